//! The one place where Kubernetes API objects (`k8s-openapi` types, as both cluster
//! backends receive them) become the scheduler's compact model. Everything is
//! validated here; a bad field is an error naming the field, never a panic.
//!
//! By kind: `pod`, `node` (and namespaces), `priority`, `disruption` (PDBs),
//! `workloads` (Services' and controllers' selectors), `storage`, and the terms they
//! share in `selectors`.

mod disruption;
mod dra;
mod dra_allocation;
mod dra_devices;
mod node;
mod pod;
mod priority;
mod requests;
mod selectors;
mod storage;
mod workloads;

pub use disruption::*;
pub use dra::*;
pub use dra_allocation::allocation_to_json;
pub use dra_devices::*;
pub use node::*;
pub use pod::*;
pub use priority::*;
use requests::pod_requests;
#[cfg(test)]
pub(crate) use requests::CASES as REQUEST_CASES;
pub use selectors::*;
pub use storage::*;
pub use workloads::*;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::labels::{
    LabelSelector, Labels, NodeSelector, NodeSelectorTerm, Operator, PreferredSchedulingTerm,
    Requirement, NODE_FIELD_NAME,
};
use super::node::{
    normalized_image_name, IntOrPercent, Namespace, Node, NodeImage, PodDisruptionBudget,
    PriorityClass, WorkloadKind, WorkloadSelector,
};
use super::pod::{
    AffinityTerm, HostPort, NodeInclusionPolicy, OwnerReference, Pod, PodPhase, PodSpec,
    PreemptionPolicy, Protocol, TopologySpreadConstraint, UnsatisfiableConstraintAction,
    WeightedAffinityTerm,
};
use super::quantity::Quantity;
use super::resource::{
    is_scalar_resource_name, Resource, ResourceName, CPU, DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST, EPHEMERAL_STORAGE, MEMORY, PODS,
};
use super::taint::{Taint, TaintEffect, Toleration, TolerationOperator};

/// The default scheduler name, used when a pod names none.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// A field that could not be converted: its path in the object and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

pub(super) fn err(field: impl fmt::Display, message: impl fmt::Display) -> FieldError {
    FieldError {
        field: field.to_string(),
        message: message.to_string(),
    }
}

pub(super) type Result<T, E = FieldError> = std::result::Result<T, E>;

pub(super) fn parse_time(t: &meta::Time) -> i64 {
    t.0.as_microsecond()
}

