//! The one place where Kubernetes API objects (`k8s-openapi` types, as both cluster
//! backends receive them) become the scheduler's compact model. Everything is
//! validated here; a bad field is an error naming the field, never a panic.

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

fn err(field: impl fmt::Display, message: impl fmt::Display) -> FieldError {
    FieldError {
        field: field.to_string(),
        message: message.to_string(),
    }
}

type Result<T, E = FieldError> = std::result::Result<T, E>;

/// What pod conversion needs from the rest of the cluster: priority classes (pods
/// created through the API server already carry a resolved `spec.priority`; manifests
/// loaded into the embedded cluster may not).
pub trait PriorityResolver {
    fn priority_class(&self, name: &str) -> Option<PriorityClass>;
    fn global_default(&self) -> Option<PriorityClass>;
}

/// A resolver that knows only the two system classes.
pub struct SystemPriorities;

impl PriorityResolver for SystemPriorities {
    fn priority_class(&self, name: &str) -> Option<PriorityClass> {
        system_priority_class(name)
    }
    fn global_default(&self) -> Option<PriorityClass> {
        None
    }
}

/// The built-in `system-cluster-critical` and `system-node-critical` classes.
pub fn system_priority_class(name: &str) -> Option<PriorityClass> {
    let value = match name {
        "system-cluster-critical" => 2_000_000_000,
        "system-node-critical" => 2_000_001_000,
        _ => return None,
    };
    Some(PriorityClass {
        name: name.into(),
        value,
        global_default: false,
        preemption_policy: None,
    })
}

fn parse_time(t: &meta::Time) -> i64 {
    t.0.as_microsecond()
}

fn labels_of(map: &Option<BTreeMap<String, String>>) -> Labels {
    match map {
        Some(m) => Labels::new(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        None => Labels::default(),
    }
}

/// Checks a pod's node affinity terms as strictly as the scheduler reads them
/// (upstream `nodeaffinity.NewNodeSelector` / `NewPreferredSchedulingTerms`). The API
/// server lets through values no label selector can hold; upstream then fails every
/// attempt at PreScore (preferred terms) or matches no node (required terms), retrying
/// forever. A manifest has no API server in front of it, so the embedded cluster
/// refuses such a pod at load time, naming the field.
/// API-server validation of a label map (`ValidateLabels`): qualified-name keys and
/// valid label values, refused with upstream's words.
pub fn validate_labels(
    labels: Option<&std::collections::BTreeMap<String, String>>,
    field: &str,
) -> Result<()> {
    const NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    for (k, v) in labels.into_iter().flatten() {
        if !crate::model::labels::is_qualified_name(k) {
            return Err(err(
                field,
                format!("Invalid value: {k:?}: {NAME}; a prefix, if any, must be a DNS subdomain of at most 253 characters and the name part at most 63"),
            ));
        }
        if !crate::model::labels::is_valid_label_value(v) {
            return Err(err(
                field,
                format!("Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'), at most 63 characters"),
            ));
        }
    }
    Ok(())
}

/// What the API server validates of a pod before the scheduler could see it, beyond
/// what parsing checks: labels, `spec.nodeSelector`, node affinity terms.
pub fn validate_pod(pod: &core::Pod) -> Result<()> {
    validate_labels(pod.metadata.labels.as_ref(), "metadata.labels")?;
    if let Some(spec) = &pod.spec {
        // Container names are unique across init and regular containers.
        let mut names = std::collections::HashSet::new();
        let init = spec.init_containers.iter().flatten().enumerate();
        for (list, (i, c)) in init.map(|x| ("initContainers", x)).chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|x| ("containers", x)),
        ) {
            if !names.insert(c.name.as_str()) {
                return Err(err(
                    format!("spec.{list}[{i}].name"),
                    format!("Duplicate value: {:?}", c.name),
                ));
            }
        }
        // Upstream checkHostPortConflicts: one host port per protocol and host IP
        // among the regular containers (the protocol defaults to TCP first).
        let mut ports = std::collections::HashSet::new();
        for (i, c) in spec.containers.iter().enumerate() {
            for (j, p) in c.ports.iter().flatten().enumerate() {
                let Some(hp) = p.host_port.filter(|h| *h != 0) else {
                    continue;
                };
                let key = format!(
                    "{}/{}/{hp}",
                    p.protocol.as_deref().unwrap_or("TCP"),
                    p.host_ip.as_deref().unwrap_or("")
                );
                if !ports.insert(key.clone()) {
                    return Err(err(
                        format!("spec.containers[{i}].ports[{j}].hostPort"),
                        format!("Duplicate value: {key:?}"),
                    ));
                }
            }
        }
    }
    validate_labels(
        pod.spec.as_ref().and_then(|s| s.node_selector.as_ref()),
        "spec.nodeSelector",
    )?;
    validate_node_affinity(pod)
}

