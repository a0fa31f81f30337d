//! The extension points, as traits. A plugin is one value implementing [`Plugin`] plus
//! any of the extension-point traits; it advertises which through the `as_*` methods,
//! and the runtime rejects a configuration that enables a plugin at a point it does
//! not implement. Remote (sidecar) plugins implement the same traits.
//!
//! Scheduling-cycle points are synchronous: they run on the scheduling thread and, for
//! Filter and Score, in parallel over nodes. Binding-cycle points (PreBind, Bind,
//! PostBind) are async: they run in concurrent binding tasks.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cycle_state::CycleState;
use super::events::ClusterEventWithHint;
use super::interned::PluginName;
use super::node_info::NodeInfo;
use super::status::{Code, Status};
use crate::framework::snapshot::Snapshot;
use crate::model::Pod;

pub use crate::client::BoxFuture;

/// Nominated pods by node (copy-on-write view of the nominator).
pub type NominatedPods = Arc<rustc_hash::FxHashMap<Arc<str>, Arc<[NominatedPod]>>>;

/// A pod nominated to a node, with what Filter tests first stored inline: Filter
/// consults these on every node in every cycle, and chasing each pod pointer for its
/// priority and UID costs more than the filters themselves.
#[derive(Clone, Debug)]
pub struct NominatedPod {
    pub priority: i32,
    /// [`uid_fingerprint`] of the pod's UID.
    pub uid_fp: u64,
    pub pod: Arc<Pod>,
}

impl NominatedPod {
    pub fn new(pod: Arc<Pod>) -> Self {
        NominatedPod {
            priority: pod.priority(),
            uid_fp: uid_fingerprint(&pod.uid),
            pod,
        }
    }

    /// Whether this is `pod` (same UID), cheaply: fingerprints first.
    pub fn is(&self, uid: &str, uid_fp: u64) -> bool {
        self.uid_fp == uid_fp && *self.pod.uid == *uid
    }
}

/// A hash of a UID for quick inequality tests.
pub fn uid_fingerprint(uid: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(uid)
}

/// What PostFilter plugins work with: the cycle's state and snapshot, the framework to
/// re-run filters (preemption dry runs), and the nominated pods.
pub struct PostFilterContext<'a> {
    pub state: &'a mut CycleState,
    pub snapshot: &'a Snapshot,
    pub framework: &'a super::Framework,
    pub nominated: &'a NominatedPods,
}

/// Highest score a Score plugin may return after normalisation.
pub const MAX_NODE_SCORE: i64 = 100;
pub const MIN_NODE_SCORE: i64 = 0;
/// Longest a pod may wait at Permit (upstream `maxTimeout`).
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A pod as the queue holds it.
#[derive(Clone, Debug)]
pub struct QueuedPodInfo {
    pub pod: Arc<Pod>,
    /// When the pod (re-)entered the queue; QueueSort's tie-breaker and backoff base.
    pub timestamp: Instant,
    /// Scheduling attempts so far (incremented on every pop).
    pub attempts: u32,
    /// Times the pod came back rejected by plugins.
    pub unschedulable_count: u32,
    /// Consecutive times the pod came back after an error (reset by a rejection).
    pub consecutive_errors_count: u32,
    /// First time the pod entered activeQ (scheduling latency from here).
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt (drive requeueing).
    pub unschedulable_plugins: HashSet<PluginName>,
    /// Plugins that returned Pending in its last attempt.
    pub pending_plugins: HashSet<PluginName>,
    /// The PreEnqueue plugin holding the pod back, if any.
    pub gating_plugin: Option<PluginName>,
    /// The last PreEnqueue error recorded as the pod's reason (not recorded again).
    pub pre_enqueue_error: Option<String>,
    /// Why the gating plugin holds the pod back (its status message), for reports:
    /// upstream writes nothing to the pod for a PreEnqueue rejection.
    pub gating_message: Option<String>,
    /// Cached backoff expiry, cleared on requeue.
    pub backoff_expiration: Option<Instant>,
    /// A sort key computed once at enqueue by a remote QueueSort plugin.
    pub sort_key: Option<Arc<[u8]>>,
}

impl QueuedPodInfo {
    pub fn new(pod: Arc<Pod>, now: Instant) -> Self {
        QueuedPodInfo {
            pod,
            timestamp: now,
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: HashSet::new(),
            pending_plugins: HashSet::new(),
            gating_plugin: None,
            pre_enqueue_error: None,
            gating_message: None,
            backoff_expiration: None,
            sort_key: None,
        }
    }

    pub fn gated(&self) -> bool {
        self.gating_plugin.is_some()
    }
}

/// PreFilter's optional narrowing of the nodes to evaluate; `None` names = all nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    pub node_names: Option<HashSet<Arc<str>>>,
}

