//! One pod's journey (upstream `schedule_one.go`): pop, snapshot, PreFilter, Filter over
//! nodes (in parallel, stopping once enough fit), PostFilter when none fit, PreScore,
//! Score, pick a node, assume, Reserve, Permit — then, off the scheduling thread, the
//! binding cycle: wait on Permit, PreBind, Bind, PostBind. Failures unreserve, forget
//! the assumed pod and requeue it; every pod ends bound or queued with a reason.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::stats::{AttemptRecord, AttemptResult};
use super::Scheduler;
use crate::cache::Snapshot;
use crate::cluster::{EventType, PodCondition, PodEvent, PodStatusUpdate, REMOTE_PLUGIN_IGNORED};
pub use crate::framework::diagnosis::{fit_error_message, Diagnosis};
use crate::framework::events::{EventObject, EVENT_ASSIGNED_POD_DELETE};
use crate::framework::interface::{NominatingInfo, QueuedPodInfo};
use crate::framework::runtime::{filter_map_adaptive, PARALLEL_THRESHOLD};
use crate::framework::{Code, CycleState, Framework, NodeInfo, ScoreBuffer, Status};
use crate::model::Pod;
use crate::queue::NominatedPods;

/// Numbers scheduling attempts for sidecars, which key per-attempt state by it.
fn next_cycle_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// At least this many nodes are checked for feasibility per cycle.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;
/// Kubernetes event notes are cut at this length (upstream `NoteLengthLimit`).
const NOTE_LENGTH_LIMIT: usize = 1024;

/// Upstream `numFeasibleNodesToFind`: all nodes under 100; otherwise the percentage
/// (adaptive `50 - n/125`, at least 5% when unset) of them, at least 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let n = num_all_nodes as i64;
    let mut p = i64::from(percentage);
    if p == 0 {
        p = (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    let num = (n * p / 100) as usize;
    num.max(MIN_FEASIBLE_NODES_TO_FIND)
}

fn truncate_message(msg: String) -> String {
    if msg.len() <= NOTE_LENGTH_LIMIT {
        return msg;
    }
    let mut cut = NOTE_LENGTH_LIMIT - 4;
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} ...", &msg[..cut])
}

/// The outcome of `schedule_pod`.
enum ScheduleError {
    /// No nodes in the cluster at all.
    NoNodes,
    /// No node fits; the diagnosis says why.
    Fit(Box<Diagnosis>, usize),
    /// A plugin failed.
    Error(Status),
}

pub struct ScheduleResult {
    pub host: Arc<str>,
    pub evaluated_nodes: usize,
    pub feasible_nodes: usize,
}

/// What the scheduling thread keeps between cycles.
pub struct LoopState {
    pub snapshot: Snapshot,
    next_start_node_index: usize,
    scores: ScoreBuffer,
    filter_failures: Vec<(usize, Status)>,
    rng: SplitMix64,
    /// The next pods' Filters, sent to node-local sidecars ahead of their cycles, in
    /// queue order.
    lookahead: VecDeque<Lookahead>,
    /// Nodes the previous attempt's Filter went through (see `Scheduler::lookahead`).
    last_processed: usize,
}

/// A lookahead (see [`Framework::lookahead`]): the pod it was sent for and the state
/// its attempt begins with.
struct Lookahead {
    pod: Arc<Pod>,
    fw: Arc<Framework>,
    state: CycleState,
}

impl LoopState {
    /// The state `pod`'s attempt begins with, if a lookahead covered it. Lookaheads
    /// for pods before it, which the queue did not give first after all, are dropped
    /// (the sidecars are told to end their cycles).
    fn adopt_lookahead(&mut self, pod: &Arc<Pod>) -> Option<CycleState> {
        let i = self
            .lookahead
            .iter()
            .position(|la| Arc::ptr_eq(&la.pod, pod))?;
        for la in self.lookahead.drain(..i) {
            la.fw.end_cycle(&la.state);
        }
        self.lookahead.pop_front().map(|la| la.state)
    }

    /// Drops every lookahead, ending their cycles.
    fn drop_lookahead(&mut self) {
        for la in self.lookahead.drain(..) {
            la.fw.end_cycle(&la.state);
        }
    }
}

impl LoopState {
    pub fn new(seed: u64) -> Self {
        LoopState {
            snapshot: Snapshot::default(),
            next_start_node_index: 0,
            scores: ScoreBuffer::default(),
            filter_failures: Vec::new(),
            rng: SplitMix64(seed),
            lookahead: VecDeque::new(),
            last_processed: 0,
        }
    }
}

/// A small, seedable generator for tie-breaking; reproducible across runs.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `scheduler_framework_extension_point_duration_seconds` for one extension point.
fn extension_point_metric(point: &str, code: Code, fw: &Framework, start: Instant) {
    crate::telemetry::metrics::SCHEDULER
        .extension_point_duration
        .observe(
            &[point, code.as_str(), fw.profile_name()],
            start.elapsed().as_secs_f64(),
        );
}

