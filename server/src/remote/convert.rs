//! The scheduler's model to and from the wire types of the plugin contract.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use switchyard_proto::v1 as pb;

use crate::framework::events::{ActionType, ClusterEvent, ClusterEventWithHint, EventResource};
use crate::framework::{Code, NodeInfo, Status};
use crate::model::{Labels, Node, Pod, Resource, TaintEffect};

fn labels(l: &Labels) -> HashMap<String, String> {
    l.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Quantities as integers: cpu in millicores, the rest in base units.
pub fn resources(r: &Resource) -> HashMap<String, i64> {
    let mut m = HashMap::with_capacity(4 + r.scalar.iter().count());
    if r.milli_cpu != 0 {
        m.insert("cpu".to_string(), r.milli_cpu);
    }
    if r.memory != 0 {
        m.insert("memory".to_string(), r.memory);
    }
    if r.ephemeral_storage != 0 {
        m.insert("ephemeral-storage".to_string(), r.ephemeral_storage);
    }
    if r.allowed_pod_number != 0 {
        m.insert("pods".to_string(), r.allowed_pod_number);
    }
    for (k, v) in r.scalar.iter() {
        m.insert(k.to_string(), v);
    }
    m
}

fn effect(e: TaintEffect) -> String {
    e.as_str().to_string()
}

pub fn pod(p: &Pod) -> pb::Pod {
    let s = &p.spec;
    pb::Pod {
        uid: p.uid.to_string(),
        namespace: p.namespace.to_string(),
        name: p.name.to_string(),
        labels: labels(&s.labels),
        annotations: labels(&s.annotations),
        scheduler_name: s.scheduler_name.to_string(),
        priority: s.priority,
        priority_class_name: s
            .priority_class_name
            .as_deref()
            .unwrap_or_default()
            .to_string(),
        node_name: p.node_name.as_deref().unwrap_or_default().to_string(),
        nominated_node_name: p
            .nominated_node_name
            .as_deref()
            .unwrap_or_default()
            .to_string(),
        requests: resources(&s.requests),
        tolerations: s
            .tolerations
            .iter()
            .map(|t| pb::Toleration {
                key: t.key.to_string(),
                operator: match t.operator {
                    crate::model::taint::TolerationOperator::Exists => "Exists".into(),
                    crate::model::taint::TolerationOperator::Equal => "Equal".into(),
                },
                value: t.value.to_string(),
                effect: t.effect.map(effect).unwrap_or_default(),
                toleration_seconds: t.toleration_seconds,
            })
            .collect(),
        node_selector: s.node_selector.as_ref().map(labels).unwrap_or_default(),
        phase: p.phase.as_str().to_string(),
        terminating: p.deletion_timestamp.is_some(),
        creation_timestamp_micros: s.creation_timestamp.unwrap_or(0),
        start_time_micros: s.start_time.unwrap_or(0),
        owner_references: s
            .owner_references
            .iter()
            .map(|o| pb::OwnerReference {
                kind: o.kind.to_string(),
                name: o.name.to_string(),
                uid: o.uid.to_string(),
                controller: o.controller,
            })
            .collect(),
        volume_claims: s
            .volumes
            .iter()
            .filter_map(|v| match v {
                crate::model::storage::PodVolume::Claim {
                    claim,
                    read_only,
                    ephemeral,
                } => Some(pb::VolumeClaim {
                    claim_name: claim.to_string(),
                    read_only: *read_only,
                    ephemeral: *ephemeral,
                }),
                _ => None,
            })
            .collect(),
    }
}

/// The fields of a pod that change without its spec changing.
pub fn pod_update(p: &Pod) -> pb::PodUpdate {
    pb::PodUpdate {
        uid: p.uid.to_string(),
        node_name: p.node_name.as_deref().unwrap_or_default().to_string(),
        nominated_node_name: p
            .nominated_node_name
            .as_deref()
            .unwrap_or_default()
            .to_string(),
        phase: p.phase.as_str().to_string(),
        terminating: p.deletion_timestamp.is_some(),
        start_time_micros: p.spec.start_time.unwrap_or(0),
    }
}

/// Whether two copies of a pod differ only in what a `PodUpdate` carries. Cheap when
/// they share their spec (the scheduler's own copies); otherwise compares the encoded
/// objects without those fields (a copy the cluster sent back after binding).
pub fn same_but_update(a: &Pod, b: &Pod) -> bool {
    if a.uid != b.uid || a.name != b.name || a.namespace != b.namespace {
        return false;
    }
    if Arc::ptr_eq(&a.spec, &b.spec) {
        return true;
    }
    let strip = |p: &Pod| {
        let mut m = pod(p);
        m.node_name.clear();
        m.nominated_node_name.clear();
        m.phase.clear();
        m.terminating = false;
        m.start_time_micros = 0;
        m
    };
    strip(a) == strip(b)
}

pub fn node(id: u32, n: &Node) -> pb::Node {
    pb::Node {
        id,
        name: n.name.to_string(),
        uid: n.uid.to_string(),
        labels: labels(&n.labels),
        allocatable: resources(&n.allocatable),
        taints: n
            .taints
            .iter()
            .map(|t| pb::Taint {
                key: t.key.to_string(),
                value: t.value.to_string(),
                effect: effect(t.effect),
            })
            .collect(),
        unschedulable: n.unschedulable,
    }
}

pub fn node_info(ni: &NodeInfo) -> pb::Node {
    node(ni.id, ni.node())
}

pub fn status_to_pb(s: &Status) -> pb::Status {
    let code = match s.code() {
        Code::Success => pb::Code::Success,
        Code::Error => pb::Code::Error,
        Code::Unschedulable => pb::Code::Unschedulable,
        Code::UnschedulableAndUnresolvable => pb::Code::UnschedulableAndUnresolvable,
        Code::Wait => pb::Code::Wait,
        Code::Skip => pb::Code::Skip,
        Code::Pending => pb::Code::Pending,
    };
    pb::Status {
        code: code as i32,
        reasons: s.reasons().iter().map(|r| r.to_string()).collect(),
    }
}

/// A status from the wire; an unknown code is an error naming it.
pub fn status_from_pb(s: Option<&pb::Status>) -> Status {
    let Some(s) = s else {
        return Status::success();
    };
    let code = match pb::Code::try_from(s.code) {
        Ok(pb::Code::Success) => Code::Success,
        Ok(pb::Code::Error) => Code::Error,
        Ok(pb::Code::Unschedulable) => Code::Unschedulable,
        Ok(pb::Code::UnschedulableAndUnresolvable) => Code::UnschedulableAndUnresolvable,
        Ok(pb::Code::Wait) => Code::Wait,
        Ok(pb::Code::Skip) => Code::Skip,
        Ok(pb::Code::Pending) => Code::Pending,
        Err(_) => return Status::error(format!("reply carries unknown status code {}", s.code)),
    };
    if s.reasons.is_empty() {
        return Status::code_only(code);
    }
    Status::with_reasons(
        code,
        s.reasons.iter().map(|r| Cow::Owned(r.clone())).collect(),
    )
}

/// A cluster event a sidecar declared at handshake that this scheduler does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnknownEvent {
    #[error("unknown event resource {0:?}")]
    Resource(String),
    #[error("unknown event action {0:?}")]
    Action(String),
}