pub fn validate_node_affinity(pod: &core::Pod) -> Result<()> {
    let Some(na) = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return Ok(());
    };
    let base = "spec.affinity.nodeAffinity";
    let term = |t: &core::NodeSelectorTerm, field: &str| -> Result<()> {
        for (i, e) in t.match_expressions.iter().flatten().enumerate() {
            let f = format!("{field}.matchExpressions[{i}]");
            let op = Operator::parse(&e.operator).ok_or_else(|| {
                err(
                    format!("{f}.operator"),
                    format!(
                        "Unsupported value: {:?}: supported values: \"DoesNotExist\", \"Exists\", \"Gt\", \"In\", \"Lt\", \"NotIn\"",
                        e.operator
                    ),
                )
            })?;
            Requirement::new(&e.key, op, e.values.clone().unwrap_or_default())
                .map_err(|m| err(&f, m))?;
        }
        for (i, m) in t.match_fields.iter().flatten().enumerate() {
            let f = format!("{field}.matchFields[{i}]");
            if m.key != NODE_FIELD_NAME {
                return Err(err(
                    format!("{f}.key"),
                    format!(
                        "Unsupported value: {:?}: supported values: \"metadata.name\"",
                        m.key
                    ),
                ));
            }
            let n = m.values.as_deref().map_or(0, <[String]>::len);
            if !matches!(m.operator.as_str(), "In" | "NotIn") || n != 1 {
                return Err(err(
                    format!("{f}.values"),
                    "must have one element for operator In or NotIn on metadata.name",
                ));
            }
        }
        Ok(())
    };
    if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
        let f = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution");
        if req.node_selector_terms.is_empty() {
            return Err(err(
                format!("{f}.nodeSelectorTerms"),
                "Required value: must have at least one node selector term",
            ));
        }
        for (i, t) in req.node_selector_terms.iter().enumerate() {
            term(t, &format!("{f}.nodeSelectorTerms[{i}]"))?;
        }
    }
    for (i, p) in na
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        term(
            &p.preference,
            &format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
        )?;
    }
    Ok(())
}

