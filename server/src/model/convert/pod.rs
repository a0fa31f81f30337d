//! Pods: validation as the API server does it, the compact Pod, and its requests.

use super::*;

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
    let (requests, non_zero_milli_cpu, non_zero_memory) = pod_requests(spec, status)?;

    let host_ports = host_ports(spec)?;
    let (resource_claims, resource_claim_statuses) = super::dra::pod_resource_claims(spec, status)?;
    let extended_containers = super::requests::extended_containers(spec);
    let (images, image_slots) = images(spec);

    let node_selector = spec
        .node_selector
        .as_ref()
        .filter(|m| !m.is_empty())
        .map(|m| Labels::new(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))));

    let AffinityTerms {
        required_node_affinity,
        preferred_node_affinity,
        required_affinity_terms,
        required_anti_affinity_terms,
        preferred_affinity_terms,
        preferred_anti_affinity_terms,
    } = affinity_terms(spec, namespace, &labels)?;

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
        required_features: crate::model::features::required_by_pod(spec),
        resource_claims,
        resource_claim_statuses,
        extended_containers,
        extended_resource_claim_status: status
            .and_then(|s| s.extended_resource_claim_status.as_ref())
            .map(|e| {
                Arc::new(crate::model::dra::ExtendedResourceClaimStatus {
                    claim_name: e.resource_claim_name.as_str().into(),
                    mappings: e
                        .request_mappings
                        .iter()
                        .map(|m| crate::model::dra::RequestMapping {
                            container: m.container_name.as_str().into(),
                            resource: m.resource_name.as_str().into(),
                            request: m.request_name.as_str().into(),
                        })
                        .collect(),
                })
            }),
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
        unschedulable_condition: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .filter(|c| c.status == "False")
            .map(|c| {
                Arc::new((
                    c.reason.clone().unwrap_or_default().into(),
                    c.message.clone().unwrap_or_default().into(),
                ))
            }),
        spec: Arc::new(spec_model),
    })
}

/// Host ports of sidecar (restartable) init containers, then of app containers, as
/// upstream `GetHostPorts` collects them.
fn host_ports(spec: &core::PodSpec) -> Result<Vec<HostPort>> {
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

    Ok(host_ports)
}

/// Images of init and app containers (duplicates kept: ImageLocality counts each
/// container) and of image volumes, and how many image slots the pod has.
fn images(spec: &core::PodSpec) -> (Vec<Box<str>>, usize) {
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
    (images, image_slots)
}

/// The pod's node affinity and inter-pod (anti-)affinity terms, validated.
struct AffinityTerms {
    required_node_affinity: Option<NodeSelector>,
    preferred_node_affinity: Vec<PreferredSchedulingTerm>,
    required_affinity_terms: Vec<AffinityTerm>,
    required_anti_affinity_terms: Vec<AffinityTerm>,
    preferred_affinity_terms: Vec<WeightedAffinityTerm>,
    preferred_anti_affinity_terms: Vec<WeightedAffinityTerm>,
}

fn affinity_terms(spec: &core::PodSpec, namespace: &str, labels: &Labels) -> Result<AffinityTerms> {
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
                required_affinity_terms.push(affinity_term(t, &own_ns, labels, &f)?);
            }
            for (i, w) in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                preferred_affinity_terms.push(weighted_term(w, &own_ns, labels, &f)?);
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
                required_anti_affinity_terms.push(affinity_term(t, &own_ns, labels, &f)?);
            }
            for (i, w) in pa
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .enumerate()
            {
                let f = format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
                preferred_anti_affinity_terms.push(weighted_term(w, &own_ns, labels, &f)?);
            }
        }
    }
    Ok(AffinityTerms {
        required_node_affinity,
        preferred_node_affinity,
        required_affinity_terms,
        required_anti_affinity_terms,
        preferred_affinity_terms,
        preferred_anti_affinity_terms,
    })
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
