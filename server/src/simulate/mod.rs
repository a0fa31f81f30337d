//! `switchyard simulate`: the scheduler on the embedded cluster, fed by manifests and/or a
//! scheduler_perf-style workload, run until the queue settles (every pod bound, or
//! unschedulable with a recorded reason), then reported.

pub mod bench;
pub mod cpu;
pub mod demo;
pub mod report;
pub mod workload;

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::client::{event_channel, ClusterBackend};
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::manifest::{self, ManifestError};
use crate::config::{ConfigError, SchedulerConfig};
use crate::framework::Registry;
use crate::scheduler::{BuildError, Options, Scheduler};
pub use report::Report;
use workload::{ChurnMode, ChurnObject, NodeLabels, Op, WorkloadError};

#[derive(Clone, Debug)]
pub struct SimulateOptions {
    pub cluster: Vec<PathBuf>,
    pub workload: Option<PathBuf>,
    pub workload_name: Option<String>,
    pub config: Option<PathBuf>,
    pub seed: u64,
    /// Give up waiting for the queue to settle after this long.
    pub timeout: Duration,
    /// Show a progress line on a terminal.
    pub progress: bool,
    /// Threads for Filter/Score (0 = one per core).
    pub threads: usize,
    /// Objects to load besides `cluster` (tests build them in memory).
    pub objects: Vec<manifest::ManifestObject>,
    /// A configuration given directly, instead of `config`.
    pub scheduler_config: Option<SchedulerConfig>,
    /// Include each pod's recent events in the report.
    pub events: bool,
    /// Sidecar endpoints to connect (`unix:///…` or `http://…`), their plugins enabled
    /// in every profile that does not mention them.
    pub plugin_endpoints: Vec<String>,
    /// Sidecar commands to start (each told where to listen through
    /// `SWITCHYARD_PLUGIN_LISTEN`), then connected like `plugin_endpoints`.
    pub sidecars: Vec<String>,
    /// How long a started sidecar may take to listen.
    pub sidecar_startup: Duration,
    /// Process groups of sidecars started elsewhere whose CPU time the measured
    /// stretch reports (those of `sidecars` are counted anyway).
    pub cpu_groups: Vec<u32>,
    /// The largest manifest, configuration, workload or template file read
    /// (`--max-input-bytes`).
    pub max_input_bytes: u64,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            cluster: Vec::new(),
            workload: None,
            workload_name: None,
            config: None,
            seed: 0x5eed,
            max_input_bytes: manifest::DEFAULT_MAX_INPUT_BYTES,
            timeout: Duration::from_secs(600),
            progress: false,
            threads: 0,
            objects: Vec::new(),
            scheduler_config: None,
            events: false,
            plugin_endpoints: Vec::new(),
            sidecars: Vec::new(),
            sidecar_startup: Duration::from_secs(30),
            cpu_groups: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("{0}")]
    Op(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
    #[error("the queue did not settle within {timeout:?}: {pending}")]
    Timeout { timeout: Duration, pending: String },
    #[error("{0}")]
    Remote(String),
}

