//! VolumeRestrictions: in-tree disks that cannot be mounted by two pods on one node
//! (GCE PD and iSCSI unless both read-only, AWS EBS always, RBD unless both
//! read-only), and ReadWriteOncePod claims already used by a pod anywhere
//! (upstream `volumerestrictions/volume_restrictions.go`).

use std::sync::Arc;

use crate::cache::volumes::VolumeStore;
use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::storage::{AccessModes, PodVolume};
use crate::model::Pod;
use crate::plugins::helper::volumes::{claim_event_hint, get_pvc};

pub const NAME: &str = "VolumeRestrictions";
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

pub struct VolumeRestrictions {
    volumes: Arc<VolumeStore>,
}

/// The pod's ReadWriteOncePod claims, and how many of them other pods use.
#[derive(Clone)]
struct PreFilterState {
    rwop_claims: Arc<[Arc<str>]>,
    conflicting: i64,
}

impl PreFilterState {
    /// How many of the pod's RWOP claims `other` mounts (upstream counts per volume).
    fn uses(&self, pod: &Pod, other: &Pod) -> i64 {
        if *other.namespace != *pod.namespace {
            return 0;
        }
        other
            .spec
            .volumes
            .iter()
            .filter(|v| matches!(v, PodVolume::Claim { claim, ephemeral: false, .. } if self.rwop_claims.contains(claim)))
            .count() as i64
    }
}

/// The volume kinds that can conflict on a node.
fn needs_restrictions_check(v: &PodVolume) -> bool {
    matches!(
        v,
        PodVolume::GcePersistentDisk { .. }
            | PodVolume::AwsElasticBlockStore { .. }
            | PodVolume::Rbd { .. }
            | PodVolume::Iscsi { .. }
    )
}

/// Upstream `isVolumeConflict`: `v` against every volume of `other`.
fn is_volume_conflict(v: &PodVolume, other: &Pod) -> bool {
    other.spec.volumes.iter().any(|e| match (v, e) {
        (
            PodVolume::GcePersistentDisk { pd_name, read_only },
            PodVolume::GcePersistentDisk {
                pd_name: e_name,
                read_only: e_ro,
            },
        ) => pd_name == e_name && !(*read_only && *e_ro),
        (
            PodVolume::AwsElasticBlockStore { volume_id },
            PodVolume::AwsElasticBlockStore { volume_id: e_id },
        ) => volume_id == e_id,
        (
            PodVolume::Iscsi { iqn, read_only },
            PodVolume::Iscsi {
                iqn: e_iqn,
                read_only: e_ro,
            },
        ) => iqn == e_iqn && !(*read_only && *e_ro),
        (
            PodVolume::Rbd {
                monitors,
                pool,
                image,
                read_only,
            },
            PodVolume::Rbd {
                monitors: e_mon,
                pool: e_pool,
                image: e_image,
                read_only: e_ro,
            },
        ) => {
            monitors.iter().any(|m| e_mon.contains(m))
                && pool == e_pool
                && image == e_image
                && !(*read_only && *e_ro)
        }
        _ => false,
    })
}

