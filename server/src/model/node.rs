//! The scheduler's view of a Node, plus the other cluster objects it reads: namespaces,
//! priority classes and pod disruption budgets.

use std::sync::Arc;

use super::labels::{LabelSelector, Labels};
use super::pod::PreemptionPolicy;
use super::resource::Resource;
use super::taint::Taint;

#[derive(Clone, Debug)]
pub struct Node {
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub labels: Labels,
    pub allocatable: Resource,
    pub taints: Box<[Taint]>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// Images present on the node, one entry per name in `status.images[].names`
    /// (verbatim, as upstream keys them), sorted by name.
    pub images: Box<[NodeImage]>,
    /// `status.declaredFeatures` the scheduler knows (NodeDeclaredFeatures).
    pub declared_features: super::features::FeatureSet,
}

impl Node {
    /// The image size on this node, by normalised name.
    pub fn image_size(&self, name: &str) -> Option<i64> {
        self.images
            .binary_search_by(|i| (*i.name).cmp(name))
            .ok()
            .map(|i| self.images[i].size)
    }
}

/// One image name present on a node (a node image with several names yields several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeImage {
    pub name: Box<str>,
    pub size: i64,
}

/// Upstream `normalizedImageName`: adds `:latest` when no `:` follows the last `/`, so a
/// pod's `nginx` matches a node's `nginx:latest`. Node image names are kept verbatim.
pub fn normalized_image_name(name: &str) -> String {
    let colon = name.rfind(':').map_or(-1, |i| i as isize);
    let slash = name.rfind('/').map_or(-1, |i| i as isize);
    if colon <= slash {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

#[derive(Clone, Debug)]
pub struct Namespace {
    pub name: Arc<str>,
    pub labels: Labels,
}

#[derive(Clone, Debug)]
pub struct PriorityClass {
    pub name: Arc<str>,
    pub value: i32,
    pub global_default: bool,
    pub preemption_policy: Option<PreemptionPolicy>,
}

/// A PodDisruptionBudget as preemption reads it.
#[derive(Clone, Debug)]
pub struct PodDisruptionBudget {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub selector: LabelSelector,
    /// `spec.minAvailable` / `spec.maxUnavailable`, for backends that compute the status
    /// themselves (the embedded cluster has no disruption controller).
    pub min_available: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
    /// `status.disruptionsAllowed` when the object carries a status.
    pub disruptions_allowed: Option<i32>,
    /// Whether the status came with the object (else a backend computes it).
    pub status_given: bool,
    /// `status.disruptedPods`: pods already being evicted under this budget.
    pub disrupted_pods: Box<[Box<str>]>,
}

/// What a Service or workload controller selects, for PodTopologySpread's default
/// constraints (upstream `helper.DefaultSelector`).
#[derive(Clone, Debug)]
pub struct WorkloadSelector {
    pub kind: WorkloadKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    /// Services and ReplicationControllers: a label map (`None`: selects nothing).
    pub match_labels: Option<Labels>,
    /// ReplicaSets and StatefulSets: a label selector.
    pub selector: LabelSelector,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    Service,
    ReplicationController,
    ReplicaSet,
    StatefulSet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(i32),
}

impl IntOrPercent {
    /// Upstream `intstr.GetScaledValueFromIntOrPercent` with rounding up.
    pub fn scaled(self, total: i32) -> i32 {
        match self {
            IntOrPercent::Int(v) => v,
            IntOrPercent::Percent(p) => ((i64::from(p) * i64::from(total) + 99) / 100) as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalise_like_upstream() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.2"), "nginx:1.2");
        assert_eq!(
            normalized_image_name("registry:5000/nginx"),
            "registry:5000/nginx:latest"
        );
        assert_eq!(
            normalized_image_name("gcr.io/a/b@sha256:abc"),
            "gcr.io/a/b@sha256:abc"
        );
        assert_eq!(normalized_image_name("repo@digest"), "repo@digest:latest");
    }
}
