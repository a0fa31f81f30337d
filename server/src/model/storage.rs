//! Storage objects as the volume plugins read them: a pod's volumes, and the
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSI objects they
//! refer to. Parsed once at ingest (`convert`), cheap to clone (`Arc`).

use std::sync::Arc;

use super::labels::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm};

/// `pv.kubernetes.io/bind-completed`: the PV controller finished binding the claim.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `pv.kubernetes.io/bound-by-controller`: the binding was made by a controller (or the
/// scheduler) rather than pre-bound by the user.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `volume.kubernetes.io/selected-node`: the node the scheduler chose for a claim to be
/// provisioned on (delayed binding).
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta storage-class annotation, still read before `spec.storageClassName`.
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Marks the default StorageClass (the DefaultStorageClass admission plugin).
pub const ANN_DEFAULT_STORAGE_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// A CSINode annotation listing the in-tree plugins migrated to CSI on the node.
pub const ANN_MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// `kubernetes.io/no-provisioner`: a class whose claims can only bind static PVs.
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// Access modes as bit flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AccessModes(pub u8);

impl AccessModes {
    pub const RWO: AccessModes = AccessModes(1);
    pub const ROX: AccessModes = AccessModes(2);
    pub const RWX: AccessModes = AccessModes(4);
    pub const RWOP: AccessModes = AccessModes(8);

    /// Parses an API access-mode name.
    pub fn parse(s: &str) -> Option<AccessModes> {
        Some(match s {
            "ReadWriteOnce" => Self::RWO,
            "ReadOnlyMany" => Self::ROX,
            "ReadWriteMany" => Self::RWX,
            "ReadWriteOncePod" => Self::RWOP,
            _ => return None,
        })
    }

    pub fn contains(self, other: AccessModes) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: AccessModes) -> AccessModes {
        AccessModes(self.0 | other.0)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VolumeMode {
    #[default]
    Filesystem,
    Block,
}

/// A volume of a pod, reduced to what scheduling plugins look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodVolume {
    /// `persistentVolumeClaim`, or a generic `ephemeral` volume (claim `<pod>-<volume>`,
    /// which must be owned by the pod).
    Claim {
        claim: Arc<str>,
        read_only: bool,
        ephemeral: bool,
    },
    /// In-tree kinds VolumeRestrictions checks for disk conflicts and NodeVolumeLimits
    /// counts once migrated to CSI.
    GcePersistentDisk {
        pd_name: Box<str>,
        read_only: bool,
    },
    AwsElasticBlockStore {
        volume_id: Box<str>,
    },
    Iscsi {
        iqn: Box<str>,
        read_only: bool,
    },
    Rbd {
        monitors: Box<[Box<str>]>,
        pool: Box<str>,
        image: Box<str>,
        read_only: bool,
    },
    AzureDisk {
        disk_uri: Box<str>,
    },
    Cinder {
        volume_id: Box<str>,
    },
}

impl PodVolume {
    /// The claim name, for claim-backed volumes.
    pub fn claim(&self) -> Option<&Arc<str>> {
        match self {
            PodVolume::Claim { claim, .. } => Some(claim),
            _ => None,
        }
    }

    /// An in-tree volume migratable to CSI: (in-tree plugin name, CSI driver, handle).
    pub fn migratable(&self) -> Option<(&'static str, &'static str, String)> {
        Some(match self {
            PodVolume::AwsElasticBlockStore { volume_id } => {
                (AWS_EBS.0, AWS_EBS.1, ebs_volume_handle(volume_id))
            }
            PodVolume::GcePersistentDisk { pd_name, .. } => {
                (GCE_PD.0, GCE_PD.1, gce_pd_handle(pd_name))
            }
            PodVolume::AzureDisk { disk_uri } => (AZURE_DISK.0, AZURE_DISK.1, disk_uri.to_string()),
            PodVolume::Cinder { volume_id } => (CINDER.0, CINDER.1, volume_id.to_string()),
            _ => return None,
        })
    }
}