impl PreFilterResult {
    pub fn all_nodes(&self) -> bool {
        self.node_names.is_none()
    }

    pub fn nodes(names: impl IntoIterator<Item = Arc<str>>) -> Self {
        PreFilterResult {
            node_names: Some(names.into_iter().collect()),
        }
    }

    /// Upstream `PreFilterResult.Merge`: intersection, where "all nodes" is neutral.
    pub fn merge(self, other: Option<PreFilterResult>) -> PreFilterResult {
        let Some(other) = other else { return self };
        match (self.node_names, other.node_names) {
            (None, None) => PreFilterResult::default(),
            (None, Some(b)) => PreFilterResult {
                node_names: Some(b),
            },
            (Some(a), None) => PreFilterResult {
                node_names: Some(a),
            },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// How PostFilter asks to change the pod's nominated node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NominatingInfo {
    /// Leave the nomination as it is.
    Noop,
    /// Set it (`Some`) or clear it (`None`).
    Override(Option<Arc<str>>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostFilterResult {
    pub nominating_info: NominatingInfo,
}

/// Statuses of the nodes that failed Filter; nodes not listed have the "absent" status
/// (UnschedulableAndUnresolvable by default, or the PreFilter rejection).
///
/// Kept in the order they were found, with the by-name index built only when something
/// looks a node up (preemption, failure handling): a pod that fits on one node of 5,000
/// records 4,999 rejections and never reads them back.
#[derive(Clone, Debug)]
pub struct NodeToStatus {
    statuses: Vec<(Arc<str>, Status)>,
    index: std::sync::OnceLock<rustc_hash::FxHashMap<Arc<str>, u32>>,
    absent: Status,
}

impl Default for NodeToStatus {
    fn default() -> Self {
        NodeToStatus {
            statuses: Vec::new(),
            index: std::sync::OnceLock::new(),
            absent: Status::code_only(Code::UnschedulableAndUnresolvable),
        }
    }
}

impl NodeToStatus {
    fn position(&self, node: &str) -> Option<usize> {
        let index = self.index.get_or_init(|| {
            self.statuses
                .iter()
                .enumerate()
                .map(|(i, (n, _))| (n.clone(), i as u32))
                .collect()
        });
        index.get(node).map(|&i| i as usize)
    }
    pub fn get(&self, node: &str) -> &Status {
        self.explicit(node).unwrap_or(&self.absent)
    }
    /// The node's own status, if it has one (not the absent default).
    pub fn explicit(&self, node: &str) -> Option<&Status> {
        self.position(node).map(|i| &self.statuses[i].1)
    }
    pub fn set(&mut self, node: Arc<str>, status: Status) {
        match self.position(&node) {
            Some(i) => self.statuses[i].1 = status,
            None => {
                if let Some(index) = self.index.get_mut() {
                    index.insert(node.clone(), self.statuses.len() as u32);
                }
                self.statuses.push((node, status));
            }
        }
    }
    /// Records a node that has no status yet (the caller knows): no lookup.
    pub fn push_new(&mut self, node: Arc<str>, status: Status) {
        self.index.take();
        self.statuses.push((node, status));
    }
    /// Room for `n` more statuses.
    pub fn reserve(&mut self, n: usize) {
        self.statuses.reserve(n);
    }
    pub fn set_absent(&mut self, status: Status) {
        self.absent = status;
    }
    pub fn absent(&self) -> &Status {
        &self.absent
    }
    /// Number of nodes with an explicit status.
    pub fn len(&self) -> usize {
        self.statuses.len()
    }
    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }
    /// The statuses in the order they were recorded.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Status)> {
        self.statuses.iter().map(|(n, s)| (n, s))
    }
}

/// Base trait of every plugin. The `as_*` methods say which extension points it
/// implements; the defaults say "none".
pub trait Plugin: Send + Sync + 'static {
    fn name(&self) -> &str;

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }

    /// The cluster events that may make a pod this plugin rejected schedulable
    /// (upstream `EnqueueExtensions.EventsToRegister`). `None` means the plugin does
    /// not declare any: every event requeues its pods.
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        None
    }

    /// Remote plugins: the sidecar connection that must see every attempt's start
    /// (snapshot replication) and end (state cleanup).
    fn cycle_hooks(&self) -> Option<Arc<dyn CycleHooks>> {
        None
    }
}

