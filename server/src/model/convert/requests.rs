//! A pod's requests as kube-scheduler v1.36 counts them (upstream
//! `k8s.io/component-helpers/resource.PodRequests` with the options the scheduler
//! passes): containers summed, init containers max'd with sidecars (restartable init
//! containers) counted beside everything started after them, pod-level requests, the
//! overhead, and in-place resize (`InPlacePodVerticalScaling`, GA in 1.35, and
//! `InPlacePodLevelResourcesVerticalScaling`, beta and on in 1.36): a pod counts the
//! larger of what its spec asks, what the kubelet allocated and what is actuated, so
//! a pod resized up is counted at its new size while the resize is in progress, and
//! one whose resize is infeasible at what it really has.

use super::*;

/// The pod condition the kubelet sets while a resize waits, and its reason when the
/// node can never fit it.
const POD_RESIZE_PENDING: &str = "PodResizePending";
const REASON_INFEASIBLE: &str = "Infeasible";

/// Requests summed the way upstream sums them, twice over: as given (what Filter and
/// the node's `Requested` use) and with upstream's defaults (100m CPU, 200Mi memory)
/// for containers that name no CPU or memory request (`NonZeroRequested`, the
/// spreading scores).
#[derive(Clone, Debug, Default)]
struct Sum {
    reqs: Resource,
    nz: (i64, i64),
}

impl Sum {
    fn add(&mut self, o: &Sum) {
        self.reqs.add(&o.reqs);
        self.nz.0 = self.nz.0.saturating_add(o.nz.0);
        self.nz.1 = self.nz.1.saturating_add(o.nz.1);
    }

    fn set_max(&mut self, o: &Sum) {
        self.reqs.set_max(&o.reqs);
        self.nz.0 = self.nz.0.max(o.nz.0);
        self.nz.1 = self.nz.1.max(o.nz.1);
    }

    /// One resource list (a container's, or a pod-level status list); `present`
    /// says which of CPU and memory it names (an absent one takes the default in the
    /// non-zero sum, even when the list itself is absent).
    fn of(reqs: Resource, has_cpu: bool, has_mem: bool) -> Sum {
        let nz = (
            non_zero(reqs.milli_cpu, has_cpu, DEFAULT_MILLI_CPU_REQUEST),
            non_zero(reqs.memory, has_mem, DEFAULT_MEMORY_REQUEST),
        );
        Sum { reqs, nz }
    }

    /// A pod-level status list: it already holds the aggregate, so upstream gives
    /// it no defaults.
    fn plain(list: &BTreeMap<String, K8sQuantity>, field: &str) -> Result<Sum> {
        let reqs = resource_list(list, field)?;
        let nz = (reqs.milli_cpu, reqs.memory);
        Ok(Sum { reqs, nz })
    }

    fn of_list(list: Option<&BTreeMap<String, K8sQuantity>>, field: &str) -> Result<Sum> {
        match list {
            None => Ok(Sum::of(Resource::default(), false, false)),
            Some(l) => Ok(Sum::of(
                resource_list(l, field)?,
                l.contains_key(CPU),
                l.contains_key(MEMORY),
            )),
        }
    }
}

/// Each container's extended-resource requests (requests, limits standing in), or
/// `None` when no container asks for an extended resource.
pub(super) fn extended_containers(
    spec: &core::PodSpec,
) -> Option<Arc<[crate::model::dra::ContainerExtended]>> {
    use crate::model::resource::is_dra_extended_resource_name;
    let any = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter_map(|c| c.resources.as_ref())
        .any(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
                .any(|k| is_dra_extended_resource_name(k))
        });
    if !any {
        return None;
    }
    let inits = spec.init_containers.iter().flatten().map(|c| {
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        (c, !sidecar)
    });
    let out: Vec<crate::model::dra::ContainerExtended> = inits
        .chain(spec.containers.iter().map(|c| (c, false)))
        .map(|(c, short_lived)| {
            let mut merged: BTreeMap<&str, &K8sQuantity> = BTreeMap::new();
            if let Some(r) = &c.resources {
                for (k, v) in r.requests.iter().flatten() {
                    merged.insert(k, v);
                }
                for (k, v) in r.limits.iter().flatten() {
                    merged.entry(k).or_insert(v);
                }
            }
            let extended = merged
                .iter()
                .filter(|(k, _)| is_dra_extended_resource_name(k))
                .filter_map(|(k, v)| {
                    let q = Quantity::parse(&v.0).ok()?;
                    Some((Arc::from(*k), q.value()))
                })
                .collect();
            crate::model::dra::ContainerExtended {
                name: c.name.as_str().into(),
                short_lived,
                keys: merged.keys().map(|k| Arc::from(*k)).collect(),
                extended,
            }
        })
        .collect();
    Some(out.into())
}

