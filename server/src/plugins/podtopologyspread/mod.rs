//! PodTopologySpread: keeps matching pods spread across topology domains. Hard
//! (DoNotSchedule) constraints filter nodes whose domain would exceed `maxSkew` over the
//! least-loaded eligible domain; soft (ScheduleAnyway) ones score. Pods without
//! constraints of their own get the default constraints (System: hostname maxSkew 3 and
//! zone maxSkew 5, both ScheduleAnyway) when a Service or controller selects them.

mod filtering;
mod scoring;

use std::sync::Arc;

use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::derived::{Change, DerivedCache, NodeDerived};
pub(crate) use crate::framework::domains::DomainNumbers;
use crate::framework::events::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use crate::framework::{Handle, NodeInfo, PluginFactory};
use crate::model::labels::{Operator, Requirement};
use crate::model::node::WorkloadKind;
use crate::model::pod::{NodeInclusionPolicy, UnsatisfiableConstraintAction};
use crate::model::taint::find_matching_untolerated_taint;
use crate::model::{LabelSelector, Labels, Node, Pod, TaintEffect};
use crate::plugins::helper::decode_args;
use crate::plugins::nodeaffinity::required_node_affinity_matches;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

pub const NAME: &str = "PodTopologySpread";
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
pub use crate::model::labels::LABEL_HOSTNAME;
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// Constraint sets whose per-node counts are kept (pods of a few workloads interleave).
const INDEX_CAPACITY: usize = 8;

/// A constraint as the plugin evaluates it.
#[derive(Clone, Debug)]
pub(crate) struct Constraint {
    pub max_skew: i64,
    pub topology_key: Box<str>,
    pub selector: LabelSelector,
    pub min_domains: i64,
    pub node_affinity_policy: NodeInclusionPolicy,
    pub node_taints_policy: NodeInclusionPolicy,
}

impl Constraint {
    /// Upstream `matchNodeInclusionPolicies`, against the incoming pod.
    pub fn includes_node(&self, pod: &Pod, node: &Node) -> bool {
        if self.node_affinity_policy == NodeInclusionPolicy::Honor
            && !required_node_affinity_matches(pod, node)
        {
            return false;
        }
        if self.node_taints_policy == NodeInclusionPolicy::Honor
            && find_matching_untolerated_taint(&node.taints, &pod.spec.tolerations, |t| {
                matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
            })
            .is_some()
        {
            return false;
        }
        true
    }
}

/// Whether the node has every constraint's topology key.
pub(crate) fn node_has_all_keys(labels: &Labels, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// Upstream `countPodsMatchSelector`: pods of the namespace, not terminating, matching
/// the selector. A selector with no requirements (`{}`) counts every such pod, as the
/// newest upstream does (kubernetes#141340; 1.27-1.37 counted none).
pub(crate) fn count_matching(
    pods: &crate::framework::pod_list::PodList,
    selector: &LabelSelector,
    namespace: &str,
) -> i64 {
    if matches!(selector, LabelSelector::Nothing) {
        return 0;
    }
    pods.iter()
        .filter(|p| {
            p.deletion_timestamp.is_none()
                && *p.namespace == *namespace
                && selector.matches(p.labels())
        })
        .count() as i64
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DefaultConstraintArgs {
    max_skew: i32,
    topology_key: String,
    when_unsatisfiable: String,
    #[serde(default)]
    label_selector: Option<serde_json::Value>,
    #[serde(default)]
    min_domains: Option<i32>,
    #[serde(default)]
    node_affinity_policy: Option<String>,
    #[serde(default)]
    node_taints_policy: Option<String>,
    #[serde(default)]
    match_label_keys: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default)]
    default_constraints: Vec<DefaultConstraintArgs>,
    #[serde(default)]
    defaulting_type: Option<String>,
}

/// A default constraint: like a pod's, but its selector comes from the workload.
#[derive(Clone, Debug)]
struct DefaultConstraint {
    max_skew: i64,
    topology_key: Box<str>,
    action: UnsatisfiableConstraintAction,
    min_domains: i64,
    node_affinity_policy: NodeInclusionPolicy,
    node_taints_policy: NodeInclusionPolicy,
}

pub struct PodTopologySpread {
    defaults: Vec<DefaultConstraint>,
    /// System defaulting: pods without explicit constraints are scored even on nodes
    /// missing the zone label (`requireAllTopologies = false`).
    system_defaulted: bool,
    /// Matching-pod counts per node for recent constraint sets, kept across cycles.
    index: DerivedCache<SpreadQuery, SpreadIndex>,
}