/// The root span of an attempt, and whether it is sampled; an unsampled attempt
/// keeps no span at all.
fn attempt_trace(
    pod: &Pod,
    pinfo: &QueuedPodInfo,
    profile: &str,
    now: Instant,
) -> crate::telemetry::trace::AttemptTrace {
    // Fields are filled only once the attempt is known to be sampled: an unsampled
    // attempt pays for an empty span and the sampling decision, nothing more.
    // One operation name for every attempt (Jaeger groups by it); the pod is in the
    // attributes.
    let span = tracing::info_span!(
        "scheduling_attempt",
        pod.namespace = tracing::field::Empty,
        pod.name = tracing::field::Empty,
        pod.uid = tracing::field::Empty,
        profile = tracing::field::Empty,
        attempt = tracing::field::Empty,
        queue_wait_ms = tracing::field::Empty,
        result = tracing::field::Empty,
        message = tracing::field::Empty,
        node = tracing::field::Empty,
        feasible_nodes = tracing::field::Empty,
        evaluated_nodes = tracing::field::Empty,
        generation = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    let sampled = crate::telemetry::trace::is_sampled(&span);
    if sampled {
        // Log lines inside the attempt carry the span's fields: this one links them
        // to the trace in Jaeger.
        span.record(
            "trace_id",
            crate::telemetry::trace::trace_id(&span).as_str(),
        );
        let queue_wait_ms = now.saturating_duration_since(pinfo.timestamp).as_secs_f64() * 1000.0;
        span.record("pod.namespace", &*pod.namespace);
        span.record("pod.name", &*pod.name);
        span.record("pod.uid", &*pod.uid);
        span.record("profile", profile);
        span.record("attempt", pinfo.attempts);
        span.record("queue_wait_ms", queue_wait_ms);
    }
    crate::telemetry::trace::AttemptTrace {
        span: if sampled { span } else { tracing::Span::none() },
        sampled,
    }
}

/// The scheduling thread: cycles until the queue closes.
pub fn run_scheduling_loop(sched: &Arc<Scheduler>) {
    // Like kube-scheduler, schedule only once the initial listing is in the cache and
    // queue: decisions then see the whole cluster, and priorities order the backlog.
    // A standby replica waits here until it wins the lease.
    while !sched.is_synced() || !sched.is_leading() {
        if sched.queue.is_closed() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut st = LoopState::new(sched.seed);
    while let Some(p) = sched.queue.pop() {
        sched.schedule_one(&mut st, p);
    }
    st.drop_lookahead();
}

impl Scheduler {
    /// One scheduling cycle for a popped pod (upstream `ScheduleOne`).
    pub fn schedule_one(self: &Arc<Self>, st: &mut LoopState, pinfo: QueuedPodInfo) {
        let pod = pinfo.pod.clone();
        let ahead = st.adopt_lookahead(&pod);
        let Some(fw) = self.profiles.get(&pod.spec.scheduler_name).cloned() else {
            tracing::error!(pod = %pod.key(), scheduler = %pod.spec.scheduler_name, "profile not found for scheduler name");
            self.queue.done(&pod.uid);
            return;
        };
        let skip = |ahead: Option<CycleState>| {
            if let Some(state) = ahead {
                fw.end_cycle(&state);
            }
        };
        if pod.deletion_timestamp.is_some() {
            skip(ahead);
            self.client.record_event(PodEvent::new(
                &pod,
                EventType::Warning,
                "FailedScheduling",
                "Scheduling",
                format!("skip schedule deleting pod: {}/{}", pod.namespace, pod.name),
            ));
            self.queue.done(&pod.uid);
            return;
        }
        if self.cache().is_assumed(&pod.uid) {
            skip(ahead);
            self.queue.done(&pod.uid);
            return;
        }
        let start = Instant::now();
        let mut state = ahead.unwrap_or_else(|| {
            let mut s = CycleState::new();
            s.cycle_id = next_cycle_id();
            s
        });
        state.record_plugin_metrics = st.rng.below(100) < 10;
        if crate::telemetry::trace::enabled() {
            state.trace = attempt_trace(&pod, &pinfo, fw.profile_name(), start);
        }
        let root = state.trace.span.clone();
        let _attempt = root.enter();

        let result = self.schedule_pod(st, &fw, &mut state, &pod);
        crate::telemetry::metrics::SCHEDULER
            .algorithm_duration
            .observe(&[], start.elapsed().as_secs_f64());
        if state.trace.sampled {
            root.record("generation", st.snapshot.generation());
        }
        let host = match result {
            Ok(r) => {
                if state.trace.sampled {
                    root.record("feasible_nodes", r.feasible_nodes);
                    root.record("evaluated_nodes", r.evaluated_nodes);
                    root.record("node", &*r.host);
                }
                r.host
            }
            Err(e) => {
                let (status, diag, nominating) = match e {
                    ScheduleError::NoNodes => (
                        Status::unresolvable("no nodes available to schedule pods"),
                        None,
                        NominatingInfo::Override(None),
                    ),
                    ScheduleError::Error(s) => (s, None, NominatingInfo::Override(None)),
                    ScheduleError::Fit(mut diag, num_nodes) => {
                        let mut nominating = NominatingInfo::Override(None);
                        if fw.has_post_filter_plugins() {
                            let _ep = state.trace.extension_point("PostFilter").entered();
                            let nominated = self.queue.nominated_pods();
                            let (r, s) = fw.run_post_filter_plugins(
                                &mut state,
                                &pod,
                                &diag.node_to_status,
                                &st.snapshot,
                                &nominated,
                            );
                            diag.post_filter_msg = s.message();
                            if s.code() == Code::Error {
                                tracing::error!(pod = %pod.key(), status = %s, "PostFilter failed");
                            }
                            nominating = r.map_or(NominatingInfo::Noop, |r| r.nominating_info);
                        }
                        let msg = fit_error_message(num_nodes, &diag);
                        (Status::unschedulable(msg), Some(*diag), nominating)
                    }
                };
                if state.trace.sampled {
                    root.record(
                        "result",
                        if status.code() == Code::Error {
                            "error"
                        } else {
                            "unschedulable"
                        },
                    );
                    root.record("message", status.message().as_str());
                }
                fw.end_cycle(&state);
                self.handle_scheduling_failure(&fw, &state, pinfo, status, diag, nominating, start);
                return;
            }
        };

        // Assume: the cache counts the pod on its node before the binding lands.
        let assumed = Arc::new(pod.with_node(host.clone()));
        if let Err(e) = self.cache().assume_pod(assumed.clone()) {
            fw.end_cycle(&state);
            self.handle_scheduling_failure(
                &fw,
                &state,
                pinfo,
                Status::error(e.to_string()),
                None,
                NominatingInfo::Override(None),
                start,
            );
            return;
        }
        self.queue.delete_nominated(&pod.uid);

        let reserve = state.trace.extension_point("Reserve").entered();
        let t = Instant::now();
        let s = fw.run_reserve_plugins_reserve(&mut state, &assumed, &host);
        extension_point_metric("Reserve", s.code(), &fw, t);
        drop(reserve);
        if !s.is_success() {
            fw.run_reserve_plugins_unreserve(&mut state, &assumed, &host);
            self.forget(&assumed);
            let (status, diag) = single_node_failure(s, &host);
            fw.end_cycle(&state);
            self.handle_scheduling_failure(
                &fw,
                &state,
                pinfo,
                status,
                diag,
                NominatingInfo::Override(None),
                start,
            );
            return;
        }
        let permit = state.trace.extension_point("Permit").entered();
        let t = Instant::now();
        let s = fw.run_permit_plugins(&mut state, &assumed, &host);
        extension_point_metric("Permit", s.code(), &fw, t);
        drop(permit);
        if !s.is_success() && !s.is_wait() {
            fw.run_reserve_plugins_unreserve(&mut state, &assumed, &host);
            self.forget(&assumed);
            let (status, diag) = single_node_failure(s, &host);
            fw.end_cycle(&state);
            self.handle_scheduling_failure(
                &fw,
                &state,
                pinfo,
                status,
                diag,
                NominatingInfo::Override(None),
                start,
            );
            return;
        }
        let elapsed = start.elapsed();
        self.stats.record(AttemptRecord {
            result: AttemptResult::Scheduled,
            duration: elapsed,
        });
        let profile = fw.profile_name();
        crate::telemetry::metrics::SCHEDULER
            .schedule_attempts
            .add(&["scheduled", profile], 1);
        crate::telemetry::metrics::SCHEDULER
            .attempt_duration
            .observe(&["scheduled", profile], elapsed.as_secs_f64());
        crate::telemetry::metrics::SCHEDULER
            .pod_scheduling_attempts
            .observe(&[], f64::from(pinfo.attempts));
        if state.trace.sampled {
            root.record("result", "scheduled");
        }

        // The binding cycle runs concurrently with the next scheduling cycles; its
        // span is a child of the attempt and ends when the pod is bound or rejected.
        let binding = if state.trace.sampled {
            tracing::info_span!(parent: &root, "binding_cycle", node = &*host, result = tracing::field::Empty)
        } else {
            tracing::Span::none()
        };
        let me = self.clone();
        self.op_started();
        self.runtime.spawn(tracing::Instrument::instrument(
            async move {
                me.binding_cycle(fw, state, assumed, pinfo, host).await;
                me.op_finished();
            },
            binding,
        ));
    }

    fn forget(&self, assumed: &Pod) {
        if let Err(e) = self.cache().forget_pod(assumed) {
            tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache ForgetPod failed");
        }
    }

    /// Upstream `schedulePod`.
    fn schedule_pod(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
    ) -> Result<ScheduleResult, ScheduleError> {
        self.cache().update_snapshot(&mut st.snapshot);
        fw.start_cycle(state, pod, &st.snapshot);
        let num_nodes = st.snapshot.num_nodes();
        if num_nodes == 0 {
            return Err(ScheduleError::NoNodes);
        }
        let nominated = self.queue.nominated_pods();
        let (feasible, diag) = self.find_nodes_that_fit_pod(st, fw, state, pod, &nominated)?;
        if feasible.is_empty() {
            return Err(ScheduleError::Fit(Box::new(diag), num_nodes));
        }
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                host: feasible[0].node().name.clone(),
                evaluated_nodes: 1 + diag.node_to_status.len(),
                feasible_nodes: 1,
            });
        }
        // PreScore and Score are pipelined (remote plugins get both in one call).
        let score = state.trace.extension_point("Score").entered();
        let t = Instant::now();
        let host = self.prioritize_and_select(st, fw, state, pod, &feasible);
        let code = host.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
        extension_point_metric("Score", code, fw, t);
        let host = host.map_err(ScheduleError::Error)?;
        drop(score);
        Ok(ScheduleResult {
            host,
            evaluated_nodes: feasible.len() + diag.node_to_status.len(),
            feasible_nodes: feasible.len(),
        })
    }

    /// Upstream `findNodesThatFitPod`.
    fn find_nodes_that_fit_pod(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        nominated: &NominatedPods,
    ) -> Result<(Vec<Arc<NodeInfo>>, Diagnosis), ScheduleError> {
        let mut diag = Diagnosis::default();
        let pre_filter = state.trace.extension_point("PreFilter").entered();
        let t = Instant::now();
        let (pre_res, s, plugins_with_nodes) = fw.run_pre_filter_plugins(state, pod, &st.snapshot);
        extension_point_metric("PreFilter", s.code(), fw, t);
        drop(pre_filter);
        diag.unschedulable_plugins = plugins_with_nodes.iter().cloned().collect();
        if !s.is_success() {
            if !s.is_rejected() {
                return Err(ScheduleError::Error(s));
            }
            diag.pre_filter_msg = s.message();
            diag.add_plugin_status(&s);
            diag.node_to_status.set_absent(s);
            return Ok((Vec::new(), diag));
        }

        // A pod nominated by an earlier preemption tries its nominated node first.
        if let Some(nnn) = &pod.nominated_node_name {
            if let Some(ni) = st.snapshot.get(nnn).cloned() {
                let s = fw.run_filter_plugins_with_nominated_pods(
                    state,
                    pod,
                    &ni,
                    nominated.get(nnn).map_or(&[][..], |v| &v[..]),
                );
                if s.is_success() {
                    return Ok((vec![ni], diag));
                }
                if s.code() == Code::Error {
                    tracing::error!(pod = %pod.key(), node = %nnn, status = %s, "evaluation failed on nominated node");
                }
            }
        }

        let all = st.snapshot.num_nodes();
        let nodes: Vec<Arc<NodeInfo>>;
        let node_list: &[Arc<NodeInfo>] = if pre_res.all_nodes() {
            st.snapshot.node_infos()
        } else {
            let names = pre_res.node_names.as_ref();
            nodes = st
                .snapshot
                .node_infos()
                .iter()
                .filter(|ni| names.is_some_and(|n| n.contains(&ni.node().name)))
                .cloned()
                .collect();
            let mut plugins: Vec<&str> = plugins_with_nodes.iter().map(|p| &**p).collect();
            plugins.sort();
            diag.node_to_status.set_absent(Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                plugins.join(" ")
            )));
            &nodes
        };
        // Split borrows: the node list may borrow the snapshot.
        let filter = state.trace.extension_point("Filter").entered();
        let t = Instant::now();
        let feasible = {
            let percentage = fw
                .percentage_of_nodes_to_score()
                .unwrap_or(self.percentage_of_nodes_to_score);
            find_nodes_that_pass_filters(
                fw,
                state,
                pod,
                &mut diag,
                node_list,
                percentage,
                st.next_start_node_index,
                &mut st.filter_failures,
                nominated,
            )
        };
        let code = feasible
            .as_ref()
            .map_or_else(|s| s.code(), |_| Code::Success);
        extension_point_metric("Filter", code, fw, t);
        drop(filter);
        match feasible {
            Ok(feasible) => {
                let processed = feasible.len() + diag.node_to_status.len();
                if all > 0 {
                    st.next_start_node_index = (st.next_start_node_index + processed) % all;
                }
                if !feasible.is_empty() && nominated.is_empty() {
                    self.lookahead(st, processed);
                }
                st.last_processed = processed;
                Ok((feasible, diag))
            }
            Err(s) => Err(ScheduleError::Error(s)),
        }
    }

    /// How many covered pods are enough lead for the sidecar to answer the next
    /// message before its first answer is needed: on 2 cores shared with the
    /// sidecar, a lead of 2 left the scheduling thread waiting more often (measured
    /// with `switchyard bench`: 70-76% of in-process with 2, 77-78% with 3).
    const LOOKAHEAD_LEAD: usize = 3;

    /// Sends the first Filter round of the queue's next pods to node-local sidecars
    /// now, so their answers are ready when their attempts begin (see
    /// [`Framework::lookahead`]). Up to K pods are covered (K from the sidecars, see
    /// [`Framework::lookahead_pods`]); once half of them are used, the next ones go
    /// in one message, so an answer is computed while the ones before it are used
    /// and the scheduling thread does not wait for the sidecar.
    ///
    /// Pod j after this one (j = 1, 2, ...) is expected to start where the j-1 before
    /// it stopped, each going through as many nodes as this one did (`processed`).
    /// A pod is covered only when its round cannot reach the nodes this attempt and
    /// the previous one went through, nor those of the pods before it: each of those
    /// places a pod on one of its nodes (the previous one's binding is likely still in
    /// flight), and any change voids the answer. So small clusters, where rounds wrap
    /// around quickly, look ahead less or not at all.
    fn lookahead(&self, st: &mut LoopState, processed: usize) {
        let mut covered = st.lookahead.len();
        let n = st.snapshot.node_infos().len();
        // Enough pods are covered whatever K is (and no queue lock is taken).
        if n == 0 || covered > Self::LOOKAHEAD_LEAD {
            return;
        }
        let Some(first) = self.queue.peek_n(covered + 1).into_iter().nth(covered) else {
            return;
        };
        let Some(fw) = self.profiles.get(&first.spec.scheduler_name) else {
            return;
        };
        if !fw.has_batch_filters() {
            return;
        }
        let percentage = fw
            .percentage_of_nodes_to_score()
            .unwrap_or(self.percentage_of_nodes_to_score);
        let to_find = if fw.has_score_plugins() {
            num_feasible_nodes_to_find(percentage, n)
        } else {
            1
        };
        // The first round of `find_nodes_that_pass_filters` for each.
        let round = filter_round(to_find, n);
        let step = processed.max(1);
        // The most pods whose rounds stay clear (j from 1 to `reach`). From the
        // second on, an answer waits longer before it is used: the binding of the pod
        // before the previous one must be kept clear of too.
        let behind = processed + st.last_processed + round;
        let reach = if behind > n {
            0
        } else if behind + st.last_processed > n {
            1
        } else {
            (n - behind - st.last_processed) / step + 1
        };
        let target = fw.lookahead_pods().min(reach);
        if covered >= target || covered > (target / 2).min(Self::LOOKAHEAD_LEAD) {
            return;
        }
        let mut next = self.queue.peek_n(target);
        let still = next.len() >= covered
            && st
                .lookahead
                .iter()
                .zip(&next)
                .all(|(la, p)| Arc::ptr_eq(&la.pod, p));
        if !still {
            // The queue changed order: these answers would go unused.
            st.drop_lookahead();
            covered = 0;
        }
        let nodes = st.snapshot.node_infos();
        let mut pods: Vec<(u64, Arc<Pod>, Vec<&NodeInfo>)> = Vec::new();
        for (j, pod) in next
            .drain(..)
            .enumerate()
            .skip(covered)
            .map(|(i, p)| (i + 1, p))
        {
            if pod.nominated_node_name.is_some()
                || pod.deletion_timestamp.is_some()
                || !self
                    .profiles
                    .get(&pod.spec.scheduler_name)
                    .is_some_and(|f| Arc::ptr_eq(f, fw))
            {
                break;
            }
            let start = st.next_start_node_index + (j - 1) * step;
            let window: Vec<&NodeInfo> = (0..round).map(|i| &*nodes[(start + i) % n]).collect();
            pods.push((next_cycle_id(), pod, window));
        }
        if pods.is_empty() {
            return;
        }
        let score_first = if to_find > 1 { to_find } else { 0 };
        let states = fw.lookahead_batch(&pods, &st.snapshot, score_first);
        for ((_, pod, _), state) in pods.into_iter().zip(states) {
            if let Some(state) = state {
                st.lookahead.push_back(Lookahead {
                    pod,
                    fw: fw.clone(),
                    state,
                });
            }
        }
    }

    /// PreScore, Score, and a uniformly random pick among the best (upstream
    /// `prioritizeNodes` + `selectHost`).
    fn prioritize_and_select(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        feasible: &[Arc<NodeInfo>],
    ) -> Result<Arc<str>, Status> {
        if !fw.has_score_plugins() {
            let i = st.rng.below(feasible.len());
            return Ok(feasible[i].node().name.clone());
        }
        let s = fw.run_pre_score_plugins(state, pod, feasible, &st.snapshot);
        if !s.is_success() {
            return Err(s);
        }
        fw.run_score_plugins(state, pod, feasible, &mut st.scores)?;
        let totals = &st.scores.totals;
        let mut best = i64::MIN;
        let mut chosen = 0usize;
        let mut ties = 0usize;
        for (i, &t) in totals.iter().enumerate() {
            if t > best {
                best = t;
                chosen = i;
                ties = 1;
            } else if t == best {
                ties += 1;
                if st.rng.below(ties) == 0 {
                    chosen = i;
                }
            }
        }
        Ok(feasible[chosen].node().name.clone())
    }

    /// Upstream `handleSchedulingFailure`: requeue (unless the pod is gone or bound),
    /// update the nomination, record a FailedScheduling event and the PodScheduled
    /// condition. Never blocks on the backend.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn handle_scheduling_failure(
        self: &Arc<Self>,
        fw: &Framework,
        state: &CycleState,
        mut pinfo: QueuedPodInfo,
        status: Status,
        diag: Option<Diagnosis>,
        nominating: NominatingInfo,
        start: Instant,
    ) {
        let rejected = status.is_rejected();
        let elapsed = start.elapsed();
        self.stats.record(AttemptRecord {
            result: if rejected {
                AttemptResult::Unschedulable
            } else {
                AttemptResult::Error
            },
            duration: elapsed,
        });
        let result = if rejected { "unschedulable" } else { "error" };
        crate::telemetry::metrics::SCHEDULER
            .schedule_attempts
            .add(&[result, fw.profile_name()], 1);
        crate::telemetry::metrics::SCHEDULER
            .attempt_duration
            .observe(&[result, fw.profile_name()], elapsed.as_secs_f64());
        let reason = if rejected {
            "Unschedulable"
        } else {
            "SchedulerError"
        };
        if let Some(d) = &diag {
            pinfo.unschedulable_plugins = d.unschedulable_plugins.clone();
            pinfo.pending_plugins = d.pending_plugins.clone();
        } else if rejected {
            if let Some(p) = status.plugin() {
                pinfo.unschedulable_plugins.insert(p.clone());
            }
        }
        let msg = status.message();
        let uid = pinfo.pod.uid.clone();
        let current = self.pod_store().get(&uid).cloned();
        let pod = match current {
            None => {
                tracing::info!(pod = %pinfo.pod.key(), "pod doesn't exist in informer cache; not requeueing");
                self.queue.done(&uid);
                return;
            }
            Some(p) if p.node_name.is_some() => {
                tracing::info!(pod = %p.key(), "pod has been assigned to a node; not requeueing");
                self.queue.done(&uid);
                return;
            }
            Some(p) => p,
        };
        pinfo.pod = pod.clone();
        let _ = fw;
        self.queue.add_unschedulable_if_not_present(pinfo);
        let nominated_update = match &nominating {
            NominatingInfo::Override(n) => {
                self.queue.set_nominated(pod.clone(), n.clone());
                (pod.nominated_node_name != *n).then(|| n.clone())
            }
            NominatingInfo::Noop => {
                if pod.nominated_node_name.is_some() {
                    self.queue
                        .set_nominated(pod.clone(), pod.nominated_node_name.clone());
                }
                None
            }
        };
        tracing::debug!(pod = %pod.key(), reason, message = %msg, "unable to schedule pod");
        self.report_ignored(state, &pod);
        self.record_failed_scheduling(pod, reason, msg, nominated_update);
    }

    /// A FailedScheduling event and the PodScheduled=False condition (`reason`:
    /// Unschedulable or SchedulerError) with `msg`, and the nomination change if any;
    /// the status patch goes off the scheduling path.
    pub(crate) fn record_failed_scheduling(
        self: &Arc<Self>,
        pod: Arc<Pod>,
        reason: &'static str,
        msg: String,
        nominated_update: Option<Option<Arc<str>>>,
    ) {
        let msg = truncate_message(msg);
        self.client.record_event(PodEvent::new(
            &pod,
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            msg.clone(),
        ));
        let me = self.clone();
        self.spawn_op(async move {
            let update = PodStatusUpdate {
                condition: Some(PodCondition {
                    status: "False",
                    reason,
                    message: msg,
                }),
                nominated_node_name: nominated_update,
            };
            if let Err(e) = me.client.update_pod_status(&pod, update).await {
                tracing::warn!(pod = %pod.key(), error = %e, "error updating pod status");
            }
        });
    }

    /// The binding cycle, then the end of the attempt for sidecars.
    async fn binding_cycle(
        self: &Arc<Self>,
        fw: Arc<Framework>,
        mut state: CycleState,
        assumed: Arc<Pod>,
        pinfo: QueuedPodInfo,
        host: Arc<str>,
    ) {
        let bound = self
            .binding_cycle_steps(&fw, &mut state, assumed, pinfo, host)
            .await;
        if state.trace.sampled {
            tracing::Span::current().record("result", if bound { "bound" } else { "failed" });
        }
        fw.end_cycle(&state);
    }

    /// The binding cycle (upstream `bindingCycle`), on tokio; true when bound.
    async fn binding_cycle_steps(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        assumed: Arc<Pod>,
        pinfo: QueuedPodInfo,
        host: Arc<str>,
    ) -> bool {
        let start = Instant::now();
        let s = fw.wait_on_permit(&assumed).await;
        crate::telemetry::metrics::SCHEDULER
            .permit_wait_duration
            .observe(
                &[if s.is_success() { "success" } else { "failure" }],
                start.elapsed().as_secs_f64(),
            );
        if !s.is_success() {
            let (status, diag) = if s.is_rejected() {
                single_node_failure(s, &host)
            } else {
                (s, None)
            };
            self.handle_binding_cycle_error(fw, state, &assumed, pinfo, &host, status, diag, start);
            return false;
        }
        // Failures after Permit are errors, never "unschedulable".
        self.queue.done(&assumed.uid);
        let t = Instant::now();
        let s = fw.run_pre_bind_plugins(state, &assumed, &host).await;
        extension_point_metric("PreBind", s.code(), fw, t);
        if !s.is_success() {
            self.handle_binding_cycle_error(fw, state, &assumed, pinfo, &host, s, None, start);
            return false;
        }
        let t = Instant::now();
        let s = fw.run_bind_plugins(state, &assumed, &host).await;
        extension_point_metric("Bind", s.code(), fw, t);
        self.cache().finish_binding(&assumed.uid, self.clock.now());
        if !s.is_success() {
            let s = if s.is_skip() {
                Status::error(format!("no bind plugin bound pod {:?}", assumed.name))
            } else {
                s
            };
            self.handle_binding_cycle_error(fw, state, &assumed, pinfo, &host, s, None, start);
            return false;
        }
        self.stats
            .bound
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.report_ignored(state, &assumed);
        self.client.record_event(PodEvent::new(
            &assumed,
            EventType::Normal,
            "Scheduled",
            "Binding",
            format!(
                "Successfully assigned {}/{} to {}",
                assumed.namespace, assumed.name, host
            ),
        ));
        fw.run_post_bind_plugins(state, &assumed, &host).await;
        true
    }

    /// Plugin calls of this attempt that failed and were skipped under
    /// `failurePolicy: Ignore`, as one Warning event before the attempt's outcome, so a
    /// placement made without a plugin's say is not mistaken for its decision.
    fn report_ignored(&self, state: &CycleState, pod: &Pod) {
        let ignored = state.ignored.take();
        if ignored.is_empty() {
            return;
        }
        self.client.record_event(PodEvent::new(
            pod,
            EventType::Warning,
            REMOTE_PLUGIN_IGNORED,
            "Scheduling",
            truncate_message(ignored.join("; ")),
        ));
    }

    /// Upstream `handleBindingCycleError`: Unreserve, forget the assumed pod, let pods
    /// its resources were blocking try again, and requeue it.
    #[allow(clippy::too_many_arguments)]
    fn handle_binding_cycle_error(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        assumed: &Arc<Pod>,
        pinfo: QueuedPodInfo,
        host: &Arc<str>,
        status: Status,
        diag: Option<Diagnosis>,
        start: Instant,
    ) {
        fw.run_reserve_plugins_unreserve(state, assumed, host);
        let forgot = self.cache().forget_pod(assumed);
        match forgot {
            Err(e) => {
                tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache ForgetPod failed")
            }
            Ok(()) => {
                let uid = assumed.uid.clone();
                let exclude_self = status.is_rejected();
                let not_self = move |p: &Pod| !exclude_self || p.uid != uid;
                self.queue.move_all_to_active_or_backoff(
                    EVENT_ASSIGNED_POD_DELETE,
                    Some(EventObject::Pod(assumed.clone())),
                    None,
                    Some(&not_self),
                );
            }
        }
        self.handle_scheduling_failure(
            fw,
            state,
            pinfo,
            status,
            diag,
            NominatingInfo::Override(None),
            start,
        );
    }
}