/// Upstream's three per-container views of a running pod.
#[derive(Clone, Copy, PartialEq, Eq)]
enum View {
    /// `spec.containers[].resources.requests` (limits standing in, as defaulting does).
    Spec,
    /// `status.containerStatuses[].allocatedResources`: what the kubelet admitted.
    Allocated,
    /// `status.containerStatuses[].resources.requests`: what is configured now.
    Actuated,
}

/// A container's effective requests: `requests`, with any resource that has only a
/// limit defaulted to the limit (what the API server's defaulting does).
fn container_spec(c: &core::Container, field: &str) -> Result<Sum> {
    let Some(res) = &c.resources else {
        return Ok(Sum::of(Resource::default(), false, false));
    };
    let mut merged: BTreeMap<String, K8sQuantity> = res.requests.clone().unwrap_or_default();
    for (k, v) in res.limits.iter().flatten() {
        merged.entry(k.clone()).or_insert_with(|| v.clone());
    }
    Sum::of_list(Some(&merged), &format!("{field}.resources.requests"))
}

/// The status of the container named `name`, and its field path.
fn container_status<'a>(
    status: Option<&'a core::PodStatus>,
    name: &str,
) -> Option<(&'a core::ContainerStatus, String)> {
    let s = status?;
    let find = |list: &'a Option<Vec<core::ContainerStatus>>, field: &str| {
        list.iter()
            .flatten()
            .enumerate()
            .find(|(_, cs)| cs.name == name)
            .map(|(i, cs)| (cs, format!("status.{field}[{i}]")))
    };
    find(&s.container_statuses, "containerStatuses")
        .or_else(|| find(&s.init_container_statuses, "initContainerStatuses"))
}

/// One container in one view (upstream `containerSpecRequests`,
/// `containerAllocatedRequests`, `containerActuatedRequests`): a status list when the
/// kubelet reported one, else the spec, except that an infeasible resize counts
/// nothing it has not got.
fn container_view(
    c: &core::Container,
    field: &str,
    view: View,
    status: Option<&core::PodStatus>,
    infeasible: bool,
) -> Result<Sum> {
    if view != View::Spec {
        if let Some((cs, f)) = container_status(status, &c.name) {
            if view == View::Actuated {
                if let Some(r) = cs.resources.as_ref().and_then(|r| r.requests.as_ref()) {
                    return Sum::of_list(Some(r), &format!("{f}.resources.requests"));
                }
            }
            if let Some(a) = &cs.allocated_resources {
                return Sum::of_list(Some(a), &format!("{f}.allocatedResources"));
            }
        }
        if infeasible {
            return Ok(Sum::of(Resource::default(), false, false));
        }
    }
    container_spec(c, field)
}

/// Upstream `aggregateContainerResourcesByFn`: containers summed; sidecars
/// (restartable init containers) run beside the app containers; each regular init
/// container runs with the sidecars started before it; the pod needs the larger.
fn aggregate(
    spec: &core::PodSpec,
    view: View,
    status: Option<&core::PodStatus>,
    infeasible: bool,
) -> Result<Sum> {
    let mut total = Sum::default();
    for (i, c) in spec.containers.iter().enumerate() {
        let f = format!("spec.containers[{i}]");
        total.add(&container_view(c, &f, view, status, infeasible)?);
    }
    let mut sidecars = Sum::default();
    let mut init_max = Sum::default();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let f = format!("spec.initContainers[{i}]");
        let r = container_view(c, &f, view, status, infeasible)?;
        let effective = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            sidecars.clone()
        } else {
            let mut t = r;
            t.add(&sidecars);
            t
        };
        init_max.set_max(&effective);
    }
    total.set_max(&init_max);
    Ok(total)
}

/// Upstream `IsPodResizeInfeasible`: the first `PodResizePending` condition decides.
fn resize_infeasible(status: Option<&core::PodStatus>) -> bool {
    status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == POD_RESIZE_PENDING))
        .is_some_and(|c| c.reason.as_deref() == Some(REASON_INFEASIBLE))
}

/// Whether the pod sets a pod-level request of a resource pod-level resources cover
/// (CPU, memory, huge pages): upstream `IsPodLevelRequestsSet`.
fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with(crate::model::resource::HUGEPAGES_PREFIX)
}

