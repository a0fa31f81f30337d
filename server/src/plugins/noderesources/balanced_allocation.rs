//! NodeResourcesBalancedAllocation: favours nodes whose resource utilisation becomes
//! more even with the pod on it.
//!
//! Follows the newest upstream scorer (kubernetes#135573, 1.36): the score is the change
//! in balance the pod causes, mapped to 50..=100 (no change = 75). Before 1.36 it was
//! the balance with the pod alone, `(1 - std) * 100`.

use std::sync::Arc;

use serde::Deserialize;

use super::resource_allocation::{
    allocatable_and_requested, default_resources, pod_request, ResourceKind, ResourceSpec,
    WeightedResource,
};
use crate::cache::Snapshot;
use crate::framework::interface::{Plugin, PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::Pod;
use crate::plugins::helper::decode_args;

pub const NAME: &str = "NodeResourcesBalancedAllocation";

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BalancedAllocationArgs {
    #[serde(default)]
    resources: Vec<ResourceSpec>,
}

pub struct BalancedAllocation {
    resources: Vec<ResourceKind>,
}

#[derive(Clone)]
struct PreScoreState {
    requests: Arc<[i64]>,
}

/// Upstream `balancedResourceScore`: `(1 - std(fractions)) * 100`, fractions capped at
/// 1, resources with zero allocatable left out. Float operations in upstream's order.
fn balanced_resource_score(requested: &[i64], allocatable: &[i64]) -> i64 {
    let mut fractions = [0f64; 8];
    let mut extra: Vec<f64> = Vec::new();
    let mut n = 0usize;
    let mut total = 0f64;
    for (r, a) in requested.iter().zip(allocatable) {
        if *a == 0 {
            continue;
        }
        let mut f = *r as f64 / *a as f64;
        if f > 1.0 {
            f = 1.0;
        }
        total += f;
        if n < fractions.len() {
            fractions[n] = f;
        } else {
            extra.push(f);
        }
        n += 1;
    }
    let all = || fractions.iter().take(n.min(8)).chain(extra.iter());
    let std = if n == 2 {
        ((fractions[0] - fractions[1]) / 2.0).abs()
    } else if n > 2 {
        let mean = total / n as f64;
        let mut sum = 0f64;
        for f in all() {
            sum += (f - mean) * (f - mean);
        }
        (sum / n as f64).sqrt()
    } else {
        0.0
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for BalancedAllocation {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let requests: Vec<i64> = self
            .resources
            .iter()
            .map(|k| pod_request(pod, k, false))
            .collect();
        // A pod requesting none of the resources changes no balance: skip it.
        if requests.iter().all(|r| *r == 0) {
            return Status::skip();
        }
        state.write(PreScoreState {
            requests: requests.into(),
        });
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        match state.read::<PreScoreState>() {
            Some(s) => {
                for (n, o) in nodes.iter().zip(out.iter_mut()) {
                    *o = self.score_with(&s.requests, n);
                }
            }
            None => {
                for (n, o) in nodes.iter().zip(out.iter_mut()) {
                    *o = self.score(state, pod, n)?;
                }
            }
        }
        Ok(())
    }

    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let owned;
        let requests: &[i64] = match state.read::<PreScoreState>() {
            Some(s) => &s.requests,
            None => {
                owned = self
                    .resources
                    .iter()
                    .map(|k| pod_request(pod, k, false))
                    .collect::<Vec<_>>();
                &owned
            }
        };
        Ok(self.score_with(requests, node))
    }
}

impl BalancedAllocation {
    #[inline]
    fn score_with(&self, requests: &[i64], node: &NodeInfo) -> i64 {
        if let ([k0, k1], [r0, r1]) = (&self.resources[..], requests) {
            // The common cpu+memory case, without arrays.
            let (a0, w0) = allocatable_and_requested(node, k0, *r0, true);
            let (a1, w1) = allocatable_and_requested(node, k1, *r1, true);
            let with_score = balanced2(w0, a0, w1, a1);
            let without_score = balanced2(w0 - r0, a0, w1 - r1, a1);
            return MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_score - without_score) / 2;
        }
        // Up to 8 resources on the stack; more (rare) on the heap.
        let n = self.resources.len();
        let zeros = || smallvec::SmallVec::<[i64; 8]>::from_elem(0, n);
        let (mut with_pod, mut without, mut alloc) = (zeros(), zeros(), zeros());
        for (i, (k, &req)) in self.resources.iter().zip(requests).enumerate() {
            let (a, r) = allocatable_and_requested(node, k, req, true);
            if a == 0 {
                continue;
            }
            alloc[i] = a;
            with_pod[i] = r;
            without[i] = r - req;
        }
        let with_score = balanced_resource_score(&with_pod, &alloc);
        let without_score = balanced_resource_score(&without, &alloc);
        MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_score - without_score) / 2
    }
}

