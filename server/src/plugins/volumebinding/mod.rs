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

mod binder;

use binder::*;
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
    /// Only for the StorageCapacityScoring scorer (alpha and off in v1.36), whose
    /// validation then refuses any shape.
    #[serde(default)]
    shape: Option<serde_json::Value>,
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
            shape: None,
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

/// The storage object an event carries.
fn storage(o: Option<&crate::framework::events::EventObject>) -> Option<&StorageObject> {
    o.and_then(|o| o.as_storage())
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
    /// Work only when Reserve assumed bindings or provisions for the node (upstream:
    /// Skip when every claim is bound).
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &Pod, _node: &str) -> Status {
        match state.read::<StateData>().and_then(|s| s.reserved.as_ref()) {
            Some(_) => Status::success(),
            None => Status::skip(),
        }
    }

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
        if let Some(shape) = &a.shape {
            return Err(format!(
                "shape: Invalid value: {shape}: unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring"
            )
            .into());
        }
        if a.bind_timeout_seconds < 0 {
            return Err(format!(
                "bindTimeoutSeconds: Invalid value: {}: invalid BindTimeoutSeconds, should not be a negative value",
                a.bind_timeout_seconds
            ).into());
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
