//! VolumeZone: a pod's bound volumes carry zone/region labels; the node must be in
//! one of the listed zones (upstream `volumezone/volume_zone.go`). Unbound claims of a
//! WaitForFirstConsumer class are VolumeBinding's business and are skipped here.

use std::sync::Arc;

use crate::cache::volumes::VolumeStore;
use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource};
use crate::framework::interface::{FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::storage::PodVolume;
use crate::model::Pod;
use crate::plugins::helper::volumes::{claim_event_hint, get_class, get_pvc};

pub const NAME: &str = "VolumeZone";
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

pub const LABEL_FAILURE_DOMAIN_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
pub const LABEL_FAILURE_DOMAIN_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_TOPOLOGY_REGION: &str = "topology.kubernetes.io/region";

/// The labels compared, in upstream's order.
const TOPOLOGY_LABELS: [&str; 4] = [
    LABEL_FAILURE_DOMAIN_BETA_ZONE,
    LABEL_FAILURE_DOMAIN_BETA_REGION,
    LABEL_TOPOLOGY_ZONE,
    LABEL_TOPOLOGY_REGION,
];

/// A beta label's GA name, so a PV's beta label matches a node's GA label.
fn translate_to_ga(key: &str) -> &str {
    match key {
        LABEL_FAILURE_DOMAIN_BETA_ZONE => LABEL_TOPOLOGY_ZONE,
        LABEL_FAILURE_DOMAIN_BETA_REGION => LABEL_TOPOLOGY_REGION,
        k => k,
    }
}

/// One topology label of one of the pod's PVs: the allowed values.
#[derive(Clone, Debug)]
struct PvTopology {
    key: &'static str,
    /// `__`-separated in the label (upstream `LabelZonesToSet`).
    values: Box<[Box<str>]>,
}

#[derive(Clone)]
struct PreFilterState(Arc<[PvTopology]>);

pub struct VolumeZone {
    volumes: Arc<VolumeStore>,
}

impl VolumeZone {
    /// Upstream `getPVbyPod`: the topology labels of the pod's bound PVs.
    fn pv_topologies(&self, pod: &Pod) -> Result<Vec<PvTopology>, Status> {
        let st = self.volumes.read();
        let mut out = Vec::new();
        for v in pod.spec.volumes.iter() {
            let Some(claim) = v.claim() else { continue };
            let pvc = get_pvc(&st, pod, claim)?;
            let Some(pv_name) = &pvc.volume_name else {
                if pvc.storage_class.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let class = get_class(&st, &pvc.storage_class).map_err(Status::unresolvable)?;
                if class.wait_for_first_consumer() {
                    continue;
                }
                return Err(Status::unresolvable("PersistentVolume had no name"));
            };
            let pv = st.pv(pv_name).ok_or_else(|| {
                Status::unresolvable(format!("persistentvolume \"{pv_name}\" not found"))
            })?;
            for key in TOPOLOGY_LABELS {
                if let Some(value) = pv.labels.get(key) {
                    out.push(PvTopology {
                        key,
                        values: value
                            .split("__")
                            .map(str::trim)
                            .filter(|z| !z.is_empty())
                            .map(Into::into)
                            .collect(),
                    });
                }
            }
        }
        Ok(out)
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            // New storage classes may make unbound claims' mode known.
            ClusterEventWithHint::new(EventResource::StorageClass, ActionType::ADD),
            // A node gaining a zone label, or a new node.
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_LABEL),
            ),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD.union(ActionType::UPDATE),
                |pod, _old, new| claim_event_hint(pod, new, true),
            ),
            ClusterEventWithHint::new(
                EventResource::PersistentVolume,
                ActionType::ADD.union(ActionType::UPDATE),
            ),
        ])
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if !pod
            .spec
            .volumes
            .iter()
            .any(|v| matches!(v, PodVolume::Claim { .. }))
        {
            return (None, Status::skip());
        }
        match self.pv_topologies(pod) {
            Ok(t) if t.is_empty() => (None, Status::skip()),
            Ok(t) => {
                state.write(PreFilterState(t.into()));
                (None, Status::success())
            }
            Err(s) => (None, s),
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(PreFilterState(topologies)) = state.read::<PreFilterState>() else {
            return Status::success();
        };
        let labels = &node.node().labels;
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(k)) {
            return Status::success();
        }
        for t in topologies.iter() {
            let v = labels
                .get(t.key)
                .or_else(|| labels.get(translate_to_ga(t.key)));
            if !v.is_some_and(|v| t.values.iter().any(|z| **z == *v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, h: &Arc<Handle>| {
        Ok(Arc::new(VolumeZone {
            volumes: h.volumes.clone(),
        }))
    })
}
