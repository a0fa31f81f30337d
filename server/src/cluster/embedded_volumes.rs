//! The embedded cluster's storage: claims, volumes, classes and CSI objects, with a
//! small PV controller and provisioner standing in for kube-controller-manager's and
//! the CSI external-provisioner's, so `simulate` shows the same flow as a cluster:
//! Immediate claims bind (or are provisioned) as soon as they can; a claim the
//! scheduler annotated with its selected node is provisioned there; a PV the scheduler
//! gave a claimRef gets its claim bound.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::manifest::Object;
use crate::client::WatchEvent;
use crate::model::convert::{
    csi_driver_from_k8s, csi_node_from_k8s, csi_storage_capacity_from_k8s, pv_from_k8s,
    pvc_from_k8s, storage_class_from_k8s, FieldError,
};
use crate::model::labels::{NodeSelector, NodeSelectorTerm, Operator, Requirement};
use crate::model::storage::{
    find_matching_volume, ClaimRef, CsiDriver, CsiNode, CsiStorageCapacity, PersistentVolume,
    PersistentVolumeClaim, PvPhase, PvSource, PvcPhase, StorageClass, StorageObject,
    ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, NO_PROVISIONER,
};
use crate::model::{Labels, Node};

type NsName = (Arc<str>, Arc<str>);

/// Storage objects of the embedded cluster.
#[derive(Default)]
pub(super) struct Storage {
    pub pvcs: BTreeMap<NsName, Arc<PersistentVolumeClaim>>,
    pub pvs: BTreeMap<Arc<str>, Arc<PersistentVolume>>,
    pub classes: BTreeMap<Arc<str>, Arc<StorageClass>>,
    pub csi_nodes: BTreeMap<Arc<str>, Arc<CsiNode>>,
    pub csi_drivers: BTreeMap<Arc<str>, Arc<CsiDriver>>,
    pub capacities: BTreeMap<NsName, Arc<CsiStorageCapacity>>,
    next_uid: u64,
    next_rv: u64,
}

/// What the cluster reports for one claim, for the simulation report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimOutcome {
    /// `namespace/name`.
    pub claim: String,
    pub phase: &'static str,
    pub volume: Option<String>,
    /// Where the bound volume lives, when its node affinity pins one hostname.
    pub node: Option<String>,
    /// A volume the embedded provisioner created (rather than a static one).
    pub provisioned: bool,
}

