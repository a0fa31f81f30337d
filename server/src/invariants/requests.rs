//! A pod's requests as kube-scheduler v1.36 counts them (upstream
//! `resource.PodRequests`), with the checker's own code over the Kubernetes types:
//! the scheduler's computation (`model/convert/requests.rs`) is held to the same
//! table of cases, so neither can drift alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use crate::model::quantity::Quantity;

pub(super) fn amount(name: &str, q: &str) -> Option<i64> {
    let q = Quantity::parse(q).ok()?;
    Some(if name == "cpu" {
        q.milli_value()
    } else {
        q.value()
    })
}

fn add_into(
    into: &mut BTreeMap<String, i64>,
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) {
    for (k, v) in list.into_iter().flatten() {
        if let Some(a) = amount(k, &v.0) {
            let e = into.entry(k.clone()).or_default();
            *e = e.saturating_add(a);
        }
    }
}

/// A container's requests, with limits standing in for absent requests (API defaulting).
fn container_requests(c: &core::Container) -> BTreeMap<String, i64> {
    let mut r = BTreeMap::new();
    if let Some(res) = &c.resources {
        add_into(&mut r, res.requests.as_ref());
        for (k, v) in res.limits.iter().flatten() {
            if !r.contains_key(k) {
                if let Some(a) = amount(k, &v.0) {
                    r.insert(k.clone(), a);
                }
            }
        }
    }
    r
}

fn max_into(into: &mut BTreeMap<String, i64>, other: &BTreeMap<String, i64>) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

fn sum_into(into: &mut BTreeMap<String, i64>, other: &BTreeMap<String, i64>) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_default();
        *e = e.saturating_add(*v);
    }
}

/// One container's list in one of upstream's views: its spec (limits standing in for
/// absent requests), or what the kubelet reports it allocated or actuated.
type ContainerFn<'a> = &'a dyn Fn(&core::Container) -> BTreeMap<String, i64>;

/// Upstream `aggregateContainerResourcesByFn`: app containers and sidecars (restartable
/// init containers) run together; each classic init container runs alone beside the
/// sidecars started before it; the pod needs the larger.
fn aggregate(spec: &core::PodSpec, f: ContainerFn) -> BTreeMap<String, i64> {
    let mut running = BTreeMap::new();
    for c in &spec.containers {
        sum_into(&mut running, &f(c));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_peak = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let r = f(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sum_into(&mut sidecars, &r);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut alone = sidecars.clone();
            sum_into(&mut alone, &r);
            max_into(&mut init_peak, &alone);
        }
    }
    sum_into(&mut running, &sidecars);
    max_into(&mut running, &init_peak);
    running
}

fn list_of(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> BTreeMap<String, i64> {
    let mut r = BTreeMap::new();
    add_into(&mut r, list);
    r
}

/// Upstream `resource.PodRequests` as kube-scheduler v1.36 calls it (in-place resize
/// on, pod-level resources and their in-place resize on): the larger of the spec,
/// the kubelet's allocated and its actuated requests (only the last two when the
/// resize is infeasible), pod-level requests replacing the containers' sum for CPU,
/// memory and huge pages, then the overhead.
pub(super) fn pod_requests(
    spec: &core::PodSpec,
    status: Option<&core::PodStatus>,
) -> BTreeMap<String, i64> {
    let infeasible = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"));
    let status_of = |c: &core::Container| {
        let s = status?;
        s.container_statuses
            .iter()
            .flatten()
            .chain(s.init_container_statuses.iter().flatten())
            .find(|cs| cs.name == c.name)
    };
    let spec_reqs = aggregate(spec, &container_requests);
    let mut reqs = spec_reqs.clone();
    if let Some(st) = status {
        let pod_actuated = st.resources.as_ref().and_then(|r| r.requests.as_ref());
        let (allocated, actuated) = match (st.allocated_resources.as_ref(), pod_actuated) {
            (Some(a), Some(r)) => (list_of(Some(a)), list_of(Some(r))),
            _ => {
                let allocated = |c: &core::Container| match status_of(c) {
                    Some(cs) if cs.allocated_resources.is_some() => {
                        list_of(cs.allocated_resources.as_ref())
                    }
                    _ if infeasible => BTreeMap::new(),
                    _ => container_requests(c),
                };
                let actuated = |c: &core::Container| {
                    let cs = status_of(c);
                    if let Some(r) = cs
                        .and_then(|cs| cs.resources.as_ref())
                        .and_then(|r| r.requests.as_ref())
                    {
                        return list_of(Some(r));
                    }
                    match cs {
                        Some(cs) if cs.allocated_resources.is_some() => {
                            list_of(cs.allocated_resources.as_ref())
                        }
                        _ if infeasible => BTreeMap::new(),
                        _ => container_requests(c),
                    }
                };
                (aggregate(spec, &allocated), aggregate(spec, &actuated))
            }
        };
        reqs = if infeasible {
            BTreeMap::new()
        } else {
            spec_reqs
        };
        max_into(&mut reqs, &allocated);
        max_into(&mut reqs, &actuated);
    }
    let pod_level_name = |k: &str| k == "cpu" || k == "memory" || k.starts_with("hugepages-");
    if let Some(level) = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .filter(|l| l.keys().any(|k| pod_level_name(k)))
    {
        let mut effective = list_of(Some(level));
        if let Some(st) =
            status.filter(|s| s.resources.is_some() || s.allocated_resources.is_some())
        {
            let overhead = list_of(spec.overhead.as_ref());
            let minus_overhead = |mut l: BTreeMap<String, i64>| {
                for (k, v) in &overhead {
                    if let Some(x) = l.get_mut(k) {
                        *x = x.saturating_sub(*v).max(0);
                    }
                }
                l
            };
            if infeasible {
                effective.clear();
            }
            let actuated = st.resources.as_ref().and_then(|r| r.requests.as_ref());
            max_into(&mut effective, &minus_overhead(list_of(actuated)));
            max_into(
                &mut effective,
                &minus_overhead(list_of(st.allocated_resources.as_ref())),
            );
        }
        for (k, v) in effective {
            if pod_level_name(&k) {
                reqs.insert(k, v);
            }
        }
    }
    add_into(&mut reqs, spec.overhead.as_ref());
    reqs
}
