//! The scheduler: owns the queue, the cache and the profiles' frameworks; runs serial
//! scheduling cycles on one thread (Filter and Score fan out over a rayon pool) and
//! concurrent binding cycles on tokio. [`schedule_one`] follows one pod's journey;
//! [`eventhandlers`] turns cluster events into cache and queue updates.

mod binding_cycle;
mod cycle;
pub mod eventhandlers;
mod failure;
mod lookahead;
mod observer;
pub mod schedule_one;
mod schedule_pod;
pub mod stats;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cache::Cache;
use crate::client::BoxFuture;
use crate::client::{ClusterClient, EventSource};
use crate::clock::{Clock, RealClock};
use crate::config::SchedulerConfig;
use crate::framework::runtime::SchedulerServices;
use crate::framework::waiting_pods::WaitingPods;
use crate::framework::{Framework, Handle, Registry};
use crate::model::{Pod, Uid};
use crate::queue::SchedulingQueue;
pub use stats::{AttemptRecord, Stats};

/// Options that are not part of KubeSchedulerConfiguration.
#[derive(Clone, Debug)]
pub struct Options {
    /// Seed for tie-breaking among equally scored nodes (reproducible runs).
    pub seed: u64,
    /// Threads for parallel Filter/Score; 0 = one per core.
    pub threads: usize,
    /// Expiry of assumed pods whose binding finished but never showed up (0 = never).
    pub assumed_pod_ttl: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 0x5eed,
            threads: 0,
            assumed_pod_ttl: Duration::ZERO,
        }
    }
}

/// State shared by the scheduling thread, the event handler and binding tasks.
pub struct Scheduler {
    pub(crate) cache: Mutex<Cache>,
    pub queue: SchedulingQueue,
    pub(crate) profiles: HashMap<Arc<str>, Arc<Framework>>,
    pub(crate) client: Arc<dyn ClusterClient>,
    /// The latest object of every pod the backend reported (the informer's store).
    pub(crate) pods: Mutex<rustc_hash::FxHashMap<Uid, Arc<Pod>>>,
    pub(crate) percentage_of_nodes_to_score: i32,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) pool: rayon::ThreadPool,
    pub stats: Stats,
    /// Binding cycles and backend calls started and not finished.
    pub(crate) in_flight_ops: Arc<InFlight>,
    /// Whether the scheduling loop may run; it waits on changes.
    pub(crate) readiness: tokio::sync::watch::Sender<Readiness>,
    pub(crate) seed: u64,
    /// Events from the backend not yet handled (shared with the event source).
    pub(crate) event_backlog: Mutex<Option<Arc<AtomicUsize>>>,
    /// Storage objects and assumed volume bindings, shared with every profile's plugins.
    pub(crate) volumes: Arc<crate::cache::volumes::VolumeStore>,
    pub(crate) dra: Arc<crate::framework::dra::DraStore>,
}

/// What the scheduling loop waits for before its first pod.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Readiness {
    /// The initial listing of the cluster has been handled.
    pub synced: bool,
    /// False while another replica holds the leader lease: the cache stays warm but
    /// no pod is scheduled.
    pub leading: bool,
    /// The scheduler is stopping: the loop ends.
    pub stopped: bool,
}

