//! InterPodAffinity: required pod affinity and anti-affinity (the incoming pod's and,
//! symmetrically, existing pods' anti-affinity against it) filter nodes per topology
//! domain; preferred terms, and existing pods' terms toward the incoming pod, score them.
//!
//! PreFilter counts matching pods per (topology key, value) once per cycle; AddPod and
//! RemovePod adjust the counts, so preemption dry runs and nominated pods see the right
//! domains without recounting.

mod filtering;
mod scoring;

use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::events::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use crate::framework::{Handle, PluginFactory};
use crate::model::pod::AffinityTerm;
use crate::model::{LabelSelector, Labels, Pod};
use crate::plugins::helper::decode_args;

pub const NAME: &str = "InterPodAffinity";
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default = "default_hard_weight")]
    hard_pod_affinity_weight: i32,
    #[serde(default)]
    ignore_preferred_terms_of_existing_pods: bool,
}

fn default_hard_weight() -> i32 {
    1
}

impl Default for Args {
    fn default() -> Self {
        Args {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
}

/// Matching-pod counts per topology domain: key -> value -> count. Nested so lookups by
/// a node's `&str` labels need no allocation; entries that reach zero are removed, so
/// "empty" means no domain has a match.
#[derive(Clone, Default, Debug)]
pub(crate) struct TopologyCounts(FxHashMap<Box<str>, FxHashMap<Box<str>, i64>>);

impl TopologyCounts {
    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub fn add(&mut self, key: &str, value: &str, delta: i64) {
        let m = self.0.entry(key.into()).or_default();
        let e = m.entry(value.into()).or_insert(0);
        *e += delta;
        if *e == 0 {
            m.remove(value);
            if m.is_empty() {
                self.0.remove(key);
            }
        }
    }

    /// Adds `delta` at the node's domain for `key`, when the node has that label.
    pub fn add_for_node(&mut self, labels: &Labels, key: &str, delta: i64) {
        if let Some(v) = labels.get(key) {
            self.add(key, v, delta);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn merge(&mut self, other: TopologyCounts) {
        for (k, vals) in other.0 {
            for (v, c) in vals {
                self.add(&k, &v, c);
            }
        }
    }

    /// Whether any domain the node is in has a positive count.
    pub fn node_has_positive(&self, labels: &Labels) -> bool {
        self.0.iter().any(|(k, vals)| {
            labels
                .get(k)
                .and_then(|v| vals.get(v))
                .is_some_and(|c| *c > 0)
        })
    }
}

/// The incoming pod's terms with namespace selectors resolved to namespace names
/// (upstream `mergeAffinityTermNamespacesIfNotEmpty`): a non-empty selector becomes the
/// list of matching namespaces; an empty one (`{}`) keeps matching every namespace.
pub(crate) fn resolve_term(term: &AffinityTerm, snapshot: &Snapshot) -> AffinityTerm {
    match &term.namespace_selector {
        Some(sel) if !sel.is_empty() => {
            let mut namespaces: Vec<Arc<str>> = term.namespaces.to_vec();
            for (name, labels) in snapshot.namespaces.iter() {
                if sel.matches(labels) && !namespaces.contains(name) {
                    namespaces.push(name.clone());
                }
            }
            AffinityTerm {
                namespaces: namespaces.into(),
                namespace_selector: Some(LabelSelector::Nothing),
                selector: term.selector.clone(),
                topology_key: term.topology_key.clone(),
            }
        }
        _ => term.clone(),
    }
}

/// Upstream `podMatchesAllAffinityTerms`: false for no terms.
pub(crate) fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &EMPTY_LABELS))
}

pub(crate) static EMPTY_LABELS: std::sync::LazyLock<Labels> =
    std::sync::LazyLock::new(Labels::default);

impl Plugin for InterPodAffinity {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::ADD
                    .union(ActionType::UPDATE_POD_LABEL)
                    .union(ActionType::DELETE),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD
                    .union(ActionType::UPDATE_NODE_LABEL)
                    .union(ActionType::UPDATE_NODE_TAINT),
                |pod, _old, new| {
                    let Some(node) = new.and_then(|n| n.as_node()) else {
                        return QueueingHint::QueueSkip;
                    };
                    let s = &pod.spec;
                    let relevant = s
                        .required_affinity_terms
                        .iter()
                        .chain(s.required_anti_affinity_terms.iter())
                        .any(|t| node.labels.contains_key(&t.topology_key));
                    if relevant {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
        ])
    }
}

/// Upstream `isSchedulableAfterPodChange` (with the 1.35 fixes: a deleted pod whose own
/// anti-affinity blocked ours also requeues; anti-affinity matches on any term).
fn is_schedulable_after_pod_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let old = old.and_then(|o| o.as_pod());
    let new = new.and_then(|n| n.as_pod());
    if old.is_some_and(|p| p.node_name.is_none()) || new.is_some_and(|p| p.node_name.is_none()) {
        return QueueingHint::QueueSkip;
    }
    let affinity = &pod.spec.required_affinity_terms;
    let anti = &pod.spec.required_anti_affinity_terms;
    let any_anti = |p: &Pod| anti.iter().any(|t| t.matches(p, &EMPTY_LABELS));
    let hint = match (old, new) {
        (Some(o), Some(n)) => {
            (!matches_all(affinity, o) && matches_all(affinity, n)) || (any_anti(o) && !any_anti(n))
        }
        (None, Some(n)) => matches_all(affinity, n),
        (Some(o), None) => {
            any_anti(o)
                || o.spec
                    .required_anti_affinity_terms
                    .iter()
                    .any(|t| t.matches(pod, &EMPTY_LABELS))
        }
        (None, None) => false,
    };
    if hint {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, _h: &Arc<Handle>| {
        let a: Args = decode_args(args)?;
        if !(0..=100).contains(&a.hard_pod_affinity_weight) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {}: not in valid range [0, 100]",
                a.hard_pod_affinity_weight
            ));
        }
        Ok(Arc::new(InterPodAffinity {
            hard_pod_affinity_weight: i64::from(a.hard_pod_affinity_weight),
            ignore_preferred_terms_of_existing_pods: a.ignore_preferred_terms_of_existing_pods,
        }) as Arc<dyn Plugin>)
    })
}
