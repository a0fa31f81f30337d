//! NodeVolumeLimits: a node attaches at most `allocatable.count` volumes of each CSI
//! driver (its CSINode says so). Volumes are counted once per `driver/handle` across
//! the pods on the node; unbound claims count through their class's provisioner; in-tree
//! EBS, GCE PD, Azure Disk and Cinder volumes count under their CSI driver where the
//! node reports them migrated (upstream `nodevolumelimits/csi.go`, `CSILimits`).
//!
//! Not modelled: VolumeAttachments of volumes no pod on the node uses (newer upstream
//! counts them too); Switchyard does not watch VolumeAttachments.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::cache::volumes::{VolumeState, VolumeStore};
use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource};
use crate::framework::interface::{FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::storage::{
    csi_driver_for_in_tree, CsiNode, PersistentVolumeClaim, PodVolume, PvSource,
};
use crate::model::Pod;
use crate::plugins::helper::volumes::{ephemeral_claim_is_for_pod, pvc_not_found};

pub const NAME: &str = "NodeVolumeLimits";
pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

pub struct NodeVolumeLimits {
    volumes: Arc<VolumeStore>,
}

/// Upstream `getCSIDriverInfoFromSC`: an unbound claim counts under its class's
/// provisioner, with a handle unique to the claim.
fn driver_from_class(
    st: &VolumeState,
    csi_node: Option<&CsiNode>,
    pvc: &PersistentVolumeClaim,
) -> Option<(Arc<str>, Arc<str>)> {
    if pvc.storage_class.is_empty() {
        return None;
    }
    let class = st.storage_class(&pvc.storage_class)?;
    let mut driver = class.provisioner.clone();
    if let Some(csi) = csi_driver_for_in_tree(&driver) {
        if !csi_node.is_some_and(|n| n.migrated(&class.provisioner)) {
            return None;
        }
        driver = csi.into();
    }
    Some((
        driver,
        format!("unbound-{}/{}", pvc.namespace, pvc.name).into(),
    ))
}

/// Upstream `getCSIDriverInfo`.
fn driver_of_claim(
    st: &VolumeState,
    csi_node: Option<&CsiNode>,
    pvc: &PersistentVolumeClaim,
) -> Option<(Arc<str>, Arc<str>)> {
    let Some(pv) = pvc.volume_name.as_ref().and_then(|n| st.pv(n)) else {
        return driver_from_class(st, csi_node, pvc);
    };
    match &pv.source {
        PvSource::Csi { driver, handle } => Some((driver.clone(), handle.clone())),
        PvSource::InTree {
            plugin,
            driver,
            handle,
        } => csi_node
            .is_some_and(|n| n.migrated(plugin))
            .then(|| (Arc::from(*driver), handle.clone())),
        PvSource::Other => None,
    }
}

/// Upstream `filterAttachableVolumes`: the attachable volumes of `pod` as
/// `driver/handle -> driver`. For the pod being scheduled a missing claim is an error;
/// for pods already on the node it is not counted.
fn attachable_volumes(
    st: &VolumeState,
    csi_node: Option<&CsiNode>,
    pod: &Pod,
    new_pod: bool,
    out: &mut FxHashMap<String, Arc<str>>,
) -> Result<(), Status> {
    for v in pod.spec.volumes.iter() {
        let PodVolume::Claim {
            claim, ephemeral, ..
        } = v
        else {
            if let Some((plugin, driver, handle)) = v.migratable() {
                if csi_node.is_some_and(|n| n.migrated(plugin)) {
                    out.insert(format!("{driver}/{handle}"), driver.into());
                }
            }
            continue;
        };
        let Some(pvc) = st.pvc(&pod.namespace, claim) else {
            if new_pod {
                return Err(Status::unresolvable(format!(
                    "looking up PVC {}/{claim}: {}",
                    pod.namespace,
                    pvc_not_found(claim)
                )));
            }
            continue;
        };
        if *ephemeral {
            ephemeral_claim_is_for_pod(pod, pvc).map_err(Status::error)?;
        }
        if let Some((driver, handle)) = driver_of_claim(st, csi_node, pvc) {
            if !driver.is_empty() && !handle.is_empty() {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
    }
    Ok(())
}

impl Plugin for NodeVolumeLimits {
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
            // Limits change with the CSINode; a deleted pod frees attachments.
            ClusterEventWithHint::new(
                EventResource::CSINode,
                ActionType::ADD.union(ActionType::UPDATE),
            ),
            ClusterEventWithHint::new(EventResource::Pod, ActionType::DELETE),
            ClusterEventWithHint::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
        ])
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let counts = pod
            .spec
            .volumes
            .iter()
            .any(|v| matches!(v, PodVolume::Claim { .. }) || v.migratable().is_some());
        if counts {
            (None, Status::success())
        } else {
            (None, Status::skip())
        }
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let st = self.volumes.read();
        let csi_node = st.csi_node(node.name()).map(|n| &**n);
        let mut new_volumes = FxHashMap::default();
        if let Err(s) = attachable_volumes(&st, csi_node, pod, true, &mut new_volumes) {
            return s;
        }
        if new_volumes.is_empty() {
            return Status::success();
        }
        let Some(csi_node) = csi_node.filter(|n| n.drivers.iter().any(|d| d.allocatable.is_some()))
        else {
            return Status::success();
        };
        let mut attached = FxHashMap::default();
        for p in &node.pods {
            if let Err(s) = attachable_volumes(&st, Some(csi_node), p, false, &mut attached) {
                return s;
            }
        }
        let mut attached_count: FxHashMap<&str, i64> = FxHashMap::default();
        for (unique, driver) in &attached {
            // A volume already attached for another pod costs nothing more.
            new_volumes.remove(unique);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: FxHashMap<&str, i64> = FxHashMap::default();
        for driver in new_volumes.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_count {
            if let Some(limit) = csi_node.limit(driver) {
                if attached_count.get(driver).copied().unwrap_or(0) + count > limit {
                    return Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED);
                }
            }
        }
        Status::success()
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, h: &Arc<Handle>| {
        Ok(Arc::new(NodeVolumeLimits {
            volumes: h.volumes.clone(),
        }))
    })
}
