//! DynamicResources: a pod's ResourceClaims must be allocated, or allocatable on the
//! node, from the devices ResourceSlices publish (upstream
//! `dynamicresources/dynamicresources.go`, v1.36).
//!
//! * PreEnqueue keeps a pod out of the queue until each of its claims exists, is not
//!   being deleted and, when made from a template, is owned by the pod.
//! * PreFilter loads the claims: allocated ones must be reservable by the pod (their
//!   node selector is checked per node); unallocated ones go to the structured
//!   allocator with the devices in use (allocated or in flight).
//! * Filter runs the allocator for the node (under `filterTimeout`) and keeps its
//!   answer for Reserve; a CEL runtime error ends the cycle with an error, as upstream.
//! * Score prefers nodes where `firstAvailable` requests got an earlier choice.
//! * Reserve marks the chosen allocations in flight; Unreserve drops them. PreBind
//!   writes each claim: finalizer, `status.allocation`, `status.reservedFor`.
//! * PostFilter deallocates one allocated claim that keeps the pod off every node, if
//!   nobody else uses it.
//!
//! Every rejection is UnschedulableAndUnresolvable: like upstream (through v1.37),
//! DRA devices are never a reason to preempt.

mod allocation;
mod allocator;
mod binding;
mod extended;
mod writes;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::cache::Snapshot;
use crate::framework::dra::DraStore;
use crate::framework::events::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
};
use crate::framework::interface::{
    BoxFuture, FilterPlugin, NodeToStatus, Plugin, PostFilterContext, PostFilterPlugin,
    PostFilterResult, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin,
};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::dra::{
    ClaimName, DraObject, RequestKind, RequestMapping, ResourceClaim, FINALIZER,
};
use crate::model::Pod;
use crate::plugins::helper::{decode_args, default_normalize_score, missing_state, MAX_SCORE};

pub use allocation::ClaimAllocation;
use allocation::{ClaimData, RequestData};
pub use allocator::AllocError;
use allocator::{allocate, Prepared};
use extended::{Extended, ForNode, SPECIAL_CLAIM_NAME};

pub const NAME: &str = "DynamicResources";
pub const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
pub const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
pub const ERR_IN_USE: &str = "resourceclaim in use";
pub const ERR_TIMEOUT: &str = "timed out trying to allocate devices";
/// Upstream `DynamicResourcesArgs.filterTimeout` default.
pub const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most subrequests a `firstAvailable` request may have: Score's scale.
const FIRST_AVAILABLE_MAX: i64 = 8;

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default)]
    filter_timeout: Option<String>,
    #[serde(default)]
    binding_timeout: Option<String>,
}

pub struct DynamicResources {
    handle: Arc<Handle>,
    dra: Arc<DraStore>,
    /// `None`: no limit (`filterTimeout: 0s`).
    filter_timeout: Option<Duration>,
    /// How long PreBind waits for devices' binding conditions (`bindingTimeout`).
    binding_timeout: Duration,
}

/// One of the pod's claims, resolved.
#[derive(Clone)]
struct PodClaim {
    claim: Arc<ResourceClaim>,
}

/// Written first by PreFilter, as upstream writes its empty state first: PostFilter
/// tells "PreFilter ran, the pod has no claims" (`no new claims to deallocate`) from
/// "PreFilter never ran" (an earlier PreFilter rejected the pod: upstream's state read
/// fails with `not found`, and that error ends PostFilter before preemption).
#[derive(Clone)]
struct PreFilterRan;

/// What Filter allocated on a node: the claims it allocated (`prep`, the pod's
/// unallocated claims and, where DRA serves extended resources, that claim as the
/// node needs it) and their allocations in the same order.
struct NodeResult {
    prep: Arc<Prepared>,
    allocs: allocator::Allocations,
    /// Which request of the extended-resource claim serves which container.
    mappings: Option<Arc<[RequestMapping]>>,
}

/// Filter's allocations per node.
type NodeAllocations = FxHashMap<Arc<str>, Arc<NodeResult>>;

