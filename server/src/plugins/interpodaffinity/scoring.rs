//! InterPodAffinity PreScore, Score and NormalizeScore.

use std::sync::Arc;

use super::{resolve_term, InterPodAffinity, TopologyCounts, EMPTY_LABELS};
use crate::cache::Snapshot;
use crate::framework::interface::{PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::{AffinityTerm, WeightedAffinityTerm};
use crate::model::{Labels, Pod};
use crate::plugins::helper::missing_state;

/// Score per topology domain, summed over every existing pod's contribution.
#[derive(Clone)]
struct PreScoreState {
    topology_score: Arc<TopologyCounts>,
}

fn add_term(
    score: &mut TopologyCounts,
    term: &AffinityTerm,
    weight: i64,
    pod_to_check: &Pod,
    ns_labels: &Labels,
    node_labels: &Labels,
) {
    if term.matches(pod_to_check, ns_labels) {
        if let Some(v) = node_labels.get(&term.topology_key) {
            score.add(&term.topology_key, v, weight);
        }
    }
}

impl InterPodAffinity {
    /// Upstream `processExistingPod`: the five contributions of one existing pod.
    #[allow(clippy::too_many_arguments)]
    fn process_existing_pod(
        &self,
        score: &mut TopologyCounts,
        incoming: &Pod,
        preferred: &[WeightedAffinityTerm],
        preferred_anti: &[WeightedAffinityTerm],
        ns_labels: &Labels,
        existing: &Pod,
        node_labels: &Labels,
    ) {
        if node_labels.is_empty() {
            return;
        }
        for w in preferred {
            add_term(
                score,
                &w.term,
                i64::from(w.weight),
                existing,
                &EMPTY_LABELS,
                node_labels,
            );
        }
        for w in preferred_anti {
            add_term(
                score,
                &w.term,
                -i64::from(w.weight),
                existing,
                &EMPTY_LABELS,
                node_labels,
            );
        }
        if self.hard_pod_affinity_weight > 0 {
            for t in existing.spec.required_affinity_terms.iter() {
                add_term(
                    score,
                    t,
                    self.hard_pod_affinity_weight,
                    incoming,
                    ns_labels,
                    node_labels,
                );
            }
        }
        for w in existing.spec.preferred_affinity_terms.iter() {
            add_term(
                score,
                &w.term,
                i64::from(w.weight),
                incoming,
                ns_labels,
                node_labels,
            );
        }
        for w in existing.spec.preferred_anti_affinity_terms.iter() {
            add_term(
                score,
                &w.term,
                -i64::from(w.weight),
                incoming,
                ns_labels,
                node_labels,
            );
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
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
        let resolve = |ws: &[WeightedAffinityTerm]| -> Vec<WeightedAffinityTerm> {
            ws.iter()
                .map(|w| WeightedAffinityTerm {
                    weight: w.weight,
                    term: resolve_term(&w.term, snapshot),
                })
                .collect()
        };
        let preferred = resolve(&spec.preferred_affinity_terms);
        let preferred_anti = resolve(&spec.preferred_anti_affinity_terms);
        let ns_labels = snapshot
            .namespace_labels(&pod.namespace)
            .cloned()
            .unwrap_or_default();
        let mut score = TopologyCounts::default();
        let mut touched = false;
        let mut visit = |ni: &Arc<NodeInfo>, pods: &[Arc<Pod>]| {
            let labels = &ni.node().labels;
            let mut node_score = TopologyCounts::default();
            for existing in pods {
                self.process_existing_pod(
                    &mut node_score,
                    pod,
                    &preferred,
                    &preferred_anti,
                    &ns_labels,
                    existing,
                    labels,
                );
            }
            if !node_score.is_empty() {
                touched = true;
                score.merge(node_score);
            }
        };
        if has_constraints {
            for ni in snapshot.node_infos() {
                visit(ni, &ni.pods);
            }
        } else {
            for ni in snapshot.have_pods_with_affinity() {
                visit(ni, &ni.pods_with_affinity);
            }
        }
        if !touched {
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
            .0
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
