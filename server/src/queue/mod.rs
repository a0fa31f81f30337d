//! The scheduling queue (upstream `PriorityQueue`): activeQ ordered by the QueueSort
//! plugin, backoffQ for pods waiting out their backoff, unschedulable pods waiting for a
//! cluster event that may help them, PreEnqueue gating, and the nominator.
//!
//! Requeueing follows upstream's queueing hints: a pod rejected by plugins moves only
//! on events those plugins registered and whose hints say `Queue`; events that arrive
//! while a pod is being scheduled are replayed against it when it comes back. No pod is
//! ever dropped: every pod is in exactly one of activeQ, backoffQ, unschedulable pods,
//! or in flight (popped, not yet `done`).

mod backoff;
pub mod heap;
pub mod nominator;
mod requeue;
mod unschedulable;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use heap::PodHeap;
pub use nominator::{NominatedPods, Nominator};
use rustc_hash::FxHashMap;
use unschedulable::UnschedulablePods;

use crate::clock::Clock;
use crate::framework::events::{
    pod_scheduling_properties_change, ActionType, ClusterEvent, EventObject, EventResource,
    EVENT_FORCE_ACTIVATE, EVENT_UNSCHEDULABLE_TIMEOUT,
};
use crate::framework::{Framework, QueuedPodInfo};
use crate::model::{Pod, Uid};

/// How long a pod may sit in unschedulable pods before it is retried anyway.
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// Backoff expiries are aligned to this window, so pods backing off together are
/// ordered by priority rather than by microseconds (upstream `backoffQOrderingWindow`).
const BACKOFF_WINDOW: Duration = Duration::from_secs(1);

const EVENT_UNSCHEDULED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::UnschedulablePod, ActionType::ADD);
const EVENT_UNSCHEDULED_POD_UPDATE: ClusterEvent =
    ClusterEvent::new(EventResource::UnschedulablePod, ActionType::UPDATE);

/// Where a requeued pod should go (upstream `queueingStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    Skip,
    AfterBackoff,
    Immediately,
}

/// Which sub-queue a pod landed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    Active,
    Backoff,
    Unschedulable,
}

/// Counts per sub-queue (`scheduler_pending_pods`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingCounts {
    pub active: usize,
    pub backoff: usize,
    /// Of `backoff`, the pods backing off after an error (not a rejection).
    pub errored: usize,
    /// The fewest consecutive errors among `errored` pods (0 when there are none).
    pub min_consecutive_errors: u32,
    pub unschedulable: usize,
    pub gated: usize,
    pub in_flight: usize,
}

struct InFlightEvent {
    seq: u64,
    event: ClusterEvent,
    old: Option<EventObject>,
    new: Option<EventObject>,
}

struct Inner {
    active: PodHeap,
    /// Pods rejected by plugins, ordered by backoff expiry then priority.
    backoff: PodHeap,
    /// Pods that hit an error, ordered by backoff expiry.
    error_backoff: PodHeap,
    unschedulable: UnschedulablePods,
    /// Popped and not yet done: the event sequence number at pop.
    in_flight: FxHashMap<Uid, u64>,
    /// Of `in_flight`, the pods whose previous attempt ended in an error.
    in_flight_errored: rustc_hash::FxHashSet<Uid>,
    in_flight_events: VecDeque<InFlightEvent>,
    next_seq: u64,
    nominator: Nominator,
    closed: bool,
    sched_cycle: u64,
}

/// Requeue counters, for metrics and tests (`scheduler_queue_incoming_pods_total`).
#[derive(Clone, Debug, Default)]
pub struct IncomingCounts(pub HashMap<(Placement, String), u64>);

pub struct SchedulingQueue {
    inner: Mutex<Inner>,
    cond: Condvar,
    clock: Arc<dyn Clock>,
    profiles: HashMap<Arc<str>, Arc<Framework>>,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_in_unschedulable: Duration,
    /// Base for aligning backoff expiries to whole windows.
    epoch: Instant,
    incoming: Mutex<IncomingCounts>,
    /// Told when a PreEnqueue plugin fails with an error (a sidecar down under
    /// `failurePolicy: Fail`): the pod cannot even be queued, and nothing else would
    /// record why.
    pre_enqueue_errors: std::sync::OnceLock<PreEnqueueErrorReporter>,
}