/// Operations started and not finished (binding cycles, backend calls), with a
/// wake-up for whoever waits for none to be left.
#[derive(Default)]
pub(crate) struct InFlight {
    count: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl InFlight {
    pub(crate) fn start(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn finish(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    pub(crate) fn get(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Returns once no operation is left.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let woken = self.idle.notified();
            tokio::pin!(woken);
            // Registered before the check, so a finish in between is not missed.
            woken.as_mut().enable();
            if self.get() == 0 {
                return;
            }
            woken.await;
        }
    }
}

/// Errors building a scheduler from configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The profile's error is part of this message, not a separate source, so a
    /// printed error chain says it once.
    #[error("{file}: profiles[{index}] ({name}): {error}")]
    Profile {
        file: String,
        index: usize,
        name: String,
        error: Box<crate::framework::ProfileError>,
    },
    #[error("cannot start the scheduling thread pool: {0}")]
    Pool(String),
}

impl Scheduler {
    pub fn new(
        config: &SchedulerConfig,
        registry: &Registry,
        client: Arc<dyn ClusterClient>,
        runtime: tokio::runtime::Handle,
        options: Options,
    ) -> Result<Arc<Scheduler>, BuildError> {
        let waiting_pods = Arc::new(WaitingPods::default());
        let volumes = crate::cache::volumes::VolumeStore::new();
        let dra = crate::framework::dra::DraStore::new();
        let mut profiles = HashMap::new();
        let mut handles = Vec::new();
        for (i, p) in config.profiles.iter().enumerate() {
            let handle = Arc::new(Handle::with_stores(
                waiting_pods.clone(),
                client.clone(),
                volumes.clone(),
                dra.clone(),
            ));
            handles.push(handle.clone());
            let fw = Framework::new(p, registry, handle.clone()).map_err(|error| {
                BuildError::Profile {
                    file: config.source.clone(),
                    index: i,
                    name: p.scheduler_name.clone(),
                    error: Box::new(error),
                }
            })?;
            profiles.insert(Arc::from(p.scheduler_name.as_str()), Arc::new(fw));
        }
        let clock: Arc<dyn Clock> = Arc::new(RealClock);
        let queue = SchedulingQueue::new(
            profiles.clone(),
            clock.clone(),
            config.pod_initial_backoff,
            config.pod_max_backoff,
        );
        let threads = if options.threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            options.threads
        };
        let threads = threads.min(config.parallelism.max(1) as usize).max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("switchyard-sched-{i}"))
            .build()
            .map_err(|e| BuildError::Pool(e.to_string()))?;
        let sched = Arc::new(Scheduler {
            cache: Mutex::new(Cache::new(options.assumed_pod_ttl)),
            queue,
            profiles,
            client,
            pods: Mutex::new(Default::default()),
            percentage_of_nodes_to_score: config.percentage_of_nodes_to_score,
            clock,
            runtime,
            pool,
            stats: Stats::default(),
            in_flight_ops: Arc::new(InFlight::default()),
            readiness: tokio::sync::watch::Sender::new(Readiness {
                synced: false,
                leading: true,
                stopped: false,
            }),
            seed: options.seed,
            event_backlog: Mutex::new(None),
            volumes,
            dra,
        });
        let services: std::sync::Weak<dyn SchedulerServices> =
            Arc::downgrade(&sched) as std::sync::Weak<dyn SchedulerServices>;
        for h in handles {
            h.set_services(services.clone());
        }
        let weak = Arc::downgrade(&sched);
        sched
            .queue
            .set_pre_enqueue_error_reporter(Box::new(move |pod, message| {
                if let Some(me) = weak.upgrade() {
                    me.report_pre_enqueue_error(pod, message);
                }
            }));
        Ok(sched)
    }

    pub(crate) fn cache(&self) -> MutexGuard<'_, Cache> {
        match self.cache.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub(crate) fn pod_store(&self) -> MutexGuard<'_, rustc_hash::FxHashMap<Uid, Arc<Pod>>> {
        match self.pods.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn profile(&self, scheduler_name: &str) -> Option<&Arc<Framework>> {
        self.profiles.get(scheduler_name)
    }

    pub fn profiles(&self) -> impl Iterator<Item = &Arc<Framework>> {
        self.profiles.values()
    }

    /// Whether the initial listing of the cluster has been handled.
    pub fn is_synced(&self) -> bool {
        self.readiness.borrow().synced
    }

    /// The initial listing of the cluster has been handled.
    pub(crate) fn set_synced(&self) {
        self.readiness.send_modify(|r| r.synced = true);
    }

    /// Lets the scheduling loop run (true, the default) or holds it before its next
    /// pod (leader election: a standby keeps its cache warm without scheduling).
    pub fn set_leading(&self, leading: bool) {
        self.readiness.send_modify(|r| r.leading = leading);
    }

    pub fn is_leading(&self) -> bool {
        self.readiness.borrow().leading
    }

    /// Blocks the calling (scheduling) thread until the loop may run: synced and
    /// leading. False when the scheduler stops first.
    pub(crate) fn wait_ready(&self) -> bool {
        let mut rx = self.readiness.subscribe();
        let ready = self
            .runtime
            .block_on(rx.wait_for(|r| r.stopped || (r.synced && r.leading)))
            .map(|r| !r.stopped);
        ready.unwrap_or(false)
    }

    /// Bindings and other asynchronous operations still running.
    pub fn in_flight_operations(&self) -> usize {
        self.in_flight_ops.get()
    }

    /// Returns once no binding or other asynchronous operation is running.
    pub async fn operations_done(&self) {
        self.in_flight_ops.wait_idle().await
    }

    /// Binding cycles and backend calls still running.
    pub fn in_flight_ops(&self) -> usize {
        self.in_flight_ops.get()
    }

    /// Events received from the backend and not yet handled.
    pub fn event_backlog(&self) -> usize {
        match self.event_backlog.lock() {
            Ok(g) => g.as_ref().map_or(0, |b| b.load(Ordering::SeqCst)),
            Err(_) => 0,
        }
    }

    /// Nothing left to do right now: no events to handle, no pod ready to schedule or
    /// being scheduled, no binding or backend call running. Unschedulable pods wait.
    pub fn is_idle(&self) -> bool {
        let p = self.queue.pending();
        self.event_backlog() == 0
            && p.active == 0
            && p.backoff == 0
            && p.in_flight == 0
            && self.in_flight_ops() == 0
    }

    pub(crate) fn op_started(&self) {
        self.in_flight_ops.start();
    }

    pub(crate) fn op_finished(&self) {
        self.in_flight_ops.finish();
    }

    /// A pod a PreEnqueue plugin failed on (an error, not a rejection: a sidecar down
    /// under `failurePolicy: Fail`) waits in the unschedulable pool until the plugin
    /// recovers; record why as a scheduling error is recorded: a FailedScheduling
    /// event and PodScheduled=False with reason SchedulerError. Off the queue's lock.
    fn report_pre_enqueue_error(self: &Arc<Self>, pod: Arc<Pod>, message: String) {
        let me = self.clone();
        self.spawn_op(async move {
            me.record_failed_scheduling(pod, "SchedulerError", message, None);
        });
    }

    /// Runs a backend call off the scheduling path, counted until it finishes.
    pub(crate) fn spawn_op<F>(self: &Arc<Self>, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.op_started();
        let me = self.clone();
        self.runtime.spawn(async move {
            fut.await;
            me.op_finished();
        });
    }

    /// Starts the event handler, the scheduling loop and the periodic queue flushes.
    pub fn start(self: &Arc<Self>, events: EventSource) -> Running {
        if let Ok(mut b) = self.event_backlog.lock() {
            *b = Some(events.backlog_counter());
        }
        let me = self.clone();
        let event_thread = std::thread::Builder::new()
            .name("switchyard-events".into())
            .spawn(move || {
                while let Some(ev) = events.recv() {
                    me.handle_event(ev);
                    events.handled();
                }
            });
        let me = self.clone();
        let sched_thread = std::thread::Builder::new()
            .name("switchyard-scheduling".into())
            .spawn(move || {
                let me2 = me.clone();
                me.pool
                    .install(move || schedule_one::run_scheduling_loop(&me2));
            });
        let me = self.clone();
        let housekeeping = self.runtime.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let mut n: u64 = 0;
            loop {
                tick.tick().await;
                n += 1;
                me.queue.flush_backoff_completed();
                me.cleanup_expired_assumed_pods();
                if n.is_multiple_of(30) {
                    me.queue.flush_unschedulable_leftover();
                }
            }
        });
        Running {
            threads: [event_thread.ok(), sched_thread.ok()],
            housekeeping,
            scheduler: self.clone(),
        }
    }

    fn cleanup_expired_assumed_pods(&self) {
        let now = self.clock.now();
        let expired = self.cache().cleanup_expired_assumed_pods(now);
        for p in expired {
            tracing::warn!(pod = %p.key(), node = ?p.node_name, "assumed pod expired: its binding was never confirmed");
            self.queue.move_all_to_active_or_backoff(
                crate::framework::events::EVENT_ASSIGNED_POD_DELETE,
                Some(crate::framework::events::EventObject::Pod(p)),
                None,
                None,
            );
        }
    }
}