/// Converts a Pod. `generated_uid` is used when the object has no UID (manifests).
pub fn pod_from_k8s(
    pod: &core::Pod,
    resolver: &dyn PriorityResolver,
    generated_uid: impl FnOnce() -> String,
) -> Result<Pod> {
    let meta = &pod.metadata;
    let name = meta
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("metadata.name", "required: every Pod needs a name"))?;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let uid = meta.uid.clone().unwrap_or_else(generated_uid);
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| err("spec", "required: a Pod needs a spec with containers"))?;
    if spec.containers.is_empty() {
        return Err(err("spec.containers", "required: at least one container"));
    }
    let labels = labels_of(&meta.labels);
    let status = pod.status.as_ref();

    let (priority, preemption_policy, class_name) = resolve_priority(spec, resolver)?;
    let (requests, non_zero_milli_cpu, non_zero_memory) = pod_requests(spec)?;

    // Host ports of sidecar (restartable) init containers, then of app containers, as
    // upstream `GetHostPorts` collects them.
    let mut host_ports = Vec::new();
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| c.restart_policy.as_deref() == Some("Always"))
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
    let apps = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.containers[{i}]"), c));
    for (cfield, c) in sidecars.chain(apps) {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let field = format!("{cfield}.ports[{pi}]");
            let Some(port) = p.host_port.filter(|p| *p > 0) else {
                continue;
            };
            let protocol = match p.protocol.as_deref() {
                None | Some("") => Protocol::Tcp,
                Some(s) => Protocol::parse(s).ok_or_else(|| {
                    err(
                        format!("{field}.protocol"),
                        format!("unsupported value {s:?}: must be TCP, UDP or SCTP"),
                    )
                })?,
            };
            let ip = match p.host_ip.as_deref() {
                None | Some("") => "0.0.0.0",
                Some(ip) => ip,
            };
            host_ports.push(HostPort {
                ip: ip.into(),
                protocol,
                port,
            });
        }
    }

    // Images of init and app containers (duplicates kept: ImageLocality counts each
    // container) and of image volumes.
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    let mut images: Vec<Box<str>> = Vec::new();
    let mut image_slots = 0usize;
    for c in containers {
        image_slots += 1;
        if let Some(i) = c.image.as_deref().filter(|i| !i.is_empty()) {
            images.push(normalized_image_name(i).into());
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(r) = v.image.as_ref().and_then(|i| i.reference.as_deref()) {
            image_slots += 1;
            images.push(normalized_image_name(r).into());
        }
    }

    let node_selector = spec
        .node_selector
        .as_ref()
        .filter(|m| !m.is_empty())
        .map(|m| Labels::new(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))));

    let mut required_node_affinity = None;
    let mut preferred_node_affinity = Vec::new();
    let mut required_affinity_terms = Vec::new();
    let mut required_anti_affinity_terms = Vec::new();
    let mut preferred_affinity_terms = Vec::new();
    let mut preferred_anti_affinity_terms = Vec::new();
    if let Some(aff) = &spec.affinity {
        if let Some(na) = &aff.node_affinity {
            if let Some(req) = &na.required_during_scheduling_ignored_during_execution {
                required_node_affinity = Some(node_selector_from_k8s(
                    req,
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
                ));
            }
            for (i, p) in na
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let field = format!(
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
                );
                if !(1..=100).contains(&p.weight) {
                    return Err(err(
                        format!("{field}.weight"),
                        format!("{} must be in the range 1-100", p.weight),
                    ));
                }
                preferred_node_affinity.push(PreferredSchedulingTerm {
                    weight: p.weight,
                    term: node_selector_term_from_k8s(&p.preference),
                });
            }
        }
        let own_ns: Arc<str> = namespace.into();
        if let Some(pa) = &aff.pod_affinity {
            let base = "spec.affinity.podAffinity";
            for (i, t) in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
                required_affinity_terms.push(affinity_term(t, &own_ns, &labels, &f)?);
            }
            for (i, w) in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                preferred_affinity_terms.push(weighted_term(w, &own_ns, &labels, &f)?);
            }
        }
        if let Some(pa) = &aff.pod_anti_affinity {
            let base = "spec.affinity.podAntiAffinity";
            for (i, t) in pa
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]");
                required_anti_affinity_terms.push(affinity_term(t, &own_ns, &labels, &f)?);
            }
            for (i, w) in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                preferred_anti_affinity_terms.push(weighted_term(w, &own_ns, &labels, &f)?);
            }
        }
    }

    let mut tolerations = Vec::new();
    for (i, t) in spec.tolerations.iter().flatten().enumerate() {
        tolerations.push(toleration_from_k8s(t, &format!("spec.tolerations[{i}]"))?);
    }

    let mut topology_spread_constraints = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let f = format!("spec.topologySpreadConstraints[{i}]");
        topology_spread_constraints.push(spread_constraint(c, &labels, &f)?);
    }

    let scheduling_gates = spec
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.clone().into_boxed_str())
        .collect();

    let owner_references = meta
        .owner_references
        .iter()
        .flatten()
        .map(|o| OwnerReference {
            api_version: o.api_version.clone().into(),
            kind: o.kind.clone().into(),
            name: o.name.clone().into(),
            uid: o.uid.clone().into(),
            controller: o.controller.unwrap_or(false),
        })
        .collect();

    let phase = match status.and_then(|s| s.phase.as_deref()) {
        None | Some("") => PodPhase::Pending,
        Some(p) => PodPhase::parse(p)
            .ok_or_else(|| err("status.phase", format!("unsupported value {p:?}")))?,
    };

    let spec_model = PodSpec {
        labels,
        annotations: labels_of(&meta.annotations),
        scheduler_name: spec
            .scheduler_name
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(DEFAULT_SCHEDULER_NAME)
            .into(),
        priority,
        priority_class_name: class_name,
        preemption_policy,
        creation_timestamp: meta.creation_timestamp.as_ref().map(parse_time),
        start_time: status.and_then(|s| s.start_time.as_ref()).map(parse_time),
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        requests,
        non_zero_milli_cpu,
        non_zero_memory,
        host_ports: host_ports.into(),
        images: images.into(),
        image_slots,
        node_selector,
        required_node_affinity,
        preferred_node_affinity: preferred_node_affinity.into(),
        tolerations: tolerations.into(),
        scheduling_gates,
        required_affinity_terms: required_affinity_terms.into(),
        required_anti_affinity_terms: required_anti_affinity_terms.into(),
        preferred_affinity_terms: preferred_affinity_terms.into(),
        preferred_anti_affinity_terms: preferred_anti_affinity_terms.into(),
        topology_spread_constraints: topology_spread_constraints.into(),
        owner_references,
        volumes: pod_volumes(name, spec)?,
    };
    Ok(Pod {
        uid: uid.into(),
        namespace: namespace.into(),
        name: name.into(),
        node_name: spec
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(Into::into),
        nominated_node_name: status
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
            .map(Into::into),
        deletion_timestamp: meta.deletion_timestamp.as_ref().map(parse_time),
        resource_version: meta.resource_version.as_deref().map(Into::into),
        phase,
        preempted_by_scheduler: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
            .is_some_and(|c| {
                c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
            }),
        spec: Arc::new(spec_model),
    })
}