fn with_annotations(labels: &Labels, add: &[(&str, &str)]) -> Labels {
    let mut pairs: Vec<(String, String)> = labels
        .iter()
        .filter(|(k, _)| !add.iter().any(|(a, _)| a == k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    pairs.extend(add.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Labels::new(pairs)
}

impl Storage {
    fn rv(&mut self) -> Arc<str> {
        self.next_rv += 1;
        format!("s{}", self.next_rv).into()
    }

    /// Every object, as a watch's initial listing delivers them (classes and CSI
    /// objects first, then volumes, then claims).
    pub fn initial_events(&self) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        let up = |o| WatchEvent::StorageUpsert(o);
        out.extend(
            self.classes
                .values()
                .cloned()
                .map(|c| up(StorageObject::StorageClass(c))),
        );
        out.extend(
            self.csi_drivers
                .values()
                .cloned()
                .map(|c| up(StorageObject::CsiDriver(c))),
        );
        out.extend(
            self.csi_nodes
                .values()
                .cloned()
                .map(|c| up(StorageObject::CsiNode(c))),
        );
        out.extend(
            self.capacities
                .values()
                .cloned()
                .map(|c| up(StorageObject::CsiStorageCapacity(c))),
        );
        out.extend(self.pvs.values().cloned().map(|c| up(StorageObject::Pv(c))));
        out.extend(
            self.pvcs
                .values()
                .cloned()
                .map(|c| up(StorageObject::Pvc(c))),
        );
        out
    }

    /// Adds a storage object from a manifest; the events to emit.
    pub fn create(&mut self, obj: &Object) -> Result<Vec<WatchEvent>, FieldError> {
        let o = match obj {
            Object::PersistentVolumeClaim(c) => {
                self.next_uid += 1;
                let n = self.next_uid;
                let mut pvc = pvc_from_k8s(c, || format!("embedded-pvc-{n:08}"))?;
                // The DefaultStorageClass admission plugin.
                if pvc.class_unset {
                    if let Some(d) = self.default_class() {
                        pvc.storage_class = d;
                    }
                }
                let key = (pvc.namespace.clone(), pvc.name.clone());
                if self.pvcs.contains_key(&key) {
                    return Err(already_exists("persistentvolumeclaim", &pvc.key()));
                }
                pvc.resource_version = Some(self.rv());
                let pvc = Arc::new(pvc);
                self.pvcs.insert(key, pvc.clone());
                StorageObject::Pvc(pvc)
            }
            Object::PersistentVolume(v) => {
                let mut pv = pv_from_k8s(v)?;
                if self.pvs.contains_key(&pv.name) {
                    return Err(already_exists("persistentvolume", &pv.name));
                }
                if pv.phase == PvPhase::Pending && pv.claim_ref.is_none() {
                    pv.phase = PvPhase::Available;
                }
                pv.resource_version = Some(self.rv());
                let pv = Arc::new(pv);
                self.pvs.insert(pv.name.clone(), pv.clone());
                StorageObject::Pv(pv)
            }
            Object::StorageClass(s) => {
                let c = Arc::new(storage_class_from_k8s(s)?);
                self.classes.insert(c.name.clone(), c.clone());
                StorageObject::StorageClass(c)
            }
            Object::CSINode(n) => {
                let n = Arc::new(csi_node_from_k8s(n)?);
                self.csi_nodes.insert(n.name.clone(), n.clone());
                StorageObject::CsiNode(n)
            }
            Object::CSIDriver(d) => {
                let d = Arc::new(csi_driver_from_k8s(d)?);
                self.csi_drivers.insert(d.name.clone(), d.clone());
                StorageObject::CsiDriver(d)
            }
            Object::CSIStorageCapacity(c) => {
                let c = Arc::new(csi_storage_capacity_from_k8s(c)?);
                self.capacities
                    .insert((c.namespace.clone(), c.name.clone()), c.clone());
                StorageObject::CsiStorageCapacity(c)
            }
            _ => return Ok(Vec::new()),
        };
        Ok(vec![WatchEvent::StorageUpsert(o)])
    }

    fn default_class(&self) -> Option<Arc<str>> {
        self.classes
            .values()
            .filter(|c| c.is_default)
            .map(|c| c.name.clone())
            .max()
    }

    fn put_pv(&mut self, mut pv: PersistentVolume, out: &mut Vec<WatchEvent>) {
        pv.resource_version = Some(self.rv());
        let pv = Arc::new(pv);
        self.pvs.insert(pv.name.clone(), pv.clone());
        out.push(WatchEvent::StorageUpsert(StorageObject::Pv(pv)));
    }

    fn put_pvc(&mut self, mut pvc: PersistentVolumeClaim, out: &mut Vec<WatchEvent>) {
        pvc.resource_version = Some(self.rv());
        let pvc = Arc::new(pvc);
        self.pvcs
            .insert((pvc.namespace.clone(), pvc.name.clone()), pvc.clone());
        out.push(WatchEvent::StorageUpsert(StorageObject::Pvc(pvc)));
    }

    /// The scheduler's PreBind for a static PV: the PV as assumed (claimRef set).
    pub fn bind_volume(
        &mut self,
        pv: &PersistentVolume,
        nodes: &BTreeMap<Arc<str>, Arc<Node>>,
    ) -> Result<Vec<WatchEvent>, String> {
        let Some(current) = self.pvs.get(&pv.name).cloned() else {
            return Err(format!("persistentvolumes \"{}\" not found", pv.name));
        };
        if let (Some(have), Some(want)) = (&current.claim_ref, &pv.claim_ref) {
            if have.namespace != want.namespace || have.name != want.name {
                return Err(format!(
                    "Operation cannot be fulfilled on persistentvolumes \"{}\": the object has been modified",
                    pv.name
                ));
            }
        }
        let mut updated = (*current).clone();
        updated.claim_ref = pv.claim_ref.clone();
        updated.annotations = pv.annotations.clone();
        let mut out = Vec::new();
        let claim = updated.claim_ref.clone();
        self.put_pv(updated, &mut out);
        if let Some(c) = claim {
            self.sync_one(&c.namespace, &c.name, nodes, &mut out);
        }
        Ok(out)
    }

    /// The scheduler's PreBind for a claim to provision: the selected-node annotation.
    pub fn select_node(
        &mut self,
        namespace: &str,
        name: &str,
        node: &str,
        nodes: &BTreeMap<Arc<str>, Arc<Node>>,
    ) -> Result<Vec<WatchEvent>, String> {
        let Some(current) = self.pvcs.get(&(namespace.into(), name.into())).cloned() else {
            return Err(format!("persistentvolumeclaims \"{name}\" not found"));
        };
        let mut updated = (*current).clone();
        updated.annotations = with_annotations(&current.annotations, &[(ANN_SELECTED_NODE, node)]);
        let mut out = Vec::new();
        self.put_pvc(updated, &mut out);
        self.sync_one(namespace, name, nodes, &mut out);
        Ok(out)
    }

    /// Binds a claim and a volume both ways, as the PV controller's `bind` does.
    fn bind(
        &mut self,
        pvc: &PersistentVolumeClaim,
        pv: &PersistentVolume,
        by_controller: bool,
        out: &mut Vec<WatchEvent>,
    ) {
        let mut v = pv.clone();
        if v.claim_ref.as_ref().is_none_or(|r| r.uid.is_empty()) {
            v.claim_ref = Some(ClaimRef {
                namespace: pvc.namespace.clone(),
                name: pvc.name.clone(),
                uid: pvc.uid.clone(),
            });
        }
        v.phase = PvPhase::Bound;
        self.put_pv(v, out);
        let mut c = pvc.clone();
        c.volume_name = Some(pv.name.clone());
        c.phase = PvcPhase::Bound;
        let mut ann = vec![(ANN_BIND_COMPLETED, "yes")];
        if by_controller {
            ann.push((ANN_BOUND_BY_CONTROLLER, "yes"));
        }
        c.annotations = with_annotations(&pvc.annotations, &ann);
        self.put_pvc(c, out);
    }

    /// A PV for the claim (the external provisioner). On `node`, the driver's topology
    /// keys from the node's CSINode pin the PV to the node's values.
    fn provision(
        &mut self,
        pvc: &PersistentVolumeClaim,
        class: &StorageClass,
        node: Option<&Node>,
        out: &mut Vec<WatchEvent>,
    ) {
        let mut affinity = None;
        if let Some(node) = node {
            let keys: Vec<Box<str>> = self
                .csi_nodes
                .get(&node.name)
                .and_then(|n| n.drivers.iter().find(|d| d.name == class.provisioner))
                .map(|d| d.topology_keys.to_vec())
                .unwrap_or_default();
            let exprs: Vec<Requirement> = keys
                .iter()
                .filter_map(|k| {
                    let v = node.labels.get(k)?;
                    Requirement::new(k, Operator::In, vec![v.to_string()]).ok()
                })
                .collect();
            if !exprs.is_empty() {
                affinity = Some(NodeSelector {
                    terms: vec![NodeSelectorTerm {
                        match_expressions: exprs.into(),
                        match_fields: Box::new([]),
                        name_pins: None,
                        valid: true,
                    }]
                    .into(),
                });
            }
        }
        let pv = PersistentVolume {
            name: format!("pvc-{}", pvc.uid).into(),
            labels: Labels::default(),
            annotations: Labels::new([("pv.kubernetes.io/provisioned-by", &*class.provisioner)]),
            capacity: pvc.request,
            access_modes: pvc.access_modes,
            volume_mode: pvc.volume_mode,
            storage_class: class.name.clone(),
            node_affinity: affinity,
            claim_ref: Some(ClaimRef {
                namespace: pvc.namespace.clone(),
                name: pvc.name.clone(),
                uid: pvc.uid.clone(),
            }),
            phase: PvPhase::Bound,
            source: PvSource::Csi {
                driver: class.provisioner.clone(),
                handle: format!("pvc-{}", pvc.uid).into(),
            },
            deleting: false,
            resource_version: None,
        };
        self.bind(pvc, &pv, true, out);
    }

    /// The PV controller's pass over unbound claims (`syncUnboundClaim`), and the
    /// provisioner's over the claims it may provision: once over each claim.
    pub fn sync(&mut self, nodes: &BTreeMap<Arc<str>, Arc<Node>>, out: &mut Vec<WatchEvent>) {
        let pending: Vec<Arc<PersistentVolumeClaim>> = self.pvcs.values().cloned().collect();
        for pvc in pending {
            self.sync_claim(&pvc, nodes, out);
        }
    }

    /// [`sync`](Self::sync) for the claim `namespace/name` only: what a write the
    /// scheduler makes for one claim can change.
    fn sync_one(
        &mut self,
        namespace: &str,
        name: &str,
        nodes: &BTreeMap<Arc<str>, Arc<Node>>,
        out: &mut Vec<WatchEvent>,
    ) {
        if let Some(pvc) = self.pvcs.get(&(namespace.into(), name.into())).cloned() {
            self.sync_claim(&pvc, nodes, out);
        }
    }

    fn sync_claim(
        &mut self,
        pvc: &Arc<PersistentVolumeClaim>,
        nodes: &BTreeMap<Arc<str>, Arc<Node>>,
        out: &mut Vec<WatchEvent>,
    ) {
        if pvc.is_fully_bound() || pvc.deleting {
            return;
        }
        if let Some(name) = &pvc.volume_name {
            // Pre-bound by the user: bind when the volume exists and is free.
            if let Some(pv) = self.pvs.get(name).cloned() {
                if pv.claim_ref.is_none() || pv.claimed_by(pvc) {
                    self.bind(pvc, &pv, false, out);
                }
            }
            return;
        }
        // A volume pre-bound to the claim (by its user, or by the scheduler).
        if let Some(pv) = self.pvs.values().find(|v| v.claimed_by(pvc)).cloned() {
            let by_controller = pv.annotations.contains_key(ANN_BOUND_BY_CONTROLLER);
            self.bind(pvc, &pv, by_controller, out);
            return;
        }
        let class = self.classes.get(&pvc.storage_class).cloned();
        let provisions = class
            .as_ref()
            .is_some_and(|c| !c.provisioner.is_empty() && *c.provisioner != *NO_PROVISIONER);
        if let Some(class) = class.as_ref().filter(|c| c.wait_for_first_consumer()) {
            let node = pvc.selected_node().and_then(|n| nodes.get(n)).cloned();
            if let (Some(node), true) = (node, provisions) {
                self.provision(pvc, class, Some(&node), out);
            }
            return;
        }
        let all: Vec<Arc<PersistentVolume>> = self.pvs.values().cloned().collect();
        if let Some(pv) = find_matching_volume(pvc, &all, None, &[], false) {
            self.bind(pvc, &pv, true, out);
        } else if let (Some(class), true) = (class, provisions) {
            self.provision(pvc, &class, None, out);
        }
    }

    /// Every claim's state, by key.
    pub fn outcomes(&self) -> Vec<ClaimOutcome> {
        self.pvcs
            .values()
            .map(|c| {
                let pv = c.volume_name.as_ref().and_then(|v| self.pvs.get(v));
                let node = pv.and_then(|pv| {
                    let t = pv.node_affinity.as_ref()?.terms.first()?;
                    let r = t
                        .match_expressions
                        .iter()
                        .find(|r| &*r.key == crate::model::labels::LABEL_HOSTNAME)?;
                    (r.values.len() == 1).then(|| r.values[0].to_string())
                });
                ClaimOutcome {
                    claim: c.key(),
                    phase: match c.phase {
                        PvcPhase::Pending => "Pending",
                        PvcPhase::Bound => "Bound",
                        PvcPhase::Lost => "Lost",
                    },
                    volume: c.volume_name.as_deref().map(str::to_string),
                    node,
                    provisioned: pv.is_some_and(|p| {
                        p.annotations
                            .contains_key("pv.kubernetes.io/provisioned-by")
                    }),
                }
            })
            .collect()
    }
}

fn already_exists(kind: &str, key: &str) -> FieldError {
    FieldError {
        field: "metadata.name".into(),
        message: format!("AlreadyExists: {kind} {key} already exists"),
    }
}

/// What the StatefulSet controller creates for a StatefulSet: its claims from
/// `volumeClaimTemplates` (`<template>-<set>-<ordinal>`) and its pods (`<set>-<ordinal>`)
/// mounting them, for ordinals `0..replicas` (all at once, as with the `Parallel`
/// policy: with no kubelet, no pod ever becomes Ready for `OrderedReady` to wait on).
pub(super) fn stateful_set_objects(
    ss: &apps::StatefulSet,
    uid: &str,
) -> Result<(Vec<core::PersistentVolumeClaim>, Vec<core::Pod>), FieldError> {
    let name = ss.metadata.name.clone().unwrap_or_default();
    let namespace = ss
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = &ss.spec;
    let replicas = spec.replicas.unwrap_or(1);
    if replicas < 0 {
        return Err(FieldError {
            field: "spec.replicas".into(),
            message: format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        });
    }
    // Bounded as the fuzzer's inputs must be; far above any StatefulSet in practice.
    let replicas = replicas.min(10_000);
    let mut claims = Vec::new();
    let mut pods = Vec::new();
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    for i in 0..replicas {
        let pod_name = format!("{name}-{i}");
        let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
        let mut volumes = pod_spec.volumes.take().unwrap_or_default();
        for t in spec.volume_claim_templates.iter().flatten() {
            let tname = t.metadata.name.clone().unwrap_or_default();
            let claim_name = format!("{tname}-{name}-{i}");
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector_labels.clone());
            claims.push(core::PersistentVolumeClaim {
                metadata: meta::ObjectMeta {
                    name: Some(claim_name.clone()),
                    namespace: Some(namespace.clone()),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    ..Default::default()
                },
                spec: t.spec.clone(),
                status: None,
            });
            volumes.retain(|v| v.name != tname);
            volumes.push(core::Volume {
                name: tname,
                persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                    claim_name,
                    read_only: None,
                }),
                ..Default::default()
            });
        }
        pod_spec.volumes = Some(volumes);
        let mut labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(
            "statefulset.kubernetes.io/pod-name".into(),
            pod_name.clone(),
        );
        labels.insert("apps.kubernetes.io/pod-index".into(), i.to_string());
        pods.push(core::Pod {
            metadata: meta::ObjectMeta {
                name: Some(pod_name),
                namespace: Some(namespace.clone()),
                labels: Some(labels),
                annotations: spec
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.clone()),
                owner_references: Some(vec![meta::OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: name.clone(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: Some(pod_spec),
            status: None,
        });
    }
    Ok((claims, pods))
}
