//! InterPodAffinity PreFilter, its AddPod/RemovePod extensions, and Filter.

use std::sync::Arc;

use smallvec::SmallVec;

use super::index::{RequiredQuery, TermKind};
use super::{
    matches_all, resolve_term, InterPodAffinity, TopologyCounts, ERR_REASON_AFFINITY,
    ERR_REASON_ANTI_AFFINITY, ERR_REASON_EXISTING_ANTI_AFFINITY,
};
use crate::cache::Snapshot;
use crate::framework::domains::DomainNumbers;
use crate::framework::interface::{
    FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::AffinityTerm;
use crate::model::{Labels, Pod};
use crate::plugins::helper::missing_state;

/// What PreFilter computes for the incoming pod.
#[derive(Clone)]
pub(crate) struct PreFilterState {
    /// Domains where an existing pod's required anti-affinity matches the incoming pod.
    existing_anti_affinity: ExistingAnti,
    /// Domains with pods matching all of the incoming pod's required affinity terms.
    affinity_counts: TopologyCounts,
    /// Domains with pods matching the incoming pod's required anti-affinity terms.
    anti_affinity_counts: TopologyCounts,
    terms: Arc<IncomingTerms>,
}

#[cfg(test)]
impl PreFilterState {
    /// Whether existing pods' anti-affinity rejects the node (Filter's last check).
    pub(crate) fn existing_anti_rejects(&self, node: &NodeInfo) -> bool {
        !self.existing_anti_affinity.is_empty()
            && self.existing_anti_affinity.node_has_positive(node)
    }

    pub(crate) fn counts(&self) -> (TopologyCounts, &TopologyCounts, &TopologyCounts) {
        (
            self.existing_anti_affinity.to_counts(),
            &self.affinity_counts,
            &self.anti_affinity_counts,
        )
    }
}

/// Existing pods' required anti-affinity terms that match the incoming pod: their
/// pods by domain, shared with the index (upstream's `existingAntiAffinityCounts`,
/// read by domain number instead of by label value), plus what AddPod and RemovePod
/// changed in this cycle.
#[derive(Clone, Default)]
pub(crate) struct ExistingAnti {
    /// Per topology key: the pods of the matching terms, by domain number.
    base: SmallVec<[KeyCounts; 1]>,
    /// AddPod/RemovePod changes, by key and domain value.
    delta: TopologyCounts,
}

#[derive(Clone)]
struct KeyCounts {
    key: Arc<str>,
    numbers: Arc<DomainNumbers>,
    by_domain: Arc<Vec<i64>>,
}

impl KeyCounts {
    fn at(&self, d: u32) -> i64 {
        self.by_domain.get(d as usize).copied().unwrap_or(0)
    }

    fn of_value(&self, v: &str) -> i64 {
        self.numbers.by_name.get(v).map_or(0, |&d| self.at(d))
    }
}

impl ExistingAnti {
    /// Adds a matching term's pods by domain.
    fn add_term(
        &mut self,
        key: &Arc<str>,
        numbers: &Arc<DomainNumbers>,
        by_domain: &Arc<Vec<i64>>,
    ) {
        let Some(k) = self.base.iter_mut().find(|k| k.key == *key) else {
            self.base.push(KeyCounts {
                key: key.clone(),
                numbers: numbers.clone(),
                by_domain: by_domain.clone(),
            });
            return;
        };
        // Two terms with one key: summed (the index numbers a key's domains once, so
        // both count by the same numbers).
        let sum = Arc::make_mut(&mut k.by_domain);
        if sum.len() < by_domain.len() {
            sum.resize(by_domain.len(), 0);
        }
        for (s, n) in sum.iter_mut().zip(by_domain.iter()) {
            *s += n;
        }
    }

    fn is_empty(&self) -> bool {
        self.base.is_empty() && self.delta.is_empty()
    }

    /// Whether any of the node's domains has a matching pod.
    fn node_has_positive(&self, node: &NodeInfo) -> bool {
        if self.delta.is_empty() {
            return self
                .base
                .iter()
                .any(|k| k.numbers.of_node(node, &k.key).is_some_and(|d| k.at(d) > 0));
        }
        let labels = &node.node().labels;
        let in_base = self.base.iter().any(|k| {
            labels
                .get(&k.key)
                .is_some_and(|v| k.of_value(v) + self.delta.get(&k.key, v) > 0)
        });
        in_base
            || self.delta.iter().any(|(key, vals)| {
                !self.base.iter().any(|k| k.key == *key)
                    && labels
                        .get(key)
                        .and_then(|v| vals.get(v))
                        .is_some_and(|c| *c > 0)
            })
    }

    /// The counts by domain value (tests compare them with a recount).
    #[cfg(test)]
    fn to_counts(&self) -> TopologyCounts {
        let mut out = TopologyCounts::default();
        for k in &self.base {
            for (d, n) in k.by_domain.iter().enumerate() {
                if let Some(name) = k.numbers.names.get(d) {
                    out.add_shared(&k.key, name, *n);
                }
            }
        }
        out.add_all(&self.delta, 1);
        out
    }
}

pub(crate) struct IncomingTerms {
    affinity: Vec<AffinityTerm>,
    anti_affinity: Vec<AffinityTerm>,
    namespace_labels: Labels,
    /// The pod matches all its own affinity terms (the first-pod-of-a-group rule).
    matches_itself: bool,
}

impl InterPodAffinity {
    fn update_with_pod(
        &self,
        state: &mut PreFilterState,
        incoming: &Pod,
        changed: &Pod,
        node: &NodeInfo,
        delta: i64,
    ) {
        let labels = &node.node().labels;
        let terms = state.terms.clone();
        for t in changed.spec.required_anti_affinity_terms.iter() {
            if t.matches(incoming, &terms.namespace_labels) {
                state
                    .existing_anti_affinity
                    .delta
                    .add_for_node(labels, &t.topology_key, delta);
            }
        }
        if matches_all(&terms.affinity, changed) {
            for t in &terms.affinity {
                state
                    .affinity_counts
                    .add_for_node(labels, &t.topology_key, delta);
            }
        }
        for t in &terms.anti_affinity {
            if t.matches(changed, &super::EMPTY_LABELS) {
                state
                    .anti_affinity_counts
                    .add_for_node(labels, &t.topology_key, delta);
            }
        }
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let spec = &pod.spec;
        let affinity: Vec<AffinityTerm> = spec
            .required_affinity_terms
            .iter()
            .map(|t| resolve_term(t, snapshot))
            .collect();
        let anti_affinity: Vec<AffinityTerm> = spec
            .required_anti_affinity_terms
            .iter()
            .map(|t| resolve_term(t, snapshot))
            .collect();
        let namespace_labels = snapshot
            .namespace_labels(&pod.namespace)
            .cloned()
            .unwrap_or_default();

        // Existing pods' required anti-affinity against the incoming pod: once per
        // distinct term, not per existing pod.
        let mut existing_anti_affinity = ExistingAnti::default();
        if snapshot
            .have_pods_with_required_anti_affinity()
            .next()
            .is_some()
        {
            self.with_existing(snapshot, |idx| {
                for (t, totals, numbers) in idx.terms() {
                    if t.kind == TermKind::RequiredAnti && t.term.matches(pod, &namespace_labels) {
                        existing_anti_affinity.add_term(&totals.key, numbers, &totals.by_domain);
                    }
                }
            });
        }
        if existing_anti_affinity.is_empty() && affinity.is_empty() && anti_affinity.is_empty() {
            return (None, Status::skip());
        }

        // The incoming pod's terms, over every node.
        let (affinity_counts, anti_affinity_counts) =
            if affinity.is_empty() && anti_affinity.is_empty() {
                Default::default()
            } else {
                let q = RequiredQuery {
                    affinity: affinity.clone(),
                    anti_affinity: anti_affinity.clone(),
                };
                self.required.with(
                    &q,
                    || q.clone(),
                    |idx| {
                        idx.refresh(&q, snapshot.node_infos());
                        (idx.affinity.clone(), idx.anti_affinity.clone())
                    },
                )
            };
        let matches_itself = matches_all(&affinity, pod);
        state.write(PreFilterState {
            existing_anti_affinity,
            affinity_counts,
            anti_affinity_counts,
            terms: Arc::new(IncomingTerms {
                affinity,
                anti_affinity,
                namespace_labels,
                matches_itself,
            }),
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_add: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterInterPodAffinity");
        };
        self.update_with_pod(s, pod_to_schedule, pod_to_add, node, 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_remove: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterInterPodAffinity");
        };
        self.update_with_pod(s, pod_to_schedule, pod_to_remove, node, -1);
        Status::success()
    }
}

fn satisfy_pod_affinity(s: &PreFilterState, labels: &Labels) -> bool {
    let mut pods_exist = true;
    for t in &s.terms.affinity {
        match labels.get(&t.topology_key) {
            Some(v) => {
                if s.affinity_counts.get(&t.topology_key, v) <= 0 {
                    pods_exist = false;
                }
            }
            // A node without a term's topology key never satisfies it.
            None => return false,
        }
    }
    if !pods_exist {
        // The first pod of a group whose affinity matches only itself may go anywhere
        // that has the topology keys, as long as no matching pod exists anywhere.
        return s.affinity_counts.is_empty() && s.terms.matches_itself;
    }
    true
}

fn satisfy_pod_anti_affinity(s: &PreFilterState, labels: &Labels) -> bool {
    if s.anti_affinity_counts.is_empty() {
        return true;
    }
    !s.terms.anti_affinity.iter().any(|t| {
        labels
            .get(&t.topology_key)
            .is_some_and(|v| s.anti_affinity_counts.get(&t.topology_key, v) > 0)
    })
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return missing_state("PreFilterInterPodAffinity");
        };
        let labels = &node.node().labels;
        if !satisfy_pod_affinity(s, labels) {
            return Status::unresolvable(ERR_REASON_AFFINITY);
        }
        if !satisfy_pod_anti_affinity(s, labels) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY);
        }
        if !s.existing_anti_affinity.is_empty() && s.existing_anti_affinity.node_has_positive(node)
        {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY);
        }
        Status::success()
    }
}