/// A list with the overhead taken out of the resources it names (upstream
/// `subtractResourceList`; pod-level status lists include the overhead, pod-level
/// spec requests do not).
fn without_overhead(list: &Sum, overhead: Option<&Resource>) -> Sum {
    let mut s = list.clone();
    if let Some(o) = overhead {
        let r = &mut s.reqs;
        // Clamped at zero, as upstream clamps.
        let sub = |a: i64, b: i64| a.saturating_sub(b).max(0);
        r.milli_cpu = sub(r.milli_cpu, o.milli_cpu);
        r.memory = sub(r.memory, o.memory);
        r.ephemeral_storage = sub(r.ephemeral_storage, o.ephemeral_storage);
        for (n, v) in o.scalar.iter() {
            if r.scalar.contains(n) {
                r.scalar.set(n, sub(r.scalar.get(n), v));
            }
        }
    }
    s
}

/// The pod's requests and its non-zero CPU and memory (see [`Sum`]), as upstream
/// `PodRequests` computes them for the scheduler in v1.36.
pub(super) fn pod_requests(
    spec: &core::PodSpec,
    status: Option<&core::PodStatus>,
) -> Result<(Resource, i64, i64)> {
    let infeasible = resize_infeasible(status);
    let spec_sum = aggregate(spec, View::Spec, None, false)?;
    let pod_status = status.filter(|s| {
        infeasible
            || s.container_statuses.as_ref().is_some_and(|l| !l.is_empty())
            || s.init_container_statuses
                .as_ref()
                .is_some_and(|l| !l.is_empty())
            || s.allocated_resources.is_some()
            || s.resources.is_some()
    });
    let mut sum = match pod_status {
        // A pod no kubelet has reported on counts its spec.
        None => spec_sum,
        Some(st) => {
            // Pod-level status lists, when the kubelet fills both, already hold the
            // aggregate over all containers.
            let (allocated, actuated) = match (
                &st.allocated_resources,
                st.resources.as_ref().and_then(|r| r.requests.as_ref()),
            ) {
                (Some(a), Some(r)) => (
                    Sum::plain(a, "status.allocatedResources")?,
                    Sum::plain(r, "status.resources.requests")?,
                ),
                _ => (
                    aggregate(spec, View::Allocated, status, infeasible)?,
                    aggregate(spec, View::Actuated, status, infeasible)?,
                ),
            };
            let mut m = if infeasible { Sum::default() } else { spec_sum };
            m.set_max(&allocated);
            m.set_max(&actuated);
            m
        }
    };

    let overhead = spec
        .overhead
        .as_ref()
        .map(|o| resource_list(o, "spec.overhead"))
        .transpose()?;
    let pod_level = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .filter(|l| l.keys().any(|k| is_pod_level_resource(k)));
    if let Some(pod_level) = pod_level {
        let spec_level = Sum::of_list(Some(pod_level), "spec.resources.requests")?;
        let mut names: Vec<&str> = pod_level.keys().map(String::as_str).collect();
        let mut effective = spec_level;
        if let Some(st) =
            status.filter(|s| s.resources.is_some() || s.allocated_resources.is_some())
        {
            let actuated = st.resources.as_ref().and_then(|r| r.requests.as_ref());
            let allocated = st.allocated_resources.as_ref();
            names.extend(actuated.into_iter().flatten().map(|(k, _)| k.as_str()));
            names.extend(allocated.into_iter().flatten().map(|(k, _)| k.as_str()));
            let mut m = if infeasible {
                Sum::default()
            } else {
                effective
            };
            if let Some(a) = actuated {
                let s = Sum::plain(a, "status.resources.requests")?;
                m.set_max(&without_overhead(&s, overhead.as_ref()));
            }
            if let Some(a) = allocated {
                let s = Sum::plain(a, "status.allocatedResources")?;
                m.set_max(&without_overhead(&s, overhead.as_ref()));
            }
            effective = m;
        }
        // Upstream `applyPodLevelResources`: the pod-level value replaces the
        // containers' sum for each resource pod-level resources cover.
        for name in names {
            match name {
                CPU => {
                    sum.reqs.milli_cpu = effective.reqs.milli_cpu;
                    sum.nz.0 = effective.reqs.milli_cpu;
                }
                MEMORY => {
                    sum.reqs.memory = effective.reqs.memory;
                    sum.nz.1 = effective.reqs.memory;
                }
                n if is_pod_level_resource(n) => {
                    let rn: ResourceName = Arc::from(n);
                    sum.reqs.scalar.set(&rn, effective.reqs.scalar.get(&rn));
                }
                _ => {}
            }
        }
    }
    if let Some(o) = &overhead {
        sum.nz.0 = sum.nz.0.saturating_add(o.milli_cpu);
        sum.nz.1 = sum.nz.1.saturating_add(o.memory);
        sum.reqs.add(o);
    }
    Ok((sum.reqs, sum.nz.0, sum.nz.1))
}

pub(super) fn non_zero(value: i64, present: bool, default: i64) -> i64 {
    if present {
        value
    } else {
        default
    }
}