fn resolve_priority(
    spec: &core::PodSpec,
    resolver: &dyn PriorityResolver,
) -> Result<(i32, PreemptionPolicy, Option<Arc<str>>)> {
    let class_name = spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty());
    let class = match class_name {
        Some(n) => Some(
            resolver
                .priority_class(n)
                .or_else(|| system_priority_class(n))
                .ok_or_else(|| {
                    err(
                        "spec.priorityClassName",
                        format!("no PriorityClass with name {n} was found: add a PriorityClass manifest or fix the name"),
                    )
                })?,
        ),
        None => resolver.global_default(),
    };
    let priority = spec
        .priority
        .or_else(|| class.as_ref().map(|c| c.value))
        .unwrap_or(0);
    let policy = match spec.preemption_policy.as_deref() {
        Some("Never") => PreemptionPolicy::Never,
        Some("PreemptLowerPriority") => PreemptionPolicy::PreemptLowerPriority,
        Some(other) => {
            return Err(err(
                "spec.preemptionPolicy",
                format!("unsupported value {other:?}: must be PreemptLowerPriority or Never"),
            ))
        }
        None => class
            .as_ref()
            .and_then(|c| c.preemption_policy)
            .unwrap_or_default(),
    };
    Ok((priority, policy, class_name.map(Into::into)))
}

/// Parses a resource list into a `Resource`, failing on malformed quantities.
/// Non-scalar names the scheduler does not account (for example `foo`) are ignored as
/// upstream ignores them.
pub fn resource_list(list: &BTreeMap<String, K8sQuantity>, field: &str) -> Result<Resource> {
    let mut r = Resource::default();
    for (name, q) in list {
        let f = format!("{field}.{name}");
        let parsed = Quantity::parse(&q.0)
            .map_err(|e| err(&f, format!("invalid quantity {:?}: {e}", q.0)))?;
        if parsed.is_negative() {
            return Err(err(
                &f,
                format!("must be greater than or equal to 0, got {:?}", q.0),
            ));
        }
        match name.as_str() {
            CPU => r.milli_cpu = parsed.milli_value(),
            MEMORY => r.memory = parsed.value(),
            EPHEMERAL_STORAGE => r.ephemeral_storage = parsed.value(),
            PODS => r.allowed_pod_number = parsed.value(),
            n if is_scalar_resource_name(n) => {
                let rn: ResourceName = Arc::from(n);
                r.scalar.set(&rn, parsed.value());
            }
            _ => {}
        }
    }
    Ok(r)
}

/// A container's effective requests: `requests`, with any resource that has only a
/// limit defaulted to the limit (what the API server's defaulting does).
fn container_requests(c: &core::Container, field: &str) -> Result<(Resource, bool, bool)> {
    let Some(res) = &c.resources else {
        return Ok((Resource::default(), false, false));
    };
    let mut merged: BTreeMap<String, K8sQuantity> = res.requests.clone().unwrap_or_default();
    for (k, v) in res.limits.iter().flatten() {
        merged.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let has_cpu = merged.contains_key(CPU);
    let has_mem = merged.contains_key(MEMORY);
    Ok((
        resource_list(&merged, &format!("{field}.resources.requests"))?,
        has_cpu,
        has_mem,
    ))
}

/// Upstream `resourcehelper.PodRequests`: containers summed; init containers max'd,
/// each regular init container on top of the sidecars started before it; sidecars
/// (restartable init containers) also run beside the app containers; pod-level
/// requests replace the aggregate for the resources they name; overhead added.
/// Returns the requests and the non-zero CPU and memory used for spreading, where
/// containers without a CPU or memory request count the upstream defaults.
fn pod_requests(spec: &core::PodSpec) -> Result<(Resource, i64, i64)> {
    let mut reqs = Resource::default();
    let mut nz = (0i64, 0i64);
    for (i, c) in spec.containers.iter().enumerate() {
        let (r, has_cpu, has_mem) = container_requests(c, &format!("spec.containers[{i}]"))?;
        nz.0 =
            nz.0.saturating_add(non_zero(r.milli_cpu, has_cpu, DEFAULT_MILLI_CPU_REQUEST));
        nz.1 =
            nz.1.saturating_add(non_zero(r.memory, has_mem, DEFAULT_MEMORY_REQUEST));
        reqs.add(&r);
    }
    let mut sidecars = Resource::default();
    let mut sidecars_nz = (0i64, 0i64);
    let mut init_max = Resource::default();
    let mut init_max_nz = (0i64, 0i64);
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let (r, has_cpu, has_mem) = container_requests(c, &format!("spec.initContainers[{i}]"))?;
        let rnz = (
            non_zero(r.milli_cpu, has_cpu, DEFAULT_MILLI_CPU_REQUEST),
            non_zero(r.memory, has_mem, DEFAULT_MEMORY_REQUEST),
        );
        let (effective, effective_nz) = if c.restart_policy.as_deref() == Some("Always") {
            reqs.add(&r);
            nz.0 = nz.0.saturating_add(rnz.0);
            nz.1 = nz.1.saturating_add(rnz.1);
            sidecars.add(&r);
            sidecars_nz.0 = sidecars_nz.0.saturating_add(rnz.0);
            sidecars_nz.1 = sidecars_nz.1.saturating_add(rnz.1);
            (sidecars.clone(), sidecars_nz)
        } else {
            let mut t = r.clone();
            t.add(&sidecars);
            (
                t,
                (
                    rnz.0.saturating_add(sidecars_nz.0),
                    rnz.1.saturating_add(sidecars_nz.1),
                ),
            )
        };
        init_max.set_max(&effective);
        init_max_nz.0 = init_max_nz.0.max(effective_nz.0);
        init_max_nz.1 = init_max_nz.1.max(effective_nz.1);
    }
    reqs.set_max(&init_max);
    nz.0 = nz.0.max(init_max_nz.0);
    nz.1 = nz.1.max(init_max_nz.1);

    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let r = resource_list(pod_level, "spec.resources.requests")?;
        if pod_level.contains_key(CPU) {
            reqs.milli_cpu = r.milli_cpu;
            nz.0 = r.milli_cpu;
        }
        if pod_level.contains_key(MEMORY) {
            reqs.memory = r.memory;
            nz.1 = r.memory;
        }
        for (n, v) in r.scalar.iter() {
            if n.starts_with(super::resource::HUGEPAGES_PREFIX) {
                reqs.scalar.set(n, v);
            }
        }
    }
    if let Some(overhead) = &spec.overhead {
        let o = resource_list(overhead, "spec.overhead")?;
        nz.0 = nz.0.saturating_add(o.milli_cpu);
        nz.1 = nz.1.saturating_add(o.memory);
        reqs.add(&o);
    }
    Ok((reqs, nz.0, nz.1))
}