pub(super) fn labels_of(map: &Option<BTreeMap<String, String>>) -> Labels {
    match map {
        Some(m) => Labels::new(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        None => Labels::default(),
    }
}

pub(super) fn meta_name_ns(meta: &meta::ObjectMeta, kind: &str) -> Result<(Arc<str>, Arc<str>)> {
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                format!("required: every {kind} needs a name"),
            )
        })?;
    Ok((
        name.into(),
        meta.namespace.as_deref().unwrap_or("default").into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Result<Pod> {
        let p: core::Pod = crate::yaml::from_str(yaml).expect("yaml");
        pod_from_k8s(&p, &SystemPriorities, || "uid-1".into())
    }

    #[test]
    fn requests_sum_containers_max_init_and_add_overhead() {
        let p = pod(r#"
metadata: {name: p}
spec:
  overhead: {cpu: 10m}
  initContainers:
  - name: init
    resources: {requests: {cpu: "2", memory: 1Gi}}
  containers:
  - name: a
    resources: {requests: {cpu: 100m, memory: 500Mi, nvidia.com/gpu: 1}}
  - name: b
    resources: {limits: {cpu: 200m}}
"#)
        .unwrap();
        let r = &p.spec.requests;
        assert_eq!(r.milli_cpu, 2010);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.get("nvidia.com/gpu"), 1);
        // Container b has no memory request: spreading counts the 200Mi default for it.
        assert_eq!(p.spec.non_zero_memory, 1 << 30);
    }

    #[test]
    fn sidecars_run_beside_app_containers() {
        let p = pod(r#"
metadata: {name: p}
spec:
  initContainers:
  - {name: side, restartPolicy: Always, resources: {requests: {cpu: 300m}}}
  - {name: init, resources: {requests: {cpu: 500m}}}
  containers:
  - {name: a, resources: {requests: {cpu: 100m}}}
"#)
        .unwrap();
        // max(100 + 300, 300 + 500) = 800
        assert_eq!(p.spec.requests.milli_cpu, 800);
    }

    #[test]
    fn labels_and_node_selectors_are_validated_as_the_api_server_does() {
        let check = |yaml: &str| {
            let p: core::Pod = crate::yaml::from_str(yaml).expect("yaml");
            validate_pod(&p).map_err(|e| e.field)
        };
        assert_eq!(
            check("metadata: {labels: {app: web, example.com/tier: ''}}"),
            Ok(())
        );
        assert_eq!(
            check("metadata: {labels: {'bad key!': v}}"),
            Err("metadata.labels".into())
        );
        assert_eq!(
            check("metadata: {labels: {k: 'not ok'}}"),
            Err("metadata.labels".into())
        );
        assert_eq!(
            check(&format!("metadata: {{labels: {{k: {}}}}}", "a".repeat(64))),
            Err("metadata.labels".into())
        );
        assert_eq!(
            check("spec: {containers: [], nodeSelector: {'UPPER.example.com/x': v}}"),
            Err("spec.nodeSelector".into())
        );
        // As the API server: duplicate container names, duplicate host ports.
        assert_eq!(
            check("spec: {initContainers: [{name: c}], containers: [{name: c}]}"),
            Err("spec.containers[0].name".into())
        );
        assert_eq!(
            check("spec: {containers: [{name: a, ports: [{containerPort: 80, hostPort: 8080}]}, {name: b, ports: [{containerPort: 81, hostPort: 8080, protocol: TCP}]}]}"),
            Err("spec.containers[1].ports[0].hostPort".into())
        );
        assert_eq!(
            check("spec: {containers: [{name: a, ports: [{containerPort: 80, hostPort: 8080}, {containerPort: 80, hostPort: 8080, protocol: UDP}]}]}"),
            Ok(())
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let e = pod("metadata: {name: p}\nspec:\n  containers:\n  - name: a\n    resources: {requests: {cpu: 1x}}\n").unwrap_err();
        assert_eq!(e.field, "spec.containers[0].resources.requests.cpu");
        let e =
            pod("metadata: {name: p}\nspec: {priorityClassName: nope, containers: [{name: a}]}")
                .unwrap_err();
        assert_eq!(e.field, "spec.priorityClassName");
        let e = pod("metadata: {name: p}\nspec: {containers: [{name: a}], tolerations: [{key: k, operator: Maybe}]}").unwrap_err();
        assert_eq!(e.field, "spec.tolerations[0].operator");
    }

    #[test]
    fn defaults_and_system_priorities() {
        let p = pod("metadata: {name: p}\nspec: {priorityClassName: system-node-critical, containers: [{name: a, image: nginx}]}").unwrap();
        assert_eq!(p.priority(), 2_000_001_000);
        assert_eq!(&*p.spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(&*p.namespace, "default");
        assert_eq!(&*p.spec.images[0], "nginx:latest");
        assert_eq!(p.spec.non_zero_milli_cpu, DEFAULT_MILLI_CPU_REQUEST);
    }

    #[test]
    fn node_allocatable_taints_images() {
        let n: core::Node = crate::yaml::from_str(
            r#"
metadata: {name: n1, labels: {zone: a}}
spec: {taints: [{key: dedicated, value: gpu, effect: NoSchedule}]}
status:
  allocatable: {cpu: "4", memory: 32Gi, pods: "110", hugepages-2Mi: 1Gi}
  images: [{names: ["nginx:latest", "nginx:1.2"], sizeBytes: 1000}]
"#,
        )
        .unwrap();
        let n = node_from_k8s(&n, || "u".into()).unwrap();
        assert_eq!(n.allocatable.milli_cpu, 4000);
        assert_eq!(n.allocatable.allowed_pod_number, 110);
        assert_eq!(n.allocatable.get("hugepages-2Mi"), 1 << 30);
        assert_eq!(n.taints[0].to_string(), "{dedicated: gpu}");
        assert_eq!(n.image_size("nginx:latest"), Some(1000));
        assert_eq!(n.image_size("nginx:1.2"), Some(1000));
    }
}