impl Plugin for VolumeRestrictions {
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
        let volumes = self.volumes.clone();
        Some(vec![
            // Volumes are immutable, so only a deletion frees a disk or a RWOP claim.
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::DELETE,
                move |pod, old, _new| {
                    let Some(deleted) = old.and_then(|o| o.as_pod()) else {
                        return QueueingHint::Queue;
                    };
                    let disk = pod
                        .spec
                        .volumes
                        .iter()
                        .any(|v| needs_restrictions_check(v) && is_volume_conflict(v, deleted));
                    let rwop = || {
                        let st = volumes.read();
                        deleted.namespace == pod.namespace
                            && deleted
                                .spec
                                .volumes
                                .iter()
                                .filter_map(PodVolume::claim)
                                .any(|c| {
                                    pod.spec
                                        .volumes
                                        .iter()
                                        .filter_map(PodVolume::claim)
                                        .any(|p| p == c)
                                        && st.pvc(&pod.namespace, c).is_some_and(|pvc| {
                                            pvc.access_modes.contains(AccessModes::RWOP)
                                        })
                                })
                    };
                    if disk || rwop() {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
            ClusterEventWithHint::new(EventResource::Node, ActionType::ADD),
            // A claim the pod named did not exist yet.
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD,
                |pod, _old, new| claim_event_hint(pod, new, false),
            ),
        ])
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.spec.volumes.is_empty() {
            return (None, Status::skip());
        }
        let needs_check = pod.spec.volumes.iter().any(needs_restrictions_check);
        let mut rwop: Vec<Arc<str>> = Vec::new();
        {
            let st = self.volumes.read();
            for v in pod.spec.volumes.iter() {
                // Upstream reads `persistentVolumeClaim` volumes only, not ephemeral ones.
                let PodVolume::Claim {
                    claim,
                    ephemeral: false,
                    ..
                } = v
                else {
                    continue;
                };
                match get_pvc(&st, pod, claim) {
                    Ok(pvc) if pvc.access_modes.contains(AccessModes::RWOP) => {
                        rwop.push(claim.clone())
                    }
                    Ok(_) => {}
                    Err(s) => return (None, s),
                }
            }
        }
        let mut s = PreFilterState {
            rwop_claims: rwop.into(),
            conflicting: 0,
        };
        if !s.rwop_claims.is_empty() {
            // Upstream `IsPVCUsedByPods`: a claim counts once however many pods use it.
            for claim in s.rwop_claims.iter() {
                let used = snapshot.node_infos().iter().any(|n| {
                    n.pods.iter().any(|p| {
                        *p.namespace == *pod.namespace
                            && p.spec.volumes.iter().any(|v| {
                                matches!(v, PodVolume::Claim { claim: c, ephemeral: false, .. } if c == claim)
                            })
                    })
                });
                s.conflicting += used as i64;
            }
        }
        if !needs_check && s.conflicting == 0 {
            return (None, Status::skip());
        }
        state.write(s);
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_add: &Arc<Pod>,
        _node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>() {
            s.conflicting += s.uses(pod_to_schedule, pod_to_add);
        }
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_remove: &Arc<Pod>,
        _node: &NodeInfo,
    ) -> Status {
        if let Some(s) = state.read_mut::<PreFilterState>() {
            s.conflicting -= s.uses(pod_to_schedule, pod_to_remove);
        }
        Status::success()
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        for v in pod
            .spec
            .volumes
            .iter()
            .filter(|v| needs_restrictions_check(v))
        {
            if node.pods.iter().any(|e| is_volume_conflict(v, e)) {
                return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
            }
        }
        match state.read::<PreFilterState>() {
            Some(s) if s.conflicting > 0 => Status::unschedulable(ERR_REASON_RWOP_CONFLICT),
            Some(_) => Status::success(),
            None => Status::error(format!(
                "reading \"PreFilter{NAME}\" from cycleState: not found"
            )),
        }
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, h: &Arc<Handle>| {
        Ok(Arc::new(VolumeRestrictions {
            volumes: h.volumes.clone(),
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::convert::{pod_from_k8s, SystemPriorities};

    fn pod(volumes: &str) -> Pod {
        let p = crate::yaml::from_str(&format!(
            "metadata: {{name: p}}\nspec: {{containers: [{{name: c}}], volumes: {volumes}}}"
        ))
        .expect("yaml");
        pod_from_k8s(&p, &SystemPriorities, || "u".into()).expect("pod")
    }

    #[test]
    fn disk_conflicts_as_upstream() {
        let gce_ro = pod("[{name: d, gcePersistentDisk: {pdName: x, readOnly: true}}]");
        let gce_rw = pod("[{name: d, gcePersistentDisk: {pdName: x}}]");
        let conflict = |a: &Pod, b: &Pod| a.spec.volumes.iter().any(|v| is_volume_conflict(v, b));
        assert!(!conflict(&gce_ro, &gce_ro));
        assert!(conflict(&gce_rw, &gce_ro));
        let ebs = pod("[{name: d, awsElasticBlockStore: {volumeID: v, readOnly: true}}]");
        assert!(conflict(&ebs, &ebs), "EBS conflicts even read-only");
        let rbd_a = pod("[{name: d, rbd: {monitors: [a, b], image: i, readOnly: true}}]");
        let rbd_b = pod("[{name: d, rbd: {monitors: [b, c], pool: rbd, image: i}}]");
        let rbd_c = pod("[{name: d, rbd: {monitors: [c], image: i}}]");
        assert!(
            conflict(&rbd_a, &rbd_b),
            "overlapping monitors, default pool"
        );
        assert!(!conflict(&rbd_a, &rbd_c), "no monitor in common");
        let iscsi = pod("[{name: d, iscsi: {targetPortal: t, iqn: q, lun: 0}}]");
        assert!(conflict(&iscsi, &iscsi));
    }
}