/// Pods whose requests the rules above decide, with the CPU (milli) and memory they
/// count, and their non-zero CPU. The invariant checker's own computation is held to
/// the same table (`invariants::tests`).
#[cfg(test)]
pub(crate) const CASES: &[(&str, &str, i64, i64, i64)] = &[
    (
        "resize down in progress: the kubelet still has 2500m, the spec asks 1",
        "spec: {nodeName: n, containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
status: {containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 0,
  allocatedResources: {cpu: 2500m}, resources: {requests: {cpu: 2500m}}}]}",
        2500,
        0,
        2500,
    ),
    (
        "resize up deferred: the spec's 2 CPU count before the kubelet allocates them",
        "spec: {nodeName: n, containers: [{name: c, resources: {requests: {cpu: '2', memory: 1Gi}}}]}
status:
  conditions: [{type: PodResizePending, status: 'True', reason: Deferred}]
  containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 0,
    allocatedResources: {cpu: '1', memory: 2Gi}, resources: {requests: {cpu: '1', memory: 2Gi}}}]",
        2000,
        2 << 30,
        2000,
    ),
    (
        "resize infeasible: the pod counts what it has, not the spec's 4 CPU",
        "spec: {nodeName: n, containers: [{name: c, resources: {requests: {cpu: '4'}}}, {name: d, resources: {requests: {cpu: '3'}}}]}
status:
  conditions: [{type: PodResizePending, status: 'True', reason: Infeasible, message: too big}]
  containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 0,
    allocatedResources: {cpu: '1'}, resources: {requests: {cpu: 500m}}}]",
        1000,
        0,
        // Container d has no status: it counts nothing, and the 100m default where
        // a request is missing.
        1100,
    ),
    (
        "actuated falls back to allocated when the kubelet reports no resources",
        "spec: {nodeName: n, containers: [{name: c, resources: {requests: {cpu: 200m}}}]}
status: {containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 0,
  allocatedResources: {cpu: 700m}}]}",
        700,
        0,
        700,
    ),
    (
        "sidecars before and after a classic init container",
        "spec:
  initContainers:
  - {name: s1, restartPolicy: Always, resources: {requests: {cpu: 500m}}}
  - {name: i, resources: {requests: {cpu: 1500m}}}
  - {name: s2, restartPolicy: Always, resources: {requests: {cpu: 100m}}}
  containers: [{name: c, resources: {requests: {cpu: 100m}}}]",
        2000,
        0,
        2000,
    ),
    (
        "pod-level requests without container requests",
        "spec: {resources: {requests: {cpu: 1500m}}, containers: [{name: c}, {name: d}]}",
        1500,
        0,
        1500,
    ),
    (
        "pod-level requests replace the containers' sum only for what they name",
        "spec: {overhead: {cpu: 100m}, resources: {requests: {cpu: '1'}},
  containers: [{name: c, resources: {requests: {cpu: 300m, memory: 1Gi}}}, {name: d, resources: {requests: {cpu: 200m}}}]}",
        1100,
        1 << 30,
        1100,
    ),
    (
        "pod-level resize in progress: the pod-level status lists include the overhead",
        "spec: {nodeName: n, overhead: {cpu: 100m}, resources: {requests: {cpu: '1'}}, containers: [{name: c}]}
status: {allocatedResources: {cpu: 2100m}, resources: {requests: {cpu: 2100m}}}",
        2100,
        0,
        2100,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_as_v1_36_counts_them() {
        for (what, yaml, cpu, memory, nz_cpu) in CASES {
            let p: core::Pod =
                crate::yaml::from_str(&format!("metadata: {{name: p}}\n{yaml}")).expect(what);
            let (r, nz, _) = pod_requests(p.spec.as_ref().unwrap(), p.status.as_ref()).expect(what);
            assert_eq!(r.milli_cpu, *cpu, "{what}: cpu");
            assert_eq!(r.memory, *memory, "{what}: memory");
            assert_eq!(nz, *nz_cpu, "{what}: non-zero cpu");
        }
    }

    #[test]
    fn a_malformed_status_quantity_names_its_field() {
        let p: core::Pod = crate::yaml::from_str(
            "metadata: {name: p}
spec: {containers: [{name: c}]}
status: {containerStatuses: [{name: c, image: i, imageID: '', ready: true, restartCount: 0, allocatedResources: {cpu: -1}}]}",
        )
        .unwrap();
        let e = pod_requests(p.spec.as_ref().unwrap(), p.status.as_ref()).unwrap_err();
        assert!(
            e.to_string()
                .contains("status.containerStatuses[0].allocatedResources.cpu"),
            "{e}"
        );
    }
}