/// Runs a simulation and returns its report.
pub fn run(opts: &SimulateOptions, registry: &Registry) -> Result<Report, SimulateError> {
    let workload = match &opts.workload {
        Some(p) => Some(workload::load(
            p,
            opts.workload_name.as_deref(),
            opts.max_input_bytes,
        )?),
        None => None,
    };
    let config = match (
        &opts.scheduler_config,
        &opts.config,
        workload.as_ref().and_then(|w| w.scheduler_config.as_ref()),
    ) {
        (Some(c), _, _) => c.clone(),
        (None, Some(p), _) | (None, None, Some(p)) => {
            SchedulerConfig::load(p, opts.max_input_bytes)?
        }
        (None, None, None) => SchedulerConfig::default_config(),
    };
    let demo = opts.cluster.is_empty() && workload.is_none() && opts.objects.is_empty();
    let load_started = Instant::now();
    let (mut objects, skipped) = if demo {
        let mut out = Vec::new();
        let mut skipped = manifest::Skipped::default();
        manifest::parse_str(demo::DEMO_CLUSTER, demo::DEMO_NAME, &mut out, &mut skipped)?;
        (out, skipped)
    } else {
        manifest::load_paths(&opts.cluster, opts.max_input_bytes)?
    };
    objects.extend(opts.objects.iter().cloned());
    for (src, kind) in &skipped.0 {
        tracing::warn!(%src, kind, "kind is not used by the scheduler; skipped");
    }
    let cluster = Arc::new(EmbeddedCluster::from_manifests(&objects)?);
    tracing::info!(
        objects = objects.len(),
        seconds = load_started.elapsed().as_secs_f64(),
        "manifests loaded"
    );
    drop(objects);
    let mut config = config;
    let sidecars = start_sidecars(opts, &mut config)?;
    let cpu_groups: Vec<u32> = (opts.cpu_groups.iter().copied())
        .chain(sidecars.iter().map(|s| s.process_group()))
        .collect();
    let mut registry = registry.clone();
    let endpoints = crate::remote::register(&config.remote_plugins, &mut registry)
        .map_err(SimulateError::Remote)?;
    for ep in endpoints.iter().filter(|e| e.config().auto_enable) {
        for p in ep.handshake().map(|h| h.plugins).unwrap_or_default() {
            config.enable_everywhere(&p.name);
        }
    }
    let registry = &registry;
    let stop = crate::remote::StopOnDrop(endpoints);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("switchyard-binding")
        .enable_all()
        .build()
        .map_err(|e| SimulateError::Runtime(e.to_string()))?;
    let sched = Scheduler::new(
        &config,
        registry,
        cluster.clone(),
        runtime.handle().clone(),
        Options {
            seed: opts.seed,
            threads: opts.threads,
            ..Options::default()
        },
    )?;
    let (sink, source) = event_channel();
    let started = Instant::now();
    cluster.start(sink);
    let running = sched.start(source);
    let mut progress = Progress::new(opts.progress && std::io::stderr().is_terminal());
    let total_hint = cluster.pods().len();
    progress.total = total_hint;

    let mut measuring = Measuring {
        cpu_groups: &cpu_groups,
        result: None,
    };
    let stuck = StuckRule::for_run(!config.remote_plugins.is_empty());
    let run_deadline = started
        .checked_add(opts.timeout)
        .unwrap_or(started + Duration::from_secs(31_536_000));
    let result = (|| -> Result<(), SimulateError> {
        wait_settled(&sched, &cluster, opts.timeout, stuck, &mut progress)?;
        if let Some(w) = &workload {
            run_ops(
                w,
                &cluster,
                &sched,
                opts,
                stuck,
                run_deadline,
                &mut progress,
                &mut measuring,
            )?;
        }
        wait_settled(&sched, &cluster, opts.timeout, stuck, &mut progress)
    })();
    let elapsed = started.elapsed();
    progress.finish();
    running.stop();
    // A run that did not settle still reports what it did; anything else is fatal.
    let unsettled = match result {
        Ok(()) => None,
        Err(e @ SimulateError::Timeout { .. }) => Some(e.to_string()),
        Err(e) => return Err(e),
    };
    let mut report = report::build(
        &cluster,
        &sched,
        &config,
        elapsed,
        measuring.result,
        workload.as_ref().map(|w| (w.name.clone(), w.threshold)),
        opts.events,
    );
    report.remote = stop.0.iter().map(report::RemoteReport::of).collect();
    report.unsettled = unsettled;
    drop(sched);
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(stop);
    drop(sidecars);
    Ok(report)
}

/// Starts `opts.sidecars` and adds them and `opts.plugin_endpoints` to the
/// configuration's endpoints.
fn start_sidecars(
    opts: &SimulateOptions,
    config: &mut SchedulerConfig,
) -> Result<Vec<crate::remote::sidecar::SidecarProcess>, SimulateError> {
    use crate::remote::sidecar::{socket_dir, Listen, SidecarProcess};
    use crate::remote::EndpointConfig;
    let mut started = Vec::new();
    let mut endpoints: Vec<(String, String)> = Vec::new();
    for (i, cmd) in opts.sidecars.iter().enumerate() {
        let sock = socket_dir().join(format!("sidecar-{i}.sock"));
        let p = SidecarProcess::start(cmd, Listen::Unix(sock), opts.sidecar_startup)
            .map_err(SimulateError::Remote)?;
        endpoints.push((format!("--sidecar {cmd:?}"), p.endpoint.clone()));
        started.push(p);
    }
    for e in &opts.plugin_endpoints {
        endpoints.push((format!("--plugin-endpoint {e:?}"), e.clone()));
    }
    for (flag, e) in endpoints {
        let index = config.remote_plugins.len();
        let mut c = EndpointConfig::new(index, &e)
            .map_err(|m| SimulateError::Remote(format!("{flag}: {m}")))?;
        c.auto_enable = true;
        config.remote_plugins.push(c);
    }
    Ok(started)
}

