//! InterPodAffinity PreScore, Score and NormalizeScore.

use std::sync::Arc;

use super::index::{PreferredQuery, TermKind};
use super::{resolve_term, InterPodAffinity, TopologyCounts};
use crate::cache::Snapshot;
use crate::framework::interface::{PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::WeightedAffinityTerm;
use crate::model::Pod;
use crate::plugins::helper::missing_state;

/// Score per topology domain, summed over every existing pod's contribution.
#[derive(Clone)]
struct PreScoreState {
    topology_score: Arc<TopologyCounts>,
}

#[cfg(test)]
pub(crate) fn topology_score(state: &CycleState) -> Option<&TopologyCounts> {
    state.read::<PreScoreState>().map(|s| &*s.topology_score)
}

impl PreScorePlugin for InterPodAffinity {
    /// Upstream `PreScore` + `processExistingPod`, summed per domain: the incoming
    /// pod's preferred terms over existing pods come from an index per term set, and
    /// existing pods' terms toward the incoming pod are checked once per distinct term.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let spec = &pod.spec;
        let has_constraints = !spec.preferred_affinity_terms.is_empty()
            || !spec.preferred_anti_affinity_terms.is_empty();
        if self.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let mut score = TopologyCounts::default();
        if has_constraints {
            let resolve = |ws: &[WeightedAffinityTerm]| -> Vec<WeightedAffinityTerm> {
                ws.iter()
                    .map(|w| WeightedAffinityTerm {
                        weight: w.weight,
                        term: resolve_term(&w.term, snapshot),
                    })
                    .collect()
            };
            let q = PreferredQuery {
                affinity: resolve(&spec.preferred_affinity_terms),
                anti_affinity: resolve(&spec.preferred_anti_affinity_terms),
            };
            self.preferred.with(
                &q,
                || q.clone(),
                |idx| {
                    idx.refresh(&q, snapshot.node_infos());
                    score.add_all(&idx.score, 1);
                },
            );
        }
        if snapshot.have_pods_with_affinity().next().is_some() {
            let ns_labels = snapshot
                .namespace_labels(&pod.namespace)
                .cloned()
                .unwrap_or_default();
            self.with_existing(snapshot, |idx| {
                for (t, totals, numbers) in idx.terms() {
                    let weight = match t.kind {
                        TermKind::Required if self.hard_pod_affinity_weight > 0 => {
                            self.hard_pod_affinity_weight
                        }
                        TermKind::Preferred => i64::from(t.weight),
                        TermKind::PreferredAnti => -i64::from(t.weight),
                        _ => continue,
                    };
                    if !t.term.matches(pod, &ns_labels) {
                        continue;
                    }
                    for (v, n) in totals.iter(numbers) {
                        score.add_shared(&totals.key, v, weight * n);
                    }
                }
            });
        }
        if score.is_empty() {
            return Status::skip();
        }
        state.write(PreScoreState {
            topology_score: Arc::new(score),
        });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScoreInterPodAffinity"))?;
        let labels = &node.node().labels;
        Ok(s.topology_score
            .iter()
            .filter_map(|(k, vals)| labels.get(k).and_then(|v| vals.get(v)))
            .sum())
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// Min-max scaling to 0..=100; equal scores all become 0.
    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        if state
            .read::<PreScoreState>()
            .is_none_or(|s| s.topology_score.is_empty())
        {
            return Status::success();
        }
        let max = scores.iter().copied().max().unwrap_or(0);
        let min = scores.iter().copied().min().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            let f = if diff > 0 {
                MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)
            } else {
                0.0
            };
            *s = f as i64;
        }
        Status::success()
    }
}
