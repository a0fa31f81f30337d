//! NodeName: a pod that names its node fits only there.

use std::sync::Arc;

use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource};
use crate::framework::interface::{FilterPlugin, Plugin};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Status};
use crate::model::Pod;

pub const NAME: &str = "NodeName";
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &str {
        NAME
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::new(
            EventResource::Node,
            ActionType::ADD,
        )])
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        match &pod.node_name {
            Some(n) if **n != *node.node().name => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(NodeName)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn only_the_named_node() {
        let n = NodeInfo::new(node("a").build());
        assert!(NodeName
            .filter(&CycleState::new(), &pod("p").build(), &n)
            .is_success());
        assert!(NodeName
            .filter(&CycleState::new(), &pod("p").node("a").build(), &n)
            .is_success());
        assert_eq!(
            NodeName
                .filter(&CycleState::new(), &pod("p").node("b").build(), &n)
                .message(),
            ERR_REASON
        );
    }
}
