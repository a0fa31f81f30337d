//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable on the
//! node (upstream `volumebinding/volume_binding.go` and `binder.go`).
//!
//! * PreFilter sorts the claims: bound (volume named and bind completed), delayed
//!   (class `WaitForFirstConsumer`, no volume yet) and immediate-but-unbound, which
//!   only the PV controller can fix. Local PVs pin the pod to their hostnames.
//! * Filter checks bound PVs' node affinity, matches delayed claims to Available static
//!   PVs (smallest fit, one PV per claim) and checks provisioning for the rest: the
//!   class's provisioner, allowedTopologies and, for CSI drivers that ask for it,
//!   CSIStorageCapacity.
//! * Reserve assumes the chosen bindings in the volume store (later cycles see the PVs
//!   taken); Unreserve reverts them.
//! * PreBind writes them (PV claimRef; the selected-node annotation) and waits until
//!   the claims are bound, up to `bindTimeoutSeconds`.
//!
//! Score: upstream scores only behind the alpha `StorageCapacityScoring` gate, off by
//! default; Switchyard has no feature gates, so PreScore always returns Skip, as
//! upstream's default does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::cache::volumes::{VolumeState, VolumeStore};
use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{
    BoxFuture, FilterPlugin, Plugin, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin,
};
use crate::framework::{Code, CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::labels::Operator;
use crate::model::storage::{
    find_matching_volume, ClaimRef, PersistentVolume, PersistentVolumeClaim, PodVolume, PvcPhase,
    StorageObject, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, NO_PROVISIONER,
};
use crate::model::{Labels, Node, Pod};
use crate::plugins::helper::decode_args;
use crate::plugins::helper::volumes::{
    claim_event_hint, ephemeral_claim_is_for_pod, pvc_not_found,
};

pub const NAME: &str = "VolumeBinding";
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Upstream `DefaultBindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;
use crate::model::labels::LABEL_HOSTNAME;

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default = "default_timeout")]
    bind_timeout_seconds: i64,
    /// Only read by the gated scorer; accepted so upstream configurations load.
    #[serde(default, rename = "shape")]
    _shape: Option<serde_json::Value>,
}

fn default_timeout() -> i64 {
    DEFAULT_BIND_TIMEOUT_SECONDS
}

impl Default for Args {
    fn default() -> Self {
        Args {
            _api_version: None,
            _kind: None,
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            _shape: None,
        }
    }
}

pub struct VolumeBinding {
    handle: Arc<Handle>,
    volumes: Arc<VolumeStore>,
    bind_timeout: Duration,
}

/// Upstream `PodVolumeClaims`.
struct PodVolumeClaims {
    /// Fully bound claims and their PVs (`None`: the PV does not exist).
    bound: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<PersistentVolume>>)>,
    /// Delayed-binding claims without a volume, smallest request first.
    delayed: Vec<Arc<PersistentVolumeClaim>>,
    /// Candidate PVs of the delayed claims' classes.
    pvs_by_class: FxHashMap<Arc<str>, Arc<[Arc<PersistentVolume>]>>,
}

/// Upstream `PodVolumes`: what binding the pod on one node takes.
#[derive(Debug)]
pub struct PodVolumes {
    node: Arc<Node>,
    /// (PV, claim): static PVs to bind; after Reserve the PV is the assumed one.
    static_bindings: Vec<(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>)>,
    /// Claims to provision; after Reserve they carry the selected-node annotation.
    provisions: Vec<Arc<PersistentVolumeClaim>>,
}

#[derive(Clone)]
struct StateData {
    claims: Arc<PodVolumeClaims>,
    /// Filter's findings per node (Filter runs in parallel; shared by clones, as
    /// upstream's state is).
    by_node: Arc<Mutex<FxHashMap<Arc<str>, Arc<PodVolumes>>>>,
    /// Set by Reserve: what PreBind writes (`None`: all bound already).
    reserved: Option<Arc<PodVolumes>>,
}

/// Upstream `GetLocalPersistentVolumeNodeNames`: the hostnames a local PV pins.
fn local_pv_node_names(pv: &PersistentVolume) -> Vec<Box<str>> {
    let Some(affinity) = &pv.node_affinity else {
        return Vec::new();
    };
    let mut out: Vec<Box<str>> = Vec::new();
    for term in affinity.terms.iter() {
        let mut nodes: Option<Vec<Box<str>>> = None;
        for r in term.match_expressions.iter() {
            if &*r.key == LABEL_HOSTNAME && r.op == Operator::In {
                let values: Vec<Box<str>> = r.values.to_vec();
                nodes = Some(match nodes {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
        }
        for n in nodes.into_iter().flatten() {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

impl VolumeBinding {
    /// Upstream `podHasPVCs` then `GetPodVolumeClaims`.
    fn pod_volume_claims(&self, pod: &Pod) -> Result<Option<PodVolumeClaims>, Status> {
        let st = self.volumes.read();
        let mut has_pvc = false;
        let mut pvcs = Vec::new();
        for v in pod.spec.volumes.iter() {
            let PodVolume::Claim {
                claim, ephemeral, ..
            } = v
            else {
                continue;
            };
            has_pvc = true;
            let Some(pvc) = st.pvc(&pod.namespace, claim) else {
                let msg = if *ephemeral {
                    format!("waiting for ephemeral volume controller to create the persistentvolumeclaim \"{claim}\"")
                } else {
                    pvc_not_found(claim)
                };
                return Err(Status::unresolvable(msg));
            };
            if pvc.phase == PvcPhase::Lost {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" bound to non-existent persistentvolume \"{}\"",
                    pvc.name,
                    pvc.volume_name.as_deref().unwrap_or("")
                )));
            }
            if pvc.deleting {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" is being deleted",
                    pvc.name
                )));
            }
            if *ephemeral {
                ephemeral_claim_is_for_pod(pod, pvc).map_err(Status::unresolvable)?;
            }
            pvcs.push(pvc.clone());
        }
        if !has_pvc {
            return Ok(None);
        }
        let mut claims = PodVolumeClaims {
            bound: Vec::new(),
            delayed: Vec::new(),
            pvs_by_class: FxHashMap::default(),
        };
        let mut unbound_immediate = false;
        for pvc in pvcs {
            if pvc.is_fully_bound() {
                let pv = pvc.volume_name.as_ref().and_then(|n| st.pv(n)).cloned();
                claims.bound.push((pvc, pv));
                continue;
            }
            // Upstream `IsDelayBindingMode`: no class, or an unknown one, is immediate.
            let delayed = !pvc.storage_class.is_empty()
                && st
                    .storage_class(&pvc.storage_class)
                    .is_some_and(|c| c.wait_for_first_consumer());
            if delayed && pvc.volume_name.is_none() {
                if !claims.pvs_by_class.contains_key(&pvc.storage_class) {
                    claims.pvs_by_class.insert(
                        pvc.storage_class.clone(),
                        st.pvs_of_class(&pvc.storage_class),
                    );
                }
                claims.delayed.push(pvc);
            } else {
                // Pre-bound claims are treated as unbound immediate ones.
                unbound_immediate = true;
            }
        }
        if unbound_immediate {
            return Err(Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        // Upstream sorts by request inside `findMatchingVolumes` (stable sort).
        claims.delayed.sort_by_key(|c| c.request);
        Ok(Some(claims))
    }

    /// Upstream `FindPodVolumes`: the reasons the node cannot take the pod's claims,
    /// or what binding them there takes.
    fn find_pod_volumes(
        &self,
        claims: &PodVolumeClaims,
        node: &NodeInfo,
    ) -> Result<(PodVolumes, Vec<&'static str>), Status> {
        let n = node.node();
        let labels = &n.labels;
        let mut volumes = PodVolumes {
            node: node
                .node_arc()
                .cloned()
                .unwrap_or_else(|| Arc::new(n.clone())),
            static_bindings: Vec::new(),
            provisions: Vec::new(),
        };
        let mut bound_ok = true;
        let mut unbound_ok = true;
        let mut storage_ok = true;
        let mut pvs_found = true;
        for (_, pv) in &claims.bound {
            match pv {
                None => {
                    pvs_found = false;
                    break;
                }
                Some(pv) if !pv.fits_node("", labels) => {
                    bound_ok = false;
                    break;
                }
                Some(_) => {}
            }
        }
        // Upstream goes on to the delayed claims whatever the bound ones found, so a
        // node can carry several reasons.
        if !claims.delayed.is_empty() {
            let mut to_match = Vec::new();
            let mut to_provision = Vec::new();
            for c in &claims.delayed {
                match c.selected_node() {
                    Some(sel) if sel != n.name.as_ref() => {
                        unbound_ok = false;
                        break;
                    }
                    Some(_) => to_provision.push(c.clone()),
                    None => to_match.push(c.clone()),
                }
            }
            if unbound_ok {
                let mut chosen: Vec<Arc<str>> = Vec::new();
                for c in to_match {
                    let pvs = claims
                        .pvs_by_class
                        .get(&c.storage_class)
                        .map_or(&[][..], |v| &v[..]);
                    match find_matching_volume(&c, pvs, Some(labels), &chosen, true) {
                        Some(pv) => {
                            chosen.push(pv.name.clone());
                            volumes.static_bindings.push((pv, c));
                        }
                        None => {
                            unbound_ok = false;
                            to_provision.push(c);
                        }
                    }
                }
                if !to_provision.is_empty() {
                    let (provision_ok, enough) = self.check_volume_provisions(&to_provision, n)?;
                    unbound_ok = provision_ok;
                    storage_ok = enough;
                    if provision_ok && enough {
                        volumes.provisions = to_provision;
                    }
                }
            }
        }
        let mut reasons = Vec::new();
        if !bound_ok {
            reasons.push(ERR_REASON_NODE_CONFLICT);
        }
        if !unbound_ok {
            reasons.push(ERR_REASON_BIND_CONFLICT);
        }
        if !storage_ok {
            reasons.push(ERR_REASON_NOT_ENOUGH_SPACE);
        }
        if !pvs_found {
            reasons.push(ERR_REASON_PV_NOT_EXIST);
        }
        Ok((volumes, reasons))
    }

    /// Upstream `checkVolumeProvisions`: (provisioning possible, enough capacity).
    fn check_volume_provisions(
        &self,
        claims: &[Arc<PersistentVolumeClaim>],
        node: &Node,
    ) -> Result<(bool, bool), Status> {
        let st = self.volumes.read();
        for c in claims {
            if c.storage_class.is_empty() {
                return Err(Status::error(format!("no class for claim \"{}\"", c.key())));
            }
            let Some(class) = st.storage_class(&c.storage_class) else {
                return Err(Status::error(format!(
                    "failed to find storage class \"{}\"",
                    c.storage_class
                )));
            };
            if class.provisioner.is_empty() || *class.provisioner == *NO_PROVISIONER {
                return Ok((false, true));
            }
            // Topology terms match labels only.
            if !class.allows_node("", &node.labels) {
                return Ok((false, true));
            }
            if !has_enough_capacity(&st, c, &class.name, &class.provisioner, &node.labels) {
                return Ok((true, false));
            }
        }
        Ok((true, true))
    }

    /// Upstream `checkBindings`: true when every claim is bound as planned.
    fn check_bindings(&self, pod: &Pod, volumes: &PodVolumes) -> Result<bool, String> {
        if let Some(services) = self.handle.services() {
            if services.pod(&pod.uid).is_none() {
                return Err(format!(
                    "pod does not exist any more: pods \"{}\" not found",
                    pod.name
                ));
            }
        }
        let labels = &volumes.node.labels;
        let node = &volumes.node.name;
        for (planned, claim) in &volumes.static_bindings {
            let pv = self.volumes.api_pv(&planned.name).ok_or_else(|| {
                format!(
                    "failed to check binding: persistentvolume \"{}\" not found",
                    planned.name
                )
            })?;
            let pvc = self
                .volumes
                .api_pvc(&claim.namespace, &claim.name)
                .ok_or_else(|| {
                    format!("failed to check binding: {}", pvc_not_found(&claim.name))
                })?;
            if pv.claim_ref.as_ref().is_none_or(|r| r.uid.is_empty()) {
                // Not written back yet, or the PV controller reset it.
                if pv.resource_version == planned.resource_version {
                    return Ok(false);
                }
                return Err(format!("ClaimRef got reset for pv \"{}\"", pv.name));
            }
            if !pv.fits_node("", labels) {
                return Err(format!(
                    "pv \"{}\" node affinity doesn't match node \"{node}\": no matching NodeSelectorTerms",
                    pv.name
                ));
            }
            if !pvc.is_fully_bound() {
                return Ok(false);
            }
        }
        for claim in &volumes.provisions {
            let pvc = self
                .volumes
                .api_pvc(&claim.namespace, &claim.name)
                .ok_or_else(|| {
                    format!(
                        "failed to check provisioning pvc: {}",
                        pvc_not_found(&claim.name)
                    )
                })?;
            match pvc.selected_node() {
                Some(n) if n == &**node => {}
                // Not written yet: the API object predates our update.
                None if pvc.resource_version == claim.resource_version => return Ok(false),
                None => {
                    return Err(format!(
                        "selectedNode annotation reset for PVC \"{}\"",
                        pvc.name
                    ))
                }
                Some(_) => return Err(format!("provisioning failed for PVC \"{}\"", pvc.name)),
            }
            if let Some(pv_name) = &pvc.volume_name {
                let Some(pv) = self.volumes.api_pv(pv_name) else {
                    return Ok(false);
                };
                if !pv.fits_node("", labels) {
                    return Err(format!(
                        "pv \"{}\" node affinity doesn't match node \"{node}\": no matching NodeSelectorTerms",
                        pv.name
                    ));
                }
            }
            if !pvc.is_fully_bound() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Upstream `BindPodVolumes`: the API writes, then the wait.
    async fn bind_pod_volumes(&self, pod: &Pod, volumes: &PodVolumes) -> Result<(), String> {
        for (pv, _) in &volumes.static_bindings {
            self.handle
                .client
                .bind_volume(pv)
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
        }
        for pvc in &volumes.provisions {
            self.handle
                .client
                .select_node_for_claim(pvc, &volumes.node.name)
                .await
                .map_err(|e| format!("binding volumes: {e}"))?;
        }
        let deadline = tokio::time::Instant::now() + self.bind_timeout;
        loop {
            let changed = self.volumes.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self
                .check_bindings(pod, volumes)
                .map_err(|e| format!("binding volumes: {e}"))?
            {
                return Ok(());
            }
            // Upstream polls every second; a change wakes us sooner, the poll still
            // covers the pod's own deletion.
            let poll = (tokio::time::Instant::now() + Duration::from_secs(1)).min(deadline);
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(poll) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("binding volumes: context deadline exceeded".into());
            }
        }
    }
}

/// Upstream `hasEnoughCapacity`: only CSI drivers that opt in are checked, against a
/// CSIStorageCapacity of the class reachable from the node that is big enough.
fn has_enough_capacity(
    st: &VolumeState,
    claim: &PersistentVolumeClaim,
    class: &str,
    provisioner: &str,
    node_labels: &Labels,
) -> bool {
    if claim.request == 0 {
        return true;
    }
    if !st
        .csi_driver(provisioner)
        .is_some_and(|d| d.storage_capacity)
    {
        return true;
    }
    st.capacities().any(|c| {
        *c.storage_class == *class
            && c.maximum_volume_size
                .or(c.capacity)
                .is_some_and(|l| l >= claim.request)
            && c.node_topology
                .as_ref()
                .is_some_and(|s| s.matches(node_labels))
    })
}

/// The storage object an event carries.
fn storage(o: Option<&crate::framework::events::EventObject>) -> Option<&StorageObject> {
    o.and_then(|o| o.as_storage())
}

/// Upstream `GetBindVolumeToClaim`: the PV with its claimRef set to the claim.
fn bind_volume_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> PersistentVolume {
    let mut out = pv.clone();
    if pv.claim_ref.is_none() {
        let mut pairs: Vec<(String, String)> = out
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        pairs.push((ANN_BOUND_BY_CONTROLLER.into(), "yes".into()));
        out.annotations = Labels::new(pairs);
    }
    out.claim_ref = Some(ClaimRef {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: claim.uid.clone(),
    });
    out
}

fn with_annotation(pvc: &PersistentVolumeClaim, key: &str, value: &str) -> PersistentVolumeClaim {
    let mut out = pvc.clone();
    let mut pairs: Vec<(String, String)> = pvc
        .annotations
        .iter()
        .filter(|(k, _)| *k != key)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pairs.push((key.into(), value.into()));
    out.annotations = Labels::new(pairs);
    out
}

impl Plugin for VolumeBinding {
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
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let add_update = ActionType::ADD.union(ActionType::UPDATE);
        Some(vec![
            // Upstream `isSchedulableAfterStorageClassChange`: a new class, or new
            // allowed topologies.
            ClusterEventWithHint::with_hint(
                EventResource::StorageClass,
                add_update,
                |_pod, old, new| match (storage(old), storage(new)) {
                    (
                        Some(StorageObject::StorageClass(o)),
                        Some(StorageObject::StorageClass(n)),
                    ) if o.allowed_topologies == n.allowed_topologies => QueueingHint::QueueSkip,
                    _ => QueueingHint::Queue,
                },
            ),
            // Only the pod's own claims matter.
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                add_update,
                |pod, _old, new| claim_event_hint(pod, new, true),
            ),
            ClusterEventWithHint::new(EventResource::PersistentVolume, add_update),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_LABEL),
            ),
            // Upstream `isSchedulableAfterCSINodeChange`: a new CSINode, or a change of
            // the plugins migrated on it.
            ClusterEventWithHint::with_hint(
                EventResource::CSINode,
                add_update,
                |_pod, old, new| match (storage(old), storage(new)) {
                    (Some(StorageObject::CsiNode(o)), Some(StorageObject::CsiNode(n)))
                        if o.migrated_plugins == n.migrated_plugins =>
                    {
                        QueueingHint::QueueSkip
                    }
                    _ => QueueingHint::Queue,
                },
            ),
            // Upstream `isSchedulableAfterCSIDriverChange`: a driver that stops asking
            // for capacity checks (or starts: the hint cannot tell which of the pod's
            // classes it serves without the store, so any change of the flag queues).
            ClusterEventWithHint::with_hint(
                EventResource::CSIDriver,
                ActionType::UPDATE,
                |_pod, old, new| match (storage(old), storage(new)) {
                    (Some(StorageObject::CsiDriver(o)), Some(StorageObject::CsiDriver(n)))
                        if o.storage_capacity == n.storage_capacity =>
                    {
                        QueueingHint::QueueSkip
                    }
                    _ => QueueingHint::Queue,
                },
            ),
            // Upstream `isSchedulableAfterCSIStorageCapacityChange`: new capacity, more
            // of it, or another class or topology.
            ClusterEventWithHint::with_hint(
                EventResource::CSIStorageCapacity,
                add_update,
                |_pod, old, new| match (storage(old), storage(new)) {
                    (
                        Some(StorageObject::CsiStorageCapacity(o)),
                        Some(StorageObject::CsiStorageCapacity(n)),
                    ) => {
                        let limit = |c: &crate::model::storage::CsiStorageCapacity| {
                            c.maximum_volume_size.or(c.capacity).unwrap_or(0)
                        };
                        if o.storage_class != n.storage_class
                            || o.node_topology != n.node_topology
                            || limit(n) > limit(o)
                        {
                            QueueingHint::Queue
                        } else {
                            QueueingHint::QueueSkip
                        }
                    }
                    _ => QueueingHint::Queue,
                },
            ),
        ])
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if !pod.spec.volumes.iter().any(|v| v.claim().is_some()) {
            return (None, Status::skip());
        }
        let claims = match self.pod_volume_claims(pod) {
            Ok(Some(c)) => c,
            Ok(None) => return (None, Status::skip()),
            Err(s) => return (None, s),
        };
        // Upstream `GetEligibleNodes`: local PVs pin the pod to their hostnames.
        let mut eligible: Option<Vec<Box<str>>> = None;
        let mut missing = false;
        for (_, pv) in &claims.bound {
            let Some(pv) = pv else {
                missing = true;
                continue;
            };
            let names = local_pv_node_names(pv);
            if names.is_empty() {
                continue;
            }
            eligible = Some(match eligible {
                None => names,
                Some(prev) => prev.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
        let result = match eligible {
            Some(names) if !missing => Some(PreFilterResult::nodes(
                names.into_iter().map(|n| Arc::from(&*n)),
            )),
            _ => None,
        };
        state.write(StateData {
            claims: Arc::new(claims),
            by_node: Arc::default(),
            reserved: None,
        });
        (result, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<StateData>() else {
            return crate::plugins::helper::missing_state("PreFilterVolumeBinding");
        };
        match self.find_pod_volumes(&s.claims, node) {
            Err(e) => e,
            Ok((_, reasons)) if !reasons.is_empty() => Status::from_reasons(
                Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(Into::into),
            ),
            Ok((volumes, _)) => {
                if let Ok(mut m) = s.by_node.lock() {
                    m.insert(node.node().name.clone(), Arc::new(volumes));
                }
                Status::success()
            }
        }
    }
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        Status::skip()
    }
}

impl ScorePlugin for VolumeBinding {
    fn score(&self, _state: &CycleState, _pod: &Pod, _node: &NodeInfo) -> Result<i64, Status> {
        Ok(0)
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        let Some(s) = state.read_mut::<StateData>() else {
            return Status::success();
        };
        let planned = s.by_node.lock().ok().and_then(|m| m.get(node).cloned());
        let Some(planned) = planned else {
            return Status::success();
        };
        if planned.static_bindings.is_empty() && planned.provisions.is_empty() {
            return Status::success();
        }
        // Upstream `AssumePodVolumes`.
        let mut assumed = PodVolumes {
            node: planned.node.clone(),
            static_bindings: Vec::new(),
            provisions: Vec::new(),
        };
        for (pv, claim) in &planned.static_bindings {
            let new_pv = Arc::new(bind_volume_to_claim(pv, claim));
            self.volumes.assume_pv(new_pv.clone());
            assumed.static_bindings.push((new_pv, claim.clone()));
        }
        for claim in &planned.provisions {
            let new_claim = Arc::new(with_annotation(claim, ANN_SELECTED_NODE, node));
            self.volumes.assume_pvc(new_claim.clone());
            assumed.provisions.push(new_claim);
        }
        s.reserved = Some(Arc::new(assumed));
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, _pod: &Pod, _node: &str) {
        let Some(s) = state.read_mut::<StateData>() else {
            return;
        };
        if let Some(r) = s.reserved.take() {
            for (pv, _) in &r.static_bindings {
                self.volumes.restore_pv(&pv.name);
            }
            for c in &r.provisions {
                self.volumes.restore_pvc(&c.namespace, &c.name);
            }
        }
    }
}

impl PreBindPlugin for VolumeBinding {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Arc<Pod>,
        _node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(volumes) = state.read::<StateData>().and_then(|s| s.reserved.clone()) else {
                return Status::success();
            };
            match self.bind_pod_volumes(pod, &volumes).await {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e),
            }
        })
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, h: &Arc<Handle>| {
        let a: Args = decode_args(args)?;
        if a.bind_timeout_seconds < 0 {
            return Err(format!(
                "bindTimeoutSeconds: Invalid value: {}: invalid BindTimeoutSeconds, should not be a negative value",
                a.bind_timeout_seconds
            ));
        }
        Ok(Arc::new(VolumeBinding {
            handle: h.clone(),
            volumes: h.volumes.clone(),
            bind_timeout: Duration::from_secs(a.bind_timeout_seconds as u64),
        }) as Arc<dyn Plugin>)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::waiting_pods::WaitingPods;
    use crate::model::convert::{
        pod_from_k8s, pv_from_k8s, pvc_from_k8s, storage_class_from_k8s, SystemPriorities,
    };
    use crate::model::storage::PvPhase;

    /// A client whose volume writes succeed and change nothing (no PV controller).
    struct AcceptingClient;
    impl crate::client::ClusterClient for AcceptingClient {
        fn bind<'a>(
            &'a self,
            _p: &'a Pod,
            _n: &'a str,
        ) -> BoxFuture<'a, Result<(), crate::client::ClientError>> {
            Box::pin(async { Ok(()) })
        }
        fn update_pod_status<'a>(
            &'a self,
            _p: &'a Pod,
            _u: crate::client::PodStatusUpdate,
        ) -> BoxFuture<'a, Result<(), crate::client::ClientError>> {
            Box::pin(async { Ok(()) })
        }
        fn delete_pod<'a>(
            &'a self,
            _p: &'a Pod,
            _q: &'a Pod,
        ) -> BoxFuture<'a, Result<(), crate::client::ClientError>> {
            Box::pin(async { Ok(()) })
        }
        fn record_event(&self, _e: crate::client::PodEvent) {}
        fn bind_volume<'a>(
            &'a self,
            _pv: &'a PersistentVolume,
        ) -> BoxFuture<'a, Result<(), crate::client::ClientError>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn setup(
        client: Arc<dyn crate::client::ClusterClient>,
        timeout: u64,
    ) -> (VolumeBinding, Arc<VolumeStore>, Pod) {
        let handle = Arc::new(Handle::new(Arc::new(WaitingPods::default()), client));
        let store = handle.volumes.clone();
        fn y<T: serde::de::DeserializeOwned>(s: &str) -> T {
            crate::yaml::from_str(s).expect("yaml")
        }
        store.upsert(&StorageObject::StorageClass(Arc::new(
            storage_class_from_k8s(&y("metadata: {name: local}\nprovisioner: kubernetes.io/no-provisioner\nvolumeBindingMode: WaitForFirstConsumer")).expect("class"),
        )));
        let mut pv = pv_from_k8s(&y("metadata: {name: pv1}\nspec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], storageClassName: local, nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]}]}}}")).expect("pv");
        pv.phase = PvPhase::Available;
        store.upsert(&StorageObject::Pv(Arc::new(pv)));
        store.upsert(&StorageObject::Pvc(Arc::new(
            pvc_from_k8s(&y("metadata: {name: c}\nspec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}"), || "cu".into()).expect("pvc"),
        )));
        let pod = pod_from_k8s(
            &y("metadata: {name: p}\nspec: {containers: [{name: c}], volumes: [{name: d, persistentVolumeClaim: {claimName: c}}]}"),
            &SystemPriorities,
            || "pu".into(),
        )
        .expect("pod");
        let plugin = VolumeBinding {
            handle: handle.clone(),
            volumes: store.clone(),
            bind_timeout: Duration::from_secs(timeout),
        };
        (plugin, store, pod)
    }

    fn node(name: &str) -> NodeInfo {
        NodeInfo::new(
            crate::testing::node(name)
                .label("kubernetes.io/hostname", name)
                .build(),
        )
    }

    #[test]
    fn filter_reserve_unreserve_and_prebind_failures() {
        let (vb, store, pod) = setup(Arc::new(crate::testing::NoopClient), 600);
        let mut state = CycleState::new();
        let (_, s) = vb.pre_filter(&mut state, &pod, &Snapshot::default());
        assert!(s.is_success(), "{s:?}");
        assert!(vb.filter(&state, &pod, &node("n1")).is_success());
        let s = vb.filter(&state, &pod, &node("n2"));
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), ERR_REASON_BIND_CONFLICT);
        // Reserve assumes the binding: the next pod's cycle sees the PV taken.
        assert!(vb.reserve(&mut state, &pod, "n1").is_success());
        assert!(store
            .read()
            .pv("pv1")
            .is_some_and(|v| v.claim_ref.is_some()));
        // Another claim of the same class finds the only PV taken.
        store.upsert(&StorageObject::Pvc(Arc::new(
            pvc_from_k8s(
                &crate::yaml::from_str("metadata: {name: c2}\nspec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}").expect("yaml"),
                || "cu2".into(),
            )
            .expect("pvc"),
        )));
        let pod2 = pod_from_k8s(
            &crate::yaml::from_str("metadata: {name: p2}\nspec: {containers: [{name: c}], volumes: [{name: d, persistentVolumeClaim: {claimName: c2}}]}").expect("yaml"),
            &SystemPriorities,
            || "pu2".into(),
        )
        .expect("pod");
        let mut other = CycleState::new();
        vb.pre_filter(&mut other, &pod2, &Snapshot::default());
        assert_eq!(
            vb.filter(&other, &pod2, &node("n1")).code(),
            Code::UnschedulableAndUnresolvable
        );
        vb.unreserve(&mut state, &pod, "n1");
        assert!(store
            .read()
            .pv("pv1")
            .is_some_and(|v| v.claim_ref.is_none()));
        // A backend that cannot write volumes fails PreBind with its reason.
        assert!(vb.reserve(&mut state, &pod, "n1").is_success());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("rt");
        let s = rt.block_on(vb.pre_bind(&state, &Arc::new(pod.clone()), "n1"));
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message()
                .starts_with("binding volumes: cannot bind persistentvolume"),
            "{}",
            s.message()
        );
    }

    #[test]
    fn queueing_hints_requeue_only_what_could_help() {
        use crate::framework::events::EventObject;
        let (vb, store, pod) = setup(Arc::new(crate::testing::NoopClient), 600);
        let events = vb.events_to_register().expect("events");
        let hint = |res: EventResource, old: Option<StorageObject>, new: Option<StorageObject>| {
            let e = events
                .iter()
                .find(|e| e.event.resource == res)
                .expect("registered");
            let (o, n) = (old.map(EventObject::Storage), new.map(EventObject::Storage));
            e.hint
                .as_ref()
                .map_or(QueueingHint::Queue, |h| h(&pod, o.as_ref(), n.as_ref()))
        };
        let own = store.read().pvc("default", "c").cloned().expect("claim");
        let mut other = (*own).clone();
        other.name = "someone-else".into();
        assert_eq!(
            hint(
                EventResource::PersistentVolumeClaim,
                None,
                Some(StorageObject::Pvc(own))
            ),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(
                EventResource::PersistentVolumeClaim,
                None,
                Some(StorageObject::Pvc(Arc::new(other)))
            ),
            QueueingHint::QueueSkip
        );
        let class = store.read().storage_class("local").cloned().expect("class");
        let same = StorageObject::StorageClass(class.clone());
        assert_eq!(
            hint(EventResource::StorageClass, None, Some(same.clone())),
            QueueingHint::Queue
        );
        assert_eq!(
            hint(EventResource::StorageClass, Some(same.clone()), Some(same)),
            QueueingHint::QueueSkip
        );
    }

    #[test]
    fn prebind_times_out_when_nothing_binds_the_claim() {
        let (vb, _store, pod) = setup(Arc::new(AcceptingClient), 0);
        let mut state = CycleState::new();
        vb.pre_filter(&mut state, &pod, &Snapshot::default());
        assert!(vb.filter(&state, &pod, &node("n1")).is_success());
        assert!(vb.reserve(&mut state, &pod, "n1").is_success());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("rt");
        let s = rt.block_on(vb.pre_bind(&state, &Arc::new(pod), "n1"));
        assert_eq!(s.message(), "binding volumes: context deadline exceeded");
    }
}
