//! The framework runtime: builds a profile's plugins from configuration and runs each
//! extension point in configured order with upstream's status handling. It is the only
//! place that knows plugin order.
//!
//! Laid out as upstream's `framework/runtime`: `registry` (Handle, Registry),
//! `profile` (building a profile), `framework` (the queue and Filter-side runners),
//! `score`, `binding` (Reserve, Permit, binding cycle), and Switchyard's own `batch`
//! (remote Filter batching and lookahead) and `parallel` (when to use the pool).

mod batch;
mod binding;
mod framework;
mod parallel;
mod profile;
mod registry;
mod score;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use smallvec::SmallVec;

use super::cycle_state::{CycleState, PluginSet};
use super::events::ClusterEventWithHint;
use super::interface::*;
use super::interned::PluginName;
use super::node_info::NodeInfo;
use super::status::{Code, Status};
use super::waiting_pods::WaitingPods;
use crate::config::{ExtensionPoint, PluginRef};
use crate::framework::snapshot::Snapshot;
use crate::model::Pod;

pub use framework::FilterRun;
pub use parallel::{
    filter_map_adaptive, filter_map_adaptive_into, Parallelism, PARALLEL_CHUNK, PARALLEL_MIN_WORK,
    PARALLEL_THRESHOLD,
};
pub use profile::ProfileError;
pub use registry::{Handle, InvalidArgs, PluginFactory, Registry, SchedulerServices};

#[derive(Clone)]
struct Entry {
    name: PluginName,
    plugin: Arc<dyn Plugin>,
}

#[derive(Clone)]
struct ScoreEntry {
    entry: Entry,
    weight: i64,
}

/// Per-cycle score storage, reused across cycles to keep the hot path allocation-free.
#[derive(Default)]
pub struct ScoreBuffer {
    /// Node-major: `scores[node * plugins + plugin]`.
    scores: Vec<i64>,
    column: Vec<i64>,
    /// Weighted totals per node, in input order.
    pub totals: Vec<i64>,
}

/// One profile's plugins, ready to run.
pub struct Framework {
    profile_name: Arc<str>,
    percentage_of_nodes_to_score: Option<i32>,
    pre_enqueue: Vec<Entry>,
    queue_sort: Entry,
    pre_filter: Vec<Entry>,
    /// For each PreFilter plugin, the position of the same plugin among Filter plugins.
    pre_filter_to_filter: Vec<Option<usize>>,
    filter: Vec<Entry>,
    post_filter: Vec<Entry>,
    pre_score: Vec<Entry>,
    pre_score_to_score: Vec<Option<usize>>,
    score: Vec<ScoreEntry>,
    reserve: Vec<Entry>,
    permit: Vec<Entry>,
    pre_bind: Vec<Entry>,
    bind: Vec<Entry>,
    post_bind: Vec<Entry>,
    /// Events each requeue-relevant plugin registered.
    enqueue_extensions: Vec<(PluginName, Vec<ClusterEventWithHint>)>,
    /// Sidecar connections to tell about attempt boundaries, once each.
    cycle_hooks: Vec<Arc<dyn CycleHooks>>,
    /// Filter plugins that evaluate batches (by position in `filter`).
    batch_filters: PluginSet,
    /// For each Filter plugin that is also a Score plugin: whether it is a PreScore
    /// plugin too (what a score-ahead request needs to know).
    filter_scores_ahead: Vec<Option<bool>>,
    handle: Arc<Handle>,
}

/// Pods nominated to a node that count for `pod`: priority at least its own, and not
/// the pod itself.
fn relevant_nominated<'a>(pod: &Pod, nominated: &'a [NominatedPod]) -> SmallVec<[&'a Arc<Pod>; 2]> {
    let (priority, uid_fp) = (pod.priority(), uid_fingerprint(&pod.uid));
    nominated
        .iter()
        .filter(|np| np.priority >= priority && !np.is(&pod.uid, uid_fp))
        .map(|np| &np.pod)
        .collect()
}