/// Receives a pod a PreEnqueue plugin failed on, and the error; called with the queue
/// locked, so it must not block or call back into the queue.
pub type PreEnqueueErrorReporter = Box<dyn Fn(Arc<Pod>, String) + Send + Sync>;

fn backoff_less(a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
    a.backoff_expiration < b.backoff_expiration
}

impl SchedulingQueue {
    /// `profiles` by scheduler name; all share one QueueSort (configuration checks it).
    pub fn new(
        profiles: HashMap<Arc<str>, Arc<Framework>>,
        clock: Arc<dyn Clock>,
        initial_backoff: Duration,
        max_backoff: Duration,
    ) -> Self {
        let sorter = profiles.values().next().cloned();
        let sorter2 = sorter.clone();
        let active_less: heap::LessFn = Box::new(move |a, b| match &sorter {
            Some(f) => f.less(a, b),
            None => a.timestamp < b.timestamp,
        });
        let backoff_then_sort: heap::LessFn = Box::new(move |a, b| {
            if a.backoff_expiration != b.backoff_expiration {
                return backoff_less(a, b);
            }
            match &sorter2 {
                Some(f) => f.less(a, b),
                None => a.timestamp < b.timestamp,
            }
        });
        let now = clock.now();
        SchedulingQueue {
            inner: Mutex::new(Inner {
                active: PodHeap::new(active_less),
                backoff: PodHeap::new(backoff_then_sort),
                error_backoff: PodHeap::new(Box::new(backoff_less)),
                unschedulable: UnschedulablePods::default(),
                in_flight: FxHashMap::default(),
                in_flight_errored: Default::default(),
                in_flight_events: VecDeque::new(),
                next_seq: 0,
                nominator: Nominator::default(),
                closed: false,
                sched_cycle: 0,
            }),
            cond: Condvar::new(),
            clock,
            profiles,
            initial_backoff,
            max_backoff,
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
            epoch: now,
            incoming: Mutex::new(IncomingCounts::default()),
            pre_enqueue_errors: std::sync::OnceLock::new(),
        }
    }

    /// Sets who records a PreEnqueue error as the pod's reason (once; later calls
    /// are ignored).
    pub fn set_pre_enqueue_error_reporter(&self, r: PreEnqueueErrorReporter) {
        let _ = self.pre_enqueue_errors.set(r);
    }