fn non_zero(value: i64, present: bool, default: i64) -> i64 {
    if present {
        value
    } else {
        default
    }
}

/// Compiles a `metav1.LabelSelector`; `None` (a nil selector) matches nothing.
pub fn label_selector(sel: Option<&meta::LabelSelector>, field: &str) -> Result<LabelSelector> {
    let Some(sel) = sel else {
        return Ok(LabelSelector::Nothing);
    };
    Ok(LabelSelector::Requirements(
        selector_requirements(sel, field)?.into(),
    ))
}

fn selector_requirements(sel: &meta::LabelSelector, field: &str) -> Result<Vec<Requirement>> {
    let mut reqs = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        reqs.push(
            Requirement::new(k, Operator::In, vec![v.clone()])
                .map_err(|m| err(format!("{field}.matchLabels.{k}"), m))?,
        );
    }
    for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
        let f = format!("{field}.matchExpressions[{i}]");
        let op = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err(err(
                    format!("{f}.operator"),
                    format!("{other:?} is not a valid label selector operator: use In, NotIn, Exists or DoesNotExist"),
                ))
            }
        };
        reqs.push(
            Requirement::new(&e.key, op, e.values.clone().unwrap_or_default())
                .map_err(|m| err(&f, m))?,
        );
    }
    Ok(reqs)
}

/// Converts a required node selector. Invalid terms are kept but never match, as
/// upstream's lazy-error node selector treats them.
pub fn node_selector_from_k8s(sel: &core::NodeSelector, _field: &str) -> NodeSelector {
    NodeSelector {
        terms: sel
            .node_selector_terms
            .iter()
            .map(node_selector_term_from_k8s)
            .collect(),
    }
}

pub fn node_selector_term_from_k8s(t: &core::NodeSelectorTerm) -> NodeSelectorTerm {
    let mut valid = true;
    let mut exprs = Vec::new();
    for e in t.match_expressions.iter().flatten() {
        match Operator::parse(&e.operator).ok_or(()).and_then(|op| {
            Requirement::new(&e.key, op, e.values.clone().unwrap_or_default()).map_err(|_| ())
        }) {
            Ok(r) => exprs.push(r),
            Err(()) => valid = false,
        }
    }
    let mut fields = Vec::new();
    let mut name_pins: Option<Vec<Box<str>>> = None;
    for f in t.match_fields.iter().flatten() {
        let values = f.values.as_deref().unwrap_or_default();
        let op = Operator::parse(&f.operator);
        if f.key == NODE_FIELD_NAME && op == Some(Operator::In) {
            let set: Vec<Box<str>> = values.iter().map(|v| v.as_str().into()).collect();
            name_pins = Some(match name_pins {
                None => set,
                Some(prev) => prev.into_iter().filter(|n| set.contains(n)).collect(),
            });
        }
        match op {
            Some(op @ (Operator::In | Operator::NotIn)) if values.len() == 1 => {
                fields.push(Requirement::field(&f.key, op, &values[0]));
            }
            _ => valid = false,
        }
    }
    NodeSelectorTerm {
        match_expressions: exprs.into(),
        match_fields: fields.into(),
        name_pins: name_pins.map(|mut v| {
            v.sort();
            v.dedup();
            v.into()
        }),
        valid,
    }
}