fn wrap(msg: String) -> Status {
    Status::error(msg)
}

impl Framework {
    pub fn profile_name(&self) -> &Arc<str> {
        &self.profile_name
    }

    /// Names of the Filter plugins this profile runs, in order.
    pub fn filter_names(&self) -> impl Iterator<Item = &str> {
        self.filter.iter().map(|e| &*e.name)
    }

    /// Tells sidecars an attempt starts (replicating the snapshot first).
    pub fn start_cycle(&self, state: &mut CycleState, pod: &Arc<Pod>, snapshot: &Snapshot) {
        for h in &self.cycle_hooks {
            h.cycle_start(state, pod, snapshot, &self.profile_name);
        }
        for e in &self.pre_score {
            if let Some(p) = e.plugin.as_pre_score() {
                p.start_pre_score(state);
            }
        }
    }

    /// Tells sidecars an attempt is over.
    pub fn end_cycle(&self, state: &CycleState) {
        for h in &self.cycle_hooks {
            h.cycle_end(state);
        }
    }

    pub fn percentage_of_nodes_to_score(&self) -> Option<i32> {
        self.percentage_of_nodes_to_score
    }

    pub fn handle(&self) -> &Arc<Handle> {
        &self.handle
    }

    pub fn waiting_pods(&self) -> &Arc<WaitingPods> {
        &self.handle.waiting_pods
    }

    pub fn has_filter_plugins(&self) -> bool {
        !self.filter.is_empty()
    }

    pub fn has_score_plugins(&self) -> bool {
        !self.score.is_empty()
    }

    pub fn has_post_filter_plugins(&self) -> bool {
        !self.post_filter.is_empty()
    }

    pub fn queue_sort_name(&self) -> &str {
        &self.queue_sort.name
    }

    /// The events each plugin registered, for the queue's requeue decisions.
    pub fn enqueue_extensions(&self) -> &[(PluginName, Vec<ClusterEventWithHint>)] {
        &self.enqueue_extensions
    }

    /// Names of plugins configured at each point, for logs and `--help`-like output.
    pub fn describe(&self) -> Vec<(&'static str, Vec<String>)> {
        let names = |v: &[Entry]| v.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        vec![
            ("preEnqueue", names(&self.pre_enqueue)),
            ("queueSort", vec![self.queue_sort.name.to_string()]),
            ("preFilter", names(&self.pre_filter)),
            ("filter", names(&self.filter)),
            ("postFilter", names(&self.post_filter)),
            ("preScore", names(&self.pre_score)),
            (
                "score",
                self.score
                    .iter()
                    .map(|s| format!("{}({})", s.entry.name, s.weight))
                    .collect(),
            ),
            ("reserve", names(&self.reserve)),
            ("permit", names(&self.permit)),
            ("preBind", names(&self.pre_bind)),
            ("bind", names(&self.bind)),
            ("postBind", names(&self.post_bind)),
        ]
    }
}