#[derive(Clone)]
struct StateData {
    /// The pod's claims, in `spec.resourceClaims` order.
    claims: Arc<Vec<PodClaim>>,
    /// The unallocated ones, for the allocator; `None` when all are allocated.
    prepared: Option<Arc<Prepared>>,
    /// Filter's allocations per node (Filter runs in parallel; shared by clones).
    by_node: Arc<Mutex<NodeAllocations>>,
    /// Allocated claims some node could not use (indices into `claims`), for PostFilter.
    unavailable: Arc<Mutex<FxHashSet<usize>>>,
    /// Set by Reserve: the claims it allocated (with their allocation) for PreBind.
    reserved: Vec<Arc<ResourceClaim>>,
    /// The pod's DRA-backed extended resources, if a DeviceClass serves any.
    extended: Option<Arc<Extended>>,
    /// Set by Reserve: the extended-resource claim's request mappings on the node.
    ext_mappings: Option<Arc<[RequestMapping]>>,
    /// The extended-resource claim once PreBind created it (Unreserve deletes it).
    created: Arc<Mutex<Option<Arc<ResourceClaim>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DynamicResources {
    /// Resolves the pod's claims (upstream `foreachPodResourceClaim`): an error names
    /// why the pod cannot be scheduled now.
    fn pod_claims(&self, pod: &Pod) -> Result<Vec<PodClaim>, String> {
        let st = self.dra.read();
        let mut out = Vec::with_capacity(pod.spec.resource_claims.len());
        for c in pod.spec.resource_claims.iter() {
            let (name, must_own) = match pod.spec.claim_name(c) {
                ClaimName::Named(n, own) => (n, own),
                ClaimName::NotNeeded => continue,
                ClaimName::NotCreated => {
                    return Err(format!(
                        "pod \"{}\": ResourceClaim not created yet",
                        pod.key()
                    ))
                }
            };
            let Some(claim) = st.claim(&pod.namespace, &name) else {
                return Err(format!(
                    "resourceclaim.resource.k8s.io \"{name}\" not found"
                ));
            };
            if claim.deleting {
                return Err(format!("resourceclaim \"{name}\" is being deleted"));
            }
            if must_own && claim.owner.as_ref().is_none_or(|o| *o.uid != *pod.uid) {
                return Err(format!(
                    "ResourceClaim {} was not created for pod {} (pod is not owner)",
                    claim.key(),
                    pod.key()
                ));
            }
            out.push(PodClaim {
                claim: claim.clone(),
            });
        }
        Ok(out)
    }

    fn prepare(&self, pod: &Pod, claims: &[PodClaim]) -> Result<Option<Prepared>, Status> {
        let st = self.dra.read();
        let mut data = Vec::new();
        for pc in claims {
            let c = &pc.claim;
            if let Some(_a) = &c.allocation {
                if !c.can_be_reserved_for(&pod.uid) {
                    return Err(Status::unresolvable(ERR_IN_USE));
                }
                continue;
            }
            if st.is_in_flight(&c.uid) {
                return Err(Status::unresolvable(format!(
                    "resource claim {} is in the process of being allocated",
                    c.key()
                )));
            }
            let requests = claim_requests(&st, c).map_err(Status::unresolvable)?;
            data.push(ClaimData {
                claim: c.clone(),
                requests,
            });
        }
        if data.is_empty() {
            return Ok(None);
        }
        Ok(Some(Prepared {
            claims: data,
            allocated: st.allocated_devices(),
            shared: st.shared_devices(),
            index: st.slice_index(),
            timeout: self.filter_timeout,
        }))
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }

    /// Upstream `EventsToRegister` with queueing hints.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let add_update = ActionType::ADD.union(ActionType::UPDATE);
        Some(vec![
            // A claim of the pod created or changed, or any claim deallocated.
            ClusterEventWithHint::with_hint(
                EventResource::ResourceClaim,
                add_update.union(ActionType::DELETE),
                |pod, old, new| {
                    let claim = |o: Option<&EventObject>| match o.and_then(|o| o.as_dra()) {
                        Some(DraObject::ResourceClaim(c)) => Some(c.clone()),
                        _ => None,
                    };
                    let (old, new) = (claim(old), claim(new));
                    let freed = match (&old, &new) {
                        (Some(o), Some(n)) => o.allocation.is_some() && n.allocation.is_none(),
                        (Some(o), None) => o.allocation.is_some(),
                        _ => false,
                    };
                    let ours = new.as_ref().or(old.as_ref()).is_some_and(|c| {
                        *c.namespace == *pod.namespace
                            && pod.spec.resource_claims.iter().any(|pc| {
                                matches!(pod.spec.claim_name(pc), ClaimName::Named(n, _) if n == c.name)
                            })
                    });
                    if freed || ours {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
            ClusterEventWithHint::new(EventResource::ResourceSlice, add_update),
            ClusterEventWithHint::new(EventResource::DeviceClass, add_update),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD
                    .union(ActionType::UPDATE_NODE_LABEL)
                    .union(ActionType::UPDATE_NODE_ALLOCATABLE),
            ),
            // The resourceclaim controller wrote the pod's claim statuses.
            ClusterEventWithHint::new(
                EventResource::Pod,
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
            ),
        ])
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        if pod.spec.resource_claims.is_empty() {
            return Status::success();
        }
        match self.pod_claims(pod) {
            Ok(_) => Status::success(),
            Err(msg) => Status::unresolvable(msg),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        state.write(PreFilterRan);
        let mut extended = match &pod.spec.extended_containers {
            Some(_) => Extended::for_pod(pod, &self.dra.read()),
            None => None,
        };
        if pod.spec.resource_claims.is_empty() && extended.is_none() {
            return (None, Status::skip());
        }
        let claims = match self.pod_claims(pod) {
            Ok(c) => c,
            Err(msg) => return (None, Status::unresolvable(msg)),
        };
        if claims.is_empty() && extended.is_none() {
            return (None, Status::skip());
        }
        let prepared = match self.prepare(pod, &claims) {
            Ok(p) => p.map(Arc::new),
            Err(s) => return (None, s),
        };
        if let Some(x) = &mut extended {
            if !x.is_stale() {
                x.prepare_full(prepared.as_deref(), &self.dra.read(), self.filter_timeout);
            }
        }
        state.write(StateData {
            claims: Arc::new(claims),
            prepared,
            by_node: Arc::default(),
            unavailable: Arc::default(),
            reserved: Vec::new(),
            extended: extended.map(Arc::new),
            ext_mappings: None,
            created: Arc::default(),
        });
        (None, Status::success())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<StateData>() else {
            // A pod without claims has nothing to check here, whatever its PreFilter
            // said (a started PreFilter's redo path may run Filter on a fresh state).
            if pod.spec.resource_claims.is_empty() {
                return Status::success();
            }
            return missing_state(NAME);
        };
        let n = node.node();
        for (i, pc) in s.claims.iter().enumerate() {
            let Some(a) = &pc.claim.allocation else {
                continue;
            };
            let elsewhere = a
                .node_selector
                .as_ref()
                .is_some_and(|sel| !sel.matches(&n.name, &n.labels));
            // A claim whose devices failed to bind, or did not in time, is of no use
            // anywhere until PostFilter deallocates it.
            let unbound = binding::has_binding_conditions(a)
                && match binding::claim_ready(&pc.claim) {
                    Err(_) => true,
                    Ok(ready) => {
                        !ready
                            && binding::claim_timed_out(
                                &pc.claim,
                                self.binding_timeout,
                                binding::now_us(),
                            )
                    }
                };
            if elsewhere || unbound {
                lock(&s.unavailable).insert(i);
                return Status::unresolvable(ERR_NOT_AVAILABLE);
            }
        }
        let (prep, mappings) = match &s.extended {
            None => (s.prepared.clone(), None),
            Some(x) => {
                match x.for_node(node, s.prepared.as_deref(), &self.dra, self.filter_timeout) {
                    Err(status) => return status,
                    Ok(ForNode::Nothing) => (s.prepared.clone(), None),
                    Ok(ForNode::Allocate(p, m)) => (Some(p), Some(m)),
                }
            }
        };
        let Some(prep) = prep else {
            return Status::success();
        };
        match allocate(&prep, n) {
            Ok(Some(allocs)) => {
                let r = NodeResult {
                    prep,
                    allocs,
                    mappings,
                };
                lock(&s.by_node).insert(n.name.clone(), Arc::new(r));
                Status::success()
            }
            Ok(None) => Status::unresolvable(ERR_CANNOT_ALLOCATE),
            Err(AllocError::Timeout) => Status::unresolvable(ERR_TIMEOUT),
            Err(AllocError::Fatal(msg)) => Status::error(msg),
        }
    }
}

impl PostFilterPlugin for DynamicResources {
    /// Deallocates one allocated claim that kept the pod off a node, if nobody but the
    /// pod uses it (upstream picks one at random; this picks the first in the pod's
    /// order, so runs repeat).
    fn post_filter(
        &self,
        ctx: PostFilterContext<'_>,
        pod: &Arc<Pod>,
        _statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        let Some(s) = ctx.state.read::<StateData>() else {
            if ctx.state.read::<PreFilterRan>().is_some() {
                return (None, Status::unschedulable("no new claims to deallocate"));
            }
            return (None, Status::error("not found"));
        };
        if s.claims.is_empty() && s.extended.is_none() {
            return (None, Status::unschedulable("no new claims to deallocate"));
        }
        let mut unavailable: Vec<usize> = lock(&s.unavailable).iter().copied().collect();
        unavailable.sort_unstable();
        for i in unavailable {
            let c = &s.claims[i].claim;
            let free = c.reserved_for.is_empty()
                || (c.reserved_for.len() == 1 && *c.reserved_for[0].uid == *pod.uid);
            if !free {
                continue;
            }
            let result = self.deallocate(c.clone());
            return match result {
                Ok(updated) => {
                    self.dra.assume(updated);
                    (
                        None,
                        Status::unschedulable("deallocation of ResourceClaim completed"),
                    )
                }
                Err(e) => (None, Status::error(e.to_string())),
            };
        }
        // A claim an earlier cycle made for the extended resources is stale: delete it
        // so the next attempt starts anew.
        if let Some(x) = s.extended.as_ref().filter(|x| x.is_stale()) {
            return match self.delete_claim(x.claim.clone()) {
                Ok(()) => (
                    None,
                    Status::unschedulable("deletion of ResourceClaim completed"),
                ),
                Err(e) => (None, Status::error(e)),
            };
        }
        (None, Status::unschedulable("still not schedulable"))
    }
}

impl PreScorePlugin for DynamicResources {
    /// Score matters only when some unallocated claim has a `firstAvailable` request.
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let prioritized = state
            .read::<StateData>()
            .and_then(|s| s.prepared.as_ref())
            .is_some_and(|p| {
                p.claims.iter().any(|c| {
                    c.requests
                        .iter()
                        .any(|alts| alts.len() > 1 || alts.first().is_some_and(|r| r.sub.is_some()))
                })
            });
        if prioritized {
            Status::success()
        } else {
            Status::skip()
        }
    }
}

impl ScorePlugin for DynamicResources {
    /// Per `firstAvailable` request, `8 - index of the chosen subrequest`, summed.
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<StateData>() else {
            return Err(missing_state(NAME));
        };
        let Some(r) = lock(&s.by_node).get(&node.node().name).cloned() else {
            return Ok(0);
        };
        let mut score = 0;
        for (cd, a) in r.prep.claims.iter().zip(r.allocs.iter()) {
            for (ri, alts) in cd.requests.iter().enumerate() {
                if alts.first().is_some_and(|r| r.sub.is_some()) {
                    score += FIRST_AVAILABLE_MAX - a.chosen.get(ri).copied().unwrap_or(0) as i64;
                }
            }
        }
        Ok(score)
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        default_normalize_score(MAX_SCORE, false, scores);
        Status::success()
    }
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        let Some(s) = state.read_mut::<StateData>() else {
            return Status::success();
        };
        let Some(r) = lock(&s.by_node).get(node).cloned() else {
            if s.prepared.is_none() {
                // Nothing to allocate here (extended resources from device plugins).
                return Status::success();
            }
            return Status::error(format!("claims not allocated for node {node}"));
        };
        s.ext_mappings = r.mappings.clone();
        let node: Arc<str> = Arc::from(node);
        let mut reserved = Vec::with_capacity(r.allocs.len());
        for (cd, a) in r.prep.claims.iter().zip(r.allocs.iter()) {
            let mut c = (*cd.claim).clone();
            c.allocation = Some(Arc::new(a.allocation(cd, &node)));
            if !c.finalizers.iter().any(|f| &**f == FINALIZER) {
                let mut f = c.finalizers.to_vec();
                f.push(FINALIZER.into());
                c.finalizers = f.into();
            }
            let c = Arc::new(c);
            self.dra.start_allocation(c.clone());
            reserved.push(c);
        }
        s.reserved = reserved;
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &Pod, _node: &str) {
        let Some(s) = state.read_mut::<StateData>() else {
            return;
        };
        for c in s.reserved.drain(..) {
            self.dra.end_allocation(&c.uid);
        }
        if let Some(created) = lock(&s.created).take() {
            self.spawn_delete(created);
        }
        // Claims PreBind already wrote: take the pod out of their reservedFor again.
        let written: Vec<Arc<ResourceClaim>> = s
            .claims
            .iter()
            .filter_map(|pc| {
                let st = self.dra.read();
                st.claim(&pc.claim.namespace, &pc.claim.name)
                    .filter(|c| c.is_reserved_for(&pod.uid))
                    .cloned()
            })
            .collect();
        if written.is_empty() {
            return;
        }
        if let Some(services) = self.handle.services() {
            let client = self.handle.client.clone();
            let dra = self.dra.clone();
            let uid: Arc<str> = pod.uid.clone();
            services.spawn(Box::pin(async move {
                for c in written {
                    if let Ok(updated) = client.release_claim(&c, &uid).await {
                        dra.assume(updated);
                    }
                }
            }));
        }
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &Pod, _node: &str) -> Status {
        match state.read::<StateData>() {
            Some(s) if !s.claims.is_empty() || !s.reserved.is_empty() => Status::success(),
            _ => Status::skip(),
        }
    }

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(s) = state.read::<StateData>() else {
                return Status::success();
            };
            for pc in s.claims.iter() {
                // The claim as the cluster has it, and what Reserve allocated for it.
                let newly = s.reserved.iter().find(|c| c.uid == pc.claim.uid);
                let claim = &pc.claim;
                if newly.is_none() && claim.is_reserved_for(&pod.uid) {
                    continue;
                }
                let allocation = binding::stamped(newly.and_then(|c| c.allocation.as_deref()));
                let reserved = self
                    .reserve_in_api(claim, allocation.as_ref(), &claim.uid, pod)
                    .await;
                if !reserved.is_success() {
                    return reserved;
                }
            }
            if let Some(c) = s.reserved.iter().find(|c| &*c.name == SPECIAL_CLAIM_NAME) {
                let bound = self.bind_extended(s, c, pod).await;
                if !bound.is_success() {
                    return bound;
                }
            }
            let waits = s
                .reserved
                .iter()
                .map(|c| &c.allocation)
                .chain(s.claims.iter().map(|pc| &pc.claim.allocation))
                .any(|a| a.as_deref().is_some_and(binding::has_binding_conditions));
            if waits {
                // Upstream says so on the pod before it waits (v1.34+).
                self.handle
                    .client
                    .record_event(crate::client::PodEvent::new(
                        pod,
                        crate::client::EventType::Normal,
                        "BindingConditionsPending",
                        "Scheduling",
                        format!("waiting for binding conditions for device on node {node}"),
                    ));
                return self.wait_for_binding_conditions(s).await;
            }
            Status::success()
        })
    }
}