/// Attempt boundaries, for plugins whose state lives elsewhere (sidecars).
pub trait CycleHooks: Send + Sync {
    /// Identity: hooks shared by several plugins run once per attempt.
    fn key(&self) -> usize;
    /// Before PreFilter, with the attempt's snapshot.
    fn cycle_start(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        profile: &str,
    );
    /// When the attempt is over: bound, failed, or rejected.
    fn cycle_end(&self, state: &CycleState);
    /// Starts the cycle of a pod that is not popped yet (the queue's next one) in
    /// `state`, for a lookahead Filter, if every plugin behind these hooks is
    /// node-local; `snapshot` is the current attempt's. `cycle_start` later adopts
    /// the cycle when the pod's attempt begins with that state.
    fn lookahead_start(
        &self,
        _state: &mut CycleState,
        _pod: &Arc<Pod>,
        _snapshot: &Snapshot,
        _profile: &str,
    ) -> bool {
        false
    }
    /// How many queued pods a lookahead may cover in one message to these plugins
    /// (0: none; 1: one pod at a time).
    fn lookahead_pods(&self) -> usize {
        0
    }
    /// Lookahead Filters started until [`Self::end_lookahead_batch`] may travel in
    /// one message.
    fn begin_lookahead_batch(&self) {}
    /// Sends what was collected since [`Self::begin_lookahead_batch`].
    fn end_lookahead_batch(&self) {}
}

/// A call in flight to a plugin that evaluates batches (remote plugins).
pub trait PendingFilter: Send {
    /// The nodes that did not pass, by their index in the batch.
    fn wait(self: Box<Self>) -> Result<Vec<(usize, Status)>, Status>;
}

/// A request to score ahead in a batched Filter call (the plugin is also a Score
/// plugin of the profile): score the first `first` nodes that pass, after PreScore if
/// `pre_score`. The plugin keeps the answer and uses it at Score only if the feasible
/// set turns out to be exactly those nodes, which saves a round trip per pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScoreAhead {
    pub first: usize,
    pub pre_score: bool,
}

/// The first Filter round an attempt evaluates when no PreFilter narrows the nodes
/// and none has a nominated pod: `len` nodes of the snapshot's list from `start`
/// (wrapping), asking `score_first` scores ahead. Written in the cycle state during
/// PreFilter, so a remote plugin can send that round right behind its PreFilter;
/// the answer is used only if the round the attempt evaluates is exactly this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstRound {
    pub start: usize,
    pub len: usize,
    pub score_first: usize,
    /// The score-ahead the plugin whose PreFilter runs now would be asked for.
    pub ahead: Option<ScoreAhead>,
}

/// Where the nodes of a batched Filter come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSource {
    /// The attempt's snapshot's own node infos.
    Snapshot,
    /// What-if copies with pods added or removed (preemption's dry runs): never the
    /// node's own, so answers for them are not kept for other pods.
    WhatIf,
}

/// Filter over many nodes in one call; the runtime starts it, runs the in-process
/// plugins meanwhile, then waits.
pub trait BatchFilter: Send + Sync {
    fn start_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
        source: NodeSource,
    ) -> Result<Box<dyn PendingFilter>, Status>;

    /// Sends this Filter for a pod whose attempt has not begun (a lookahead) and keeps
    /// the call in `state`. `start_filter` of that attempt uses it only if it names
    /// the same nodes, none of them changed since, and the same `ahead`; otherwise it
    /// calls again. Only plugins whose answers depend on nothing but the named nodes
    /// may do this. False when nothing was sent.
    fn lookahead_filter(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _nodes: &[&NodeInfo],
        _ahead: Option<ScoreAhead>,
    ) -> bool {
        false
    }
}

/// A Score call in flight: scores in batch order, and whether they are normalised.
pub trait PendingScore: Send {
    fn wait(self: Box<Self>) -> Result<(Vec<i64>, bool), Status>;
}

pub trait BatchScore: Send + Sync {
    /// `with_pre_score`: the plugin's PreScore was deferred to this call.
    fn start_score(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        with_pre_score: bool,
    ) -> Result<Box<dyn PendingScore>, Status>;
}

pub trait PreEnqueuePlugin: Plugin {
    /// Success lets the pod into activeQ; anything else keeps it gated.
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}

pub trait QueueSortPlugin: Plugin {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;

    /// The key `less` compares, for plugins that order by one (remote QueueSort): the
    /// queue computes it once when a pod is enqueued or updated, outside its lock, so
    /// the heap never waits on a sidecar. `None` for plugins that compare pods directly.
    fn sort_key(&self, _pod: &Pod) -> Option<Arc<[u8]>> {
        None
    }
}

pub trait PreFilterPlugin: Plugin {
    /// Computes per-cycle state; may narrow the nodes (`Some` result) or return Skip to
    /// skip this plugin's Filter for the pod.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status);

