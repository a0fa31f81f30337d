//! `switchyard simulate`: the scheduler on the embedded cluster, fed by manifests and/or a
//! scheduler_perf-style workload, run until the queue settles (every pod bound, or
//! unschedulable with a recorded reason), then reported.

pub mod bench;
pub mod cpu;
pub mod demo;
mod ops;
pub mod report;
mod settle;
pub mod workload;

use ops::*;
pub use settle::StuckRule;
use settle::*;

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
    /// The tree the workload's templates may come from (default: the nearest
    /// `scheduler_perf` folder above it, else its own folder).
    pub workload_root: Option<PathBuf>,
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
            workload_root: None,
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
    #[error(transparent)]
    Remote(#[from] crate::remote::SetupError),
    #[error(transparent)]
    Sidecar(#[from] crate::remote::sidecar::SidecarError),
    #[error("{flag}: {error}")]
    Endpoint {
        flag: String,
        error: crate::remote::InvalidEndpoint,
    },
    #[error("cannot find a free TCP port for a sidecar: {0}")]
    Port(#[source] std::io::Error),
    #[error("no SDK sidecar number {0}")]
    NoSdkSidecar(usize),
}

/// Runs a simulation and returns its report.
pub fn run(opts: &SimulateOptions, registry: &Registry) -> Result<Report, SimulateError> {
    let workload = match &opts.workload {
        Some(p) => Some(workload::load(
            p,
            opts.workload_name.as_deref(),
            opts.max_input_bytes,
            opts.workload_root.as_deref(),
        )?),
        None => None,
    };
    for note in workload.iter().flat_map(|w| &w.notes) {
        tracing::warn!("{note}");
    }
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
    let endpoints = crate::remote::register(&config.remote_plugins, &mut registry)?;
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
        wait_settled(&sched, &cluster, opts.timeout, &stuck, &mut progress)?;
        if let Some(w) = &workload {
            run_ops(
                w,
                &cluster,
                &sched,
                opts,
                stuck.clone(),
                run_deadline,
                &mut progress,
                &mut measuring,
            )?;
        }
        wait_settled(&sched, &cluster, opts.timeout, &stuck, &mut progress)
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
        let p = SidecarProcess::start(cmd, Listen::Unix(sock), opts.sidecar_startup)?;
        endpoints.push((format!("--sidecar {cmd:?}"), p.endpoint.clone()));
        started.push(p);
    }
    for e in &opts.plugin_endpoints {
        endpoints.push((format!("--plugin-endpoint {e:?}"), e.clone()));
    }
    for (flag, e) in endpoints {
        let index = config.remote_plugins.len();
        let mut c = EndpointConfig::new(index, &e)
            .map_err(|error| SimulateError::Endpoint { flag, error })?;
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

    /// Records the stretch from `m` to now, in which `bound` pods were bound.
    fn record(&mut self, m: Mark, bound: ops::Bound) {
        let binding_seconds = bound
            .first_micros
            .zip(bound.last_micros)
            .map(|(f, l)| (l - f) as f64 / 1e6);
        self.result = Some(Measured {
            pods: bound.pods,
            seconds: m.at.elapsed().as_secs_f64(),
            binding_seconds,
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
    /// From the first of the pods bound to the last (wall clock).
    pub binding_seconds: Option<f64>,
    /// CPU time spent over the stretch (Linux).
    pub cpu: Option<cpu::CpuSeconds>,
}