/// What PreFilter and PreScore count for a pod: per constraint, pods in its namespace
/// matching the selector, per domain of the topology key.
#[derive(Clone, PartialEq)]
pub(crate) struct SpreadQuery {
    namespace: Arc<str>,
    terms: Vec<(LabelSelector, Box<str>)>,
}

impl SpreadQuery {
    pub(crate) fn new(pod: &Pod, constraints: &[Constraint]) -> Self {
        SpreadQuery {
            namespace: pod.namespace.clone(),
            terms: constraints
                .iter()
                .map(|c| (c.selector.clone(), c.topology_key.clone()))
                .collect(),
        }
    }
}

/// One node's part in a [`SpreadQuery`].
#[derive(Clone, Default)]
pub(crate) struct NodeSpread {
    /// The node's id ([`NodeInfo::id`]).
    pub id: u32,
    /// Per constraint: the node's domain, if it has the topology key.
    pub domains: SmallVec<[Option<Arc<str>>; 2]>,
    /// Per constraint: matching pods on the node.
    pub counts: SmallVec<[i64; 2]>,
}

impl NodeSpread {
    /// The node's domains and matching pods for `(selector, topology key)` terms.
    pub fn of<'a>(
        ni: &NodeInfo,
        namespace: &str,
        terms: impl Iterator<Item = (&'a LabelSelector, &'a str)> + Clone,
    ) -> Self {
        let labels = &ni.node().labels;
        NodeSpread {
            id: ni.id,
            domains: terms
                .clone()
                .map(|(_, k)| labels.get(k).map(Arc::from))
                .collect(),
            counts: terms
                .map(|(sel, _)| count_matching(&ni.pods, sel, namespace))
                .collect(),
        }
    }

    pub fn has_all_keys(&self) -> bool {
        self.domains.iter().all(Option::is_some)
    }
}

/// A domain's totals over the nodes that have every topology key of the query.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct DomainTotal {
    pub pods: i64,
    pub nodes: u32,
    /// The domain's number in the constraint's [`DomainNumbers`] (`totals` only).
    pub number: u32,
}

/// Per-node counts for one query and their per-domain totals, both kept up to date
/// incrementally (only nodes that changed since the last cycle are recounted).
#[derive(Default)]
pub(crate) struct SpreadIndex {
    nodes: NodeDerived<NodeSpread>,
    /// Per constraint: domain -> totals over the nodes with every topology key
    /// (PreFilter; PreScore of a pod's own constraints).
    pub totals: Vec<FxHashMap<Arc<str>, DomainTotal>>,
    /// Per constraint: its domains numbered (numbers are not reused until the node list
    /// changes, which renumbers from scratch).
    pub numbers: Vec<Arc<DomainNumbers>>,
    /// Per constraint: topology value -> totals over every node, a node without the key
    /// counted under "" (PreScore of system-default constraints, which reads a missing
    /// label as upstream does: as the empty value).
    pub by_value: Vec<FxHashMap<Arc<str>, DomainTotal>>,
}

impl SpreadIndex {
    pub(crate) fn refresh(&mut self, q: &SpreadQuery, all: &[Arc<NodeInfo>]) {
        let n = q.terms.len();
        if self.totals.len() != n {
            self.totals = vec![FxHashMap::default(); n];
            self.by_value = vec![FxHashMap::default(); n];
            self.numbers = vec![Arc::default(); n];
        }
        let compute = |ni: &NodeInfo| {
            NodeSpread::of(ni, &q.namespace, q.terms.iter().map(|(sel, k)| (sel, &**k)))
        };
        let (totals, by_value, numbers) = (&mut self.totals, &mut self.by_value, &mut self.numbers);
        self.nodes.refresh(all, compute, |c| match c {
            Change::Reset => {
                totals
                    .iter_mut()
                    .chain(by_value.iter_mut())
                    .for_each(FxHashMap::clear);
                numbers.iter_mut().for_each(|n| *n = Arc::default());
            }
            Change::Replaced { old, new } => {
                renumber(numbers, old, new);
                if let Some(old) = old {
                    apply(totals, by_value, numbers, old, -1);
                }
                apply(totals, by_value, numbers, new, 1);
            }
        });
    }

    /// Per-node values, by snapshot position.
    pub(crate) fn per_node(&self) -> &[NodeSpread] {
        self.nodes.values()
    }

    /// The values of a snapshot node info (`None` for a copy or another snapshot's).
    pub(crate) fn get(&self, ni: &Arc<NodeInfo>) -> Option<&NodeSpread> {
        self.nodes.get(ni)
    }
}

