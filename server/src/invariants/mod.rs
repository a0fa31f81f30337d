//! The invariant checker: what must hold after every run, recomputed from the input
//! objects as the cluster received them (Kubernetes types), not from the scheduler's
//! model or caches. Requests, allocatable, host ports, taints, node selectors and
//! required node affinity are read again here, with their own code, so a bug in the
//! scheduler's parsing or bookkeeping cannot hide itself.
//!
//! Faults are told apart: an input that is over-committed by pods pinned with
//! `spec.nodeName` is the input's fault (reported as such); a node over-committed by a
//! pod the scheduler placed is the scheduler's.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1 as core;
use serde::Serialize;

mod requests;

use requests::{amount, pod_requests};

/// What the checker keeps of a pod, read from the object it was created from.
#[derive(Clone, Debug, Default)]
pub struct PodFacts {
    /// Effective requests as upstream `resource.PodRequests` computes them (cpu in
    /// milli-units, everything else as `Value()`), plus the pod itself under `pods`.
    pub requests: BTreeMap<String, i64>,
    /// `(hostIP, protocol, hostPort)` of every container port with a host port.
    pub host_ports: Vec<(String, String, i32)>,
    pub tolerations: Vec<core::Toleration>,
    pub node_selector: BTreeMap<String, String>,
    pub required_affinity: Option<core::NodeSelector>,
    /// `spec.nodeName` at creation: the input placed it, not the scheduler.
    pub pinned: Option<String>,
    pub scheduler_name: String,
    /// `spec.priority` as admission resolved it (see [`PodFacts::resolve_priority`]).
    pub priority: i32,
    /// How much an in-place resize grew the requests after the pod was bound (by
    /// resource). Such growth is the resize's doing (a kubelet would defer it), not
    /// a placement: the node may exceed its allocatable by this much.
    pub grown_in_place: BTreeMap<String, i64>,
}

/// A preemption as the cluster carried it out: who was deleted for whom, with both
/// priorities from the checker's own facts.
#[derive(Clone, Debug)]
pub struct Preemption {
    pub victim: String,
    pub victim_priority: i32,
    pub preemptor: String,
    pub preemptor_priority: i32,
}

/// What the checker keeps of a node.
#[derive(Clone, Debug, Default)]
pub struct NodeFacts {
    pub allocatable: BTreeMap<String, i64>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<core::Taint>,
    pub unschedulable: bool,
}

impl PodFacts {
    pub fn of(pod: &core::Pod) -> PodFacts {
        let Some(spec) = &pod.spec else {
            return PodFacts::default();
        };
        let mut running = pod_requests(spec, pod.status.as_ref());
        running.insert("pods".into(), 1);
        let host_ports = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.host_port.is_some_and(|h| h > 0))
            .map(|p| {
                (
                    p.host_ip
                        .clone()
                        .filter(|ip| !ip.is_empty())
                        .unwrap_or_else(|| "0.0.0.0".into()),
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    p.host_port.unwrap_or(0),
                )
            })
            .collect();
        let required_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .clone()
            });
        PodFacts {
            requests: running,
            host_ports,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_affinity,
            pinned: spec.node_name.clone().filter(|n| !n.is_empty()),
            scheduler_name: spec
                .scheduler_name
                .clone()
                .unwrap_or_else(|| "default-scheduler".into()),
            priority: spec.priority.unwrap_or(0),
            grown_in_place: BTreeMap::new(),
        }
    }

    /// Priority admission for a pod created without `spec.priority`: the named class's
    /// value (system classes included), else the global default's, else 0.
    pub fn resolve_priority(
        &mut self,
        pod: &core::Pod,
        class_value: &dyn Fn(Option<&str>) -> Option<i32>,
    ) {
        let Some(spec) = &pod.spec else { return };
        if spec.priority.is_none() {
            let name = spec
                .priority_class_name
                .as_deref()
                .filter(|n| !n.is_empty());
            self.priority = class_value(name).unwrap_or(0);
        }
    }
}

