//! The SDK glue: each extension point hands the bookkeeping in `gang.rs` the pod,
//! the replica's pods and the waiting pods, then acts on its answer through the
//! [`Handle`].

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use switchyard_plugin_sdk::{
    pb, Cycle, CycleState, Handle, Index, PermitPlugin, Plugin, Pod, PreEnqueuePlugin,
    PreFilterPlugin, PreFilterResult, QueueSortPlugin, ReservePlugin, Status,
};

use crate::gang::{group_key, Gangs, PermitDecision, POD_GROUP_LABEL};

pub const NAME: &str = "Coscheduling";
/// Upstream's message to members released by a failed sibling.
const UNRESERVE_REJECTION: &str = "rejection in Unreserve";

pub struct Coscheduling {
    gangs: Gangs,
    /// Set once at start (`serve`'s `on_handle`): Unreserve gets no handle from the
    /// SDK, yet must reject the waiting siblings.
    handle: OnceLock<Handle>,
}

impl Coscheduling {
    pub fn new(gangs: Gangs) -> Self {
        Coscheduling {
            gangs,
            handle: OnceLock::new(),
        }
    }

    /// Keeps the SDK's handle for Unreserve. Later calls are ignored.
    pub fn set_handle(&self, handle: Handle) {
        let _ = self.handle.set(handle);
    }
}

impl Plugin for Coscheduling {
    fn name(&self) -> &str {
        NAME
    }
    /// A pod rejected for missing siblings may fit once one is created (upstream
    /// registers Pod/Add), or once an existing pod is labelled into its group.
    fn events(&self) -> Vec<pb::ClusterEvent> {
        vec![pb::ClusterEvent {
            resource: "Pod".into(),
            actions: vec!["Add".into(), "UpdatePodLabel".into()],
        }]
    }
    /// The placed members of a group, without scanning every pod of the cluster.
    fn indexes(&self) -> Vec<Index> {
        vec![Index::PodListsByLabel(POD_GROUP_LABEL.into())]
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}

/// Counts members; never gates (a gate would hide the pods PreFilter counts on).
impl PreEnqueuePlugin for Coscheduling {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        self.gangs.observe(pod);
        Status::success()
    }
}

/// Gang members leave the queue together (enable it as the profile's queueSort, in
/// place of PrioritySort).
impl QueueSortPlugin for Coscheduling {
    fn sort_key(&self, pod: &Pod) -> Vec<u8> {
        self.gangs.sort_key(pod, Instant::now())
    }
}

/// The replica's pods that may be in `pod`'s group: its group's placed pods from the
/// index (every pod when the index is missing, as in a test that built its own
/// replica); `gang.rs` keeps only the group's.
fn candidates<'a>(cycle: &'a Cycle) -> Box<dyn Iterator<Item = &'a Arc<Pod>> + 'a> {
    let pod = cycle.pod;
    match (
        cycle.snapshot.pod_lists_by_label(POD_GROUP_LABEL),
        pod.labels.get(POD_GROUP_LABEL),
    ) {
        (Some(lists), Some(group)) => Box::new(lists.pods(&pod.namespace, group)),
        _ => Box::new(cycle.snapshot.pods()),
    }
}

impl PreFilterPlugin for Coscheduling {
    fn pre_filter(&self, cycle: &Cycle, _state: &mut CycleState) -> PreFilterResult {
        self.gangs
            .pre_filter(cycle.pod, candidates(cycle), Instant::now())
            .into()
    }
}

impl PermitPlugin for Coscheduling {
    fn permit(
        &self,
        cycle: &Cycle,
        _state: &mut CycleState,
        _node: &str,
        handle: &Handle,
    ) -> (Status, Duration) {
        // Most pods are not gang pods: skip listing the waiting ones for them.
        if group_key(cycle.pod).is_none() {
            return (Status::success(), Duration::ZERO);
        }
        let waiting = handle.waiting_pods(NAME);
        match self
            .gangs
            .permit(cycle.pod, candidates(cycle), &waiting, Instant::now())
        {
            PermitDecision::NotGang => (Status::success(), Duration::ZERO),
            PermitDecision::Allow(siblings) => {
                for uid in siblings {
                    handle.allow(NAME, &uid);
                }
                (Status::success(), Duration::ZERO)
            }
            PermitDecision::Wait(timeout) => (Status::wait(), timeout),
            PermitDecision::Reject(s) => (s, Duration::ZERO),
        }
    }
}

impl ReservePlugin for Coscheduling {
    fn reserve(&self, _cycle: &Cycle, _state: &mut CycleState, _node: &str) -> Status {
        Status::success()
    }

    fn unreserve(&self, cycle: &Cycle, _state: &mut CycleState, _node: &str) {
        if group_key(cycle.pod).is_none() {
            return;
        }
        let waiting = self
            .handle
            .get()
            .map(|h| h.waiting_pods(NAME))
            .unwrap_or_default();
        let reject = self
            .gangs
            .unreserve(cycle.pod, cycle.id, &waiting, Instant::now());
        if let Some(h) = self.handle.get() {
            for uid in reject {
                h.reject(NAME, &uid, UNRESERVE_REJECTION);
            }
        }
    }
}