fn affinity_term(
    t: &core::PodAffinityTerm,
    own_ns: &Arc<str>,
    pod_labels: &Labels,
    field: &str,
) -> Result<AffinityTerm> {
    if t.topology_key.is_empty() {
        return Err(err(
            format!("{field}.topologyKey"),
            "required: can not be empty",
        ));
    }
    let mut selector =
        label_selector(t.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
    // The API server merges matchLabelKeys / mismatchLabelKeys into the selector at pod
    // creation; do the same for manifests (idempotent for API objects).
    if let LabelSelector::Requirements(reqs) = &mut selector {
        let mut v = reqs.to_vec();
        for (keys, op) in [
            (&t.match_label_keys, Operator::In),
            (&t.mismatch_label_keys, Operator::NotIn),
        ] {
            for k in keys.iter().flatten() {
                if let Some(val) = pod_labels.get(k) {
                    let r = Requirement::new(k, op, vec![val.to_string()])
                        .map_err(|m| err(format!("{field}.matchLabelKeys"), m))?;
                    if !v.contains(&r) {
                        v.push(r);
                    }
                }
            }
        }
        *reqs = v.into();
    }
    let namespace_selector = match &t.namespace_selector {
        Some(s) => Some(label_selector(
            Some(s),
            &format!("{field}.namespaceSelector"),
        )?),
        None => None,
    };
    let mut namespaces: Vec<Arc<str>> = t
        .namespaces
        .iter()
        .flatten()
        .map(|n| Arc::from(n.as_str()))
        .collect();
    if namespaces.is_empty() && namespace_selector.is_none() {
        namespaces.push(own_ns.clone());
    }
    Ok(AffinityTerm {
        namespaces: namespaces.into(),
        namespace_selector,
        selector,
        topology_key: t.topology_key.clone().into(),
    })
}

fn weighted_term(
    w: &core::WeightedPodAffinityTerm,
    own_ns: &Arc<str>,
    pod_labels: &Labels,
    field: &str,
) -> Result<WeightedAffinityTerm> {
    if !(1..=100).contains(&w.weight) {
        return Err(err(
            format!("{field}.weight"),
            format!("{} must be in the range 1-100", w.weight),
        ));
    }
    Ok(WeightedAffinityTerm {
        weight: w.weight,
        term: affinity_term(
            &w.pod_affinity_term,
            own_ns,
            pod_labels,
            &format!("{field}.podAffinityTerm"),
        )?,
    })
}

fn spread_constraint(
    c: &core::TopologySpreadConstraint,
    pod_labels: &Labels,
    field: &str,
) -> Result<TopologySpreadConstraint> {
    if c.max_skew <= 0 {
        return Err(err(
            format!("{field}.maxSkew"),
            format!("{} must be greater than zero", c.max_skew),
        ));
    }
    if c.topology_key.is_empty() {
        return Err(err(
            format!("{field}.topologyKey"),
            "required: can not be empty",
        ));
    }
    let when_unsatisfiable = match c.when_unsatisfiable.as_str() {
        "DoNotSchedule" => UnsatisfiableConstraintAction::DoNotSchedule,
        "ScheduleAnyway" => UnsatisfiableConstraintAction::ScheduleAnyway,
        other => {
            return Err(err(
                format!("{field}.whenUnsatisfiable"),
                format!("unsupported value {other:?}: must be DoNotSchedule or ScheduleAnyway"),
            ))
        }
    };
    if let Some(m) = c.min_domains {
        if m <= 0 {
            return Err(err(
                format!("{field}.minDomains"),
                format!("{m} must be greater than zero"),
            ));
        }
        if when_unsatisfiable != UnsatisfiableConstraintAction::DoNotSchedule {
            return Err(err(
                format!("{field}.minDomains"),
                "can only use minDomains if whenUnsatisfiable=DoNotSchedule",
            ));
        }
    }
    let policy = |v: &Option<String>, f: &str, default| -> Result<NodeInclusionPolicy> {
        match v.as_deref() {
            None => Ok(default),
            Some("Honor") => Ok(NodeInclusionPolicy::Honor),
            Some("Ignore") => Ok(NodeInclusionPolicy::Ignore),
            Some(o) => Err(err(
                format!("{field}.{f}"),
                format!("unsupported value {o:?}: must be Honor or Ignore"),
            )),
        }
    };
    let mut selector =
        label_selector(c.label_selector.as_ref(), &format!("{field}.labelSelector"))?;
    if let LabelSelector::Requirements(reqs) = &mut selector {
        let mut v = reqs.to_vec();
        for k in c.match_label_keys.iter().flatten() {
            if let Some(val) = pod_labels.get(k) {
                let r = Requirement::new(k, Operator::In, vec![val.to_string()])
                    .map_err(|m| err(format!("{field}.matchLabelKeys"), m))?;
                if !v.contains(&r) {
                    v.push(r);
                }
            }
        }
        *reqs = v.into();
    }
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone().into(),
        when_unsatisfiable,
        selector,
        min_domains: c.min_domains,
        node_affinity_policy: policy(
            &c.node_affinity_policy,
            "nodeAffinityPolicy",
            NodeInclusionPolicy::Honor,
        )?,
        node_taints_policy: policy(
            &c.node_taints_policy,
            "nodeTaintsPolicy",
            NodeInclusionPolicy::Ignore,
        )?,
    })
}