/// The measured stretch of a run, once there is one, and whose CPU it counts.
struct Measuring<'a> {
    cpu_groups: &'a [u32],
    result: Option<Measured>,
}

/// Where a measured stretch began.
#[derive(Clone, Copy)]
struct Mark {
    at: Instant,
    cpu: Option<cpu::CpuSeconds>,
}

impl Measuring<'_> {
    fn mark(&self) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: cpu::CpuSeconds::now(self.cpu_groups),
        }
    }

    /// Records the stretch from `m` to now, in which `pods` pods were bound.
    fn record(&mut self, m: Mark, pods: usize) {
        self.result = Some(Measured {
            pods,
            seconds: m.at.elapsed().as_secs_f64(),
            cpu: cpu::CpuSeconds::now(self.cpu_groups)
                .zip(m.cpu)
                .map(|(b, a)| b.since(a)),
        });
    }
}

/// Throughput over a measured stretch (a `collectMetrics` op, or start/stop ops).
#[derive(Clone, Debug)]
pub struct Measured {
    pub pods: usize,
    pub seconds: f64,
    /// CPU time spent over the stretch (Linux).
    pub cpu: Option<cpu::CpuSeconds>,
}

/// Pods in `namespaces` (empty: any) created at or after `since` (a
/// [`EmbeddedCluster::next_order`] value) that are bound now, as upstream's throughput
/// collector counts them. Counting only new pods keeps preemption workloads honest:
/// victims leave the cluster, so a difference of bound totals would undercount.
fn bound_since(cluster: &EmbeddedCluster, since: u64, namespaces: &[String]) -> usize {
    cluster
        .pods()
        .iter()
        .filter(|r| {
            r.order >= since
                && r.pod.node_name.is_some()
                && (namespaces.is_empty() || namespaces.iter().any(|n| **n == *r.pod.namespace))
        })
        .count()
}

#[allow(clippy::too_many_arguments)]
fn run_ops(
    w: &workload::Workload,
    cluster: &Arc<EmbeddedCluster>,
    sched: &Arc<Scheduler>,
    opts: &SimulateOptions,
    stuck: StuckRule,
    deadline: Instant,
    progress: &mut Progress,
    measured: &mut Measuring,
) -> Result<(), SimulateError> {
    let mut churn = Churn::default();
    let ctx = OpsContext { stuck, deadline };
    let result = run_ops_inner(w, cluster, sched, opts, ctx, progress, measured, &mut churn);
    // Upstream churn runs until the workload's last op is done.
    let churned = churn.stop();
    result?;
    churned.map_err(|m| SimulateError::Op(format!("{}: {m}", w.name)))
}

/// What every op of a run shares: when to call it settled, and when to give up.
#[derive(Clone, Copy)]
struct OpsContext {
    stuck: StuckRule,
    deadline: Instant,
}

