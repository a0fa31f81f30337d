//! PodTopologySpread PreFilter, AddPod/RemovePod, and Filter (hard constraints).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{
    inclusion_is_trivial, node_has_all_keys, Constraint, PodTopologySpread,
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
};
use crate::cache::Snapshot;
use crate::framework::interface::{
    FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::UnsatisfiableConstraintAction;
use crate::model::Pod;
use crate::plugins::helper::missing_state;

/// The two least-loaded domains of a constraint (upstream `criticalPaths`): exact for
/// the minimum under PreFilter and single-node AddPod/RemovePod updates.
#[derive(Clone, Debug)]
struct CriticalPaths([(Option<Box<str>>, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        CriticalPaths([(None, i64::from(i32::MAX)), (None, i64::from(i32::MAX))])
    }
}

impl CriticalPaths {
    fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if p[0].0.as_deref() == Some(value) {
            Some(0)
        } else if p[1].0.as_deref() == Some(value) {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = p[0].clone();
                    p[0] = (Some(value.into()), num);
                } else if num < p[1].1 {
                    p[1] = (Some(value.into()), num);
                }
            }
        }
    }

    fn min(&self) -> i64 {
        self.0[0].1
    }

    /// The critical paths of whole counts: the two least-loaded domains, ties broken by
    /// the smaller value. The same as [`CriticalPaths::update`] over the counts sorted by
    /// value, in one pass: a domain per node (hostname) made that sort most of
    /// PreFilter's time.
    fn from_counts<'a>(counts: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let mut best: [(Option<&str>, i64); 2] = [(None, i64::from(i32::MAX)); 2];
        let before = |v: &str, n: i64, b: &(Option<&str>, i64)| {
            n < b.1 || (n == b.1 && b.0.is_some_and(|bv| v < bv))
        };
        for (v, n) in counts {
            if before(v, n, &best[0]) {
                best[1] = best[0];
                best[0] = (Some(v), n);
            } else if before(v, n, &best[1]) {
                best[1] = (Some(v), n);
            }
        }
        CriticalPaths(best.map(|(v, n)| (v.map(Box::from), n)))
    }
}

#[derive(Clone)]
pub(crate) struct PreFilterState {
    constraints: Arc<[Constraint]>,
    /// Per constraint: topology value -> matching pods (every eligible domain present).
    match_num: Counts,
    critical_paths: Vec<CriticalPaths>,
}

#[cfg(test)]
pub(crate) fn match_num(state: &CycleState) -> Option<&[FxHashMap<Arc<str>, i64>]> {
    state.read::<PreFilterState>().map(|s| &s.match_num[..])
}

impl PreFilterState {
    fn min_match_num(&self, i: usize, min_domains: i64) -> i64 {
        // Fewer eligible domains than minDomains: the global minimum counts as 0.
        if (self.match_num[i].len() as i64) < min_domains {
            return 0;
        }
        self.critical_paths[i].min()
    }
}

type Counts = Vec<FxHashMap<Arc<str>, i64>>;

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let constraints =
            self.constraints(pod, UnsatisfiableConstraintAction::DoNotSchedule, snapshot);
        if constraints.is_empty() {
            return (None, Status::skip());
        }
        let n = constraints.len();
        let trivial = inclusion_is_trivial(pod, &constraints);
        let match_num: Counts = self.with_index(pod, &constraints, snapshot, |idx| {
            if trivial {
                return idx
                    .totals
                    .iter()
                    .map(|t| t.iter().map(|(d, v)| (d.clone(), v.pods)).collect())
                    .collect();
            }
            // Node inclusion depends on this pod: walk the nodes, counts come cached.
            let mut counts: Counts = vec![FxHashMap::default(); n];
            for (ni, ns) in snapshot.node_infos().iter().zip(idx.per_node()) {
                if !ns.has_all_keys() {
                    continue;
                }
                let node = ni.node();
                for (i, c) in constraints.iter().enumerate() {
                    if !c.includes_node(pod, node) {
                        continue;
                    }
                    if let Some(d) = &ns.domains[i] {
                        *counts[i].entry(d.clone()).or_insert(0) += ns.counts[i];
                    }
                }
            }
            counts
        });
        let critical_paths = match_num
            .iter()
            .map(|m| CriticalPaths::from_counts(m.iter().map(|(v, n)| (&**v, *n))))
            .collect();
        state.write(PreFilterState {
            constraints: constraints.into(),
            match_num,
            critical_paths,
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

fn update_with_pod(
    state: &mut PreFilterState,
    changed: &Pod,
    preemptor: &Pod,
    node: &NodeInfo,
    delta: i64,
) {
    if changed.namespace != preemptor.namespace {
        return;
    }
    let n = node.node();
    if !node_has_all_keys(&n.labels, &state.constraints) {
        return;
    }
    let constraints = state.constraints.clone();
    for (i, c) in constraints.iter().enumerate() {
        if !c.selector.matches(changed.labels()) || !c.includes_node(preemptor, n) {
            continue;
        }
        let Some(v) = n.labels.get(&c.topology_key) else {
            continue;
        };
        let e = match state.match_num[i].get_mut(v) {
            Some(e) => e,
            None => state.match_num[i].entry(Arc::from(v)).or_insert(0),
        };
        *e += delta;
        let num = *e;
        state.critical_paths[i].update(v, num);
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_add: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        update_with_pod(s, pod_to_add, pod, node, 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_remove: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        update_with_pod(s, pod_to_remove, pod, node, -1);
        Status::success()
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        let labels = &node.node().labels;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let min = s.min_match_num(i, c.min_domains);
            let self_match = i64::from(c.selector.matches(pod.labels()));
            let match_num = s.match_num[i].get(value).copied().unwrap_or(0);
            if match_num + self_match - min > c.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_paths_track_the_minimum() {
        let mut cp = CriticalPaths::default();
        for (v, n) in [("a", 3), ("b", 1), ("c", 2)] {
            cp.update(v, n);
        }
        assert_eq!(cp.min(), 1);
        cp.update("b", 4);
        assert_eq!(cp.min(), 2);
        cp.update("c", 0);
        assert_eq!(cp.min(), 0);
    }

    #[test]
    fn one_pass_equals_updates_in_value_order() {
        // Small counts over few values: many ties, in every input order.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..2000 {
            let len = next(8) as usize;
            let mut counts: Vec<(String, i64)> = (0..len)
                .map(|i| {
                    (
                        format!("d{}", (i as u64 * 7 + next(50)) % 50),
                        next(3) as i64,
                    )
                })
                .collect();
            counts.sort();
            counts.dedup_by(|a, b| a.0 == b.0);
            let mut sorted = CriticalPaths::default();
            for (v, n) in &counts {
                sorted.update(v, *n);
            }
            // Any order in: the hash map's.
            counts.reverse();
            let one = CriticalPaths::from_counts(counts.iter().map(|(v, n)| (v.as_str(), *n)));
            assert_eq!(format!("{one:?}"), format!("{sorted:?}"), "{counts:?}");
        }
    }
}