/// The "" domain: a node without the topology key, as PreScore reads it.
pub(crate) fn blank() -> Arc<str> {
    static BLANK: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    BLANK.get_or_init(|| Arc::from("")).clone()
}

/// Keeps each constraint's node -> domain numbers in step with a recomputed node.
fn renumber(numbers: &mut [Arc<DomainNumbers>], old: Option<&NodeSpread>, new: &NodeSpread) {
    for (i, d) in new.domains.iter().enumerate() {
        if old.is_some_and(|o| o.id == new.id && o.domains[i] == *d) {
            continue;
        }
        Arc::make_mut(&mut numbers[i]).set_node(old.map(|o| o.id), new.id, d.as_ref());
    }
}

fn apply(
    totals: &mut [FxHashMap<Arc<str>, DomainTotal>],
    by_value: &mut [FxHashMap<Arc<str>, DomainTotal>],
    numbers: &[Arc<DomainNumbers>],
    v: &NodeSpread,
    sign: i64,
) {
    let add = |map: &mut FxHashMap<Arc<str>, DomainTotal>, d: &Arc<str>, pods: i64, number| {
        let e = match map.get_mut(&**d) {
            Some(e) => e,
            None => map.entry(d.clone()).or_insert(DomainTotal {
                number,
                ..DomainTotal::default()
            }),
        };
        e.pods += sign * pods;
        e.nodes = (i64::from(e.nodes) + sign).max(0) as u32;
        if e.nodes == 0 {
            map.remove(&**d);
        }
    };
    for (i, d) in v.domains.iter().enumerate() {
        match d {
            Some(d) => add(&mut by_value[i], d, v.counts[i], u32::MAX),
            None => add(&mut by_value[i], &blank(), v.counts[i], u32::MAX),
        }
    }
    if !v.has_all_keys() {
        return;
    }
    for (i, d) in v.domains.iter().enumerate() {
        if let Some(d) = d {
            // `renumber` ran first, so the domain has its number.
            let number = numbers[i].by_name.get(&**d).copied().unwrap_or(u32::MAX);
            add(&mut totals[i], d, v.counts[i], number);
        }
    }
}

impl PodTopologySpread {
    /// Runs `f` on the up-to-date index for the pod's constraints.
    pub(crate) fn with_index<R>(
        &self,
        pod: &Pod,
        constraints: &[Constraint],
        snapshot: &Snapshot,
        f: impl FnOnce(&SpreadIndex) -> R,
    ) -> R {
        let q = SpreadQuery::new(pod, constraints);
        self.index.with(
            &q,
            || q.clone(),
            |idx| {
                idx.refresh(&q, snapshot.node_infos());
                f(idx)
            },
        )
    }
}

/// Whether `includes_node` is true for every node, whatever its labels and taints:
/// then the index's totals are the counts, with no per-node pass.
pub(crate) fn inclusion_is_trivial(pod: &Pod, constraints: &[Constraint]) -> bool {
    let no_node_affinity = pod.spec.node_selector.as_ref().is_none_or(|s| s.is_empty())
        && pod.spec.required_node_affinity.is_none();
    constraints.iter().all(|c| {
        (c.node_affinity_policy == NodeInclusionPolicy::Ignore || no_node_affinity)
            && c.node_taints_policy == NodeInclusionPolicy::Ignore
    })
}

impl PodTopologySpread {
    /// The pod's constraints for `action` (upstream `getConstraints`): its own when it has
    /// any at all, else the defaults with the workload's selector.
    pub(crate) fn constraints(
        &self,
        pod: &Pod,
        action: UnsatisfiableConstraintAction,
        snapshot: &Snapshot,
    ) -> Vec<Constraint> {
        let own = &pod.spec.topology_spread_constraints;
        if !own.is_empty() {
            return own
                .iter()
                .filter(|c| c.when_unsatisfiable == action)
                .map(|c| Constraint {
                    max_skew: i64::from(c.max_skew),
                    topology_key: c.topology_key.clone(),
                    selector: c.selector.clone(),
                    min_domains: i64::from(c.min_domains.unwrap_or(1)),
                    node_affinity_policy: c.node_affinity_policy,
                    node_taints_policy: c.node_taints_policy,
                })
                .collect();
        }
        let wanted: Vec<&DefaultConstraint> = self
            .defaults
            .iter()
            .filter(|d| d.action == action)
            .collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        let Some(selector) = default_selector(pod, snapshot) else {
            return Vec::new();
        };
        wanted
            .into_iter()
            .map(|d| Constraint {
                max_skew: d.max_skew,
                topology_key: d.topology_key.clone(),
                selector: selector.clone(),
                min_domains: d.min_domains,
                node_affinity_policy: d.node_affinity_policy,
                node_taints_policy: d.node_taints_policy,
            })
            .collect()
    }
}