/// A Reserve/Permit rejection reported as a one-node FitError; errors stay errors.
fn single_node_failure(s: Status, host: &Arc<str>) -> (Status, Option<Diagnosis>) {
    if !s.is_rejected() {
        return (s, None);
    }
    let mut d = Diagnosis::default();
    d.add_plugin_status(&s);
    let code = s.code();
    d.node_to_status.set(host.clone(), s);
    let msg = fit_error_message(1, &d);
    (Status::new(code, msg), Some(d))
}

/// How many nodes a Filter round checks to find `need` more feasible ones among `left`:
/// a margin for some failing, so one round usually suffices.
fn filter_round(need: usize, left: usize) -> usize {
    (need + need / 4 + 16).min(left)
}

/// Upstream `findNodesThatPassFilters`: checks nodes from `start` onwards (wrapping) in
/// rounds, in parallel when a round's projected work pays for it
/// ([`filter_map_adaptive`]), stopping once `numFeasibleNodesToFind` fit. Rounds keep the
/// result deterministic: the feasible nodes are the first ones in list order.
#[allow(clippy::too_many_arguments)]
fn find_nodes_that_pass_filters(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    diag: &mut Diagnosis,
    nodes: &[Arc<NodeInfo>],
    percentage: i32,
    start: usize,
    failures: &mut Vec<(usize, Status)>,
    nominated: &NominatedPods,
) -> Result<Vec<Arc<NodeInfo>>, Status> {
    let n = nodes.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut to_find = num_feasible_nodes_to_find(percentage, n);
    if !fw.has_score_plugins() {
        to_find = 1;
    }
    let at = |i: usize| &nodes[(start + i) % n];
    if !fw.has_filter_plugins() {
        return Ok((0..to_find.min(n)).map(|i| at(i).clone()).collect());
    }
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::with_capacity(to_find);
    let mut offset = 0usize;
    let check = |ni: &Arc<NodeInfo>| -> Status {
        if nominated.is_empty() {
            fw.run_filter_plugins(state, pod, ni)
        } else {
            match nominated.get(&ni.node().name) {
                Some(np) => fw.run_filter_plugins_with_nominated_pods(state, pod, ni, np),
                None => fw.run_filter_plugins(state, pod, ni),
            }
        }
    };
    while offset < n && feasible.len() < to_find {
        let need = to_find - feasible.len();
        let round = filter_round(need, n - offset);
        // Only failures are materialised; most nodes usually pass.
        failures.clear();
        if fw.has_batch_filters() {
            // Remote plugins get the round's nodes in one call; nodes with nominated
            // pods take the node-by-node path (its what-if deltas).
            let mut plain: Vec<&Arc<NodeInfo>> = Vec::with_capacity(round);
            let mut plain_at: Vec<usize> = Vec::with_capacity(round);
            for i in 0..round {
                let ni = at(offset + i);
                if !nominated.is_empty() && nominated.contains_key(&ni.node().name) {
                    let s = check(ni);
                    if !s.is_success() {
                        failures.push((i, s));
                    }
                } else {
                    plain.push(ni);
                    plain_at.push(i);
                }
            }
            let score_first = if to_find > 1 { need } else { 0 };
            let found = fw.run_filter_plugins_batched(
                state,
                pod,
                &plain,
                round >= PARALLEL_THRESHOLD,
                score_first,
            )?;
            failures.extend(found.into_iter().map(|(k, s)| (plain_at[k], s)));
            failures.sort_by_key(|(i, _)| *i);
        } else if round >= PARALLEL_THRESHOLD {
            failures.extend(filter_map_adaptive(round, |i| {
                let s = check(at(offset + i));
                (!s.is_success()).then_some((i, s))
            }));
        } else {
            for i in 0..round {
                let s = check(at(offset + i));
                if !s.is_success() {
                    failures.push((i, s));
                }
            }
        }
        diag.node_to_status.reserve(failures.len());
        let mut next_failure = 0usize;
        for i in 0..round {
            let ni = at(offset + i);
            if failures.get(next_failure).is_some_and(|(fi, _)| *fi == i) {
                let s = std::mem::take(&mut failures[next_failure].1);
                next_failure += 1;
                if s.code() == Code::Error {
                    return Err(s);
                }
                diag.add_plugin_status(&s);
                diag.node_to_status.set(ni.node().name.clone(), s);
            } else {
                feasible.push(ni.clone());
                if feasible.len() == to_find {
                    break;
                }
            }
        }
        offset += round;
    }
    Ok(feasible)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_percentage_of_nodes_to_score() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 100), 100);
        // 50 - 5000/125 = 10% of 5000
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        // below 5% floors at 5%: 50 - 6000/125 = 2 -> 5% of 6000
        assert_eq!(num_feasible_nodes_to_find(0, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(10, 500), 100);
        assert_eq!(num_feasible_nodes_to_find(100, 500), 500);
    }

    #[test]
    fn fit_error_messages() {
        let mut d = Diagnosis::default();
        d.node_to_status.set(
            "a".into(),
            Status::unresolvable("node(s) had untolerated taint(s)"),
        );
        d.node_to_status
            .set("b".into(), Status::unschedulable("Insufficient cpu"));
        d.node_to_status.set(
            "c".into(),
            Status::with_reasons(
                Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        assert_eq!(
            fit_error_message(3, &d),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
        );
        d.post_filter_msg = "preemption: not helpful".into();
        assert!(fit_error_message(3, &d).ends_with("2 Insufficient cpu. preemption: not helpful"));
        let p = Diagnosis {
            pre_filter_msg: "pod affinity terms conflict".into(),
            ..Default::default()
        };
        assert_eq!(
            fit_error_message(5, &p),
            "0/5 nodes are available: pod affinity terms conflict."
        );
    }
}