#[allow(clippy::too_many_arguments)]
fn run_ops_inner(
    w: &workload::Workload,
    cluster: &Arc<EmbeddedCluster>,
    sched: &Arc<Scheduler>,
    opts: &SimulateOptions,
    ctx: OpsContext,
    progress: &mut Progress,
    measured: &mut Measuring,
    churn: &mut Churn,
) -> Result<(), SimulateError> {
    let mut window: Option<(Mark, u64, &[String])> = None;
    for (i, op) in w.ops.iter().enumerate() {
        let op_err = |m: String| SimulateError::Op(format!("{}: op {i}: {m}", w.name));
        match op {
            Op::CreateNodes {
                count,
                template,
                labels,
                allocatable,
            } => {
                for n in 0..*count {
                    let mut node: core::Node = template.instantiate(n, *count).map_err(op_err)?;
                    if let Some(l) = labels {
                        let (k, v) = match l {
                            NodeLabels::RoundRobin { key, values } => {
                                (key.clone(), values[n % values.len()].clone())
                            }
                            NodeLabels::Unique { key } => (
                                key.clone(),
                                format!(
                                    "{:016x}",
                                    crate::rand::SplitMix64(n as u64 ^ opts.seed).next_u64()
                                ),
                            ),
                        };
                        node.metadata
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert(k, v);
                    }
                    if !allocatable.is_empty() {
                        let status = node.status.get_or_insert_with(Default::default);
                        let alloc = status
                            .allocatable
                            .get_or_insert_with(|| status.capacity.clone().unwrap_or_default());
                        for (k, v) in allocatable {
                            alloc.insert(k.clone(), Quantity(v.clone()));
                        }
                    }
                    if node.metadata.name.as_deref().is_none_or(str::is_empty) {
                        let prefix = node
                            .metadata
                            .generate_name
                            .clone()
                            .unwrap_or_else(|| format!("node-{i}-"));
                        node.metadata.name = Some(format!("{prefix}{n:05}"));
                    }
                    cluster
                        .create_node(&node)
                        .map_err(|e| op_err(format!("node {n}: {e}")))?;
                }
            }
            Op::CreateNamespaces {
                prefix,
                count,
                template,
            } => {
                for n in 0..*count {
                    let mut ns = template.as_deref().cloned().unwrap_or_default();
                    ns.metadata.name = Some(format!("{prefix}-{n}"));
                    cluster
                        .create_namespace(&ns)
                        .map_err(|e| op_err(e.to_string()))?;
                }
            }
            Op::CreatePods {
                count,
                namespace,
                template,
                skip_wait,
                collect_metrics,
            } => {
                let mut pods = Vec::with_capacity(*count);
                for n in 0..*count {
                    let mut p: core::Pod = template.instantiate(n, *count).map_err(op_err)?;
                    p.metadata.namespace = Some(namespace.clone());
                    p.metadata
                        .labels
                        .get_or_insert_with(BTreeMap::new)
                        .insert("signature".into(), format!("signature-label-{n}"));
                    pods.push(p);
                }
                progress.total += count;
                let since = cluster.next_order();
                let mark = measured.mark();
                for p in &pods {
                    cluster.create_pod(p).map_err(|e| op_err(e.to_string()))?;
                }
                if !*skip_wait {
                    wait_settled(sched, cluster, opts.timeout, ctx.stuck, progress)?;
                }
                if *collect_metrics {
                    let bound = bound_since(cluster, since, std::slice::from_ref(namespace));
                    measured.record(mark, bound);
                }
            }
            Op::Barrier => wait_settled(sched, cluster, opts.timeout, ctx.stuck, progress)?,
            Op::Sleep(d) => {
                // A sleep never outlasts the run's --timeout.
                let left = ctx.deadline.saturating_duration_since(Instant::now());
                if *d > left {
                    std::thread::sleep(left);
                    return Err(SimulateError::Timeout {
                        timeout: opts.timeout,
                        pending: format!("op {i} (sleep {d:?}) runs past the time-out"),
                    });
                }
                std::thread::sleep(*d);
            }
            Op::DeletePods {
                namespace,
                selector,
            } => {
                for r in cluster.pods() {
                    if *r.pod.namespace == **namespace
                        && selector
                            .iter()
                            .all(|(k, v)| r.pod.labels().get(k) == Some(v))
                    {
                        cluster.delete_pod(&r.pod.namespace, &r.pod.name);
                    }
                }
            }
            Op::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
            } => {
                let ticker = Churner {
                    cluster: cluster.clone(),
                    mode: *mode,
                    number: *number,
                    interval: *interval,
                    namespace: namespace.clone(),
                    templates: templates.clone(),
                    label: format!("op {i} (churn)"),
                };
                churn.spawn(ticker);
            }
            Op::StartCollectingMetrics { namespaces } => {
                window = Some((measured.mark(), cluster.next_order(), namespaces));
            }
            Op::StopCollectingMetrics => {
                wait_settled(sched, cluster, opts.timeout, ctx.stuck, progress)?;
                if let Some((mark, since, namespaces)) = window.take() {
                    let pods = bound_since(cluster, since, namespaces);
                    measured.record(mark, pods);
                }
            }
        }
    }
    Ok(())
}

/// Background `churn` ops of one workload run.
#[derive(Default)]
struct Churn {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Result<(), String>>>,
}

impl Churn {
    fn spawn(&mut self, c: Churner) {
        let stop = self.stop.clone();
        self.threads.push(std::thread::spawn(move || c.run(&stop)));
    }