    /// AddPod/RemovePod, for plugins whose Filter depends on other pods: keeps their
    /// state right when the scheduler evaluates "what if" (nominated pods, preemption).
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }

    /// Starts PreFilter without waiting for its outcome (a remote plugin: the call
    /// travels while the scheduler's own plugins run), for [`Self::finish_pre_filter`]
    /// to take; `pre_filter` later in the same attempt returns that outcome again.
    /// False: not started, call `pre_filter`. The plugin's Filter in that attempt must
    /// take the outcome first and pass every node when it is not Success: a Skip then
    /// stands as if the Filter had not run (any other outcome redoes the phase).
    fn start_pre_filter(&self, _state: &mut CycleState, _pod: &Pod, _snapshot: &Snapshot) -> bool {
        false
    }

    /// The outcome of the PreFilter [`Self::start_pre_filter`] started in this
    /// attempt (waiting for it), if one was.
    fn finish_pre_filter(&self, _state: &CycleState) -> Option<(Option<PreFilterResult>, Status)> {
        None
    }
}

pub trait PreFilterExtensions: Send + Sync {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_add: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status;
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &Pod,
        pod_to_remove: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status;
}

pub trait FilterPlugin: Plugin {
    /// Success, Unschedulable or UnschedulableAndUnresolvable for one node. Runs in
    /// parallel over nodes: must not lock or allocate on the success path.
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status;

    /// Plugins that evaluate a batch of nodes per call (remote ones).
    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        None
    }
}

pub trait PostFilterPlugin: Plugin {
    /// Runs when no node fits; may make one fit later (preemption) and nominate it.
    fn post_filter(
        &self,
        ctx: PostFilterContext<'_>,
        pod: &Arc<Pod>,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status);
}

pub trait PreScorePlugin: Plugin {
    /// `nodes` are the feasible nodes. Skip skips this plugin's Score for the pod.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status;

    /// The plugin can run its PreScore inside its batched Score call (remote plugins:
    /// one exchange instead of two).
    fn deferrable(&self) -> bool {
        false
    }

    /// Starts this attempt's PreScore as the cycle starts, before Filter, for a
    /// plugin whose PreScore reads no node list (a remote plugin that scores by a
    /// node label): its call travels while Filter runs, and `pre_score` takes the
    /// reply.
    fn start_pre_score(&self, _state: &mut CycleState) {}
}

pub trait ScorePlugin: Plugin {
    /// A score for one node.
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status>;

    /// Scores a batch of nodes into `out` (same length). The runtime calls this on
    /// chunks of the feasible nodes in parallel; override it to read cycle state once
    /// per batch, or to send the whole batch in one message (remote plugins).
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        for (n, o) in nodes.iter().zip(out.iter_mut()) {
            *o = self.score(state, pod, n)?;
        }
        Ok(())
    }

    /// Plugins that score the whole batch in one call (remote ones).
    fn as_batch(&self) -> Option<&dyn BatchScore> {
        None
    }

    /// Whether [`normalize_score`](Self::normalize_score) should run.
    fn has_normalize_score(&self) -> bool {
        false
    }

    /// Rescales all nodes' scores (same order as `nodes`) into 0..=100.
    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        _scores: &mut [i64],
    ) -> Status {
        Status::success()
    }
}

pub trait ReservePlugin: Plugin {
    fn reserve(&self, state: &mut CycleState, pod: &Pod, node: &str) -> Status;
    /// Must be idempotent and cannot fail.
    fn unreserve(&self, state: &mut CycleState, pod: &Pod, node: &str);
}

pub trait PermitPlugin: Plugin {
    /// Success, a rejection, or Wait with how long to wait.
    fn permit(&self, state: &mut CycleState, pod: &Pod, node: &str) -> (Status, Duration);
}

pub trait PreBindPlugin: Plugin {
    /// Upstream `PreBindPreFlight` (KEP-5278): whether PreBind has work for the pod on
    /// `node`, cheaply and without doing it: Success (it has), Skip (PreBind is not
    /// called for this pod) or an error. A plugin that cannot tell says Success.
    fn pre_bind_pre_flight(&self, _state: &CycleState, _pod: &Pod, _node: &str) -> Status {
        Status::success()
    }

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

pub trait BindPlugin: Plugin {
    /// Skip passes the pod to the next bind plugin.
    fn bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

pub trait PostBindPlugin: Plugin {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, ()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> Option<PreFilterResult> {
        Some(PreFilterResult::nodes(names.iter().map(|n| Arc::from(*n))))
    }

    #[test]
    fn prefilter_results_intersect() {
        let all = PreFilterResult::default();
        assert!(all.clone().merge(None).all_nodes());
        let r = all.merge(set(&["a", "b"])).merge(set(&["b", "c"]));
        assert_eq!(
            r.node_names.unwrap().into_iter().collect::<Vec<_>>(),
            vec![Arc::from("b")]
        );
    }
}
