//! The scheduler's view of a Pod: everything the plugins read, parsed once at ingest.
//!
//! A `Pod` is small and cheap to clone: identity and the fields the scheduler itself
//! changes (node, nominated node) sit beside an `Arc<PodSpec>` holding everything else.

use std::sync::Arc;

use super::labels::{LabelSelector, Labels, NodeSelector, PreferredSchedulingTerm};
use super::resource::Resource;
use super::taint::Toleration;

/// A pod's UID; unique across the cluster's lifetime.
pub type Uid = Arc<str>;

#[derive(Clone, Debug)]
pub struct Pod {
    pub uid: Uid,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    /// `spec.nodeName`: set once the pod is bound (or assumed inside the scheduler).
    pub node_name: Option<Arc<str>>,
    /// `status.nominatedNodeName`.
    pub nominated_node_name: Option<Arc<str>>,
    /// `metadata.deletionTimestamp` as Unix microseconds: the pod is terminating.
    pub deletion_timestamp: Option<i64>,
    /// `metadata.resourceVersion`, when the backend has one.
    pub resource_version: Option<Arc<str>>,
    pub phase: PodPhase,
    /// Has the `DisruptionTarget` condition from scheduler preemption: a terminating
    /// victim that must not trigger another preemption.
    pub preempted_by_scheduler: bool,
    /// The `PodScheduled=False` condition as the cluster holds it (reason, message):
    /// a failed attempt that would write the same one writes nothing, as upstream's
    /// status diff.
    pub unschedulable_condition: Option<Arc<(Box<str>, Box<str>)>>,
    pub spec: Arc<PodSpec>,
}

impl Pod {
    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn is_assigned(&self) -> bool {
        self.node_name.is_some()
    }

    pub fn is_terminated(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    pub fn priority(&self) -> i32 {
        self.spec.priority
    }

    pub fn labels(&self) -> &Labels {
        &self.spec.labels
    }

    /// A copy of this pod placed on `node` (the cache's assumed pod).
    pub fn with_node(&self, node: Arc<str>) -> Pod {
        Pod {
            node_name: Some(node),
            ..self.clone()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PodPhase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            "Unknown" => PodPhase::Unknown,
            _ => return None,
        })
    }

    /// The API name, the inverse of [`parse`](Self::parse).
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PreemptionPolicy {
    #[default]
    PreemptLowerPriority,
    Never,
}

/// Everything about a pod the scheduler reads but never changes.
#[derive(Clone, Debug, Default)]
pub struct PodSpec {
    pub labels: Labels,
    pub annotations: Labels,
    pub scheduler_name: Arc<str>,
    /// Resolved priority (`spec.priority`, else from `priorityClassName`).
    pub priority: i32,
    pub priority_class_name: Option<Arc<str>>,
    pub preemption_policy: PreemptionPolicy,
    /// Creation time (Unix microseconds): QueueSort's tie-breaker and preemption's
    /// "latest start time" when there is no status start time.
    pub creation_timestamp: Option<i64>,
    /// `status.startTime` (Unix microseconds).
    pub start_time: Option<i64>,
    pub termination_grace_period_seconds: Option<i64>,
    /// Effective requests: containers summed, init containers max'd (sidecars counted
    /// as upstream does), plus overhead. What NodeResourcesFit compares.
    pub requests: Resource,
    /// CPU and memory with the upstream defaults (100m, 200Mi) for containers that
    /// request none: what spreading scores and `NonZeroRequested` use.
    pub non_zero_milli_cpu: i64,
    pub non_zero_memory: i64,
    /// Host ports wanted by the pod's containers (hostPort > 0).
    pub host_ports: Box<[HostPort]>,
    /// Normalised image names (`:latest` added when untagged) of init containers, app
    /// containers and image volumes, one per container (duplicates kept).
    pub images: Box<[Box<str>]>,
    /// How many containers and image volumes ImageLocality divides its threshold by.
    pub image_slots: usize,
    /// `spec.nodeSelector` as requirements that must all match.
    pub node_selector: Option<Labels>,
    pub required_node_affinity: Option<NodeSelector>,
    pub preferred_node_affinity: Box<[PreferredSchedulingTerm]>,
    pub tolerations: Box<[Toleration]>,
    pub scheduling_gates: Box<[Box<str>]>,
    pub required_affinity_terms: Box<[AffinityTerm]>,
    pub required_anti_affinity_terms: Box<[AffinityTerm]>,
    pub preferred_affinity_terms: Box<[WeightedAffinityTerm]>,
    pub preferred_anti_affinity_terms: Box<[WeightedAffinityTerm]>,
    pub topology_spread_constraints: Box<[TopologySpreadConstraint]>,
    pub owner_references: Box<[OwnerReference]>,
    /// Volumes the volume plugins look at (claims, generic ephemeral volumes, and the
    /// in-tree kinds with disk conflicts or attach limits); others are left out.
    pub volumes: Box<[super::storage::PodVolume]>,
    /// The node features the pod needs (NodeDeclaredFeatures), inferred from its spec.
    pub required_features: super::features::FeatureSet,
    /// `spec.resourceClaims`: the DRA claims the pod needs.
    pub resource_claims: Box<[super::dra::PodResourceClaim]>,
    /// `status.resourceClaimStatuses`: the claim generated for each template entry
    /// (`None`: no claim needed), written by the resourceclaim controller.
    pub resource_claim_statuses: Box<[super::dra::PodClaimStatus]>,
    /// Per container, its extended-resource requests, kept only for a pod that has
    /// some: DynamicResources turns those a DeviceClass serves into device requests.
    pub extended_containers: Option<Arc<[super::dra::ContainerExtended]>>,
    /// `status.extendedResourceClaimStatus`: the claim serving the pod's DRA-backed
    /// extended resources, written by the scheduler at PreBind.
    pub extended_resource_claim_status: Option<Arc<super::dra::ExtendedResourceClaimStatus>>,
}

impl PodSpec {
    pub fn has_affinity(&self) -> bool {
        !self.required_affinity_terms.is_empty()
            || !self.required_anti_affinity_terms.is_empty()
            || !self.preferred_affinity_terms.is_empty()
            || !self.preferred_anti_affinity_terms.is_empty()
    }

