//! NodeUnschedulable: cordoned nodes (`spec.unschedulable`) take only pods that
//! tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint.

use std::sync::Arc;

use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{FilterPlugin, Plugin};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::taint::tolerations_tolerate_taint;
use crate::model::{Pod, Taint, TaintEffect};

pub const NAME: &str = "NodeUnschedulable";
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub struct NodeUnschedulable;

fn unschedulable_taint() -> Taint {
    Taint {
        key: TAINT_NODE_UNSCHEDULABLE.into(),
        value: "".into(),
        effect: TaintEffect::NoSchedule,
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &str {
        NAME
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_TAINT),
                |_pod, old, new| {
                    let new = new.and_then(|n| n.as_node());
                    let old = old.and_then(|o| o.as_node());
                    match (old, new) {
                        (None, Some(n)) if !n.unschedulable => QueueingHint::Queue,
                        (Some(o), Some(n)) if o.unschedulable && !n.unschedulable => {
                            QueueingHint::Queue
                        }
                        _ => QueueingHint::QueueSkip,
                    }
                },
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::UPDATE_POD_TOLERATION,
                |pod, _old, new| match new.and_then(|n| n.as_pod()) {
                    Some(p)
                        if p.uid == pod.uid
                            && tolerations_tolerate_taint(
                                &p.spec.tolerations,
                                &unschedulable_taint(),
                            ) =>
                    {
                        QueueingHint::Queue
                    }
                    _ => QueueingHint::QueueSkip,
                },
            ),
        ])
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !node.unschedulable
            || tolerations_tolerate_taint(&pod.spec.tolerations, &unschedulable_taint())
        {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(NodeUnschedulable)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::taint::{Toleration, TolerationOperator};
    use crate::testing::{node, pod};

    #[test]
    fn cordoned_nodes_need_the_toleration() {
        let n = NodeInfo::new(node("n").unschedulable().build());
        let s = NodeUnschedulable.filter(&CycleState::new(), &pod("p").build(), &n);
        assert_eq!(s.message(), ERR_REASON_UNSCHEDULABLE);
        let tolerant = pod("p")
            .toleration(Toleration {
                key: TAINT_NODE_UNSCHEDULABLE.into(),
                operator: TolerationOperator::Exists,
                value: "".into(),
                effect: None,
                toleration_seconds: None,
            })
            .build();
        assert!(NodeUnschedulable
            .filter(&CycleState::new(), &tolerant, &n)
            .is_success());
        let ok = NodeInfo::new(node("n").build());
        assert!(NodeUnschedulable
            .filter(&CycleState::new(), &pod("p").build(), &ok)
            .is_success());
    }
}
