//! NodeDeclaredFeatures (KEP-5328; beta and in the default profile in v1.36): a pod
//! that needs a node feature (inferred from its spec at ingest,
//! [`crate::model::features`]) goes only to nodes that declare it in
//! `status.declaredFeatures`. A pod that needs none skips the plugin (PreFilter Skip).

use std::sync::Arc;

use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult};
use crate::framework::{CycleState, Handle, NodeInfo, PluginFactory, Snapshot, Status};
use crate::model::Pod;

pub const NAME: &str = "NodeDeclaredFeatures";
pub const ERR_REASON_UNSATISFIED_REQUIREMENTS: &str =
    "node(s) didn't match Pod's required features";

pub struct NodeDeclaredFeatures;

impl Plugin for NodeDeclaredFeatures {
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
                EventResource::Node,
                ActionType::ADD.union(ActionType::UPDATE_NODE_DECLARED_FEATURE),
                |_pod, old, new| {
                    let old = old.and_then(|o| o.as_node());
                    let new = new.and_then(|n| n.as_node());
                    match (old, new) {
                        (Some(o), Some(n)) if o.declared_features == n.declared_features => {
                            QueueingHint::QueueSkip
                        }
                        _ => QueueingHint::Queue,
                    }
                },
            ),
            // The pod's own update, when it changes what the pod needs.
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::UPDATE,
                |pod, old, new| match (old.and_then(|o| o.as_pod()), new.and_then(|n| n.as_pod())) {
                    (Some(o), Some(n))
                        if n.uid == pod.uid
                            && o.spec.required_features != n.spec.required_features =>
                    {
                        QueueingHint::Queue
                    }
                    _ => QueueingHint::QueueSkip,
                },
            ),
        ])
    }
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.spec.required_features.is_empty() {
            return (None, Status::skip());
        }
        (None, Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if pod
            .spec
            .required_features
            .is_subset(node.node().declared_features)
        {
            return Status::success();
        }
        // No preemption can give a node a feature.
        Status::unresolvable(ERR_REASON_UNSATISFIED_REQUIREMENTS)
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(NodeDeclaredFeatures)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn a_pod_needing_a_feature_goes_where_it_is_declared() {
        let (_, s) = NodeDeclaredFeatures.pre_filter(
            &mut CycleState::new(),
            &pod("p").build(),
            &Snapshot::default(),
        );
        assert!(s.is_skip(), "a pod that needs nothing skips");
        let p = pod("p")
            .required_features(&["UserNamespacesHostNetworkSupport"])
            .build();
        let with = node("with")
            .declared_features(&[
                "RestartAllContainersOnContainerExits",
                "UserNamespacesHostNetworkSupport",
            ])
            .build();
        let st = CycleState::new();
        assert!(NodeDeclaredFeatures
            .filter(&st, &p, &NodeInfo::new(with))
            .is_success());
        let s = NodeDeclaredFeatures.filter(&st, &p, &NodeInfo::new(node("without").build()));
        assert_eq!(s.message(), ERR_REASON_UNSATISFIED_REQUIREMENTS);
        assert_eq!(
            s.code(),
            crate::framework::Code::UnschedulableAndUnresolvable
        );
    }
}