/// In-tree plugin names and the CSI drivers they migrate to (upstream csi-translation-lib),
/// for the kinds with attach limits.
pub const AWS_EBS: (&str, &str) = ("kubernetes.io/aws-ebs", "ebs.csi.aws.com");
pub const GCE_PD: (&str, &str) = ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io");
pub const AZURE_DISK: (&str, &str) = ("kubernetes.io/azure-disk", "disk.csi.azure.com");
pub const CINDER: (&str, &str) = ("kubernetes.io/cinder", "cinder.csi.openstack.org");
pub const MIGRATABLE: [(&str, &str); 4] = [AWS_EBS, GCE_PD, AZURE_DISK, CINDER];

/// The CSI driver an in-tree plugin (or provisioner) name migrates to.
pub fn csi_driver_for_in_tree(plugin: &str) -> Option<&'static str> {
    MIGRATABLE
        .iter()
        .find(|(p, _)| *p == plugin)
        .map(|(_, d)| *d)
}

/// The translator's EBS handle: `aws://zone/vol-x` becomes `vol-x`.
fn ebs_volume_handle(id: &str) -> String {
    match id.strip_prefix("aws://") {
        Some(rest) => rest.rsplit('/').next().unwrap_or(rest).to_string(),
        None => id.to_string(),
    }
}

/// The translator's GCE PD handle for a zonal disk whose zone it does not know.
fn gce_pd_handle(pd: &str) -> String {
    format!("projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{pd}")
}

/// Where a PV's data lives, as far as attach limits care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PvSource {
    Csi {
        driver: Arc<str>,
        handle: Arc<str>,
    },
    /// A migratable in-tree source: (in-tree plugin, CSI driver, translated handle).
    InTree {
        plugin: &'static str,
        driver: &'static str,
        handle: Arc<str>,
    },
    Other,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PvPhase {
    #[default]
    Pending,
    Available,
    Bound,
    Released,
    Failed,
}

/// A reference from a PV to the claim it is (to be) bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    /// Empty when the user pre-bound by name only.
    pub uid: Arc<str>,
}

#[derive(Clone, Debug)]
pub struct PersistentVolume {
    pub name: Arc<str>,
    pub labels: Labels,
    pub annotations: Labels,
    /// `spec.capacity.storage` in bytes.
    pub capacity: i64,
    pub access_modes: AccessModes,
    pub volume_mode: VolumeMode,
    /// `spec.storageClassName` (or the beta annotation); empty for none.
    pub storage_class: Arc<str>,
    /// `spec.nodeAffinity.required`.
    pub node_affinity: Option<NodeSelector>,
    pub claim_ref: Option<ClaimRef>,
    pub phase: PvPhase,
    pub source: PvSource,
    pub deleting: bool,
    pub resource_version: Option<Arc<str>>,
}

impl PersistentVolume {
    /// Upstream `CheckNodeAffinity`: no affinity matches every node.
    pub fn fits_node(&self, node_name: &str, node_labels: &Labels) -> bool {
        self.node_affinity
            .as_ref()
            .is_none_or(|a| a.matches(node_name, node_labels))
    }