fn toleration_from_k8s(t: &core::Toleration, field: &str) -> Result<Toleration> {
    let key = t.key.clone().unwrap_or_default();
    let operator = match t.operator.as_deref() {
        None | Some("") | Some("Equal") => TolerationOperator::Equal,
        Some("Exists") => TolerationOperator::Exists,
        Some(o) => {
            return Err(err(
                format!("{field}.operator"),
                format!("unsupported value {o:?}: must be Equal or Exists"),
            ))
        }
    };
    let value = t.value.clone().unwrap_or_default();
    if operator == TolerationOperator::Exists && !value.is_empty() {
        return Err(err(
            format!("{field}.value"),
            "must be empty when `operator` is 'Exists'",
        ));
    }
    if key.is_empty() && operator != TolerationOperator::Exists {
        return Err(err(
            format!("{field}.operator"),
            "must be 'Exists' when `key` is empty, which means \"match all values and all keys\"",
        ));
    }
    let effect = match t.effect.as_deref() {
        None | Some("") => None,
        Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
            err(
                format!("{field}.effect"),
                format!(
                    "unsupported value {e:?}: must be NoSchedule, PreferNoSchedule or NoExecute"
                ),
            )
        })?),
    };
    Ok(Toleration {
        key: key.into(),
        operator,
        value: value.into(),
        effect,
        toleration_seconds: t.toleration_seconds,
    })
}

/// Converts a Node. Allocatable falls back to capacity when absent, as the kubelet
/// reports it.
pub fn node_from_k8s(node: &core::Node, generated_uid: impl FnOnce() -> String) -> Result<Node> {
    let name = node
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("metadata.name", "required: every Node needs a name"))?;
    let status = node.status.as_ref();
    let allocatable = match status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref())) {
        Some(list) => resource_list(
            list,
            if status.and_then(|s| s.allocatable.as_ref()).is_some() {
                "status.allocatable"
            } else {
                "status.capacity"
            },
        )?,
        None => Resource::default(),
    };
    let mut taints = Vec::new();
    let spec = node.spec.as_ref();
    for (i, t) in spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            err(
                format!("spec.taints[{i}].effect"),
                format!(
                    "unsupported value {:?}: must be NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        if t.key.is_empty() {
            return Err(err(
                format!("spec.taints[{i}].key"),
                "required: taint key can not be empty",
            ));
        }
        taints.push(Taint {
            key: t.key.clone().into(),
            value: t.value.clone().unwrap_or_default().into(),
            effect,
        });
    }
    let mut images: Vec<NodeImage> = Vec::new();
    for img in status.and_then(|s| s.images.as_ref()).into_iter().flatten() {
        let size = img.size_bytes.unwrap_or(0);
        for n in img.names.iter().flatten() {
            images.push(NodeImage {
                name: n.as_str().into(),
                size,
            });
        }
    }
    images.sort_by(|a, b| a.name.cmp(&b.name));
    images.dedup_by(|a, b| a.name == b.name);
    Ok(Node {
        name: name.into(),
        uid: node
            .metadata
            .uid
            .clone()
            .unwrap_or_else(generated_uid)
            .into(),
        labels: labels_of(&node.metadata.labels),
        allocatable,
        taints: taints.into(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        images: images.into(),
    })
}

pub fn namespace_from_k8s(ns: &core::Namespace) -> Result<Namespace> {
    let name = ns
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| err("metadata.name", "required: every Namespace needs a name"))?;
    Ok(Namespace {
        name: name.into(),
        labels: labels_of(&ns.metadata.labels),
    })
}

pub fn priority_class_from_k8s(pc: &scheduling::PriorityClass) -> Result<PriorityClass> {
    let name = pc
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                "required: every PriorityClass needs a name",
            )
        })?;
    let preemption_policy = match pc.preemption_policy.as_deref() {
        None => None,
        Some("Never") => Some(PreemptionPolicy::Never),
        Some("PreemptLowerPriority") => Some(PreemptionPolicy::PreemptLowerPriority),
        Some(o) => {
            return Err(err(
                "preemptionPolicy",
                format!("unsupported value {o:?}: must be PreemptLowerPriority or Never"),
            ))
        }
    };
    Ok(PriorityClass {
        name: name.into(),
        value: pc.value.unwrap_or(0),
        global_default: pc.global_default.unwrap_or(false),
        preemption_policy,
    })
}

