//! PodTopologySpread PreScore, Score and NormalizeScore (soft constraints).

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::{
    blank, count_matching, inclusion_is_trivial, Constraint, NodeSpread, PodTopologySpread,
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
    counts: Vec<FxHashMap<Arc<str>, i64>>,
    /// Per constraint: ln(domains + 2).
    weights: Vec<f64>,
    /// The feasible nodes' domains and matching pods, by node id, so Score reads
    /// neither a node's labels nor its pods. Empty when two nodes share an id.
    nodes: FxHashMap<u32, NodeSpread>,
}

#[cfg(test)]
pub(crate) fn counts(state: &CycleState) -> Option<&[FxHashMap<Arc<str>, i64>]> {
    state.read::<PreScoreState>().map(|s| &s.0.counts[..])
}

#[cfg(test)]
pub(crate) fn weights(state: &CycleState) -> Option<&[f64]> {
    state.read::<PreScoreState>().map(|s| &s.0.weights[..])
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
        let trivial = inclusion_is_trivial(pod, &constraints);
        let terms = constraints.iter().map(|c| (&c.selector, &*c.topology_key));
        let data = self.with_index(pod, &constraints, snapshot, |idx| {
            let n = constraints.len();
            let mut ignored_nodes = FxHashSet::default();
            let mut counts: Vec<FxHashMap<Arc<str>, i64>> = vec![FxHashMap::default(); n];
            let mut nodes: FxHashMap<u32, NodeSpread> =
                FxHashMap::with_capacity_and_hasher(filtered.len(), Default::default());
            let mut ids_unique = true;
            for ni in filtered {
                let ns = match idx.get(ni) {
                    Some(ns) => ns.clone(),
                    None => NodeSpread::of(ni, &pod.namespace, terms.clone()),
                };
                if require_all && !ns.has_all_keys() {
                    ignored_nodes.insert(ni.node().name.clone());
                    continue;
                }
                for (i, c) in constraints.iter().enumerate() {
                    if *c.topology_key == *LABEL_HOSTNAME {
                        continue;
                    }
                    let d = ns.domains[i].as_ref();
                    if !counts[i].contains_key(d.map_or("", |d| &**d)) {
                        counts[i].insert(d.cloned().unwrap_or_else(blank), 0);
                    }
                }
                ids_unique &= nodes.insert(ni.id, ns).is_none();
            }
            if !ids_unique {
                nodes.clear();
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
            if trivial {
                // Every node is included: the index's totals are the counts. With every
                // key required they are over the nodes that have all keys, else over
                // every node with a missing key read as "".
                let totals = if require_all {
                    &idx.totals
                } else {
                    &idx.by_value
                };
                for (i, m) in counts.iter_mut().enumerate() {
                    for (d, slot) in m.iter_mut() {
                        *slot += totals[i].get(&**d).map_or(0, |t| t.pods);
                    }
                }
            } else {
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
            }
            PreScoreData {
                constraints: Vec::new(),
                ignored_nodes,
                counts,
                weights,
                nodes,
            }
        });
        state.write(PreScoreState(Arc::new(PreScoreData {
            constraints,
            ..data
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
        let known = s.nodes.get(&node.id);
        let mut score = 0f64;
        for (i, c) in s.constraints.iter().enumerate() {
            let hostname = *c.topology_key == *LABEL_HOSTNAME;
            let cnt = match known {
                Some(ns) => {
                    let Some(v) = &ns.domains[i] else { continue };
                    if hostname {
                        ns.counts[i]
                    } else {
                        s.counts[i].get(&**v).copied().unwrap_or(0)
                    }
                }
                None => {
                    let Some(v) = n.labels.get(&c.topology_key) else {
                        continue;
                    };
                    if hostname {
                        count_matching(&node.pods, &c.selector, &pod.namespace)
                    } else {
                        s.counts[i].get(v).copied().unwrap_or(0)
                    }
                }
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
