//! Storage: pod volumes, claims, volumes, classes and CSI objects.

use crate::model::storage::{
    AccessModes, ClaimRef, CsiDriver, CsiNode, CsiNodeDriver, CsiStorageCapacity, PersistentVolume,
    PersistentVolumeClaim, PodVolume, PvPhase, PvSource, PvcPhase, StorageClass, VolumeBindingMode,
    VolumeMode, ANN_BETA_STORAGE_CLASS, ANN_DEFAULT_STORAGE_CLASS, ANN_MIGRATED_PLUGINS,
};
use k8s_openapi::api::storage::v1 as storage;

use super::*;

/// The volumes of a pod the volume plugins read. A generic ephemeral volume's claim is
/// named `<pod>-<volume>` (upstream `ephemeral.VolumeClaimName`).
pub(super) fn pod_volumes(pod_name: &str, spec: &core::PodSpec) -> Result<Box<[PodVolume]>> {
    let mut out = Vec::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        if let Some(c) = &v.persistent_volume_claim {
            if c.claim_name.is_empty() {
                return Err(err(
                    format!("{field}.persistentVolumeClaim.claimName"),
                    "Required value",
                ));
            }
            out.push(PodVolume::Claim {
                claim: c.claim_name.as_str().into(),
                read_only: c.read_only.unwrap_or(false),
                ephemeral: false,
            });
        } else if v.ephemeral.is_some() {
            out.push(PodVolume::Claim {
                claim: format!("{pod_name}-{}", v.name).into(),
                read_only: false,
                ephemeral: true,
            });
        } else if let Some(m) = migratable_source(
            v.aws_elastic_block_store.as_ref(),
            v.gce_persistent_disk.as_ref(),
            v.azure_disk.as_ref(),
            v.cinder.as_ref().map(|c| c.volume_id.as_str()),
        ) {
            out.push(m);
        } else if let Some(d) = &v.iscsi {
            out.push(PodVolume::Iscsi {
                iqn: d.iqn.as_str().into(),
                read_only: d.read_only.unwrap_or(false),
            });
        } else if let Some(d) = &v.rbd {
            out.push(PodVolume::Rbd {
                monitors: d.monitors.iter().map(|m| m.as_str().into()).collect(),
                // The API server defaults the pool to "rbd".
                pool: d.pool.as_deref().unwrap_or("rbd").into(),
                image: d.image.as_str().into(),
                read_only: d.read_only.unwrap_or(false),
            });
        }
    }
    Ok(out.into())
}

/// The in-tree volume kinds with a CSI migration and attach limits, from a pod's
/// volume or a PV's source (the same source types, but Cinder's).
pub(super) fn migratable_source(
    ebs: Option<&core::AWSElasticBlockStoreVolumeSource>,
    gce: Option<&core::GCEPersistentDiskVolumeSource>,
    azure: Option<&core::AzureDiskVolumeSource>,
    cinder_volume_id: Option<&str>,
) -> Option<PodVolume> {
    if let Some(d) = gce {
        return Some(PodVolume::GcePersistentDisk {
            pd_name: d.pd_name.as_str().into(),
            read_only: d.read_only.unwrap_or(false),
        });
    }
    if let Some(d) = ebs {
        return Some(PodVolume::AwsElasticBlockStore {
            volume_id: d.volume_id.as_str().into(),
        });
    }
    if let Some(d) = azure {
        return Some(PodVolume::AzureDisk {
            disk_uri: d.disk_uri.as_str().into(),
        });
    }
    cinder_volume_id.map(|id| PodVolume::Cinder {
        volume_id: id.into(),
    })
}

pub(super) fn storage_bytes(q: Option<&K8sQuantity>, field: &str) -> Result<Option<i64>> {
    let Some(q) = q else { return Ok(None) };
    let parsed = Quantity::parse(&q.0)
        .map_err(|e| err(field, format!("invalid quantity {:?}: {e}", q.0)))?;
    if parsed.is_negative() {
        return Err(err(
            field,
            format!("must be greater than or equal to 0, got {:?}", q.0),
        ));
    }
    Ok(Some(parsed.value()))
}

