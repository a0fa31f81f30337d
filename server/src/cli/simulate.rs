//! `switchyard simulate`: the embedded cluster until the queue settles, then the report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

use super::sidecars::demo_sidecars;
use super::OutputFormat;

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// Kubernetes manifests to load: files or directories of multi-document YAML/JSON
    /// (Nodes, Pods, Namespaces, PriorityClasses, PodDisruptionBudgets; RuntimeClasses,
    /// whose overhead and scheduling pods naming them get as admission gives them;
    /// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes, CSIDrivers
    /// and CSIStorageCapacities, bound and provisioned by an embedded PV controller;
    /// StatefulSets, whose pods and claims are created as their controller would;
    /// Services, ReplicationControllers and ReplicaSets for their selectors; `kind:
    /// List` works). Other kinds are skipped with a warning.
    #[arg(short, long, value_name = "PATH", num_args = 1..)]
    cluster: Vec<PathBuf>,

    /// A workload in kube-scheduler's scheduler_perf format (test cases of ops:
    /// createNodes, createNamespaces, createPods, createPodSets, createAny, updateAny,
    /// createResourceDriver, allocResourceClaims, barrier, sleep, deletePods, churn,
    /// start/stopCollectingMetrics), run after the
    /// --cluster manifests; upstream's own files run unchanged. See
    /// benchmarks/upstream/ and examples/workloads/.
    #[arg(short, long, value_name = "FILE")]
    workload: Option<PathBuf>,

    /// Which workload of the file to run, as `Case/Workload` (or just `Workload` when
    /// unique). Needed when the file has more than one.
    #[arg(long, value_name = "NAME")]
    workload_name: Option<String>,

    /// The folder a workload's templates may come from. Template paths resolve
    /// against the workload file, as upstream resolves them (`../templates/...`); a
    /// path that leaves this tree is refused. Default: the nearest folder named
    /// `scheduler_perf` above the file (upstream's layout), else the file's folder.
    #[arg(long, value_name = "DIR", requires = "workload")]
    workload_root: Option<PathBuf>,

    /// List the workloads in --workload, each with whether it loads (and why not),
    /// and exit. With `--output-format json`: an array of {name, labels, threshold,
    /// refused}.
    #[arg(long, requires = "workload")]
    list_workloads: bool,

    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1). Without it,
    /// one `default-scheduler` profile with the default plugins. Its `remotePlugins`
    /// list (Switchyard's extension: endpoint `unix:///path.sock`, `http://host:port` or
    /// `https://host:port` with `tls: {caFile, certFile, keyFile, serverName}`, timeout,
    /// failurePolicy Fail|Ignore) connects plugin sidecars, whose plugins profiles then
    /// enable by name like built-in ones (see proto/README.md).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Output format of the report.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,

    /// Print every pod in the table, even for large runs.
    #[arg(long)]
    all_pods: bool,

    /// Include each pod's latest events (Scheduled, FailedScheduling, Preempted) in the
    /// JSON report.
    #[arg(long)]
    events: bool,

    /// Seed for breaking ties between equally scored nodes (same seed, same input:
    /// same placements).
    #[arg(long, default_value_t = 0x5eed, value_name = "N")]
    seed: u64,

    /// Give up if the queue has not settled after this many seconds (a last resort: a
    /// run ends by itself once no pod can make progress). The report is printed either
    /// way.
    #[arg(long, default_value_t = 600, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    timeout: u64,

    /// Refuse a manifest file larger than this many bytes (100,000 pods and 10,000
    /// nodes take about 40 MB).
    #[arg(long, default_value_t = switchyard::cluster::manifest::DEFAULT_MAX_INPUT_BYTES,
          value_name = "BYTES")]
    max_input_bytes: u64,

    /// Threads for parallel Filter and Score (0 = one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: usize,

    /// Do not show the progress line on a terminal.
    #[arg(long)]
    no_progress: bool,

    /// Connect a running plugin sidecar (`unix:///path.sock` or `http://host:port`;
    /// failure policy Fail, timeout 1s). The plugins it serves (learnt from its
    /// handshake) are enabled at multiPoint in every profile that does not mention
    /// them. Repeatable.
    #[arg(long, value_name = "ENDPOINT")]
    plugin_endpoint: Vec<String>,

    /// Start a plugin sidecar with `sh -c CMD`, tell it where to listen
    /// (SWITCHYARD_PLUGIN_LISTEN=unix:///tmp/switchyard-PID/sidecar-N.sock), wait for
    /// its socket, then connect it like --plugin-endpoint. It is stopped when the run
    /// ends. Repeatable.
    #[arg(long, value_name = "CMD")]
    sidecar: Vec<String>,
}