fn int_or_percent(v: &IntOrString, field: &str) -> Result<IntOrPercent> {
    match v {
        IntOrString::Int(i) => Ok(IntOrPercent::Int(*i)),
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i32>().ok())
            .map(IntOrPercent::Percent)
            .ok_or_else(|| {
                err(
                    field,
                    format!("{s:?} is neither an integer nor a percentage like \"50%\""),
                )
            }),
    }
}

pub fn pdb_from_k8s(pdb: &policy::PodDisruptionBudget) -> Result<PodDisruptionBudget> {
    let name = pdb
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            err(
                "metadata.name",
                "required: every PodDisruptionBudget needs a name",
            )
        })?;
    let spec = pdb.spec.as_ref();
    let min_available = spec
        .and_then(|s| s.min_available.as_ref())
        .map(|v| int_or_percent(v, "spec.minAvailable"))
        .transpose()?;
    let max_unavailable = spec
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| int_or_percent(v, "spec.maxUnavailable"))
        .transpose()?;
    if min_available.is_some() && max_unavailable.is_some() {
        return Err(err(
            "spec",
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    // A PDB's nil selector selects no pods; an empty one selects all in its namespace.
    let selector = match spec.and_then(|s| s.selector.as_ref()) {
        Some(s) => label_selector(Some(s), "spec.selector")?,
        None => LabelSelector::Nothing,
    };
    Ok(PodDisruptionBudget {
        namespace: pdb
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .into(),
        name: name.into(),
        selector,
        min_available,
        max_unavailable,
        disruptions_allowed: pdb.status.as_ref().and_then(|s| s.disruptions_allowed),
        status_given: pdb
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .is_some(),
        disrupted_pods: pdb
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|m| m.keys().map(|k| k.as_str().into()).collect())
            .unwrap_or_default(),
    })
}

fn meta_name_ns(meta: &meta::ObjectMeta, kind: &str) -> Result<(Arc<str>, Arc<str>)> {
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

/// A Service's selector, for default topology spreading.
pub fn service_selector(svc: &core::Service) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&svc.metadata, "Service")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::Service,
        namespace,
        name,
        match_labels: svc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|m| labels_of(&Some(m.clone()))),
        selector: LabelSelector::Nothing,
    })
}

pub fn replication_controller_selector(
    rc: &core::ReplicationController,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&rc.metadata, "ReplicationController")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::ReplicationController,
        namespace,
        name,
        match_labels: rc
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(|m| labels_of(&Some(m.clone()))),
        selector: LabelSelector::Nothing,
    })
}

pub fn replica_set_selector(
    rs: &k8s_openapi::api::apps::v1::ReplicaSet,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&rs.metadata, "ReplicaSet")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::ReplicaSet,
        namespace,
        name,
        match_labels: None,
        selector: label_selector(Some(&rs.spec.selector), "spec.selector")?,
    })
}

pub fn stateful_set_selector(
    ss: &k8s_openapi::api::apps::v1::StatefulSet,
) -> Result<WorkloadSelector> {
    let (name, namespace) = meta_name_ns(&ss.metadata, "StatefulSet")?;
    Ok(WorkloadSelector {
        kind: WorkloadKind::StatefulSet,
        namespace,
        name,
        match_labels: None,
        selector: label_selector(Some(&ss.spec.selector), "spec.selector")?,
    })
}

// ---- Storage: pod volumes, claims, volumes, classes and CSI objects ----

use super::storage::{
    AccessModes, ClaimRef, CsiDriver, CsiNode, CsiNodeDriver, CsiStorageCapacity, PersistentVolume,
    PersistentVolumeClaim, PodVolume, PvPhase, PvSource, PvcPhase, StorageClass, VolumeBindingMode,
    VolumeMode, ANN_BETA_STORAGE_CLASS, ANN_DEFAULT_STORAGE_CLASS, ANN_MIGRATED_PLUGINS,
};
use k8s_openapi::api::storage::v1 as storage;

/// The volumes of a pod the volume plugins read. A generic ephemeral volume's claim is
/// named `<pod>-<volume>` (upstream `ephemeral.VolumeClaimName`).
fn pod_volumes(pod_name: &str, spec: &core::PodSpec) -> Result<Box<[PodVolume]>> {
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
fn migratable_source(
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

fn storage_bytes(q: Option<&K8sQuantity>, field: &str) -> Result<Option<i64>> {
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

fn access_modes(modes: Option<&Vec<String>>, field: &str) -> Result<AccessModes> {
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

fn volume_mode(mode: Option<&str>, field: &str) -> Result<VolumeMode> {
    match mode {
        None | Some("Filesystem") => Ok(VolumeMode::Filesystem),
        Some("Block") => Ok(VolumeMode::Block),
        Some(m) => Err(err(
            field,
            format!("Unsupported value: {m:?}: supported values: \"Block\", \"Filesystem\""),
        )),
    }
}

fn storage_name(meta: &meta::ObjectMeta, kind: &str) -> Result<Arc<str>> {
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