/// Upstream `helper.DefaultSelector`: labels of Services selecting the pod, merged with
/// the selector of its controlling ReplicationController, ReplicaSet or StatefulSet.
/// `None` when that adds up to no requirement at all.
pub(crate) fn default_selector(pod: &Pod, snapshot: &Snapshot) -> Option<LabelSelector> {
    let mut label_set: Vec<(String, String)> = Vec::new();
    let merge = |labels: &Labels, set: &mut Vec<(String, String)>| {
        for (k, v) in labels.iter() {
            match set.iter_mut().find(|(sk, _)| sk == k) {
                Some(e) => e.1 = v.to_string(),
                None => set.push((k.to_string(), v.to_string())),
            }
        }
    };
    let sources = snapshot.workload_selectors();
    for s in sources
        .iter()
        .filter(|s| s.kind == WorkloadKind::Service && *s.namespace == *pod.namespace)
    {
        if let Some(sel) = &s.match_labels {
            if sel.iter().all(|(k, v)| pod.labels().get(k) == Some(v)) {
                merge(sel, &mut label_set);
            }
        }
    }
    let mut extra: Vec<Requirement> = Vec::new();
    if let Some(owner) = pod.spec.owner_references.iter().find(|o| o.controller) {
        let kind = match (&*owner.api_version, &*owner.kind) {
            ("v1", "ReplicationController") => Some(WorkloadKind::ReplicationController),
            ("apps/v1", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
            ("apps/v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
            _ => None,
        };
        if let Some(kind) = kind {
            if let Some(s) = sources.iter().find(|s| {
                s.kind == kind && *s.namespace == *pod.namespace && *s.name == *owner.name
            }) {
                match kind {
                    WorkloadKind::ReplicationController => {
                        if let Some(sel) = &s.match_labels {
                            merge(sel, &mut label_set);
                        }
                    }
                    _ => {
                        if let LabelSelector::Requirements(reqs) = &s.selector {
                            extra.extend(reqs.iter().cloned());
                        }
                    }
                }
            }
        }
    }
    let mut reqs: Vec<Requirement> = label_set
        .into_iter()
        .filter_map(|(k, v)| Requirement::new(&k, Operator::In, vec![v]).ok())
        .collect();
    reqs.extend(extra);
    if reqs.is_empty() {
        return None;
    }
    Some(LabelSelector::Requirements(reqs.into()))
}

fn policy(
    v: &Option<String>,
    field: &str,
    default: NodeInclusionPolicy,
) -> Result<NodeInclusionPolicy, String> {
    match v.as_deref() {
        None => Ok(default),
        Some("Honor") => Ok(NodeInclusionPolicy::Honor),
        Some("Ignore") => Ok(NodeInclusionPolicy::Ignore),
        Some(o) => Err(format!(
            "{field}: Unsupported value: {o:?}: supported values: \"Honor\", \"Ignore\""
        )),
    }
}

fn build(args: Option<&serde_json::Value>) -> Result<PodTopologySpread, String> {
    let a: Args = decode_args(args)?;
    let defaulting = a.defaulting_type.as_deref().unwrap_or("System");
    match defaulting {
        "System" => {
            if !a.default_constraints.is_empty() {
                return Err("defaultConstraints: Invalid value: when .defaultConstraints are not empty, defaultingType must be List".into());
            }
            let d = |key: &str, skew| DefaultConstraint {
                max_skew: skew,
                topology_key: key.into(),
                action: UnsatisfiableConstraintAction::ScheduleAnyway,
                min_domains: 1,
                node_affinity_policy: NodeInclusionPolicy::Honor,
                node_taints_policy: NodeInclusionPolicy::Ignore,
            };
            Ok(PodTopologySpread {
                defaults: vec![d(LABEL_HOSTNAME, 3), d(LABEL_ZONE, 5)],
                system_defaulted: true,
                index: DerivedCache::new(INDEX_CAPACITY),
            })
        }
        "List" => {
            let mut defaults = Vec::new();
            for (i, c) in a.default_constraints.iter().enumerate() {
                let f = format!("defaultConstraints[{i}]");
                if c.max_skew <= 0 {
                    return Err(format!(
                        "{f}.maxSkew: Invalid value: {}: not in valid range (0, inf)",
                        c.max_skew
                    ));
                }
                if c.topology_key.is_empty() {
                    return Err(format!("{f}.topologyKey: Required value: can not be empty"));
                }
                if c.label_selector.is_some() {
                    return Err(format!("{f}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod"));
                }
                let action = match c.when_unsatisfiable.as_str() {
                    "DoNotSchedule" => UnsatisfiableConstraintAction::DoNotSchedule,
                    "ScheduleAnyway" => UnsatisfiableConstraintAction::ScheduleAnyway,
                    o => {
                        return Err(format!(
                            "{f}.whenUnsatisfiable: Unsupported value: {o:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\""
                        ))
                    }
                };
                if defaults.iter().any(|d: &DefaultConstraint| {
                    *d.topology_key == *c.topology_key && d.action == action
                }) {
                    return Err(format!(
                        "{f}: Duplicate value: \"{{{}, {}}}\"",
                        c.topology_key, c.when_unsatisfiable
                    ));
                }
                let _ = &c.match_label_keys;
                defaults.push(DefaultConstraint {
                    max_skew: i64::from(c.max_skew),
                    topology_key: c.topology_key.as_str().into(),
                    action,
                    min_domains: i64::from(c.min_domains.unwrap_or(1)),
                    node_affinity_policy: policy(
                        &c.node_affinity_policy,
                        &format!("{f}.nodeAffinityPolicy"),
                        NodeInclusionPolicy::Honor,
                    )?,
                    node_taints_policy: policy(
                        &c.node_taints_policy,
                        &format!("{f}.nodeTaintsPolicy"),
                        NodeInclusionPolicy::Ignore,
                    )?,
                });
            }
            Ok(PodTopologySpread {
                defaults,
                system_defaulted: false,
                index: DerivedCache::new(INDEX_CAPACITY),
            })
        }
        other => Err(format!(
            "defaultingType: Unsupported value: {other:?}: supported values: \"System\", \"List\""
        )),
    }
}

impl Plugin for PodTopologySpread {
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
                    .union(ActionType::UPDATE_POD_TOLERATION)
                    .union(ActionType::DELETE),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD
                    .union(ActionType::DELETE)
                    .union(ActionType::UPDATE_NODE_LABEL)
                    .union(ActionType::UPDATE_NODE_TAINT),
                is_schedulable_after_node_change,
            ),
        ])
    }
}

