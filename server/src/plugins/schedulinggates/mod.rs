//! SchedulingGates (PreEnqueue): a pod with `spec.schedulingGates` stays out of
//! activeQ until every gate is removed.

use std::sync::Arc;

use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{Plugin, PreEnqueuePlugin};
use crate::framework::{Handle, PluginFactory, Status};
use crate::model::Pod;

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::Pod,
            ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            |pod, _old, new| match new.and_then(|n| n.as_pod()) {
                Some(p) if p.uid == pod.uid => QueueingHint::Queue,
                _ => QueueingHint::QueueSkip,
            },
        )])
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let gates = &pod.spec.scheduling_gates;
        if gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = gates.iter().map(|g| &**g).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(SchedulingGates)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::testing::pod;

    #[test]
    fn gated_pods_wait() {
        assert!(SchedulingGates.pre_enqueue(&pod("p").build()).is_success());
        let s = SchedulingGates.pre_enqueue(&pod("p").gate("a").gate("b").build());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(s.message(), "waiting for scheduling gates: [a b]");
    }
}