pub fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.list_workloads {
        if let Some(w) = &args.workload {
            let mut rows = Vec::new();
            for entry in simulate::workload::list_workloads(w, args.max_input_bytes)? {
                let refused = simulate::workload::load(
                    w,
                    Some(&entry.name),
                    args.max_input_bytes,
                    args.workload_root.as_deref(),
                )
                .err()
                .map(|e| e.to_string());
                match args.output_format {
                    OutputFormat::Table => match &refused {
                        None => println!("{}", entry.name),
                        Some(e) => println!("{}\trefused: {e}", entry.name),
                    },
                    OutputFormat::Json => rows.push(serde_json::json!({
                        "name": entry.name,
                        "labels": entry.labels,
                        "threshold": entry.threshold,
                        "refused": refused,
                    })),
                }
            }
            if args.output_format == OutputFormat::Json {
                println!("{}", serde_json::Value::Array(rows));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let demo = args.cluster.is_empty() && args.workload.is_none();
    let mut sidecars = args.sidecar;
    if demo && args.config.is_none() && sidecars.is_empty() && args.plugin_endpoint.is_empty() {
        sidecars = demo_sidecars()?;
    }
    let opts = SimulateOptions {
        cluster: args.cluster,
        workload: args.workload,
        workload_name: args.workload_name,
        workload_root: args.workload_root,
        config: args.config,
        seed: args.seed,
        max_input_bytes: args.max_input_bytes,
        timeout: Duration::from_secs(args.timeout),
        progress: !args.no_progress,
        threads: args.threads,
        events: args.events,
        plugin_endpoints: args.plugin_endpoint,
        sidecars,
        ..SimulateOptions::default()
    };
    let report = simulate::run(&opts, &in_tree_registry()).context("simulation failed")?;
    match args.output_format {
        OutputFormat::Json => println!("{}", report.to_json()),
        OutputFormat::Table => print!("{}", report.to_table(args.all_pods)),
    }
    if let Some(why) = &report.unsettled {
        eprintln!("error: simulation failed: {why} (the report above shows the state then)");
        return Ok(ExitCode::from(1));
    }
    if !report.invariants.ok {
        eprintln!("error: an invariant was violated (see the report)");
        return Ok(ExitCode::from(3));
    }
    if let Some(v) = report.invariants.input_errors.first() {
        eprintln!(
            "error: bad input: {} on node {}: {} (and {} more; see the report)",
            v.rule,
            v.node.as_deref().unwrap_or("?"),
            v.detail,
            report.invariants.input_errors.len() - 1
        );
        return Ok(ExitCode::from(1));
    }
    if report.summary.scheduler_errors > 0 {
        eprintln!(
            "error: {} pod(s) ended pending after a scheduler or plugin error, not because they do not fit (see the summary)",
            report.summary.scheduler_errors
        );
        return Ok(ExitCode::from(EXIT_PENDING_ON_ERROR));
    }
    Ok(ExitCode::SUCCESS)
}

/// The exit status of a run that settled with pods pending after an error (a plugin
/// failing under `failurePolicy: Fail`, a dead sidecar): a CI pipeline must not
/// mistake it for a run whose pods simply do not fit.
pub const EXIT_PENDING_ON_ERROR: u8 = 4;