/// The pod's own hard constraints, for queueing hints (defaults are soft unless
/// configured with List; hints then err on the side of requeueing).
fn hard_selectors(pod: &Pod) -> Vec<&crate::model::pod::TopologySpreadConstraint> {
    pod.spec
        .topology_spread_constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == UnsatisfiableConstraintAction::DoNotSchedule)
        .collect()
}

fn is_schedulable_after_pod_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let old = old.and_then(|o| o.as_pod());
    let new = new.and_then(|n| n.as_pod());
    let involved =
        |p: &Pod| p.uid == pod.uid || (p.node_name.is_some() && p.namespace == pod.namespace);
    if new.is_some_and(|p| !involved(p)) || old.is_some_and(|p| !involved(p)) {
        return QueueingHint::QueueSkip;
    }
    let cs = hard_selectors(pod);
    let queue = match (old, new) {
        (Some(o), Some(n)) => {
            (pod.uid == n.uid
                && o.spec.tolerations != n.spec.tolerations
                && cs
                    .iter()
                    .any(|c| c.node_taints_policy == NodeInclusionPolicy::Honor))
                || (o.labels() != n.labels()
                    && cs
                        .iter()
                        .any(|c| c.selector.matches(o.labels()) != c.selector.matches(n.labels())))
        }
        (None, Some(n)) => cs.iter().any(|c| c.selector.matches(n.labels())),
        (Some(o), None) => cs.iter().any(|c| c.selector.matches(o.labels())),
        (None, None) => false,
    };
    if queue {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

fn is_schedulable_after_node_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let cs = hard_selectors(pod);
    let has_keys = |n: &Node| cs.iter().all(|c| n.labels.contains_key(&c.topology_key));
    let old = old.and_then(|o| o.as_node());
    let new = new.and_then(|n| n.as_node());
    let orig = old.is_some_and(|n| has_keys(n));
    let now = new.is_some_and(|n| has_keys(n));
    let queue = match (old, new) {
        (Some(o), Some(n)) => {
            orig != now
                || (now
                    && (cs
                        .iter()
                        .any(|c| o.labels.get(&c.topology_key) != n.labels.get(&c.topology_key))
                        || o.taints != n.taints))
        }
        (None, Some(_)) => now,
        (Some(_), None) => orig,
        (None, None) => false,
    };
    if queue {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, _h: &Arc<Handle>| Ok(Arc::new(build(args)?) as Arc<dyn Plugin>))
}

#[cfg(test)]
mod tests;