    pub fn set_max_in_unschedulable(&mut self, d: Duration) {
        self.max_in_unschedulable = d;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn framework(&self, pod: &Pod) -> Option<&Arc<Framework>> {
        self.profiles.get(&pod.spec.scheduler_name)
    }

    /// The QueueSort key of a pod being enqueued; computed before taking the queue
    /// lock because a remote QueueSort is a call to a sidecar.
    fn sort_key(&self, pod: &Pod) -> Option<Arc<[u8]>> {
        self.framework(pod)?.queue_sort_key(pod)
    }

    fn count(&self, placement: Placement, event: &ClusterEvent) {
        if let Ok(mut c) = self.incoming.lock() {
            *c.0.entry((placement, event.label())).or_default() += 1;
        }
    }

    pub fn incoming_counts(&self) -> IncomingCounts {
        self.incoming.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Runs PreEnqueue; records the gating plugin. Returns true when the pod may enter.
    fn run_pre_enqueue(&self, p: &mut QueuedPodInfo) -> bool {
        let Some(fw) = self.framework(&p.pod) else {
            return true;
        };
        match fw.run_pre_enqueue_plugins(&p.pod, p.gating_plugin.as_deref()) {
            None => {
                p.gating_plugin = None;
                p.pre_enqueue_error = None;
                p.gating_message = None;
                true
            }
            Some((plugin, status)) => {
                // Upstream only logs a PreEnqueue error; here it is also the pod's
                // recorded reason (once per distinct message), since every pod must end
                // bound or pending with one.
                if status.code() == crate::framework::Code::Error {
                    let msg = status.message();
                    if p.pre_enqueue_error.as_deref() != Some(msg.as_str()) {
                        if let Some(report) = self.pre_enqueue_errors.get() {
                            report(p.pod.clone(), msg.clone());
                        }
                        p.pre_enqueue_error = Some(msg);
                    }
                }
                p.unschedulable_plugins.insert(plugin);
                p.gating_plugin = Some(plugin);
                p.gating_message = Some(status.message());
                false
            }
        }
    }

    // ---- public API ----------------------------------------------------------

    /// A new pending pod (informer add).
    pub fn add(&self, pod: Arc<Pod>) -> Placement {
        let sort_key = self.sort_key(&pod);
        let mut p = QueuedPodInfo::new(pod, self.clock.now());
        p.sort_key = sort_key;
        let mut inner = self.lock();
        let placement = self.move_to_active(&mut inner, p, &EVENT_UNSCHEDULED_POD_ADD, false);
        drop(inner);
        if placement == Placement::Active {
            self.cond.notify_one();
        }
        placement
    }

    /// The first `n` pods `pop` would most likely return, without taking them (backoff
    /// that completes meanwhile or new pods may change that): activeQ's first `n` in
    /// pop order, or with activeQ empty the first pod of backoffQ. For the lookahead.
    pub fn peek_n(&self, n: usize) -> Vec<Arc<Pod>> {
        let inner = self.lock();
        if inner.closed {
            return Vec::new();
        }
        if inner.active.is_empty() {
            return inner
                .backoff
                .peek()
                .map(|p| p.pod.clone())
                .into_iter()
                .collect();
        }
        inner
            .active
            .top(n)
            .into_iter()
            .map(|p| p.pod.clone())
            .collect()
    }

    /// Takes the next pod to schedule, blocking while there is none. With activeQ empty
    /// a pod still backing off after a rejection is taken early (upstream
    /// `SchedulerPopFromBackoffQ`). Returns `None` once the queue is closed.
    pub fn pop(&self) -> Option<QueuedPodInfo> {
        let mut inner = self.lock();
        loop {
            if inner.closed {
                return None;
            }
            self.flush_backoff_completed_locked(&mut inner);
            let next = inner.active.pop().or_else(|| inner.backoff.pop());
            if let Some(p) = next {
                return Some(Self::start_attempt(&mut inner, p));
            }
            let wait = inner
                .error_backoff
                .peek()
                .and_then(|p| p.backoff_expiration)
                .map(|t| t.saturating_duration_since(self.clock.now()) + Duration::from_millis(1))
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            inner = match self.cond.wait_timeout(inner, wait) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// Like `pop` but returns `None` instead of blocking when nothing is ready now.
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        let mut inner = self.lock();
        self.flush_backoff_completed_locked(&mut inner);
        let p = inner.active.pop().or_else(|| inner.backoff.pop())?;
        Some(Self::start_attempt(&mut inner, p))
    }

    /// A popped pod's attempt begins: it is in flight.
    fn start_attempt(inner: &mut Inner, mut p: QueuedPodInfo) -> QueuedPodInfo {
        p.attempts += 1;
        let seq = inner.next_seq;
        inner.in_flight.insert(p.pod.uid.clone(), seq);
        if p.consecutive_errors_count > 0 {
            inner.in_flight_errored.insert(p.pod.uid.clone());
        }
        inner.sched_cycle += 1;
        p.unschedulable_plugins.clear();
        p.pending_plugins.clear();
        p
    }

    /// The pod's attempt is over (success or failure); forget its in-flight events.
    pub fn done(&self, uid: &str) {
        let mut inner = self.lock();
        Self::done_locked(&mut inner, uid);
    }

    fn done_locked(inner: &mut Inner, uid: &str) {
        if inner.in_flight.remove(uid).is_none() {
            return;
        }
        inner.in_flight_errored.remove(uid);
        match inner.in_flight.values().min().copied() {
            None => inner.in_flight_events.clear(),
            Some(oldest) => {
                while inner
                    .in_flight_events
                    .front()
                    .is_some_and(|e| e.seq < oldest)
                {
                    inner.in_flight_events.pop_front();
                }
            }
        }
    }

    /// Requeues a pod whose attempt failed (upstream `AddUnschedulableIfNotPresent`):
    /// to activeQ/backoffQ if an event during its attempt may have helped it, else to
    /// unschedulable pods.
    pub fn add_unschedulable_if_not_present(&self, mut p: QueuedPodInfo) -> Placement {
        let mut inner = self.lock();
        let uid = p.pod.uid.clone();
        if inner.active.contains(&uid)
            || inner.backoff.contains(&uid)
            || inner.error_backoff.contains(&uid)
            || inner.unschedulable.contains_key(&uid)
        {
            tracing::warn!(pod = %p.pod.key(), "pod is already queued; not requeueing it again");
            Self::done_locked(&mut inner, &uid);
            return Placement::Unschedulable;
        }
        if p.unschedulable_plugins.is_empty() && p.pending_plugins.is_empty() {
            p.consecutive_errors_count += 1;
        } else {
            p.unschedulable_count += 1;
            p.consecutive_errors_count = 0;
        }
        p.timestamp = self.clock.now();
        p.backoff_expiration = None;

        let strategy = if p.unschedulable_plugins.is_empty() && p.pending_plugins.is_empty() {
            Strategy::AfterBackoff
        } else {
            let since = inner.in_flight.get(&uid).copied().unwrap_or(u64::MAX);
            let mut s = Strategy::Skip;
            for e in inner.in_flight_events.iter().filter(|e| e.seq >= since) {
                match self.worth_requeuing(&p, &e.event, e.old.as_ref(), e.new.as_ref()) {
                    Strategy::Immediately => {
                        s = Strategy::Immediately;
                        break;
                    }
                    Strategy::AfterBackoff => {
                        s = Strategy::AfterBackoff;
                        if p.pending_plugins.is_empty() {
                            break;
                        }
                    }
                    Strategy::Skip => {}
                }
            }
            s
        };
        let event = ClusterEvent {
            custom_label: Some("ScheduleAttemptFailure"),
            ..EVENT_UNSCHEDULABLE_TIMEOUT
        };
        let placement = self.requeue(&mut inner, p, strategy, &event);
        Self::done_locked(&mut inner, &uid);
        drop(inner);
        if placement != Placement::Unschedulable {
            self.cond.notify_one();
        }
        placement
    }

    /// A pending pod changed (upstream `Update`). A pod in no queue is added, unless
    /// `is_assumed` says its scheduling cycle already placed it: asked under the
    /// queue's lock, where a pod that is neither queued nor in flight has passed
    /// [`Self::done`], which its cycle calls only after assuming it. The caller's own
    /// check before calling can be overtaken by that cycle (the event thread stalled
    /// between the two), and the pod would then be scheduled a second time.
    pub fn update(&self, old: &Arc<Pod>, new: Arc<Pod>, is_assumed: impl Fn(&str) -> bool) {
        let events = pod_scheduling_properties_change(old, &new);
        let sort_key = self.sort_key(&new);
        let mut inner = self.lock();
        let uid = new.uid.clone();
        if inner.in_flight.contains_key(&uid) {
            for e in events {
                let seq = inner.next_seq;
                inner.next_seq += 1;
                inner.in_flight_events.push_back(InFlightEvent {
                    seq,
                    event: e,
                    old: Some(EventObject::Pod(old.clone())),
                    new: Some(EventObject::Pod(new.clone())),
                });
            }
            return;
        }
        for which in 0..3 {
            let heap = match which {
                0 => &mut inner.active,
                1 => &mut inner.backoff,
                _ => &mut inner.error_backoff,
            };
            if let Some(p) = heap.get(&uid) {
                let mut p = p.clone();
                p.pod = new.clone();
                p.sort_key = sort_key;
                heap.add_or_update(p);
                inner.nominator.update(new);
                return;
            }
        }
        if let Some(mut p) = inner.unschedulable.remove(&uid) {
            p.pod = new.clone();
            p.sort_key = sort_key;
            inner.nominator.update(new.clone());
            let old_obj = Some(EventObject::Pod(old.clone()));
            let new_obj = Some(EventObject::Pod(new.clone()));
            for e in &events {
                let s = self.worth_requeuing(&p, e, old_obj.as_ref(), new_obj.as_ref());
                if s == Strategy::Skip {
                    continue;
                }
                let placement = self.requeue(&mut inner, p, s, e);
                if placement != Placement::Unschedulable {
                    drop(inner);
                    self.cond.notify_one();
                    return;
                }
                // Back in unschedulable pods; try the next event kind.
                match inner.unschedulable.remove(&uid) {
                    Some(back) => p = back,
                    None => return,
                }
            }
            inner.unschedulable.insert(uid, p);
            return;
        }
        if is_assumed(&uid) {
            return;
        }
        let mut p = QueuedPodInfo::new(new, self.clock.now());
        p.sort_key = sort_key;
        let placement = self.move_to_active(&mut inner, p, &EVENT_UNSCHEDULED_POD_UPDATE, false);
        drop(inner);
        if placement == Placement::Active {
            self.cond.notify_one();
        }
    }

    /// A pending pod was deleted.
    pub fn delete(&self, pod: &Pod) {
        let mut inner = self.lock();
        inner.nominator.delete(&pod.uid);
        if inner.active.delete(&pod.uid).is_none()
            && inner.backoff.delete(&pod.uid).is_none()
            && inner.error_backoff.delete(&pod.uid).is_none()
        {
            inner.unschedulable.remove(&pod.uid);
        }
    }

    /// Nominates a pod to a node (`Some`), clears it (`None`).
    pub fn set_nominated(&self, pod: Arc<Pod>, node: Option<Arc<str>>) {
        self.lock().nominator.add(pod, node);
    }

    pub fn delete_nominated(&self, uid: &str) {
        self.lock().nominator.delete(uid);
    }

    pub fn nominated_node(&self, uid: &str) -> Option<Arc<str>> {
        self.lock().nominator.node_of(uid).cloned()
    }

    pub fn nominated_pods(&self) -> NominatedPods {
        self.lock().nominator.view()
    }

    pub fn pending(&self) -> PendingCounts {
        let inner = self.lock();
        PendingCounts {
            active: inner.active.len(),
            backoff: inner.backoff.len() + inner.error_backoff.len(),
            errored: inner.error_backoff.len(),
            min_consecutive_errors: inner
                .error_backoff
                .iter()
                .map(|p| p.consecutive_errors_count)
                .min()
                .unwrap_or(0),
            unschedulable: inner.unschedulable.rejected_len(),
            gated: inner.unschedulable.gated_len(),
            in_flight: inner.in_flight.len(),
        }
    }

    /// Of activeQ and the pods in flight, those whose previous attempt ended in an
    /// error: retries after errors (see `simulate`'s settle rule). Apart from
    /// [`pending`](Self::pending) because it walks activeQ.
    pub fn errored_retrying(&self) -> usize {
        let inner = self.lock();
        inner.in_flight_errored.len()
            + inner
                .active
                .iter()
                .filter(|p| p.consecutive_errors_count > 0)
                .count()
    }

    /// Pods waiting in unschedulable pods (for reports).
    pub fn unschedulable_pods(&self) -> Vec<QueuedPodInfo> {
        self.lock().unschedulable.values().cloned().collect()
    }

    pub fn scheduling_cycle(&self) -> u64 {
        self.lock().sched_cycle
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.cond.notify_all();
    }

    /// Wakes a blocked `pop` (e.g. after the clock moved in a simulation).
    pub fn wake(&self) {
        self.cond.notify_all();
    }
}

#[cfg(test)]
mod tests;