impl NodeFacts {
    pub fn of(node: &core::Node) -> NodeFacts {
        let status = node.status.as_ref();
        let alloc = status
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
            .cloned()
            .unwrap_or_default();
        let mut allocatable = BTreeMap::new();
        for (k, v) in &alloc {
            if let Some(a) = amount(k, &v.0) {
                allocatable.insert(k.clone(), a);
            }
        }
        let mut labels = node.metadata.labels.clone().unwrap_or_default();
        if let Some(n) = &node.metadata.name {
            labels
                .entry("kubernetes.io/hostname".into())
                .or_insert_with(|| n.clone());
        }
        let spec = node.spec.as_ref();
        NodeFacts {
            allocatable,
            labels,
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        }
    }
}

/// Upstream `Toleration.ToleratesTaint`.
fn tolerates(t: &core::Toleration, taint: &core::Taint) -> bool {
    if t.effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    if t.key
        .as_deref()
        .is_some_and(|k| !k.is_empty() && k != taint.key)
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

fn requirement_matches(
    key: &str,
    op: &str,
    values: &[String],
    labels: &BTreeMap<String, String>,
) -> bool {
    let v = labels.get(key);
    match op {
        "In" => v.is_some_and(|v| values.contains(v)),
        "NotIn" => v.is_none_or(|v| !values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (v, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(a), Ok(b)) => {
                    if op == "Gt" {
                        a > b
                    } else {
                        a < b
                    }
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn term_matches(t: &core::NodeSelectorTerm, node: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name = BTreeMap::from([("metadata.name".to_string(), node.to_string())]);
    exprs.iter().all(|e| {
        requirement_matches(
            &e.key,
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
            labels,
        )
    }) && fields.iter().all(|f| {
        requirement_matches(
            &f.key,
            &f.operator,
            f.values.as_deref().unwrap_or_default(),
            &name,
        )
    })
}

/// A violated rule, named with its pod and node.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub detail: String,
}

/// A pod at the end of a run, as the cluster holds it.
pub struct EndPod<'a> {
    pub key: String,
    pub node: Option<&'a str>,
    /// The scheduler recorded why it is not bound (PodScheduled=False).
    pub has_reason: bool,
    /// Being deleted (victims under their grace period).
    pub terminating: bool,
    /// Extended resources DRA serves for the pod (its
    /// `status.extendedResourceClaimStatus`): devices of a claim, not the node's
    /// allocatable (the DRA check verifies the claim).
    pub dra_resources: Vec<String>,
}

/// The ordering-independent Filters the checker recomputes, by upstream plugin name.
pub const CHECKED_FILTERS: [&str; 5] = [
    "NodeResourcesFit",
    "NodePorts",
    "TaintToleration",
    "NodeAffinity",
    "NodeUnschedulable",
];

/// Checks the end state. `facts` holds every pod handed in that has not been deleted
/// since (by the input, a workload, a preemption or a termination); `filters_of` says
/// which of [`CHECKED_FILTERS`] a scheduler name's profile runs (`None`: no profile, the
/// pod is not ours).
pub fn check<'a>(
    facts: &HashMap<String, PodFacts>,
    nodes: &HashMap<String, NodeFacts>,
    end: &[EndPod<'a>],
    preemptions: &[Preemption],
    filters_of: &dyn Fn(&str) -> Option<Vec<&'static str>>,
) -> (Vec<Violation>, Vec<Violation>) {
    let mut faults = Vec::new();
    let mut input = Vec::new();
    // Upstream preempts only pods of strictly lower priority.
    for p in preemptions {
        if p.victim_priority >= p.preemptor_priority {
            faults.push(Violation {
                rule: "victim priority not lower".into(),
                pod: Some(p.victim.clone()),
                node: None,
                detail: format!(
                    "priority {} deleted for {} of priority {}",
                    p.victim_priority, p.preemptor, p.preemptor_priority
                ),
            });
        }
    }
    let present: HashMap<&str, &EndPod> = end.iter().map(|p| (p.key.as_str(), p)).collect();
    // Every pod handed in is still there: bound, or pending with a reason.
    let mut lost: Vec<&String> = facts
        .keys()
        .filter(|k| !present.contains_key(k.as_str()))
        .collect();
    lost.sort();
    for k in lost {
        faults.push(Violation {
            rule: "pod lost".into(),
            pod: Some(k.clone()),
            node: None,
            detail: "created and never deleted, but neither bound nor pending at the end".into(),
        });
    }
    let mut on_node: BTreeMap<&str, Vec<(&EndPod, &PodFacts)>> = BTreeMap::new();
    for p in end {
        let Some(f) = facts.get(&p.key) else { continue };
        let ours = filters_of(&f.scheduler_name).is_some();
        match p.node {
            Some(n) => on_node.entry(n).or_default().push((p, f)),
            None if ours && !p.has_reason && !p.terminating => faults.push(Violation {
                rule: "pod without a reason".into(),
                pod: Some(p.key.clone()),
                node: None,
                detail: "not bound, and no PodScheduled=False condition recorded".into(),
            }),
            None => {}
        }
    }
    for (node, pods) in &on_node {
        let Some(nf) = nodes.get(*node) else { continue };
        // Resources: usage of all pods, and of the pinned ones alone.
        let mut total: BTreeMap<&str, i64> = BTreeMap::new();
        let mut pinned: BTreeMap<&str, i64> = BTreeMap::new();
        let mut grown: BTreeMap<&str, i64> = BTreeMap::new();
        for (p, f) in pods {
            for (r, v) in &f.grown_in_place {
                let g = grown.entry(r).or_default();
                *g = g.saturating_add(*v);
            }
            for (r, v) in &f.requests {
                if p.dra_resources.iter().any(|d| d == r) {
                    continue;
                }
                let t = total.entry(r).or_default();
                *t = t.saturating_add(*v);
                if f.pinned.is_some() {
                    let t = pinned.entry(r).or_default();
                    *t = t.saturating_add(*v);
                }
            }
        }
        for (r, used) in &total {
            let alloc = nf.allocatable.get(*r).copied();
            // Resources a node does not list are unchecked, as upstream ignores them,
            // except the ones every node has.
            let alloc = match alloc {
                Some(a) => a,
                None if matches!(*r, "cpu" | "memory" | "ephemeral-storage" | "pods") => 0,
                None if r.contains('/') || r.starts_with("hugepages-") => 0,
                None => continue,
            };
            if *used <= alloc {
                continue;
            }
            let growth = grown.get(r).copied().unwrap_or(0);
            if growth > 0 && used.saturating_sub(growth) <= alloc {
                input.push(Violation {
                    rule: "resized in place over allocatable".into(),
                    pod: None,
                    node: Some(node.to_string()),
                    detail: format!(
                        "{r}: {used} requested of {alloc} allocatable after bound pods grew by {growth} in place (a kubelet defers such a resize)"
                    ),
                });
                continue;
            }
            if pinned.get(r).copied().unwrap_or(0) > alloc {
                input.push(Violation {
                    rule: "input over-committed".into(),
                    pod: None,
                    node: Some(node.to_string()),
                    detail: format!(
                        "pods pinned with spec.nodeName request {} {r} of {alloc} allocatable",
                        pinned[r]
                    ),
                });
                continue;
            }
            let placed: Vec<&str> = pods
                .iter()
                .filter(|(_, f)| f.pinned.is_none() && f.requests.get(*r).is_some_and(|v| *v > 0))
                .filter(|(_, f)| {
                    filters_of(&f.scheduler_name).is_some_and(|fs| fs.contains(&"NodeResourcesFit"))
                })
                .map(|(p, _)| p.key.as_str())
                .collect();
            if let Some(last) = placed.last() {
                faults.push(Violation {
                    rule: "node over-committed".into(),
                    pod: Some(last.to_string()),
                    node: Some(node.to_string()),
                    detail: format!("{r}: {used} requested of {alloc} allocatable (placed by the scheduler: {})", placed.join(", ")),
                });
            }
        }
        // Host ports.
        let mut seen: Vec<(&(String, String, i32), &PodFacts, &str)> = Vec::new();
        for (p, f) in pods {
            for hp in &f.host_ports {
                // A pod's own ports never clash with each other here (the API server
                // refuses duplicates within a pod).
                let clash = seen.iter().find(|(o, _, ok)| {
                    *ok != p.key.as_str()
                        && o.1 == hp.1
                        && o.2 == hp.2
                        && (o.0 == hp.0 || o.0 == "0.0.0.0" || hp.0 == "0.0.0.0")
                });
                if let Some((_, of, ok)) = clash {
                    let by_us = |f: &PodFacts| {
                        f.pinned.is_none()
                            && filters_of(&f.scheduler_name)
                                .is_some_and(|fs| fs.contains(&"NodePorts"))
                    };
                    let v = Violation {
                        rule: if by_us(f) || by_us(of) {
                            "host port conflict"
                        } else {
                            "input host port conflict"
                        }
                        .into(),
                        pod: Some(p.key.clone()),
                        node: Some(node.to_string()),
                        detail: format!("{}/{} {} also used by {ok}", hp.1, hp.2, hp.0),
                    };
                    if by_us(f) || by_us(of) {
                        faults.push(v);
                    } else {
                        input.push(v);
                    }
                }
                seen.push((hp, f, &p.key));
            }
        }
        // Ordering-independent Filters of the pod's profile.
        for (p, f) in pods {
            if f.pinned.is_some() {
                continue;
            }
            let Some(filters) = filters_of(&f.scheduler_name) else {
                continue;
            };
            let mut fail = |rule: &str, detail: String| {
                faults.push(Violation {
                    rule: rule.into(),
                    pod: Some(p.key.clone()),
                    node: Some(node.to_string()),
                    detail,
                })
            };
            if filters.contains(&"NodeUnschedulable") && nf.unschedulable {
                let taint = core::Taint {
                    key: "node.kubernetes.io/unschedulable".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                };
                if !f.tolerations.iter().any(|t| tolerates(t, &taint)) {
                    fail(
                        "NodeUnschedulable",
                        "node is unschedulable and the pod does not tolerate it".into(),
                    );
                }
            }
            if filters.contains(&"TaintToleration") {
                for taint in nf
                    .taints
                    .iter()
                    .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                {
                    if !f.tolerations.iter().any(|t| tolerates(t, taint)) {
                        fail(
                            "TaintToleration",
                            format!(
                                "untolerated taint {}={}:{}",
                                taint.key,
                                taint.value.as_deref().unwrap_or(""),
                                taint.effect
                            ),
                        );
                    }
                }
            }
            if filters.contains(&"NodeAffinity") {
                if let Some((k, v)) = f
                    .node_selector
                    .iter()
                    .find(|(k, v)| nf.labels.get(*k) != Some(*v))
                {
                    fail(
                        "NodeAffinity",
                        format!("nodeSelector {k}={v} does not match"),
                    );
                }
                if let Some(req) = &f.required_affinity {
                    if !req
                        .node_selector_terms
                        .iter()
                        .any(|t| term_matches(t, node, &nf.labels))
                    {
                        fail(
                            "NodeAffinity",
                            "no required node affinity term matches".into(),
                        );
                    }
                }
            }
        }
    }
    (faults, input)
}

/// The checker over what an API server holds, for the Kubernetes backend: `created` are
/// the pods as the API server accepted them (their facts; `spec.priority` admitted),
/// `current` the pods listed now, `nodes` the nodes listed now, and `events` the
/// `events.k8s.io/v1` events of the pods' namespaces, whose `Preempted` notes name each
/// victim's preemptor. A created pod that is gone counts as lost unless it was preempted
/// or `deleted` (by the caller) names it. Pods are keyed `namespace/name`.
pub fn check_api_server(
    created: &[core::Pod],
    deleted: &[String],
    current: &[core::Pod],
    nodes: &[core::Node],
    events: &[k8s_openapi::api::events::v1::Event],
    filters_of: &dyn Fn(&str) -> Option<Vec<&'static str>>,
) -> (Vec<Violation>, Vec<Violation>) {
    let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default()
        )
    };
    let mut facts: HashMap<String, PodFacts> = created
        .iter()
        .map(|p| (key(&p.metadata), PodFacts::of(p)))
        .collect();
    let by_uid: HashMap<&str, &core::Pod> = current
        .iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect();
    let mut preemptions = Vec::new();
    for e in events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Preempted"))
    {
        let Some(r) = &e.regarding else { continue };
        let victim = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or("default"),
            r.name.as_deref().unwrap_or_default()
        );
        // "Preempted by pod <uid> on node <node>" (v1.26: "Preempted by <uid> on ...").
        let note = e.note.as_deref().unwrap_or_default();
        let uid = note
            .strip_prefix("Preempted by ")
            .map(|n| n.strip_prefix("pod ").unwrap_or(n))
            .and_then(|n| n.split(' ').next())
            .unwrap_or_default();
        let preemptor = by_uid.get(uid).map(|p| key(&p.metadata));
        let priority = |k: &str| facts.get(k).map_or(0, |f| f.priority);
        preemptions.push(Preemption {
            victim_priority: priority(&victim),
            preemptor_priority: preemptor.as_deref().map_or(i32::MAX, priority),
            preemptor: preemptor.unwrap_or_else(|| format!("pod with uid {uid}")),
            victim,
        });
    }
    let present: std::collections::HashSet<String> =
        current.iter().map(|p| key(&p.metadata)).collect();
    facts.retain(|k, _| {
        present.contains(k) || !(deleted.contains(k) || preemptions.iter().any(|p| &p.victim == k))
    });
    let node_facts: HashMap<String, NodeFacts> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                NodeFacts::of(n),
            )
        })
        .collect();
    let end: Vec<EndPod> = current
        .iter()
        .map(|p| EndPod {
            key: key(&p.metadata),
            node: p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            has_reason: p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                }),
            terminating: p.metadata.deletion_timestamp.is_some(),
            dra_resources: p
                .status
                .as_ref()
                .and_then(|s| s.extended_resource_claim_status.as_ref())
                .map(|e| {
                    e.request_mappings
                        .iter()
                        .map(|m| m.resource_name.clone())
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    check(&facts, &node_facts, &end, &preemptions, filters_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> PodFacts {
        PodFacts::of(&crate::yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn requests_follow_upstream_pod_requests() {
        let f = pod("spec:\n  overhead: {cpu: 10m}\n  initContainers:\n  - {name: i, resources: {requests: {cpu: '2'}}}\n  - {name: s, restartPolicy: Always, resources: {requests: {cpu: 500m}}}\n  containers:\n  - {name: a, resources: {requests: {cpu: 300m}, limits: {memory: 1Gi}}}\n  - {name: b, resources: {requests: {cpu: 200m}}}\n");
        assert_eq!(f.requests["cpu"], 2010);
        assert_eq!(f.requests["memory"], 1 << 30);
        assert_eq!(f.requests["pods"], 1);
    }

    #[test]
    fn requests_agree_with_the_table_of_v1_36_rules() {
        for (what, yaml, cpu, memory, _) in crate::model::convert::REQUEST_CASES {
            let f = pod(&format!("metadata: {{name: p}}\n{yaml}"));
            assert_eq!(
                f.requests.get("cpu").copied().unwrap_or(0),
                *cpu,
                "{what}: cpu"
            );
            let m = f.requests.get("memory").copied().unwrap_or(0);
            assert_eq!(m, *memory, "{what}: memory");
        }
    }

    #[test]
    fn finds_lost_pods_overcommit_and_broken_filters() {
        let nodes = HashMap::from([(
            "n".to_string(),
            NodeFacts::of(&crate::yaml::from_str("metadata: {name: n}\nspec: {taints: [{key: k, effect: NoSchedule}]}\nstatus: {allocatable: {cpu: '1', pods: '10'}}").unwrap()),
        )]);
        let facts = HashMap::from([
            ("default/a".to_string(), pod("spec: {containers: [{name: c, resources: {requests: {cpu: 800m}}}]}")),
            ("default/b".to_string(), pod("spec: {tolerations: [{operator: Exists}], containers: [{name: c, resources: {requests: {cpu: 800m}}}]}")),
            ("default/gone".to_string(), pod("spec: {containers: [{name: c}]}")),
        ]);
        let end = [
            EndPod {
                key: "default/a".into(),
                node: Some("n"),
                has_reason: false,
                terminating: false,
                dra_resources: vec![],
            },
            EndPod {
                key: "default/b".into(),
                node: Some("n"),
                has_reason: false,
                terminating: false,
                dra_resources: vec![],
            },
        ];
        let all = |_: &str| Some(CHECKED_FILTERS.to_vec());
        let (faults, input) = check(&facts, &nodes, &end, &[], &all);
        assert!(input.is_empty());
        let rules: Vec<&str> = faults.iter().map(|v| v.rule.as_str()).collect();
        assert!(rules.contains(&"pod lost"), "{faults:?}");
        assert!(rules.contains(&"node over-committed"), "{faults:?}");
        assert!(rules.contains(&"TaintToleration"), "{faults:?}");
        // Pinned by the input: the input's fault, not the scheduler's.
        let pinned = HashMap::from([
            ("default/a".to_string(), pod("spec: {nodeName: n, tolerations: [{operator: Exists}], containers: [{name: c, resources: {requests: {cpu: 800m}}}]}")),
            ("default/b".to_string(), pod("spec: {nodeName: n, tolerations: [{operator: Exists}], containers: [{name: c, resources: {requests: {cpu: 800m}}}]}")),
        ]);
        let (faults, input) = check(&pinned, &nodes, &end, &[], &all);
        assert!(faults.is_empty(), "{faults:?}");
        assert_eq!(input.len(), 1, "{input:?}");
        // A victim of equal priority is the scheduler's fault.
        let same = [Preemption {
            victim: "default/v".into(),
            victim_priority: 5,
            preemptor: "default/p".into(),
            preemptor_priority: 5,
        }];
        let (faults, _) = check(&pinned, &nodes, &end, &same, &all);
        assert_eq!(faults[0].rule, "victim priority not lower", "{faults:?}");
    }

    #[test]
    fn api_server_objects_are_checked_the_same_way() {
        let obj = |y: &str| crate::yaml::from_str::<core::Pod>(y).unwrap();
        let created = [
            obj("metadata: {name: low, namespace: default}\nspec: {schedulerName: switchyard, priority: 5, containers: [{name: c}]}"),
            obj("metadata: {name: high, namespace: default}\nspec: {schedulerName: switchyard, priority: 5, containers: [{name: c, resources: {requests: {cpu: '2'}}}]}"),
            obj("metadata: {name: gone, namespace: default}\nspec: {schedulerName: switchyard, containers: [{name: c}]}"),
        ];
        // Now: low was preempted (gone), high bound to a 1-CPU node, gone vanished.
        let current = [obj("metadata: {name: high, namespace: default, uid: u-high}\nspec: {schedulerName: switchyard, nodeName: n, priority: 5, containers: [{name: c, resources: {requests: {cpu: '2'}}}]}")];
        let nodes = [crate::yaml::from_str::<core::Node>(
            "metadata: {name: n}\nstatus: {allocatable: {cpu: '1', pods: '10'}}",
        )
        .unwrap()];
        let events = [crate::yaml::from_str::<k8s_openapi::api::events::v1::Event>(
            "metadata: {name: e}\neventTime: '2026-11-25T00:00:00.000000Z'\nreason: Preempted\nnote: Preempted by pod u-high on node n\nregarding: {name: low, namespace: default}",
        )
        .unwrap()];
        let all = |_: &str| Some(CHECKED_FILTERS.to_vec());
        let (faults, input) = check_api_server(&created, &[], &current, &nodes, &events, &all);
        assert!(input.is_empty(), "{input:?}");
        let rules: Vec<(&str, Option<&str>)> = faults
            .iter()
            .map(|v| (v.rule.as_str(), v.pod.as_deref()))
            .collect();
        assert!(
            rules.contains(&("victim priority not lower", Some("default/low"))),
            "{faults:?}"
        );
        assert!(
            rules.contains(&("node over-committed", Some("default/high"))),
            "{faults:?}"
        );
        assert!(
            rules.contains(&("pod lost", Some("default/gone"))),
            "{faults:?}"
        );
        // Deleted by the caller: not lost.
        let (faults, _) = check_api_server(
            &created,
            &["default/gone".into()],
            &current,
            &nodes,
            &events,
            &all,
        );
        assert!(!faults.iter().any(|v| v.rule == "pod lost"), "{faults:?}");
    }
}