/// A claim's requests as the allocator takes them: each with its alternatives (one,
/// or `firstAvailable`'s subrequests in order) and their classes. The error is
/// upstream PreFilter's: `request <r>: device class <c> does not exist`.
fn claim_requests(
    st: &crate::framework::dra::DraState,
    c: &ResourceClaim,
) -> Result<Vec<Vec<RequestData>>, String> {
    let mut requests = Vec::with_capacity(c.spec.requests.len());
    for r in c.spec.requests.iter() {
        let alts: Vec<(Option<Arc<str>>, &crate::model::dra::ExactRequest)> = match &r.kind {
            RequestKind::Exactly(e) => vec![(None, e)],
            RequestKind::FirstAvailable(subs) => {
                subs.iter().map(|(n, e)| (Some(n.clone()), e)).collect()
            }
        };
        let mut out = Vec::with_capacity(alts.len());
        for (sub, e) in alts {
            let shown: Arc<str> = match &sub {
                Some(s) => format!("{}/{s}", r.name).into(),
                None => r.name.clone(),
            };
            let Some(class) = st.device_class(&e.device_class_name) else {
                return Err(format!(
                    "request {shown}: device class {} does not exist",
                    e.device_class_name
                ));
            };
            out.push(RequestData {
                result_name: shown,
                base: r.name.clone(),
                sub,
                request: e.clone(),
                class: class.clone(),
            });
        }
        requests.push(out);
    }
    Ok(requests)
}