    /// Whether this PV is bound (or pre-bound) to the claim.
    pub fn claimed_by(&self, claim: &PersistentVolumeClaim) -> bool {
        self.claim_ref.as_ref().is_some_and(|r| {
            *r.namespace == *claim.namespace
                && *r.name == *claim.name
                && (r.uid.is_empty() || *r.uid == *claim.uid)
        })
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PvcPhase {
    #[default]
    Pending,
    Bound,
    Lost,
}

#[derive(Clone, Debug)]
pub struct PersistentVolumeClaim {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub annotations: Labels,
    /// Upstream `GetPersistentVolumeClaimClass`: the beta annotation, else
    /// `spec.storageClassName`; empty for none.
    pub storage_class: Arc<str>,
    /// `spec.storageClassName` was absent (the default class may still be assigned).
    pub class_unset: bool,
    pub volume_name: Option<Arc<str>>,
    pub access_modes: AccessModes,
    pub volume_mode: VolumeMode,
    /// `spec.resources.requests.storage` in bytes.
    pub request: i64,
    pub selector: Option<LabelSelector>,
    pub phase: PvcPhase,
    pub deleting: bool,
    /// The UID of the controlling owner (a generic ephemeral volume's pod).
    pub controller_uid: Option<Arc<str>>,
    pub resource_version: Option<Arc<str>>,
}

impl PersistentVolumeClaim {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Upstream `IsFullyBound`... the claim names a volume and the controller finished.
    pub fn is_fully_bound(&self) -> bool {
        self.volume_name.is_some() && self.annotations.contains_key(ANN_BIND_COMPLETED)
    }

    pub fn selected_node(&self) -> Option<&str> {
        self.annotations.get(ANN_SELECTED_NODE)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeBindingMode {
    Immediate,
    WaitForFirstConsumer,
}

#[derive(Clone, Debug)]
pub struct StorageClass {
    pub name: Arc<str>,
    pub provisioner: Arc<str>,
    /// `None` only for objects the API server did not default (VolumeZone says so).
    pub binding_mode: Option<VolumeBindingMode>,
    /// `allowedTopologies`: ORed terms; empty allows every node.
    pub allowed_topologies: Box<[NodeSelectorTerm]>,
    pub is_default: bool,
}

impl StorageClass {
    pub fn wait_for_first_consumer(&self) -> bool {
        self.binding_mode == Some(VolumeBindingMode::WaitForFirstConsumer)
    }

    /// Upstream `checkVolumeProvisions`' topology test: no terms allow every node.
    pub fn allows_node(&self, node_name: &str, labels: &Labels) -> bool {
        self.allowed_topologies.is_empty()
            || self
                .allowed_topologies
                .iter()
                .any(|t| t.matches(node_name, labels))
    }
}

#[derive(Clone, Debug)]
pub struct CsiNodeDriver {
    pub name: Arc<str>,
    pub topology_keys: Box<[Box<str>]>,
    /// `allocatable.count`: how many of this driver's volumes the node can attach.
    pub allocatable: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct CsiNode {
    /// Same as the node's name.
    pub name: Arc<str>,
    pub drivers: Box<[CsiNodeDriver]>,
    /// In-tree plugin names migrated to CSI on this node (the annotation).
    pub migrated_plugins: Box<[Box<str>]>,
}

impl CsiNode {
    /// Upstream `isCSIMigrationOn` for the migrations that are GA: the node says so.
    pub fn migrated(&self, plugin: &str) -> bool {
        self.migrated_plugins.iter().any(|p| **p == *plugin)
    }

    pub fn limit(&self, driver: &str) -> Option<i64> {
        self.drivers
            .iter()
            .find(|d| *d.name == *driver)
            .and_then(|d| d.allocatable)
    }
}

#[derive(Clone, Debug)]
pub struct CsiDriver {
    pub name: Arc<str>,
    /// `spec.storageCapacity`: the scheduler must check CSIStorageCapacity objects.
    pub storage_capacity: bool,
}

#[derive(Clone, Debug)]
pub struct CsiStorageCapacity {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub storage_class: Arc<str>,
    /// `nodeTopology`; `None` matches no node (upstream: a nil selector selects nothing).
    pub node_topology: Option<LabelSelector>,
    pub capacity: Option<i64>,
    pub maximum_volume_size: Option<i64>,
}

/// A storage object as a watch delivers it.
#[derive(Clone, Debug)]
pub enum StorageObject {
    Pvc(Arc<PersistentVolumeClaim>),
    Pv(Arc<PersistentVolume>),
    StorageClass(Arc<StorageClass>),
    CsiNode(Arc<CsiNode>),
    CsiDriver(Arc<CsiDriver>),
    CsiStorageCapacity(Arc<CsiStorageCapacity>),
}

/// Upstream `FindMatchingVolume` (component-helpers `pv_helpers.go`): the PV a claim
/// binds to among `volumes`. A PV pre-bound to the claim wins (or, on a node its
/// affinity rejects, nothing does); otherwise the smallest Available PV of the claim's
/// class that is big enough, has the claim's volume mode and access modes, matches its
/// selector and (with a node) the node. The PV controller calls it without a node,
/// where delayed-binding claims are left to the scheduler.
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: Option<&Labels>,
    excluded: &[Arc<str>],
    delay_binding: bool,
) -> Option<Arc<PersistentVolume>> {
    let mut smallest: Option<&Arc<PersistentVolume>> = None;
    for pv in volumes {
        if excluded.contains(&pv.name) {
            continue;
        }
        let bound_to_claim = pv.claimed_by(claim);
        if pv.claim_ref.is_some() && !bound_to_claim {
            continue;
        }
        if pv.capacity < claim.request || pv.volume_mode != claim.volume_mode || pv.deleting {
            continue;
        }
        // Upstream `CheckNodeAffinity` builds a node from labels alone: field terms see
        // an empty name.
        let affinity_ok = node.is_none_or(|labels| pv.fits_node("", labels));
        if bound_to_claim {
            return affinity_ok.then(|| pv.clone());
        }
        if node.is_none() && delay_binding {
            continue;
        }
        if pv.phase != PvPhase::Available {
            continue;
        }
        if claim
            .selector
            .as_ref()
            .is_some_and(|s| !s.matches(&pv.labels))
        {
            continue;
        }
        if pv.storage_class != claim.storage_class || !affinity_ok {
            continue;
        }
        // The scheduler checks access modes here; the PV controller through its index of
        // volumes by access modes: both ask for a superset.
        if !pv.access_modes.contains(claim.access_modes) {
            continue;
        }
        if smallest.is_none_or(|s| s.capacity > pv.capacity) {
            smallest = Some(pv);
        }
    }
    smallest.cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::convert::{pv_from_k8s, pvc_from_k8s};

    fn pv(yaml: &str) -> Arc<PersistentVolume> {
        let mut v = pv_from_k8s(&crate::yaml::from_str(yaml).expect("yaml")).expect("pv");
        if v.claim_ref.is_none() {
            v.phase = PvPhase::Available;
        }
        Arc::new(v)
    }

    fn claim(yaml: &str) -> PersistentVolumeClaim {
        pvc_from_k8s(&crate::yaml::from_str(yaml).expect("yaml"), || {
            "uid-c".into()
        })
        .expect("pvc")
    }

    #[test]
    fn smallest_fit_prebound_and_exclusions() {
        let node = Labels::new([("kubernetes.io/hostname", "n1")]);
        let on = |name: &str, size: &str, host: &str| {
            pv(&format!("metadata: {{name: {name}}}\nspec: {{capacity: {{storage: {size}}}, accessModes: [ReadWriteOnce], storageClassName: local, nodeAffinity: {{required: {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{host}]}}]}}]}}}}}}"))
        };
        let vols = vec![
            on("big", "50Gi", "n1"),
            on("small", "10Gi", "n1"),
            on("tiny", "1Gi", "n1"),
            on("elsewhere", "8Gi", "n2"),
        ];
        let c = claim("metadata: {name: c}\nspec: {storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 5Gi}}}");
        let pick = |excluded: &[Arc<str>]| {
            find_matching_volume(&c, &vols, Some(&node), excluded, true).map(|v| v.name.to_string())
        };
        assert_eq!(pick(&[]).as_deref(), Some("small"));
        assert_eq!(pick(&["small".into()]).as_deref(), Some("big"));
        assert_eq!(pick(&["small".into(), "big".into()]), None);
        // Without a node (the PV controller) a delayed claim matches nothing.
        assert!(find_matching_volume(&c, &vols, None, &[], true).is_none());
        // Access modes must be a subset of the PV's.
        let rwx = claim("metadata: {name: c}\nspec: {storageClassName: local, accessModes: [ReadWriteMany], resources: {requests: {storage: 5Gi}}}");
        assert!(find_matching_volume(&rwx, &vols, Some(&node), &[], true).is_none());
        // A PV pre-bound to the claim wins over a smaller free one, unless its node
        // affinity rejects the node.
        let pre = pv("metadata: {name: pre}\nspec: {capacity: {storage: 100Gi}, accessModes: [ReadWriteOnce], storageClassName: local, claimRef: {namespace: default, name: c}}");
        let mut with_pre = vols.clone();
        with_pre.push(pre);
        assert_eq!(
            find_matching_volume(&c, &with_pre, Some(&node), &[], true).map(|v| v.name.to_string()),
            Some("pre".into())
        );
    }

    #[test]
    fn claim_class_and_binding_state() {
        let c = claim("metadata: {name: c, annotations: {volume.beta.kubernetes.io/storage-class: beta}}\nspec: {storageClassName: ga}");
        assert_eq!(&*c.storage_class, "beta");
        assert!(!c.class_unset);
        let c = claim("metadata: {name: c}\nspec: {volumeName: v}");
        assert!(c.class_unset && !c.is_fully_bound());
        let c = claim("metadata: {name: c, annotations: {pv.kubernetes.io/bind-completed: 'yes'}}\nspec: {volumeName: v}");
        assert!(c.is_fully_bound());
    }
}
