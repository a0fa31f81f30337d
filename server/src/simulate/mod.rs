//! `switchyard simulate`: the scheduler on the embedded cluster, fed by manifests and/or a
//! scheduler_perf-style workload, run until the queue settles (every pod bound, or
//! unschedulable with a recorded reason), then reported.

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

use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::manifest::{self, ManifestError};
use crate::cluster::{event_channel, ClusterBackend};
use crate::config::{ConfigError, SchedulerConfig};
use crate::framework::Registry;
use crate::scheduler::{BuildError, Options, Scheduler};
pub use report::Report;
use workload::{NodeLabels, Op, WorkloadError};

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
}

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            cluster: Vec::new(),
            workload: None,
            workload_name: None,
            config: None,
            seed: 0x5eed,
            timeout: Duration::from_secs(600),
            progress: false,
            threads: 0,
            objects: Vec::new(),
            scheduler_config: None,
            events: false,
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
}

/// Runs a simulation and returns its report.
pub fn run(opts: &SimulateOptions, registry: &Registry) -> Result<Report, SimulateError> {
    let workload = match &opts.workload {
        Some(p) => Some(workload::load(p, opts.workload_name.as_deref())?),
        None => None,
    };
    let config = match (
        &opts.scheduler_config,
        &opts.config,
        workload.as_ref().and_then(|w| w.scheduler_config.as_ref()),
    ) {
        (Some(c), _, _) => c.clone(),
        (None, Some(p), _) | (None, None, Some(p)) => SchedulerConfig::load(p)?,
        (None, None, None) => SchedulerConfig::default_config(),
    };
    let demo = opts.cluster.is_empty() && workload.is_none() && opts.objects.is_empty();
    let (mut objects, skipped) = if demo {
        let mut out = Vec::new();
        let mut skipped = manifest::Skipped::default();
        manifest::parse_str(demo::DEMO_CLUSTER, demo::DEMO_NAME, &mut out, &mut skipped)?;
        (out, skipped)
    } else {
        manifest::load_paths(&opts.cluster)?
    };
    objects.extend(opts.objects.iter().cloned());
    for (src, kind) in &skipped.0 {
        tracing::warn!(%src, kind, "kind is not used by the scheduler; skipped");
    }
    let cluster = Arc::new(EmbeddedCluster::from_manifests(&objects)?);

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

    let mut measured: Option<Measured> = None;
    let result = (|| -> Result<(), SimulateError> {
        wait_settled(&sched, &cluster, opts.timeout, &mut progress)?;
        if let Some(w) = &workload {
            run_ops(w, &cluster, &sched, opts, &mut progress, &mut measured)?;
        }
        wait_settled(&sched, &cluster, opts.timeout, &mut progress)
    })();
    let elapsed = started.elapsed();
    progress.finish();
    running.stop();
    result?;
    let report = report::build(
        &cluster,
        &sched,
        &config,
        elapsed,
        measured,
        workload.as_ref().map(|w| (w.name.clone(), w.threshold)),
        opts.events,
    );
    drop(sched);
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(report)
}

/// Throughput over a measured stretch (a `collectMetrics` op, or start/stop ops).
#[derive(Clone, Debug)]
pub struct Measured {
    pub pods: usize,
    pub seconds: f64,
}

fn bound_count(cluster: &EmbeddedCluster) -> usize {
    cluster
        .pods()
        .iter()
        .filter(|r| r.pod.node_name.is_some())
        .count()
}

fn run_ops(
    w: &workload::Workload,
    cluster: &Arc<EmbeddedCluster>,
    sched: &Arc<Scheduler>,
    opts: &SimulateOptions,
    progress: &mut Progress,
    measured: &mut Option<Measured>,
) -> Result<(), SimulateError> {
    let mut window: Option<(Instant, usize)> = None;
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
                                    crate::scheduler::schedule_one::SplitMix64(
                                        n as u64 ^ opts.seed
                                    )
                                    .next_u64()
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
                let before = bound_count(cluster);
                let t0 = Instant::now();
                for p in &pods {
                    cluster.create_pod(p).map_err(|e| op_err(e.to_string()))?;
                }
                if !*skip_wait {
                    wait_settled(sched, cluster, opts.timeout, progress)?;
                }
                if *collect_metrics {
                    let bound = bound_count(cluster).saturating_sub(before);
                    *measured = Some(Measured {
                        pods: bound,
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                }
            }
            Op::Barrier => wait_settled(sched, cluster, opts.timeout, progress)?,
            Op::Sleep(d) => std::thread::sleep(*d),
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
            Op::StartCollectingMetrics => {
                window = Some((Instant::now(), bound_count(cluster)));
            }
            Op::StopCollectingMetrics => {
                wait_settled(sched, cluster, opts.timeout, progress)?;
                if let Some((t0, before)) = window.take() {
                    *measured = Some(Measured {
                        pods: bound_count(cluster).saturating_sub(before),
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Waits until the scheduler has nothing left to do (checked twice, a moment apart).
fn wait_settled(
    sched: &Arc<Scheduler>,
    cluster: &EmbeddedCluster,
    timeout: Duration,
    progress: &mut Progress,
) -> Result<(), SimulateError> {
    let deadline = Instant::now() + timeout;
    let mut idle_since: Option<Instant> = None;
    loop {
        let terminating = cluster.advance();
        if terminating == 0 && sched.is_idle() {
            match idle_since {
                Some(t) if t.elapsed() >= Duration::from_millis(3) => return Ok(()),
                Some(_) => {}
                None => idle_since = Some(Instant::now()),
            }
        } else {
            idle_since = None;
        }
        if Instant::now() > deadline {
            let p = sched.queue.pending();
            return Err(SimulateError::Timeout {
                timeout,
                pending: format!(
                    "{} active, {} backing off, {} in flight, {} binding/backend calls, {} events unhandled",
                    p.active,
                    p.backoff,
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