pub(super) fn access_modes(modes: Option<&Vec<String>>, field: &str) -> Result<AccessModes> {
    let mut out = AccessModes::default();
    for (i, m) in modes.into_iter().flatten().enumerate() {
        let mode = AccessModes::parse(m).ok_or_else(|| {
            err(
                format!("{field}[{i}]"),
                format!("Unsupported value: {m:?}: supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""),
            )
        })?;
        out = out.union(mode);
    }
    Ok(out)
}

pub(super) fn volume_mode(mode: Option<&str>, field: &str) -> Result<VolumeMode> {
    match mode {
        None | Some("Filesystem") => Ok(VolumeMode::Filesystem),
        Some("Block") => Ok(VolumeMode::Block),
        Some(m) => Err(err(
            field,
            format!("Unsupported value: {m:?}: supported values: \"Block\", \"Filesystem\""),
        )),
    }
}

pub(super) fn storage_name(meta: &meta::ObjectMeta, kind: &str) -> Result<Arc<str>> {
    meta.name
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(Into::into)
        .ok_or_else(|| {
            err(
                "metadata.name",
                format!("required: every {kind} needs a name"),
            )
        })
}

pub fn pvc_from_k8s(
    pvc: &core::PersistentVolumeClaim,
    generated_uid: impl FnOnce() -> String,
) -> Result<PersistentVolumeClaim> {
    let (name, namespace) = meta_name_ns(&pvc.metadata, "PersistentVolumeClaim")?;
    let annotations = labels_of(&pvc.metadata.annotations);
    let spec = pvc.spec.as_ref();
    let class_name = spec.and_then(|s| s.storage_class_name.as_deref());
    let storage_class: Arc<str> = annotations
        .get(ANN_BETA_STORAGE_CLASS)
        .or(class_name)
        .unwrap_or("")
        .into();
    let request = storage_bytes(
        spec.and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
        "spec.resources.requests.storage",
    )?
    .unwrap_or(0);
    let selector = match spec.and_then(|s| s.selector.as_ref()) {
        Some(sel) => Some(label_selector(Some(sel), "spec.selector")?),
        None => None,
    };
    let phase = match pvc.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => PvcPhase::Pending,
        Some("Bound") => PvcPhase::Bound,
        Some("Lost") => PvcPhase::Lost,
        Some(p) => return Err(err("status.phase", format!("Unsupported value: {p:?}"))),
    };
    Ok(PersistentVolumeClaim {
        namespace,
        name,
        uid: pvc
            .metadata
            .uid
            .clone()
            .unwrap_or_else(generated_uid)
            .into(),
        class_unset: class_name.is_none() && !annotations.contains_key(ANN_BETA_STORAGE_CLASS),
        annotations,
        storage_class,
        volume_name: spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty())
            .map(Into::into),
        access_modes: access_modes(
            spec.and_then(|s| s.access_modes.as_ref()),
            "spec.accessModes",
        )?,
        volume_mode: volume_mode(
            spec.and_then(|s| s.volume_mode.as_deref()),
            "spec.volumeMode",
        )?,
        request,
        selector,
        phase,
        deleting: pvc.metadata.deletion_timestamp.is_some(),
        controller_uid: pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str().into()),
        resource_version: pvc.metadata.resource_version.as_deref().map(Into::into),
    })
}

pub fn pv_from_k8s(pv: &core::PersistentVolume) -> Result<PersistentVolume> {
    let name = storage_name(&pv.metadata, "PersistentVolume")?;
    let annotations = labels_of(&pv.metadata.annotations);
    let spec = pv.spec.as_ref();
    let capacity = storage_bytes(
        spec.and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
        "spec.capacity.storage",
    )?
    .unwrap_or(0);
    let storage_class: Arc<str> = annotations
        .get(ANN_BETA_STORAGE_CLASS)
        .or(spec.and_then(|s| s.storage_class_name.as_deref()))
        .unwrap_or("")
        .into();
    let source = match spec {
        Some(s) if s.csi.is_some() => {
            let c = s
                .csi
                .as_ref()
                .map(|c| (c.driver.as_str(), c.volume_handle.as_str()));
            let (driver, handle) = c.unwrap_or_default();
            PvSource::Csi {
                driver: driver.into(),
                handle: handle.into(),
            }
        }
        Some(s) => {
            let inline = migratable_source(
                s.aws_elastic_block_store.as_ref(),
                s.gce_persistent_disk.as_ref(),
                s.azure_disk.as_ref(),
                s.cinder.as_ref().map(|c| c.volume_id.as_str()),
            );
            match inline.as_ref().and_then(|v| v.migratable()) {
                Some((plugin, driver, handle)) => PvSource::InTree {
                    plugin,
                    driver,
                    handle: handle.into(),
                },
                None => PvSource::Other,
            }
        }
        None => PvSource::Other,
    };
    let phase = match pv.status.as_ref().and_then(|s| s.phase.as_deref()) {
        None | Some("Pending") => PvPhase::Pending,
        Some("Available") => PvPhase::Available,
        Some("Bound") => PvPhase::Bound,
        Some("Released") => PvPhase::Released,
        Some("Failed") => PvPhase::Failed,
        Some(p) => return Err(err("status.phase", format!("Unsupported value: {p:?}"))),
    };
    Ok(PersistentVolume {
        name,
        labels: labels_of(&pv.metadata.labels),
        annotations,
        capacity,
        access_modes: access_modes(
            spec.and_then(|s| s.access_modes.as_ref()),
            "spec.accessModes",
        )?,
        volume_mode: volume_mode(
            spec.and_then(|s| s.volume_mode.as_deref()),
            "spec.volumeMode",
        )?,
        storage_class,
        node_affinity: spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| node_selector_from_k8s(r, "spec.nodeAffinity.required")),
        claim_ref: spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
            namespace: r.namespace.as_deref().unwrap_or("default").into(),
            name: r.name.as_deref().unwrap_or("").into(),
            uid: r.uid.as_deref().unwrap_or("").into(),
        }),
        phase,
        source,
        deleting: pv.metadata.deletion_timestamp.is_some(),
        resource_version: pv.metadata.resource_version.as_deref().map(Into::into),
    })
}