/// `balanced_resource_score` for two resources, same float operations.
#[inline]
fn balanced2(r0: i64, a0: i64, r1: i64, a1: i64) -> i64 {
    let frac = |r: i64, a: i64| (r as f64 / a as f64).min(1.0);
    let std = match (a0 != 0, a1 != 0) {
        (true, true) => ((frac(r0, a0) - frac(r1, a1)) / 2.0).abs(),
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

fn build(args: Option<&serde_json::Value>) -> Result<BalancedAllocation, String> {
    let a: BalancedAllocationArgs = decode_args(args)?;
    let resources = if a.resources.is_empty() {
        default_resources()
    } else {
        a.resources
    };
    for (i, r) in resources.iter().enumerate() {
        if resources[..i].iter().any(|p| p.name == r.name) {
            return Err(format!(
                "resources[{i}].name: Duplicate value: {:?}",
                r.name
            ));
        }
        if let Some(w) = r.weight {
            if w != 1 && w != 0 {
                return Err(format!(
                    "resources[{i}].weight: Invalid value: {w}: must be 1"
                ));
            }
        }
    }
    Ok(BalancedAllocation {
        resources: resources
            .iter()
            .map(|r| WeightedResource::from_spec(r).kind)
            .collect(),
    })
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, _h: &Arc<Handle>| Ok(Arc::new(build(args)?) as Arc<dyn Plugin>))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn float_order_matches_upstream() {
        // 0.53 and 0.35: std 0.09, (1 - 0.09) * 100 = 90.999..., truncated to 90.
        assert_eq!(balanced_resource_score(&[53, 35], &[100, 100]), 90);
        assert_eq!(balanced_resource_score(&[3000, 5000], &[4000, 10000]), 87);
        assert_eq!(balanced_resource_score(&[5, 0], &[10, 0]), 100);
        for (r0, a0, r1, a1) in [
            (53, 100, 35, 100),
            (3000, 4000, 5000, 10000),
            (5, 10, 0, 0),
            (7, 3, 1, 9),
        ] {
            assert_eq!(
                balanced2(r0, a0, r1, a1),
                balanced_resource_score(&[r0, r1], &[a0, a1])
            );
        }
    }

    #[test]
    fn scores_the_change_in_balance() {
        let b = build(None).unwrap();
        let p = pod("p").cpu(1000).memory(1 << 30).build();
        let mut st = CycleState::new();
        assert!(b
            .pre_score(&mut st, &p, &[], &Snapshot::default())
            .is_success());
        // Empty 4-CPU/4Gi node: with the pod, cpu 0.25 and memory 0.25: still balanced.
        let n = NodeInfo::new(node("n").cpu(4000).memory(4 << 30).build());
        assert_eq!(b.score(&st, &p, &n).unwrap(), 75);
        // A node with CPU already busy: adding a memory-heavy pod balances it.
        let mut busy = NodeInfo::new(node("m").cpu(4000).memory(4 << 30).build());
        busy.add_pod(pod("x").node("m").cpu(3000).build());
        let mem_pod = pod("q").memory(3 << 30).build();
        let mut st2 = CycleState::new();
        b.pre_score(&mut st2, &mem_pod, &[], &Snapshot::default());
        assert!(b.score(&st2, &mem_pod, &busy).unwrap() > 75);
        // Best-effort pods skip the plugin.
        assert!(b
            .pre_score(
                &mut CycleState::new(),
                &pod("be").build(),
                &[],
                &Snapshot::default()
            )
            .is_skip());
    }

    #[test]
    fn more_than_eight_resources_are_balanced_as_upstream() {
        // Upstream sets no limit; cpu and memory plus eight extended resources.
        let mut resources = vec![
            serde_json::json!({"name": "cpu", "weight": 1}),
            serde_json::json!({"name": "memory", "weight": 1}),
        ];
        for i in 0..8 {
            resources.push(serde_json::json!({"name": format!("example.com/r{i}"), "weight": 1}));
        }
        let b = build(Some(&serde_json::json!({"resources": resources}))).unwrap();
        let two = build(None).unwrap();
        // A node with none of the extended resources: only cpu and memory count, so
        // the score is the two-resource one.
        let p = pod("p").cpu(1000).memory(1 << 30).build();
        let n = NodeInfo::new(node("n").cpu(4000).memory(4 << 30).build());
        let (mut s1, mut s2) = (CycleState::new(), CycleState::new());
        b.pre_score(&mut s1, &p, &[], &Snapshot::default());
        two.pre_score(&mut s2, &p, &[], &Snapshot::default());
        assert_eq!(
            b.score(&s1, &p, &n).unwrap(),
            two.score(&s2, &p, &n).unwrap()
        );
    }
}
