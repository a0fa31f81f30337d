//! PodTopologySpread PreScore, Score and NormalizeScore (soft constraints).

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{
    count_matching, inclusion_is_trivial, node_has_all_keys, Constraint, PodTopologySpread,
    LABEL_HOSTNAME,
};
use crate::cache::Snapshot;
use crate::framework::interface::{PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::UnsatisfiableConstraintAction;
use crate::model::Pod;
use crate::plugins::helper::missing_state;

#[derive(Clone)]
struct PreScoreState(Arc<PreScoreData>);

struct PreScoreData {
    constraints: Vec<Constraint>,
    /// Feasible nodes lacking a topology key: scored 0.
    ignored_nodes: FxHashSet<Arc<str>>,
    /// Per constraint (non-hostname): topology value -> matching pods.
    counts: Vec<FxHashMap<Box<str>, i64>>,
    /// Per constraint: ln(domains + 2).
    weights: Vec<f64>,
}

#[cfg(test)]
pub(crate) fn counts(state: &CycleState) -> Option<&[FxHashMap<Box<str>, i64>]> {
    state.read::<PreScoreState>().map(|s| &s.0.counts[..])
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        filtered: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let all = snapshot.node_infos();
        if all.is_empty() {
            return Status::skip();
        }
        let constraints =
            self.constraints(pod, UnsatisfiableConstraintAction::ScheduleAnyway, snapshot);
        if constraints.is_empty() {
            return Status::skip();
        }
        let require_all =
            !pod.spec.topology_spread_constraints.is_empty() || !self.system_defaulted;
        let n = constraints.len();
        let mut ignored_nodes = FxHashSet::default();
        let mut counts: Vec<FxHashMap<Box<str>, i64>> = vec![FxHashMap::default(); n];
        for ni in filtered {
            let labels = &ni.node().labels;
            if require_all && !node_has_all_keys(labels, &constraints) {
                ignored_nodes.insert(ni.node().name.clone());
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                if *c.topology_key == *LABEL_HOSTNAME {
                    continue;
                }
                let v = labels.get(&c.topology_key).unwrap_or("");
                counts[i].entry(v.into()).or_insert(0);
            }
        }
        let weights: Vec<f64> = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let size = if *c.topology_key == *LABEL_HOSTNAME {
                    filtered.len() - ignored_nodes.len()
                } else {
                    counts[i].len()
                };
                ((size + 2) as f64).ln()
            })
            .collect();
        let trivial = inclusion_is_trivial(pod, &constraints);
        let no_blank_domain = counts.iter().all(|m| !m.contains_key(""));
        self.with_index(pod, &constraints, snapshot, |idx| {
            if require_all && trivial && no_blank_domain {
                // Totals cover exactly the nodes with every key, all included.
                for (i, m) in counts.iter_mut().enumerate() {
                    for (d, slot) in m.iter_mut() {
                        *slot += idx.totals[i].get(&**d).map_or(0, |t| t.pods);
                    }
                }
                return;
            }
            for (ni, ns) in all.iter().zip(idx.per_node()) {
                if require_all && !ns.has_all_keys() {
                    continue;
                }
                let node = ni.node();
                for (i, c) in constraints.iter().enumerate() {
                    if *c.topology_key == *LABEL_HOSTNAME || !c.includes_node(pod, node) {
                        continue;
                    }
                    let v = ns.domains[i].as_deref().unwrap_or("");
                    if let Some(slot) = counts[i].get_mut(v) {
                        *slot += ns.counts[i];
                    }
                }
            }
        });
        state.write(PreScoreState(Arc::new(PreScoreData {
            constraints,
            ignored_nodes,
            counts,
            weights,
        })));
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScorePodTopologySpread"))?;
        let s = &s.0;
        let n = node.node();
        if s.ignored_nodes.contains(&n.name) {
            return Ok(0);
        }
        let mut score = 0f64;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(v) = n.labels.get(&c.topology_key) else {
                continue;
            };
            let cnt = if *c.topology_key == *LABEL_HOSTNAME {
                count_matching(&node.pods, &c.selector, &pod.namespace)
            } else {
                s.counts[i].get(v).copied().unwrap_or(0)
            };
            score += cnt as f64 * s.weights[i] + (c.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// `100 * (max + min - score) / max`; ignored nodes 0; all-zero maxima 100.
    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>() else {
            return Status::success();
        };
        let ignored = |i: usize| s.0.ignored_nodes.contains(&nodes[i].node().name);
        let mut min = i64::MAX;
        let mut max = 0i64;
        for (i, v) in scores.iter().enumerate() {
            if ignored(i) {
                continue;
            }
            min = min.min(*v);
            max = max.max(*v);
        }
        for (i, v) in scores.iter_mut().enumerate() {
            if ignored(i) {
                *v = 0;
            } else if max == 0 {
                *v = MAX_NODE_SCORE;
            } else {
                *v = MAX_NODE_SCORE * (max + min - *v) / max;
            }
        }
        Status::success()
    }
}