    /// Stops every churn thread; the first error any of them hit.
    fn stop(self) -> Result<(), String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.threads {
            let r = t
                .join()
                .unwrap_or_else(|_| Err("churn thread panicked".into()));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

/// One `churn` op: creates (and in recreate mode deletes) objects on a real-time tick.
struct Churner {
    cluster: Arc<EmbeddedCluster>,
    mode: ChurnMode,
    number: usize,
    interval: Duration,
    namespace: String,
    templates: Vec<ChurnObject>,
    label: String,
}

/// What a churn tick created, so recreate mode can delete it again.
enum Churned {
    Pod(String, String),
    Node(String),
    Service(String, String),
}

impl Churner {
    fn run(self, stop: &std::sync::atomic::AtomicBool) -> Result<(), String> {
        let mut slots: Vec<Vec<Option<Churned>>> = self
            .templates
            .iter()
            .map(|_| (0..self.number).map(|_| None).collect())
            .collect();
        let mut ticks = 0usize;
        let mut serial = 0u64;
        loop {
            let next = Instant::now() + self.interval;
            while Instant::now() < next {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep((next - Instant::now()).min(Duration::from_millis(5)));
            }
            for (t, template) in self.templates.iter().enumerate() {
                match self.mode {
                    ChurnMode::Create => {
                        serial += 1;
                        self.create(template, serial)?;
                    }
                    ChurnMode::Recreate => {
                        let slot = &mut slots[t][ticks % self.number];
                        match slot.take() {
                            Some(obj) => self.delete(obj),
                            None => {
                                serial += 1;
                                *slot = Some(self.create(template, serial)?);
                            }
                        }
                    }
                }
            }
            ticks += 1;
            if self.mode == ChurnMode::Create && ticks == self.number {
                return Ok(());
            }
        }
    }

    /// Names a generateName object: the prefix, the op's label-free serial.
    fn name(&self, generate_name: Option<&str>, kind: &str, serial: u64) -> String {
        format!("{}{serial:05}", generate_name.unwrap_or(kind))
    }

    fn create(&self, template: &ChurnObject, serial: u64) -> Result<Churned, String> {
        let err = |e: String| format!("{}: {e}", self.label);
        match template {
            ChurnObject::Pod(p) => {
                let mut p = (**p).clone();
                p.metadata.namespace = Some(self.namespace.clone());
                let key = self
                    .cluster
                    .create_pod(&p)
                    .map_err(|e| err(e.to_string()))?;
                let name = key.rsplit('/').next().unwrap_or_default().to_string();
                Ok(Churned::Pod(self.namespace.clone(), name))
            }
            ChurnObject::Node(n) => {
                let mut n = (**n).clone();
                if n.metadata.name.as_deref().is_none_or(str::is_empty) {
                    n.metadata.name =
                        Some(self.name(n.metadata.generate_name.as_deref(), "node-churn-", serial));
                }
                let name = self
                    .cluster
                    .create_node(&n)
                    .map_err(|e| err(e.to_string()))?;
                Ok(Churned::Node(name.to_string()))
            }
            ChurnObject::Service(s) => {
                let mut s = (**s).clone();
                s.metadata.namespace = Some(self.namespace.clone());
                if s.metadata.name.as_deref().is_none_or(str::is_empty) {
                    s.metadata.name = Some(self.name(
                        s.metadata.generate_name.as_deref(),
                        "service-churn-",
                        serial,
                    ));
                }
                let sel =
                    crate::model::convert::service_selector(&s).map_err(|e| err(e.to_string()))?;
                let name = sel.name.to_string();
                self.cluster.add_selector(sel);
                Ok(Churned::Service(self.namespace.clone(), name))
            }
        }
    }

    fn delete(&self, obj: Churned) {
        match obj {
            Churned::Pod(ns, name) => {
                self.cluster.delete_pod(&ns, &name);
            }
            Churned::Node(name) => {
                self.cluster.delete_node(&name);
            }
            Churned::Service(ns, name) => {
                self.cluster
                    .delete_selector(crate::model::node::WorkloadKind::Service, &ns, &name);
            }
        }
    }
}

/// How a simulation decides that pods retrying after errors cannot make progress.
#[derive(Clone, Copy, Debug)]
pub struct StuckRule {
    /// Consecutive errors every erroring pod must have had.
    pub errors: u32,
    /// How long nothing else may have happened meanwhile.
    pub quiet: Duration,
}

impl StuckRule {
    /// In process an error repeats as long as the cluster does not change (no nodes, a
    /// plugin that fails on this pod): two in a row settle it. A sidecar may come back,
    /// so with sidecars it takes three errors each and 5 s without any other progress.
    pub fn for_run(with_sidecars: bool) -> Self {
        if with_sidecars {
            StuckRule {
                errors: 3,
                quiet: Duration::from_secs(5),
            }
        } else {
            StuckRule {
                errors: 2,
                quiet: Duration::ZERO,
            }
        }
    }
}

/// Waits until no pod can make progress: the scheduler has nothing left to do, or the
/// only pods left retry after errors that repeat (see [`StuckRule`]). Terminations
/// still under their grace period are finished by letting simulated time jump to them
/// once everything else is idle. Checked twice, a moment apart.
fn wait_settled(
    sched: &Arc<Scheduler>,
    cluster: &EmbeddedCluster,
    timeout: Duration,
    stuck: StuckRule,
    progress: &mut Progress,
) -> Result<(), SimulateError> {
    let now = Instant::now();
    let deadline = now
        .checked_add(timeout)
        .unwrap_or(now + Duration::from_secs(31_536_000));
    let mut idle_since: Option<Instant> = None;
    let mut stuck_since: Option<(Instant, u64)> = None;
    loop {
        let terminating = cluster.advance();
        let p = sched.queue.pending();
        let quiet = sched.event_backlog() == 0
            && p.active == 0
            && p.in_flight == 0
            && sched.in_flight_ops() == 0;
        if quiet && p.backoff == 0 {
            match idle_since {
                Some(t) if t.elapsed() >= Duration::from_millis(3) => {
                    if terminating == 0 {
                        return Ok(());
                    }
                    cluster.finish_next_termination();
                    idle_since = None;
                }
                Some(_) => {}
                None => idle_since = Some(Instant::now()),
            }
        } else {
            idle_since = None;
        }
        let bound = sched.stats.bound.load(std::sync::atomic::Ordering::Relaxed);
        let only_errors_left = quiet
            && terminating == 0
            && p.backoff == p.errored
            && p.errored > 0
            && p.min_consecutive_errors >= stuck.errors;
        if only_errors_left {
            match stuck_since {
                Some((t, b)) if b == bound => {
                    if t.elapsed() >= stuck.quiet {
                        tracing::info!(
                            pods = p.errored,
                            "settled: every pod left fails with an error at each attempt"
                        );
                        return Ok(());
                    }
                }
                _ => stuck_since = Some((Instant::now(), bound)),
            }
        } else if quiet || terminating > 0 {
            stuck_since = None;
        }
        // Else a retry is in flight (an erroring pod's backoff expired): keep the
        // clock. Retries come every few seconds, so resetting here would never let
        // `quiet` pass; the retry either errors again (the same state), binds (the
        // bound count moves) or turns unschedulable (then not only errors are left).
        if Instant::now() > deadline {
            let mut terminating = cluster.terminating_pods();
            let waiting_on = if terminating.is_empty() {
                String::new()
            } else {
                let more = terminating.len().saturating_sub(5);
                terminating.truncate(5);
                format!(
                    "; still terminating: {}{}",
                    terminating.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            };
            return Err(SimulateError::Timeout {
                timeout,
                pending: format!(
                    "{} active, {} backing off ({} after errors, the fewest with {} in a row), {} in flight, {} binding/backend calls, {} events unhandled{waiting_on}",
                    p.active,
                    p.backoff,
                    p.errored,
                    p.min_consecutive_errors,
                    p.in_flight,
                    sched.in_flight_ops(),
                    sched.event_backlog()
                ),
            });
        }
        progress.tick(sched, cluster);
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// A one-line progress display on stderr.
struct Progress {
    enabled: bool,
    total: usize,
    last: Option<Instant>,
    started: Instant,
}

impl Progress {
    fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            total: 0,
            last: None,
            started: Instant::now(),
        }
    }

    fn tick(&mut self, sched: &Scheduler, _cluster: &EmbeddedCluster) {
        if !self.enabled || self.total < 200 {
            return;
        }
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_millis(150))
        {
            return;
        }
        self.last = Some(Instant::now());
        let bound = sched.stats.bound.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let p = sched.queue.pending();
        let width = 30usize;
        let done = (bound + p.unschedulable).min(self.total);
        let filled = (done * width).checked_div(self.total).unwrap_or(0);
        let rate = bound as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2Kscheduling [{}{}] {bound}/{} bound, {} unschedulable, {:.0} pods/s",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.total,
            p.unschedulable,
            rate
        );
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.enabled && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}