pub fn storage_class_from_k8s(sc: &storage::StorageClass) -> Result<StorageClass> {
    let name = storage_name(&sc.metadata, "StorageClass")?;
    if sc.provisioner.is_empty() {
        return Err(err("provisioner", "Required value"));
    }
    // The API server defaults the mode to Immediate.
    let binding_mode = match sc.volume_binding_mode.as_deref() {
        None | Some("Immediate") => VolumeBindingMode::Immediate,
        Some("WaitForFirstConsumer") => VolumeBindingMode::WaitForFirstConsumer,
        Some(m) => {
            return Err(err(
                "volumeBindingMode",
                format!("Unsupported value: {m:?}: supported values: \"Immediate\", \"WaitForFirstConsumer\""),
            ))
        }
    };
    let mut terms = Vec::new();
    for (i, t) in sc.allowed_topologies.iter().flatten().enumerate() {
        let mut exprs = Vec::new();
        for (j, e) in t.match_label_expressions.iter().flatten().enumerate() {
            if e.values.is_empty() {
                return Err(err(
                    format!("allowedTopologies[{i}].matchLabelExpressions[{j}].values"),
                    "Required value: must specify as least one value",
                ));
            }
            exprs.push(core::NodeSelectorRequirement {
                key: e.key.clone(),
                operator: "In".into(),
                values: Some(e.values.clone()),
            });
        }
        terms.push(node_selector_term_from_k8s(&core::NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        }));
    }
    Ok(StorageClass {
        is_default: sc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_DEFAULT_STORAGE_CLASS))
            .is_some_and(|v| v == "true"),
        name,
        provisioner: sc.provisioner.as_str().into(),
        binding_mode: Some(binding_mode),
        allowed_topologies: terms.into(),
    })
}

pub fn csi_node_from_k8s(n: &storage::CSINode) -> Result<CsiNode> {
    let name = storage_name(&n.metadata, "CSINode")?;
    let migrated = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_MIGRATED_PLUGINS))
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(Into::into)
                .collect()
        })
        .unwrap_or_default();
    let mut drivers = Vec::new();
    for (i, d) in n.spec.drivers.iter().enumerate() {
        let count = d.allocatable.as_ref().and_then(|a| a.count);
        if count.is_some_and(|c| c < 0) {
            return Err(err(
                format!("spec.drivers[{i}].allocatable.count"),
                "must be greater than or equal to 0",
            ));
        }
        drivers.push(CsiNodeDriver {
            name: d.name.as_str().into(),
            topology_keys: d
                .topology_keys
                .iter()
                .flatten()
                .map(|k| k.as_str().into())
                .collect(),
            allocatable: count.map(i64::from),
        });
    }
    Ok(CsiNode {
        name,
        drivers: drivers.into(),
        migrated_plugins: migrated,
    })
}

pub fn csi_driver_from_k8s(d: &storage::CSIDriver) -> Result<CsiDriver> {
    Ok(CsiDriver {
        name: storage_name(&d.metadata, "CSIDriver")?,
        storage_capacity: d.spec.storage_capacity.unwrap_or(false),
    })
}

pub fn csi_storage_capacity_from_k8s(
    c: &storage::CSIStorageCapacity,
) -> Result<CsiStorageCapacity> {
    let (name, namespace) = meta_name_ns(&c.metadata, "CSIStorageCapacity")?;
    Ok(CsiStorageCapacity {
        namespace,
        name,
        storage_class: c.storage_class_name.as_str().into(),
        node_topology: match &c.node_topology {
            Some(sel) => Some(label_selector(Some(sel), "nodeTopology")?),
            None => None,
        },
        capacity: storage_bytes(c.capacity.as_ref(), "capacity")?,
        maximum_volume_size: storage_bytes(c.maximum_volume_size.as_ref(), "maximumVolumeSize")?,
    })
}
