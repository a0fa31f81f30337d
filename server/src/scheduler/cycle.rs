//! What a scheduling cycle carries between attempts and hands between its stages:
//! the scheduling thread's state (snapshot, score buffers, lookaheads), the result of
//! finding a node, and the pod a cycle assumed.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::cache::Snapshot;
use crate::framework::diagnosis::Diagnosis;
use crate::framework::{CycleState, Framework, ScoreBuffer, Status};
use crate::model::Pod;
use crate::rand::SplitMix64;

/// Numbers scheduling attempts for sidecars, which key per-attempt state by it.
pub(super) fn next_cycle_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What the scheduling thread keeps between cycles.
pub struct LoopState {
    pub snapshot: Snapshot,
    pub(super) next_start_node_index: usize,
    pub(super) scores: ScoreBuffer,
    pub(super) filter_failures: Vec<(usize, Status)>,
    /// Tie-breaks between equally scored nodes.
    pub(super) rng: SplitMix64,
    /// Which attempts record per-plugin durations: apart from `rng`, so that how
    /// many attempts ran before a pod (retries of other pods, whose timing varies)
    /// does not change which node it gets among equals.
    pub(super) sample_rng: SplitMix64,
    /// The next pods' Filters, sent to node-local sidecars ahead of their cycles, in
    /// queue order.
    pub(super) lookahead: VecDeque<Lookahead>,
    /// Nodes the previous attempt's Filter went through (see `Scheduler::lookahead`).
    pub(super) last_processed: usize,
}

impl LoopState {
    pub fn new(seed: u64) -> Self {
        LoopState {
            snapshot: Snapshot::default(),
            next_start_node_index: 0,
            scores: ScoreBuffer::default(),
            filter_failures: Vec::new(),
            rng: SplitMix64(seed),
            sample_rng: SplitMix64(seed ^ 0x9e37_79b9_7f4a_7c15),
            lookahead: VecDeque::new(),
            last_processed: 0,
        }
    }
}

/// A pod that passed Reserve and Permit, assumed on `host`: its binding cycle may
/// start.
pub(super) struct ScheduledPod {
    pub assumed: Arc<Pod>,
    pub host: Arc<str>,
    /// `Stats::cycle_failures` when the pod was assumed.
    pub cycle_failures_at_assume: u64,
}

/// A lookahead (see [`Framework::lookahead`]): the pod it was sent for and the state
/// its attempt begins with.
pub(super) struct Lookahead {
    pub pod: Arc<Pod>,
    pub fw: Arc<Framework>,
    pub state: CycleState,
}

impl LoopState {
    /// The state `pod`'s attempt begins with, if a lookahead covered it. Lookaheads
    /// for pods before it, which the queue did not give first after all, are dropped
    /// (the sidecars are told to end their cycles).
    pub(super) fn adopt_lookahead(&mut self, pod: &Arc<Pod>) -> Option<CycleState> {
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
    pub(super) fn drop_lookahead(&mut self) {
        for la in self.lookahead.drain(..) {
            la.fw.end_cycle(&la.state);
        }
    }
}

/// The outcome of `schedule_pod`.
pub(super) enum ScheduleError {
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