/// A plugin's declared events; unknown names are reported, and an empty list means
/// "every event" as for in-process plugins without registrations.
pub fn events(evs: &[pb::ClusterEvent]) -> Result<Option<Vec<ClusterEventWithHint>>, UnknownEvent> {
    if evs.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(evs.len());
    for e in evs {
        let resource = EventResource::parse(&e.resource)
            .ok_or_else(|| UnknownEvent::Resource(e.resource.clone()))?;
        let mut action = ActionType::NONE;
        for a in &e.actions {
            let parsed = ActionType::parse(a).ok_or_else(|| UnknownEvent::Action(a.clone()))?;
            action = action.union(parsed);
        }
        if e.actions.is_empty() {
            action = ActionType::ALL;
        }
        out.push(ClusterEventWithHint {
            event: ClusterEvent::new(resource, action),
            hint: None,
        });
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn pod_round_trip_fields() {
        let p = testing::pod("p")
            .cpu(250)
            .memory(1 << 20)
            .label("app", "web")
            .build();
        let w = pod(&p);
        assert_eq!(w.requests["cpu"], 250);
        assert_eq!(w.requests["memory"], 1 << 20);
        assert_eq!(w.labels["app"], "web");
        assert_eq!(w.phase, "Pending");
    }

    #[test]
    fn statuses_and_events() {
        let s = Status::unschedulable("Insufficient cpu");
        let back = status_from_pb(Some(&status_to_pb(&s)));
        assert_eq!(back.code(), Code::Unschedulable);
        assert_eq!(back.message(), "Insufficient cpu");
        let bad = status_from_pb(Some(&pb::Status {
            code: 42,
            reasons: vec![],
        }));
        assert_eq!(bad.code(), Code::Error);
        let ev = events(&[pb::ClusterEvent {
            resource: "Node".into(),
            actions: vec!["Add".into(), "UpdateNodeTaint".into()],
        }])
        .unwrap()
        .unwrap();
        assert_eq!(ev[0].event.resource, EventResource::Node);
        assert!(events(&[pb::ClusterEvent {
            resource: "Gadget".into(),
            actions: vec![],
        }])
        .is_err());
    }
}