/// Allocates one claim on the first of `nodes` where it fits, with the devices `dra`
/// has in use (scheduler_perf's `allocResourceClaims`: claims allocated before a
/// test, as a driver's own controller would). `Ok(None)`: it fits nowhere.
pub fn allocate_on_first_fit(
    dra: &DraStore,
    claim: &Arc<ResourceClaim>,
    nodes: &[Arc<crate::model::Node>],
) -> Result<Option<crate::model::dra::Allocation>, String> {
    let st = dra.read();
    let requests = claim_requests(&st, claim).map_err(|e| format!("claim {}: {e}", claim.key()))?;
    let prep = Prepared {
        claims: vec![ClaimData {
            claim: claim.clone(),
            requests,
        }],
        allocated: st.allocated_devices(),
        shared: st.shared_devices(),
        index: st.slice_index(),
        timeout: None,
    };
    drop(st);
    for n in nodes {
        match allocate(&prep, n) {
            Ok(Some(a)) => {
                return Ok(a.first().map(|a| a.allocation(&prep.claims[0], &n.name)));
            }
            Ok(None) => {}
            Err(AllocError::Timeout) => {}
            Err(AllocError::Fatal(m)) => return Err(m),
        }
    }
    Ok(None)
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, h: &Arc<Handle>| {
        let a: Args = decode_args(args)?;
        let timeout = |v: &Option<String>,
                       field: &str,
                       default: Option<Duration>|
         -> Result<Option<Duration>, String> {
            match v {
                None => Ok(default),
                Some(s) => match crate::config::parse_go_duration(s) {
                    Some(d) if d.is_zero() => Ok(None),
                    Some(d) => Ok(Some(d)),
                    None => Err(format!(
                        "{field}: Invalid value: {s:?}: must be a duration such as 10s"
                    )),
                },
            }
        };
        let filter_timeout = timeout(
            &a.filter_timeout,
            "filterTimeout",
            Some(DEFAULT_FILTER_TIMEOUT),
        )?;
        // Upstream `ValidateDynamicResourcesArgs`: at least a second.
        let binding_timeout = match timeout(&a.binding_timeout, "bindingTimeout", None)? {
            None if a.binding_timeout.is_none() => binding::DEFAULT_BINDING_TIMEOUT,
            Some(d) if d >= Duration::from_secs(1) => d,
            _ => {
                return Err(format!(
                    "bindingTimeout: Invalid value: {:?}: must be at least 1 second",
                    a.binding_timeout.as_deref().unwrap_or_default()
                )
                .into())
            }
        };
        Ok(Arc::new(DynamicResources {
            handle: h.clone(),
            dra: h.dra.clone(),
            filter_timeout,
            binding_timeout,
        }) as Arc<dyn Plugin>)
    })
}