/// `scheduler_plugin_execution_duration_seconds`, for the sampled attempts (`start`
/// is `None` in the others, as upstream samples 10%).
fn plugin_metric(plugin: &str, point: &str, code: Code, start: Option<Instant>) {
    if let Some(t) = start {
        crate::telemetry::metrics::SCHEDULER
            .plugin_execution_duration
            .observe(&[plugin, point, code.as_str()], t.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::parallel::worth_parallel;
    use super::*;
    use crate::testing::{default_framework, node, pod};

    #[test]
    fn parallel_only_when_the_projected_work_pays() {
        let us = Duration::from_micros;
        // 1 µs per node over 200 more nodes: 200 µs, worth it.
        assert!(worth_parallel(us(32), 32, 200, 2));
        // 0.1 µs per node: 20 µs, not.
        assert!(!worth_parallel(Duration::from_nanos(3200), 32, 200, 2));
        // Never with one thread, too few nodes left, or nothing timed.
        assert!(!worth_parallel(us(32), 32, 200, 1));
        assert!(!worth_parallel(us(3200), 32, 2 * PARALLEL_CHUNK - 1, 2));
        assert!(!worth_parallel(us(32), 0, 200, 2));
    }

    #[test]
    fn filter_map_adaptive_appends_after_what_is_there() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let expect: Vec<usize> = (0..300).filter(|i| i % 3 != 0).collect();
        for slow in [false, true] {
            let mut out = vec![usize::MAX];
            pool.install(|| {
                filter_map_adaptive_into(
                    300,
                    |i| {
                        if slow {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        (i % 3 != 0).then_some(i)
                    },
                    &mut out,
                )
            });
            assert_eq!(out[0], usize::MAX, "slow={slow}");
            assert_eq!(out[1..], expect[..], "slow={slow}");
        }
    }

    /// Both ways give `(0..n).filter_map(f)` in order; slow items go to the pool, cheap
    /// ones stay on the calling thread.
    #[test]
    fn filter_map_adaptive_keeps_order_either_way() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let n = 200;
        let expect: Vec<usize> = (0..n).filter(|i| i % 3 != 0).collect();
        let mut cheap_on_one_thread = false;
        // The cheap case runs three times: a preemption while the first nodes are timed
        // could make one projection large (the slow case needs no such allowance).
        for slow in [false, false, false, true] {
            // Bit k: pool thread k ran an item.
            let threads = std::sync::atomic::AtomicUsize::new(0);
            let got = pool.install(|| {
                filter_map_adaptive(n, |i| {
                    if slow {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let k = rayon::current_thread_index().unwrap_or(63);
                    threads.fetch_or(1 << k, std::sync::atomic::Ordering::Relaxed);
                    (i % 3 != 0).then_some(i)
                })
            });
            assert_eq!(got, expect, "slow={slow}");
            let used = threads.into_inner().count_ones();
            if slow {
                assert_eq!(used, 2, "40 ms of work is shared");
            } else {
                cheap_on_one_thread |= used == 1;
            }
        }
        assert!(
            cheap_on_one_thread,
            "cheap work stays on the calling thread"
        );
    }

    /// The shared-copy and in-place paths of Filter-with-nominated-pods decide alike,
    /// and the in-place one leaves the node as it found it.
    #[test]
    fn nominated_pod_paths_agree() {
        let fw = default_framework();
        let mut ni = NodeInfo::new(node("n").cpu(4000).build());
        ni.add_pod(pod("low").cpu(900).node("n").build());
        let high = pod("high").cpu(3000).priority(10).build();
        let cases: Vec<(Arc<Pod>, bool)> = vec![
            // A nominated pod of equal priority takes the room: rejected.
            (
                pod("nom").cpu(2000).priority(10).nominated("n").build(),
                false,
            ),
            // A lower-priority nomination does not count.
            (
                pod("nom").cpu(2000).priority(1).nominated("n").build(),
                true,
            ),
            // The pod's own nomination does not count against it.
            (high.clone(), true),
        ];
        for (nominated, fits) in cases {
            let list = [NominatedPod::new(nominated.clone())];
            let mut state = CycleState::new();
            let snapshot = crate::framework::snapshot::Snapshot::from_node_infos(vec![ni.clone()]);
            let (_, s, _) = fw.run_pre_filter_plugins(&mut state, &high, &snapshot);
            assert!(s.is_success(), "{s:?}");
            let shared = fw.run_filter_plugins_with_nominated_pods(&state, &high, &ni, &list);
            let mut copy = ni.clone();
            let in_place =
                fw.run_filter_plugins_with_nominated_pods_mut(&state, &high, &mut copy, &list);
            assert_eq!(shared.is_success(), fits, "{}: {shared:?}", nominated.name);
            assert_eq!(shared.message(), in_place.message());
            assert_eq!(copy.pods.len(), 1);
            assert_eq!(copy.requested.milli_cpu, 900);
        }
    }
}
