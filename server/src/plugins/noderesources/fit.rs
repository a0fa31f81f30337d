//! NodeResourcesFit: the pod's requests must fit in what the node has left; scoring by
//! LeastAllocated (default), MostAllocated or RequestedToCapacityRatio.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;

use super::resource_allocation::{
    allocatable_and_requested, default_resources, least_requested_score, most_requested_score,
    pod_request, BrokenLinear, ResourceKind, ResourceSpec, WeightedResource,
};
use crate::cache::Snapshot;
use crate::framework::dra::{DeviceSet, DraStore, SliceIndex};
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin,
};
use crate::framework::{Code, CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::dra::{DeviceClass, DraObject, DEVICE_CLASS_RESOURCE_PREFIX};
use crate::model::labels::is_qualified_name;
use crate::model::resource::is_extended_resource_name;
use crate::model::resource::ScalarResources;
use crate::model::{Node, Pod, Resource};
use crate::plugins::helper::{decode_args, missing_state};

pub const NAME: &str = "NodeResourcesFit";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FitArgs {
    #[serde(default)]
    ignored_resources: Vec<String>,
    #[serde(default)]
    ignored_resource_groups: Vec<String>,
    #[serde(default)]
    scoring_strategy: Option<ScoringStrategyArgs>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScoringStrategyArgs {
    #[serde(rename = "type", default)]
    strategy: Option<String>,
    #[serde(default)]
    resources: Vec<ResourceSpec>,
    #[serde(default)]
    requested_to_capacity_ratio: Option<RtcrArgs>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RtcrArgs {
    #[serde(default)]
    shape: Vec<ShapePoint>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShapePoint {
    pub utilization: i32,
    pub score: i32,
}

pub struct Fit {
    ignored_resources: Vec<String>,
    ignored_resource_groups: Vec<String>,
    strategy: Strategy,
    resources: Vec<WeightedResource>,
    shape: BrokenLinear,
    /// The DRA objects, for extended resources a DeviceClass serves (upstream
    /// DRAExtendedResource, on in v1.36): `None` outside a scheduler.
    dra: Option<Arc<DraStore>>,
}

/// One reason the pod does not fit (upstream `InsufficientResource`).
struct Insufficient {
    reason: Cow<'static, str>,
    unresolvable: bool,
}

/// Reasons collected by [`Fit::fits`]; inline so a rejection does not allocate.
type InsufficientList = smallvec::SmallVec<[Insufficient; 2]>;

/// One scalar resource the pod asks for and Fit checks (not ignored, non-zero), with
/// the reason a node lacking it gets.
#[derive(Clone)]
struct ScalarCheck {
    name: crate::model::resource::ResourceName,
    /// The name's hash ([`ScalarResources::hash_of`]).
    hash: u64,
    quantity: i64,
    reason: Cow<'static, str>,
    /// A DeviceClass serves this resource: on a node whose allocatable lacks it,
    /// DynamicResources allocates devices instead (upstream `shouldDelegateResourceToDRA`).
    dra_backed: bool,
}

/// What PreFilter works out once per pod (upstream `preFilterState`): the scalar checks,
/// whose reasons are interned so a Filter that rejects thousands of nodes neither
/// formats nor allocates a reason per node.
#[derive(Clone, Default)]
struct PreFilterState {
    scalars: smallvec::SmallVec<[ScalarCheck; 2]>,
}

impl Fit {
    fn is_ignored(&self, name: &str) -> bool {
        if !is_extended_resource_name(name) {
            return false;
        }
        if self.ignored_resources.iter().any(|r| r == name) {
            return true;
        }
        if !self.ignored_resource_groups.is_empty() {
            let prefix = name.split('/').next().unwrap_or("");
            return self.ignored_resource_groups.iter().any(|g| g == prefix);
        }
        false
    }

    /// The scalar checks for `req`. `intern`: reasons interned (once per pod) rather than
    /// owned.
    fn scalar_checks(&self, req: &Resource, intern: bool) -> PreFilterState {
        if req.scalar.is_empty() {
            return PreFilterState::default();
        }
        let dra = self.dra.as_ref().map(|d| d.read());
        let dra = dra.as_ref().filter(|d| d.has_extended());
        let scalars = req
            .scalar
            .iter()
            .filter(|&(name, q)| q != 0 && !self.is_ignored(name))
            .map(|(name, quantity)| {
                let reason = format!("Insufficient {name}");
                ScalarCheck {
                    name: name.clone(),
                    hash: ScalarResources::hash_of(name),
                    quantity,
                    reason: if intern {
                        crate::framework::interned::reason(&reason)
                    } else {
                        Cow::Owned(reason)
                    },
                    dra_backed: dra.is_some_and(|d| d.extended_class(name).is_some()),
                }
            })
            .collect();
        PreFilterState { scalars }
    }

    /// Upstream `fitsRequest`, appending into `out` only when something does not fit.
    /// `scalars` are `req`'s scalar checks ([`Fit::scalar_checks`]).
    fn fits(
        &self,
        req: &Resource,
        scalars: &[ScalarCheck],
        node: &NodeInfo,
        out: &mut InsufficientList,
    ) {
        let a = &node.allocatable;
        let r = &node.requested;
        if node.pods.len() as i64 + 1 > a.allowed_pod_number {
            out.push(Insufficient {
                reason: Cow::Borrowed("Too many pods"),
                unresolvable: false,
            });
        }
        if req.milli_cpu == 0
            && req.memory == 0
            && req.ephemeral_storage == 0
            && req.scalar.is_empty()
        {
            return;
        }
        if req.milli_cpu > 0 && req.milli_cpu > a.milli_cpu - r.milli_cpu {
            out.push(Insufficient {
                reason: Cow::Borrowed("Insufficient cpu"),
                unresolvable: req.milli_cpu > a.milli_cpu,
            });
        }
        if req.memory > 0 && req.memory > a.memory - r.memory {
            out.push(Insufficient {
                reason: Cow::Borrowed("Insufficient memory"),
                unresolvable: req.memory > a.memory,
            });
        }
        if req.ephemeral_storage > 0
            && req.ephemeral_storage > a.ephemeral_storage - r.ephemeral_storage
        {
            out.push(Insufficient {
                reason: Cow::Borrowed("Insufficient ephemeral-storage"),
                unresolvable: req.ephemeral_storage > a.ephemeral_storage,
            });
        }
        for c in scalars {
            let avail = a.scalar.get_hashed(&c.name, c.hash);
            if c.dra_backed && avail == 0 {
                continue;
            }
            if c.quantity > avail - r.scalar.get_hashed(&c.name, c.hash) {
                out.push(Insufficient {
                    reason: c.reason.clone(),
                    unresolvable: c.quantity > avail,
                });
            }
        }
    }

    /// Whether the pod could fit on an empty node like this one (queueing hints).
    fn fits_empty(&self, pod: &Pod, node: &Node) -> bool {
        // Throwaway: no id needed.
        let mut ni = NodeInfo::default();
        ni.set_node(Arc::new(node.clone()));
        let mut out = InsufficientList::new();
        let checks = self.scalar_checks(&pod.spec.requests, false);
        self.fits(&pod.spec.requests, &checks.scalars, &ni, &mut out);
        out.is_empty()
    }
}

#[derive(Clone)]
struct PreScoreState {
    /// Pod requests per configured resource, non-zero defaults for CPU and memory.
    requests: Arc<[i64]>,
    /// Per configured resource: the DeviceClass serving it, when one does and the pod
    /// asks for it (upstream `draPreScoreState`); with the devices in use.
    dra: Option<Arc<DraScoring>>,
}

/// What scoring a DRA-backed extended resource reads: on a node whose allocatable
/// lacks the resource, its capacity is the node's devices of the class and its use
/// those of them allocated (upstream `calculateDRAResourceTotals`).
struct DraScoring {
    classes: Vec<Option<Arc<DeviceClass>>>,
    index: Arc<SliceIndex>,
    allocated: DeviceSet,
}

impl Plugin for Fit {
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
        let me = Arc::new(Fit {
            ignored_resources: vec![],
            ignored_resource_groups: vec![],
            strategy: self.strategy,
            resources: vec![],
            shape: BrokenLinear(vec![]),
            dra: self.dra.clone(),
        });
        Some(vec![
            // A deleted pod, or (InPlacePodVerticalScaling, on in v1.36) an assigned
            // pod scaled down, may free what this pod needs (upstream
            // `isSchedulableAfterPodEvent`).
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::DELETE.union(ActionType::UPDATE_POD_SCALE_DOWN),
                |pod, old, new| {
                    let old = old.and_then(|o| o.as_pod());
                    match new.and_then(|n| n.as_pod()) {
                        None => match old {
                            Some(p) if p.node_name.is_none() && p.nominated_node_name.is_none() => {
                                QueueingHint::QueueSkip
                            }
                            _ => QueueingHint::Queue,
                        },
                        Some(n) if n.node_name.is_none() => QueueingHint::QueueSkip,
                        Some(n) => {
                            let Some(o) = old else {
                                return QueueingHint::Queue;
                            };
                            let (r, o, n) =
                                (&pod.spec.requests, &o.spec.requests, &n.spec.requests);
                            let down = (r.milli_cpu > 0 && n.milli_cpu < o.milli_cpu)
                                || (r.memory > 0 && n.memory < o.memory)
                                || (r.ephemeral_storage > 0
                                    && n.ephemeral_storage < o.ephemeral_storage)
                                || r.scalar
                                    .iter()
                                    .any(|(k, v)| v > 0 && n.scalar.get(k) < o.scalar.get(k));
                            if down {
                                QueueingHint::Queue
                            } else {
                                QueueingHint::QueueSkip
                            }
                        }
                    }
                },
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_ALLOCATABLE),
                move |pod, old, new| {
                    let Some(new) = new.and_then(|n| n.as_node()) else {
                        return QueueingHint::QueueSkip;
                    };
                    if !me.fits_empty(pod, new) {
                        return QueueingHint::QueueSkip;
                    }
                    let Some(old) = old.and_then(|o| o.as_node()) else {
                        return QueueingHint::Queue;
                    };
                    let (o, n, r) = (&old.allocatable, &new.allocatable, &pod.spec.requests);
                    let grew = n.allowed_pod_number > o.allowed_pod_number
                        || (r.milli_cpu > 0 && n.milli_cpu > o.milli_cpu)
                        || (r.memory > 0 && n.memory > o.memory)
                        || (r.ephemeral_storage > 0 && n.ephemeral_storage > o.ephemeral_storage)
                        || r.scalar
                            .iter()
                            .any(|(k, v)| v > 0 && n.scalar.get(k) > o.scalar.get(k));
                    if grew {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
            // A class now serving an extended resource the pod asks for (upstream
            // `isSchedulableAfterDeviceClassEvent`).
            ClusterEventWithHint::with_hint(
                EventResource::DeviceClass,
                ActionType::ADD.union(ActionType::UPDATE),
                |pod, _old, new| {
                    let Some(DraObject::DeviceClass(c)) = new.and_then(|n| n.as_dra()) else {
                        return QueueingHint::QueueSkip;
                    };
                    let implicit = format!("{DEVICE_CLASS_RESOURCE_PREFIX}{}", c.name);
                    let asks = pod.spec.requests.scalar.iter().any(|(k, v)| {
                        v > 0
                            && (**k == *implicit
                                || c.extended_resource_name.as_deref() == Some(&**k))
                    });
                    if asks {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
        ])
    }
}

impl PreFilterPlugin for Fit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        // The requests themselves are computed at ingest (`model::convert::requests`).
        state.write(self.scalar_checks(&pod.spec.requests, true));
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let mut out = InsufficientList::new();
        let req = &pod.spec.requests;
        // Without PreFilter (a profile that disables it at that point) the checks are
        // worked out here; upstream errors instead.
        match state.read::<PreFilterState>() {
            Some(pre) => self.fits(req, &pre.scalars, node, &mut out),
            None => self.fits(req, &self.scalar_checks(req, false).scalars, node, &mut out),
        }
        if out.is_empty() {
            return Status::success();
        }
        let code = if out.iter().any(|i| i.unresolvable) {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        // One reason (the usual rejection): no list to move through.
        if let [only] = &mut out[..] {
            return Status::new(code, std::mem::take(&mut only.reason));
        }
        Status::from_reasons(code, out.into_iter().map(|i| i.reason))
    }
}

impl PreScorePlugin for Fit {
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
            .map(|r| pod_request(pod, &r.kind, true))
            .collect();
        let dra = self.dra_scoring(&requests);
        state.write(PreScoreState {
            requests: requests.into(),
            dra,
        });
        Status::success()
    }
}

impl ScorePlugin for Fit {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScoreNodeResourcesFit"))?;
        Ok(self.score_with(s, node))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScoreNodeResourcesFit"))?;
        for (n, o) in nodes.iter().zip(out.iter_mut()) {
            *o = self.score_with(s, n);
        }
        Ok(())
    }
}

impl Fit {
    /// The DRA side of scoring, when a configured resource the pod asks for is served
    /// by a DeviceClass.
    fn dra_scoring(&self, requests: &[i64]) -> Option<Arc<DraScoring>> {
        let st = self.dra.as_ref()?.read();
        if !st.has_extended() {
            return None;
        }
        let classes: Vec<Option<Arc<DeviceClass>>> = self
            .resources
            .iter()
            .zip(requests)
            .map(|(r, &q)| match &r.kind {
                ResourceKind::Scalar(n) if q > 0 => st.extended_class(n).cloned(),
                _ => None,
            })
            .collect();
        if classes.iter().all(Option::is_none) {
            return None;
        }
        Some(Arc::new(DraScoring {
            classes,
            index: st.slice_index(),
            allocated: st.allocated_devices(),
        }))
    }

    /// `(allocatable, requested with the pod)` for the `i`th configured resource,
    /// counting devices for a DRA-backed one the node's allocatable lacks.
    #[inline]
    fn resource_totals(&self, s: &PreScoreState, i: usize, node: &NodeInfo) -> (i64, i64) {
        let (r, req) = (&self.resources[i], s.requests[i]);
        if let (Some(d), ResourceKind::Scalar(n)) = (&s.dra, &r.kind) {
            if let Some(class) = &d.classes[i] {
                if node.allocatable.scalar.get(n) == 0 {
                    let n = node.node();
                    let (cap, used) =
                        d.index
                            .count_class_devices(&n.name, &n.labels, class, &d.allocated);
                    if cap > 0 {
                        return (cap, used.saturating_add(req));
                    }
                }
            }
        }
        allocatable_and_requested(node, &r.kind, req, false)
    }

    #[inline]
    fn score_with(&self, s: &PreScoreState, node: &NodeInfo) -> i64 {
        let mut node_score: i64 = 0;
        let mut weight_sum: i64 = 0;
        match self.strategy {
            Strategy::RequestedToCapacityRatio => {
                for (i, r) in self.resources.iter().enumerate() {
                    let (alloc, requested) = self.resource_totals(s, i, node);
                    if alloc == 0 {
                        continue;
                    }
                    let score = if requested > alloc {
                        self.shape.eval(100)
                    } else {
                        self.shape
                            .eval(super::resource_allocation::percent_of(requested, alloc))
                    };
                    // Resources scoring 0 are left out of the mean (upstream quirk).
                    if score > 0 {
                        node_score += score * r.weight;
                        weight_sum += r.weight;
                    }
                }
                if weight_sum == 0 {
                    return 0;
                }
                (node_score as f64 / weight_sum as f64).round() as i64
            }
            strategy => {
                for (i, r) in self.resources.iter().enumerate() {
                    let (alloc, requested) = self.resource_totals(s, i, node);
                    if alloc == 0 {
                        continue;
                    }
                    let score = if strategy == Strategy::LeastAllocated {
                        least_requested_score(requested, alloc)
                    } else {
                        most_requested_score(requested, alloc)
                    };
                    node_score += score * r.weight;
                    weight_sum += r.weight;
                }
                if weight_sum == 0 {
                    return 0;
                }
                node_score / weight_sum
            }
        }
    }
}

fn build(args: Option<&serde_json::Value>) -> Result<Fit, String> {
    let a: FitArgs = decode_args(args)?;
    for (i, r) in a.ignored_resources.iter().enumerate() {
        if !is_qualified_name(r) {
            return Err(format!(
                "ignoredResources[{i}]: Invalid value: {r:?}: must be a valid resource name"
            ));
        }
    }
    for (i, g) in a.ignored_resource_groups.iter().enumerate() {
        if g.contains('/') {
            return Err(format!("ignoredResourceGroups[{i}]: Invalid value: {g:?}: resource group name can't contain '/'"));
        }
        if !is_qualified_name(g) {
            return Err(format!(
                "ignoredResourceGroups[{i}]: Invalid value: {g:?}: must be a valid name"
            ));
        }
    }
    let (strategy, resources, shape) = match a.scoring_strategy {
        None => (Strategy::LeastAllocated, default_resources(), None),
        Some(s) => {
            let strategy = match s.strategy.as_deref().unwrap_or("LeastAllocated") {
                "LeastAllocated" => Strategy::LeastAllocated,
                "MostAllocated" => Strategy::MostAllocated,
                "RequestedToCapacityRatio" => Strategy::RequestedToCapacityRatio,
                other => {
                    return Err(format!(
                        "scoringStrategy.type: Unsupported value: {other:?}: supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\""
                    ))
                }
            };
            let resources = if s.resources.is_empty() {
                default_resources()
            } else {
                s.resources
            };
            for (i, r) in resources.iter().enumerate() {
                let w = r.weight.unwrap_or(1);
                if !(0..=100).contains(&w) {
                    return Err(format!(
                        "scoringStrategy.resources[{i}].weight: Invalid value: {w}: resource weight of {} not in valid range (0, 100]",
                        r.name
                    ));
                }
            }
            match (strategy, s.requested_to_capacity_ratio) {
                (Strategy::RequestedToCapacityRatio, None) => {
                    return Err("scoringStrategy.requestedToCapacityRatio: Required value: must be specified when type is RequestedToCapacityRatio".into())
                }
                (Strategy::RequestedToCapacityRatio, Some(r)) => (strategy, resources, Some(validate_shape(&r.shape, "scoringStrategy.requestedToCapacityRatio.shape")?)),
                (_, Some(_)) => {
                    return Err("scoringStrategy.requestedToCapacityRatio: Forbidden: must be nil when type is not RequestedToCapacityRatio".into())
                }
                (_, None) => (strategy, resources, None),
            }
        }
    };
    Ok(Fit {
        ignored_resources: a.ignored_resources,
        ignored_resource_groups: a.ignored_resource_groups,
        strategy,
        resources: resources.iter().map(WeightedResource::from_spec).collect(),
        shape: shape.unwrap_or(BrokenLinear(vec![])),
        dra: None,
    })
}

/// Validates a utilisation shape and scales scores to 0..=100.
pub fn validate_shape(shape: &[ShapePoint], field: &str) -> Result<BrokenLinear, String> {
    if shape.is_empty() {
        return Err(format!(
            "{field}: Required value: at least one point must be specified"
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if i > 0 && p.utilization <= shape[i - 1].utilization {
            return Err(format!(
                "{field}[{i}].utilization: Invalid value: {}: values must be sorted in increasing order",
                p.utilization
            ));
        }
        if !(0..=100).contains(&p.utilization) {
            return Err(format!(
                "{field}[{i}].utilization: Invalid value: {}: not in valid range [0, 100]",
                p.utilization
            ));
        }
        if !(0..=10).contains(&p.score) {
            return Err(format!(
                "{field}[{i}].score: Invalid value: {}: not in valid range [0, 10]",
                p.score
            ));
        }
    }
    Ok(BrokenLinear(
        shape
            .iter()
            .map(|p| (i64::from(p.utilization), i64::from(p.score) * 10))
            .collect(),
    ))
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, h: &Arc<Handle>| {
        let mut fit = build(args)?;
        fit.dra = Some(h.dra.clone());
        Ok(Arc::new(fit) as Arc<dyn Plugin>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    fn fit(args: serde_json::Value) -> Fit {
        build(Some(&args)).unwrap()
    }

    #[test]
    fn a_bound_pod_scaled_down_requeues_what_it_may_unblock() {
        use crate::framework::events::EventObject;
        let f = fit(serde_json::json!({}));
        let events = f.events_to_register().expect("events");
        let e = events
            .iter()
            .find(|e| e.event.resource == EventResource::Pod)
            .expect("pod events");
        assert!(e.event.action.intersects(ActionType::UPDATE_POD_SCALE_DOWN));
        let hint = |pod: &Pod, old: Arc<Pod>, new: Option<Arc<Pod>>| {
            let (o, n) = (EventObject::Pod(old), new.map(EventObject::Pod));
            e.hint
                .as_ref()
                .map_or(QueueingHint::Queue, |h| h(pod, Some(&o), n.as_ref()))
        };
        let waiting = pod("w").memory(500).build();
        let big = pod("b").node("n").cpu(1000).memory(2000).build();
        let smaller_memory = pod("b").node("n").cpu(1000).memory(1000).build();
        let smaller_cpu = pod("b").node("n").cpu(500).memory(2000).build();
        // Memory it asks for came free: try again; only CPU, which it does not ask
        // for: skip; a pending pod changing frees nothing; a deletion may.
        assert_eq!(
            hint(&waiting, big.clone(), Some(smaller_memory)),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(&waiting, big.clone(), Some(smaller_cpu)),
            QueueingHint::QueueSkip
        );
        let pending = pod("q").memory(2000).build();
        assert_eq!(
            hint(&waiting, pending.clone(), Some(pod("q").memory(1).build())),
            QueueingHint::QueueSkip
        );
        assert_eq!(hint(&waiting, big, None), QueueingHint::Queue);
        assert_eq!(hint(&waiting, pending, None), QueueingHint::QueueSkip);
    }

    #[test]
    fn filter_reasons_and_codes() {
        let f = fit(serde_json::json!({}));
        let mut n = NodeInfo::new(node("n").cpu(1000).memory(1000).pods(1).build());
        let st = CycleState::new();
        let s = f.filter(&st, &pod("p").cpu(2000).memory(500).build(), &n);
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "Insufficient cpu");
        n.add_pod(pod("a").node("n").cpu(600).build());
        let s = f.filter(&st, &pod("p").cpu(500).memory(500).build(), &n);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), "Too many pods, Insufficient cpu");
        let gpu = f.filter(
            &st,
            &pod("g").scalar("nvidia.com/gpu", 1).build(),
            &NodeInfo::new(node("m").build()),
        );
        assert_eq!(gpu.message(), "Insufficient nvidia.com/gpu");
        let ignoring = fit(serde_json::json!({"ignoredResourceGroups": ["nvidia.com"]}));
        assert!(ignoring
            .filter(
                &st,
                &pod("g").scalar("nvidia.com/gpu", 1).build(),
                &NodeInfo::new(node("m").build())
            )
            .is_success());
    }

    #[test]
    fn least_and_most_allocated() {
        let n = NodeInfo::new(node("n").cpu(4000).memory(10000).build());
        let p = pod("p").cpu(3000).memory(5000).build();
        for (args, want) in [
            (serde_json::json!({}), 37),
            (
                serde_json::json!({"scoringStrategy": {"type": "MostAllocated"}}),
                62,
            ),
        ] {
            let f = fit(args);
            let mut st = CycleState::new();
            f.pre_score(&mut st, &p, &[], &Snapshot::default());
            assert_eq!(f.score(&st, &p, &n).unwrap(), want);
        }
    }

    #[test]
    fn requested_to_capacity_ratio() {
        let f = fit(
            serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]}}}),
        );
        let n = NodeInfo::new(node("n").cpu(4000).memory(10000).build());
        let p = pod("p").cpu(3000).memory(5000).build();
        let mut st = CycleState::new();
        f.pre_score(&mut st, &p, &[], &Snapshot::default());
        // cpu 75, memory 50 -> 62.5 rounds half away from zero
        assert_eq!(f.score(&st, &p, &n).unwrap(), 63);
    }

    #[test]
    fn bad_args_name_the_field() {
        let e = build(Some(
            &serde_json::json!({"scoringStrategy": {"type": "Nope"}}),
        ))
        .err()
        .unwrap();
        assert!(
            e.starts_with("scoringStrategy.type: Unsupported value"),
            "{e}"
        );
        let e = build(Some(
            &serde_json::json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
        ))
        .err()
        .unwrap();
        assert!(
            e.contains("requestedToCapacityRatio: Required value"),
            "{e}"
        );
        let e = build(Some(&serde_json::json!({"bogus": 1}))).err().unwrap();
        assert!(e.contains("bogus"), "{e}");
        let e = build(Some(&serde_json::json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}}))).err().unwrap();
        assert!(e.contains("resources[0].weight"), "{e}");
    }
}
