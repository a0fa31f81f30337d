//! NodePorts: a pod's host ports must be free on the node.

use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::Pod;

pub const NAME: &str = "NodePorts";
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::DELETE,
                |pod, old, _new| {
                    let Some(deleted) = old.and_then(|o| o.as_pod()) else {
                        return QueueingHint::Queue;
                    };
                    if deleted.node_name.is_none() && deleted.nominated_node_name.is_none() {
                        return QueueingHint::QueueSkip;
                    }
                    let shares_port = deleted.spec.host_ports.iter().any(|d| {
                        pod.spec.host_ports.iter().any(|p| {
                            p.port == d.port
                                && p.protocol == d.protocol
                                && (p.ip == d.ip || &*p.ip == "0.0.0.0" || &*d.ip == "0.0.0.0")
                        })
                    });
                    if shares_port {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
            ClusterEventWithHint::new(EventResource::Node, ActionType::ADD),
        ])
    }
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.spec.host_ports.is_empty() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if node.used_ports.is_empty() {
            return Status::success();
        }
        if pod
            .spec
            .host_ports
            .iter()
            .any(|p| node.used_ports.conflicts(p))
        {
            return Status::unschedulable(ERR_REASON);
        }
        Status::success()
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(NodePorts)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::{node, pod};

    #[test]
    fn conflicting_host_port() {
        let mut n = NodeInfo::new(node("n").build());
        n.add_pod(pod("a").node("n").host_port(8080).build());
        let s = NodePorts.filter(&CycleState::new(), &pod("b").host_port(8080).build(), &n);
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(s.message(), ERR_REASON);
        assert!(NodePorts
            .filter(&CycleState::new(), &pod("c").host_port(9090).build(), &n)
            .is_success());
        let (_, s) = NodePorts.pre_filter(
            &mut CycleState::new(),
            &pod("d").build(),
            &Snapshot::default(),
        );
        assert!(s.is_skip());
    }
}