impl SchedulerServices for Scheduler {
    fn spawn(&self, fut: BoxFuture<'static, ()>) {
        self.op_started();
        let ops = self.in_flight_ops.clone();
        self.runtime.spawn(async move {
            fut.await;
            ops.finish();
        });
    }

    fn pod(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pod_store().get(uid).cloned()
    }

    fn activate(&self, pods: &[Arc<Pod>]) {
        self.queue.activate(pods);
    }

    fn plugins_recovered(&self, plugins: &[String]) {
        self.queue.plugins_recovered(plugins);
    }

    fn record_preemption(&self, victims: usize) {
        crate::telemetry::metrics::SCHEDULER
            .preemption_attempts
            .add(&[], 1);
        crate::telemetry::metrics::SCHEDULER
            .preemption_victims
            .observe(&[], victims as f64);
        self.stats
            .preemption_attempts
            .fetch_add(1, Ordering::Relaxed);
        self.stats
            .preemption_victims
            .fetch_add(victims as u64, Ordering::Relaxed);
    }
}

/// A running scheduler; stopping closes the queue and lets the threads finish.
pub struct Running {
    threads: [Option<JoinHandle<()>>; 2],
    housekeeping: tokio::task::JoinHandle<()>,
    scheduler: Arc<Scheduler>,
}

impl Running {
    pub fn scheduler(&self) -> &Arc<Scheduler> {
        &self.scheduler
    }

    /// Stops scheduling new pods. The event thread ends when the backend's sinks drop.
    pub fn stop(mut self) {
        self.scheduler.readiness.send_modify(|r| r.stopped = true);
        self.scheduler.queue.close();
        self.housekeeping.abort();
        if let Some(t) = self.threads[1].take() {
            let _ = t.join();
        }
    }
}