    pub fn has_required_anti_affinity(&self) -> bool {
        !self.required_anti_affinity_terms.is_empty()
    }

    /// The claim a `spec.resourceClaims` entry resolves to (upstream
    /// `resourceclaim.Name`).
    pub fn claim_name(&self, claim: &super::dra::PodResourceClaim) -> super::dra::ClaimName {
        use super::dra::{ClaimName, ClaimSource};
        match &claim.source {
            ClaimSource::Claim(n) => ClaimName::Named(n.clone(), false),
            ClaimSource::Template(_) => {
                match self
                    .resource_claim_statuses
                    .iter()
                    .find(|s| s.name == claim.name)
                {
                    Some(s) => match &s.claim {
                        Some(name) => ClaimName::Named(name.clone(), true),
                        None => ClaimName::NotNeeded,
                    },
                    None => ClaimName::NotCreated,
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => return None,
        })
    }
}

/// A host port a container binds: `hostIP` defaults to `0.0.0.0` (all addresses) and
/// protocol to TCP, as upstream `HostPortInfo` normalises them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: Box<str>,
    pub protocol: Protocol,
    pub port: i32,
}

/// An inter-pod (anti-)affinity term with namespaces resolved as far as the pod alone
/// allows; `namespace_selector` is matched against namespace labels at PreFilter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Explicit namespaces; when both this and the selector are empty the term applies
    /// to the pod's own namespace (already filled in at ingest).
    pub namespaces: Box<[Arc<str>]>,
    /// `None` when the term has no namespaceSelector.
    pub namespace_selector: Option<LabelSelector>,
    /// `labelSelector` with matchLabelKeys / mismatchLabelKeys merged in.
    pub selector: LabelSelector,
    pub topology_key: Box<str>,
}

impl AffinityTerm {
    /// Upstream `AffinityTerm.Matches`: `pod` is in one of the term's namespaces (or in a
    /// namespace whose labels, `ns_labels`, match the namespace selector) and its labels
    /// match the selector. Pass empty labels when the namespace's are unknown.
    pub fn matches(&self, pod: &Pod, ns_labels: &Labels) -> bool {
        let ns_ok = self.namespaces.iter().any(|n| **n == *pod.namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|sel| sel.matches(ns_labels));
        ns_ok && self.selector.matches(&pod.spec.labels)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightedAffinityTerm {
    pub weight: i32,
    pub term: AffinityTerm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnsatisfiableConstraintAction {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NodeInclusionPolicy {
    #[default]
    Honor,
    Ignore,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: Box<str>,
    pub when_unsatisfiable: UnsatisfiableConstraintAction,
    /// `labelSelector` with matchLabelKeys merged in.
    pub selector: LabelSelector,
    pub min_domains: Option<i32>,
    /// Default Honor.
    pub node_affinity_policy: NodeInclusionPolicy,
    /// Default Ignore.
    pub node_taints_policy: NodeInclusionPolicy,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerReference {
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub name: Box<str>,
    pub uid: Box<str>,
    pub controller: bool,
}
