//! The `switchyard` command.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use switchyard::plugins::in_tree_registry;
use switchyard::remote::sidecar::exec_command;
use switchyard::simulate::{self, SimulateOptions};

/// A Kubernetes pod scheduler whose plugins can live outside it.
///
/// Switchyard decides like kube-scheduler (queue, cache and snapshot, serial scheduling
/// cycles, every feature a plugin at a framework extension point) and can run on an
/// embedded in-memory cluster for simulations, demos and benchmarks.
#[derive(Parser, Debug)]
#[command(name = "switchyard", version, about, long_about)]
struct Cli {
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// `switchyard=debug`. RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "warn", value_name = "FILTER")]
    log_level: String,

    /// Log lines as text or as JSON objects (one per line, for log collectors).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Export traces over OTLP/gRPC to this collector (Jaeger accepts OTLP), e.g.
    /// http://127.0.0.1:4317. Sets OTEL_EXPORTER_OTLP_ENDPOINT, so sidecars started
    /// with --sidecar export too; the other OTEL_* variables (OTEL_SERVICE_NAME,
    /// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG) apply.
    /// Without it and without the variable, nothing is traced.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Schedule pods on the embedded in-memory cluster until the queue settles, then
    /// report where every pod went, or why it could not be placed.
    ///
    /// With no arguments it runs the built-in demo cluster
    /// (examples/demo/cluster.yaml).
    ///
    /// Exit status: 0 when the run settled and every invariant held (no node
    /// over-committed, no pod bound twice, every pod accounted for, no victim of
    /// priority at or above its preemptor's, every bound pod passing its profile's
    /// taint, node affinity, node name, unschedulable, port and resource checks,
    /// recomputed from the input); 1 on bad input (including nodes the input itself
    /// over-commits with pods pinned by spec.nodeName), a failed run or a run that hit
    /// --timeout (its report is printed first); 3 when the scheduler broke an invariant.
    Simulate(SimulateArgs),

    /// Measure what an out-of-process plugin costs: run a scheduler_perf workload
    /// (SchedulingBasic, 5000 nodes, 10000 pods by default) with every plugin in
    /// process, then with TaintToleration (a Filter+Score plugin) served by the Rust
    /// sidecar `switchyard-tainttoleration` over a Unix socket, then over TCP, then
    /// with the stateful TenantQuota sidecar added (on a tenant-labelled cluster,
    /// --quota-workload); sidecar-python adds the Python EnergyAware sidecar on
    /// request. Prints pods/s, attempt latency, remote calls per pod, gRPC bytes per
    /// pod, Filter answers sent ahead and used, and CPU per pod (scheduler process +
    /// sidecar process, user and system, Linux).
    ///
    /// Build the sidecars first: `cargo build --release --workspace`.
    Bench(BenchArgs),

    /// Fuzz every input surface (manifests, KubeSchedulerConfiguration, workloads,
    /// sidecar replies, watched objects) with structure-aware mutations of the seeds in
    /// examples/, tests/scenarios/ and tests/fuzz-corpus/. Prints, per surface, the
    /// inputs tried, execs/s, panics, hangs (an input over 2 s, simulation aside),
    /// invariant violations of the simulations run on accepted manifests (one in 100
    /// that hold objects), the process's peak resident memory, and the input that
    /// needed the most heap (its size and heap peak; kept as heaviest.txt). Each
    /// finding is written to --findings-dir. Exit status 1 when anything was found.
    Fuzz(FuzzArgs),

    /// Schedule the pods of a Kubernetes cluster: watch it through its API server,
    /// bind pods whose spec.schedulerName is one of the configuration's profiles, and
    /// leave every other pod alone.
    ///
    /// Leader election (on by default, `leaderElection` in the configuration) lets
    /// several replicas run: the one holding the Lease schedules, the others keep
    /// their cache warm. SIGTERM stops scheduling, lets bindings in flight finish and
    /// releases the Lease. Exit status: 0 after SIGTERM; 1 on bad input, or when the
    /// lease was lost (as kube-scheduler, so that two replicas never schedule at
    /// once).
    Run(RunArgs),

    /// Check a plugin sidecar against the plugin contract before a scheduler runs it:
    /// plays the scheduler on its own connections (handshake and capabilities,
    /// snapshots, deltas, gaps and reconnects, every declared extension point,
    /// what-if deltas, concurrent cycles, FilterBatch, health) and prints one line
    /// per clause of proto/README.md ("Clauses") with PASS, FAIL (what was seen and
    /// what to fix) or SKIP (nothing the sidecar declares exercises it). It checks
    /// that the plugin is consistent, not what its policy decides.
    ///
    /// Run it against a sidecar no scheduler is using. Exit status: 0 when no clause
    /// failed, 1 when one did or on bad input.
    Conformance(ConformanceArgs),
}

#[derive(clap::Args, Debug)]
struct ConformanceArgs {
    /// The sidecar: a Unix socket (unix:///path/to.sock, or a path), plain TCP
    /// (tcp://host:port, http://host:port or host:port) or TLS (https://host:port,
    /// with --tls-ca).
    #[arg(value_name = "ENDPOINT")]
    endpoint: String,
    /// For an https:// endpoint: the CA certificate (PEM) the sidecar's certificate
    /// must chain to.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// For a sidecar that requires client certificates (mutual TLS): the kit's
    /// certificate (PEM), with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name to verify the sidecar's certificate against, when it is not the
    /// endpoint's host.
    #[arg(long, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// Cluster manifests (files or directories) to replicate to the sidecar: Nodes,
    /// Pods (those with spec.nodeName are placed, the others are scheduled one cycle
    /// each, at most 12) and PriorityClasses. Default: the demo cluster
    /// (examples/demo/cluster.yaml). Use objects your plugin cares about.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    cluster: Vec<PathBuf>,
    /// How long one call may take before it counts as unanswered.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
    /// Receive the sidecar's spans over OTLP/gRPC on this address (for example
    /// 127.0.0.1:4319) and check that each call's span starts under the call's
    /// traceparent (clause T1). Start the sidecar with
    /// OTEL_EXPORTER_OTLP_ENDPOINT=http://ADDRESS (and OTEL_BSP_SCHEDULE_DELAY=200 so
    /// it exports within the kit's 10 s wait).
    #[arg(long, value_name = "ADDRESS")]
    otlp_listen: Option<std::net::SocketAddr>,
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): profiles,
    /// leaderElection, clientConnection (qps, burst), remotePlugins. Without it, one
    /// `default-scheduler` profile with the default plugins and leader election on
    /// the Lease kube-system/kube-scheduler.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The kubeconfig to use. Without it: $KUBECONFIG or ~/.kube/config if present,
    /// else the in-cluster service account (in a pod).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Where to serve /healthz, /livez, /readyz and /metrics. By default over HTTPS,
    /// as kube-scheduler's secure port: /metrics needs a bearer token that the API
    /// server accepts (TokenReview) and whose user may `get` the non-resource path
    /// /metrics (SubjectAccessReview; deploy/metrics-reader.yaml grants it);
    /// /healthz, /livez and /readyz are open to all. Default: 0.0.0.0:10259, or
    /// 127.0.0.1:10251 with --plain-http.
    #[arg(long, value_name = "ADDR")]
    health_address: Option<std::net::SocketAddr>,

    /// Serve the health address over plain HTTP with no authentication, for
    /// development and tests. Allowed only on a loopback address.
    #[arg(long, conflicts_with_all = ["tls_cert_file", "tls_private_key_file"])]
    plain_http: bool,

    /// The serving certificate (PEM, the chain with the leaf first). Without it and
    /// --tls-private-key-file, a self-signed certificate for localhost and
    /// 127.0.0.1 is made in memory at start.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,

    /// The key of --tls-cert-file (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,

    /// This replica's identity in the leader Lease and in events. Default: $POD_NAME
    /// or the hostname, plus a random suffix.
    #[arg(long, value_name = "NAME")]
    identity: Option<String>,

    /// How long SIGTERM waits for bindings in flight.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    shutdown_grace_seconds: u64,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    /// The workload file (scheduler_perf format).
    #[arg(
        short,
        long,
        value_name = "FILE",
        default_value = "examples/workloads/scheduling-basic.yaml"
    )]
    workload: PathBuf,

    /// Which workload of the file, as `Case/Workload`.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "SchedulingBasic/5000Nodes_10000Pods"
    )]
    workload_name: String,

    /// Runs to make, comma-separated: in-process, sidecar-uds, sidecar-tcp (the
    /// TaintToleration sidecar), sidecar-uds-no-reuse (the same, its answers never
    /// reused for alike pods), sidecar-quota (the TenantQuota sidecar, on
    /// --quota-workload), sidecar-python (the Python EnergyAware sidecar; needs
    /// grpcio, see scripts/demo.sh).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "in-process,sidecar-uds,sidecar-uds-no-reuse,sidecar-tcp,sidecar-quota"
    )]
    runs: Vec<String>,

    /// The workload file of the sidecar-quota run: its pods have tenants and its
    /// nodes limits (the labels of plugins/quota).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "examples/workloads/tenant-quota.yaml"
    )]
    quota_workload: PathBuf,

    /// The workload of --quota-workload to run, as `Case/Workload`.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "TenantQuota/5000Nodes_10000Pods"
    )]
    quota_workload_name: String,

    /// Make the runs this many times, interleaved (in-process, sidecar-uds, ...,
    /// in-process, ...), and report each run's median. Throughput on a shared machine
    /// varies by tens of percent from one run to the next.
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: usize,

    /// Command that starts the TaintToleration sidecar; it must listen where
    /// SWITCHYARD_PLUGIN_LISTEN says. Default: switchyard-tainttoleration next to
    /// this binary.
    #[arg(long, value_name = "CMD")]
    sidecar_command: Option<String>,

    /// Add a run `sdk-NAME` after --runs: the sidecar CMD starts serves a plugin named
    /// `Accelerator` (the example every plugin SDK ships), added to the profile, over
    /// a Unix socket (SWITCHYARD_PLUGIN_LISTEN). Repeatable, one per SDK:
    /// scripts/bench-sdks.sh runs the Rust, Python, Go and TypeScript ones.
    #[arg(long, value_name = "NAME=CMD")]
    sdk_sidecar: Vec<String>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,

    /// Threads for parallel Filter and Score (0 = one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    threads: usize,

    /// Seed for breaking ties between equally scored nodes.
    #[arg(long, default_value_t = 0x5eed, value_name = "N")]
    seed: u64,

    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    timeout: u64,

    /// Instead of --runs: measure what tracing costs. Runs the in-process workload
    /// once per value, each in a fresh process: `off` (no exporter), or a sampling
    /// ratio (0.01 = 1% of attempts traced, 1 = all) with spans exported over OTLP to
    /// $OTEL_EXPORTER_OTLP_ENDPOINT (default http://127.0.0.1:4317; with nothing
    /// listening there the spans are still made, batched and dropped). Example:
    /// --tracing off,0.01,1
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    tracing: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct SimulateArgs {
    /// Kubernetes manifests to load: files or directories of multi-document YAML/JSON
    /// (Nodes, Pods, Namespaces, PriorityClasses, PodDisruptionBudgets;
    /// PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes, CSIDrivers
    /// and CSIStorageCapacities, bound and provisioned by an embedded PV controller;
    /// StatefulSets, whose pods and claims are created as their controller would;
    /// Services, ReplicationControllers and ReplicaSets for their selectors; `kind:
    /// List` works). Other kinds are skipped with a warning.
    #[arg(short, long, value_name = "PATH", num_args = 1..)]
    cluster: Vec<PathBuf>,

    /// A workload in kube-scheduler's scheduler_perf format (test cases of ops:
    /// createNodes, createNamespaces, createPods, barrier, sleep, deletePods, churn,
    /// start/stopCollectingMetrics), run after the --cluster manifests. See
    /// examples/workloads/.
    #[arg(short, long, value_name = "FILE")]
    workload: Option<PathBuf>,

    /// Which workload of the file to run, as `Case/Workload` (or just `Workload` when
    /// unique). Needed when the file has more than one.
    #[arg(long, value_name = "NAME")]
    workload_name: Option<String>,

    /// List the workloads in --workload and exit.
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

#[derive(clap::Args, Debug)]
struct FuzzArgs {
    /// Surfaces to fuzz (default: all of them). Repeatable.
    #[arg(long, value_enum)]
    surface: Vec<switchyard::fuzz::Surface>,
    /// Inputs per surface.
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    inputs: u64,
    /// Seconds per surface at most.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    seconds: f64,
    #[arg(long, default_value_t = 0x5eed, value_name = "N")]
    seed: u64,
    /// Where findings are written, one folder per surface (move them into
    /// tests/fuzz-corpus/ to keep them as regression tests).
    #[arg(long, default_value = "target/fuzz-findings", value_name = "DIR")]
    findings_dir: PathBuf,
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OutputFormat {
    Table,
    Json,
}

/// Logs to stderr (text or JSON) at the requested level, and, when the `OTEL_*`
/// variables ask for it, spans to the OTLP collector (at info, whatever the log
/// level). The guard flushes the spans at exit.
fn init_logging(
    filter: &str,
    format: LogFormat,
) -> anyhow::Result<Option<switchyard::telemetry::trace::TraceGuard>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let env = std::env::var("RUST_LOG").unwrap_or_else(|_| filter.to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&env)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour only on a terminal: `kubectl logs` and log collectors read a pipe or a
    // file, where escape sequences are noise.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let (otel, guard) = if switchyard::telemetry::trace::requested() {
        let (tracer, guard) = switchyard::telemetry::trace::tracer("switchyard")
            .context("OTEL_EXPORTER_OTLP_ENDPOINT is set, but tracing cannot start")?;
        let spans = tracing_subscriber::filter::Targets::new()
            .with_target("switchyard", tracing::Level::INFO);
        (
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(spans),
            ),
            Some(guard),
        )
    } else {
        (None, None)
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .init();
    Ok(guard)
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(path) => switchyard::config::SchedulerConfig::load(path)?,
        None => switchyard::config::SchedulerConfig::default_config(),
    };
    switchyard::run::run(
        switchyard::run::RunOptions {
            config,
            kubeconfig: args.kubeconfig,
            health_address: args.health_address.unwrap_or(if args.plain_http {
                std::net::SocketAddr::from(([127, 0, 0, 1], 10251))
            } else {
                std::net::SocketAddr::from(([0, 0, 0, 0], 10259))
            }),
            plain_http: args.plain_http,
            tls_cert_and_key: args.tls_cert_file.zip(args.tls_private_key_file),
            identity: args.identity,
            shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        },
        &in_tree_registry(),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn simulate(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.list_workloads {
        if let Some(w) = &args.workload {
            for name in simulate::workload::list_workloads(w)? {
                println!("{name}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    switchyard::cluster::manifest::set_max_input_bytes(args.max_input_bytes);
    let demo = args.cluster.is_empty() && args.workload.is_none();
    let mut sidecars = args.sidecar;
    if demo && args.config.is_none() && sidecars.is_empty() && args.plugin_endpoint.is_empty() {
        sidecars = demo_sidecars()?;
    }
    let opts = SimulateOptions {
        cluster: args.cluster,
        workload: args.workload,
        workload_name: args.workload_name,
        config: args.config,
        seed: args.seed,
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
    Ok(ExitCode::SUCCESS)
}

fn conformance(args: ConformanceArgs) -> anyhow::Result<ExitCode> {
    use switchyard::conformance;
    if !(args.timeout > 0.0 && args.timeout <= 600.0) {
        anyhow::bail!(
            "--timeout {}: must be more than 0 and at most 600 seconds",
            args.timeout
        );
    }
    let tls = match args.tls_ca {
        Some(ca) => {
            for f in [Some(&ca), args.tls_cert.as_ref(), args.tls_key.as_ref()]
                .into_iter()
                .flatten()
            {
                std::fs::metadata(f).with_context(|| format!("cannot read {}", f.display()))?;
            }
            Some(switchyard::remote::TlsFiles {
                ca,
                identity: args.tls_cert.zip(args.tls_key),
                server_name: args.tls_server_name,
            })
        }
        None if args.tls_cert.is_some() || args.tls_server_name.is_some() => {
            anyhow::bail!("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
        }
        None => None,
    };
    let opts = conformance::Options {
        endpoint: args.endpoint,
        tls,
        cluster: args.cluster,
        timeout: Duration::from_secs_f64(args.timeout),
        otlp_listen: args.otlp_listen,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(conformance::run(&opts))?;
    match args.output_format {
        OutputFormat::Table => print!("{}", report.table()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn fuzz(args: FuzzArgs) -> anyhow::Result<ExitCode> {
    use switchyard::fuzz;
    let manifest_root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = if manifest_root.join("examples").is_dir() {
        manifest_root
    } else {
        PathBuf::from(".")
    };
    let opts = fuzz::FuzzOptions {
        surfaces: if args.surface.is_empty() {
            fuzz::Surface::ALL.to_vec()
        } else {
            args.surface
        },
        inputs: args.inputs,
        seconds: args.seconds,
        seed: args.seed,
        root,
        crash_dir: Some(args.findings_dir),
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let reports = fuzz::run(&opts, &mut |r| {
        if tty {
            eprint!(
                "\r\x1b[2Kfuzzing {:?}: {} inputs, {:.0}/s, {} panics, {} hangs, {} violations",
                r.surface, r.inputs, r.execs_per_second, r.panics, r.hangs, r.invariant_violations
            );
        }
    });
    if tty {
        eprint!("\r\x1b[2K");
    }
    match args.output_format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&reports)?),
        OutputFormat::Table => print!("{}", fuzz::table(&reports)),
    }
    let found = fuzz::findings(&reports);
    Ok(if found > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The demo's sidecars: gang scheduling (Rust, built next to this binary) and
/// EnergyAware (Python, from the source tree; `SWITCHYARD_PYTHON` names the
/// interpreter that has grpcio, as `scripts/demo.sh` sets up).
fn demo_sidecars() -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot locate this binary")?;
    let cosched = exe.with_file_name("switchyard-coscheduling");
    let fix = "run scripts/demo.sh (it builds the sidecars and installs grpcio), or pass --cluster/--config to run without them";
    if !cosched.exists() {
        anyhow::bail!(
            "the demo starts the sidecar {}, which is not built: {fix}",
            cosched.display()
        );
    }
    let energy = energy_sidecar_command()?;
    Ok(vec![
        exec_command(
            &cosched.display().to_string(),
            &[
                "--permit-timeout-seconds",
                "2",
                "--denied-backoff-seconds",
                "1",
            ],
        ),
        energy,
    ])
}

/// The command that starts the Python EnergyAware sidecar from the source tree, with
/// the interpreter `SWITCHYARD_PYTHON` names (checked for grpcio).
fn energy_sidecar_command() -> anyhow::Result<String> {
    let script = [
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../plugins/python-energy/sidecar.py"),
        PathBuf::from("plugins/python-energy/sidecar.py"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .context("plugins/python-energy/sidecar.py is not here: run from the repository root")?;
    let python = std::env::var("SWITCHYARD_PYTHON").unwrap_or_else(|_| "python3".into());
    check_python_grpc(&python)?;
    Ok(exec_command(&python, &[&script.display().to_string()]))
}

/// Checks before starting the Python sidecar that its interpreter exists and has the
/// Python plugin SDK (and so grpcio and protobuf), so a missing module is one clear
/// line, not a child's traceback.
fn check_python_grpc(python: &str) -> anyhow::Result<()> {
    let fix = format!(
        "run scripts/demo.sh (it creates target/pyenv with them), or: {python} -m pip install ./plugin-sdk/python; \
         SWITCHYARD_PYTHON names another interpreter"
    );
    let out = std::process::Command::new(python)
        .args(["-c", "import grpc, google.protobuf, switchyard_plugin"])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Err(e) => anyhow::bail!(
            "the demo's EnergyAware sidecar needs Python, and {python:?} cannot be started ({e}): {fix}"
        ),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let missing = err
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("ModuleNotFoundError: "))
                .unwrap_or("the Python plugin SDK (switchyard_plugin), grpcio or protobuf is missing");
            anyhow::bail!(
                "the demo's EnergyAware sidecar needs the Python plugin SDK in {python:?} ({missing}): {fix}"
            )
        }
        Ok(_) => Ok(()),
    }
}

/// `bench --tracing`: one child `bench --runs in-process` per sampling setting.
fn bench_tracing(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot locate this binary")?;
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4317".into());
    let mut rows: Vec<(String, serde_json::Value)> = Vec::new();
    for t in &args.tracing {
        let t = t.trim();
        let ratio = match t {
            "off" => None,
            r => Some(
                r.parse::<f64>()
                    .ok()
                    .filter(|v| (0.0..=1.0).contains(v))
                    .with_context(|| {
                        format!("--tracing: {r:?} is neither `off` nor a ratio between 0 and 1")
                    })?,
            ),
        };
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "bench",
            "--runs",
            "in-process",
            "--output-format",
            "json",
            "--workload",
        ])
        .arg(&args.workload)
        .args(["--workload-name", &args.workload_name])
        .args(["--threads", &args.threads.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(["--timeout", &args.timeout.to_string()])
        .env_remove("OTEL_TRACES_EXPORTER")
        .stderr(std::process::Stdio::inherit());
        match ratio {
            None => {
                cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
            }
            Some(r) => {
                cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                    .env("OTEL_TRACES_SAMPLER", "traceidratio")
                    .env("OTEL_TRACES_SAMPLER_ARG", r.to_string());
            }
        }
        eprintln!("bench: tracing {t} ...");
        let out = cmd.output().context("starting the benchmark process")?;
        if !out.status.success() {
            anyhow::bail!("the benchmark with tracing {t} failed ({})", out.status);
        }
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("reading the benchmark's JSON")?;
        let run = v["runs"][0].clone();
        rows.push((t.to_string(), run));
    }
    // Runs on a shared machine vary: compare with the median of the `off` runs.
    let mut offs: Vec<f64> = rows
        .iter()
        .filter(|(t, _)| t == "off")
        .filter_map(|(_, r)| r["pods_per_second"].as_f64())
        .collect();
    offs.sort_by(|a, b| a.total_cmp(b));
    let base = offs.get(offs.len() / 2).copied();
    match args.output_format {
        OutputFormat::Json => {
            let runs: Vec<serde_json::Value> = rows
                .iter()
                .map(|(t, r)| {
                    let mut r = r.clone();
                    r["tracing"] = serde_json::json!(t);
                    r
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "workload": args.workload_name,
                    "runs": runs,
                }))?
            );
        }
        OutputFormat::Table => {
            println!("Workload: {} (in process)", args.workload_name);
            println!(
                "{:<10} {:>10} {:>10} {:>9} {:>9}",
                "TRACING", "PODS/S", "VS OFF*", "P50 MS", "P99 MS"
            );
            for (t, r) in &rows {
                let pps = r["pods_per_second"].as_f64().unwrap_or(0.0);
                let vs = match base {
                    Some(b) if b > 0.0 && t != "off" => format!("{:+.1}%", (pps / b - 1.0) * 100.0),
                    _ => "-".into(),
                };
                println!(
                    "{:<10} {:>10.0} {:>10} {:>9.3} {:>9.3}",
                    if t == "off" {
                        "off".to_string()
                    } else {
                        format!("{}%", t.parse::<f64>().unwrap_or(0.0) * 100.0)
                    },
                    pps,
                    vs,
                    r["attempt_latency_ms"]["p50"].as_f64().unwrap_or(0.0),
                    r["attempt_latency_ms"]["p99"].as_f64().unwrap_or(0.0),
                );
            }
            println!("* against the median of the `off` runs; repeat values (off,0.01,off,0.01) to see the noise");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    use switchyard::simulate::bench::{self, BenchOptions, Mode};
    if !args.tracing.is_empty() {
        return bench_tracing(&args);
    }
    let mut modes = Vec::new();
    for r in args.runs.iter().filter(|r| !r.trim().is_empty()) {
        let m = Mode::parse(r.trim()).with_context(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!(
                "--runs: unknown run {r:?}; expected one of {}",
                names.join(", ")
            )
        })?;
        modes.push(m);
    }
    let mut sdk_sidecars = Vec::new();
    for spec in &args.sdk_sidecar {
        let Some((name, cmd)) = spec
            .split_once('=')
            .filter(|(n, c)| !n.trim().is_empty() && !c.trim().is_empty())
        else {
            anyhow::bail!("--sdk-sidecar {spec:?}: expected NAME=COMMAND, e.g. python='python3 plugin-sdk/python/examples/accelerator.py'");
        };
        modes.push(Mode::Sdk(sdk_sidecars.len()));
        sdk_sidecars.push((name.trim().to_string(), cmd.to_string()));
    }
    if modes.is_empty() {
        anyhow::bail!("nothing to run: --runs is empty and there is no --sdk-sidecar");
    }
    if !args.workload.exists() {
        anyhow::bail!(
            "--workload {}: no such file; run from the repository root or pass --workload",
            args.workload.display()
        );
    }
    if args.repeat == 0 {
        anyhow::bail!("--repeat 0: make the runs at least once");
    }
    let sidecar_command = match args.sidecar_command {
        Some(c) => c,
        None => {
            let exe = std::env::current_exe().context("cannot locate this binary")?;
            let bin = exe.with_file_name("switchyard-tainttoleration");
            let taint = [Mode::SidecarUds, Mode::SidecarUdsNoReuse, Mode::SidecarTcp];
            if modes.iter().any(|m| taint.contains(m)) && !bin.exists() {
                anyhow::bail!(
                    "{} not found: build it with `cargo build --release --workspace`, or pass --sidecar-command",
                    bin.display()
                );
            }
            exec_command(&bin.display().to_string(), &[])
        }
    };
    let exe = std::env::current_exe().context("cannot locate this binary")?;
    let quota = exe.with_file_name("switchyard-quota");
    if modes.contains(&Mode::SidecarQuota) {
        if !quota.exists() {
            anyhow::bail!(
                "{} not found (the sidecar-quota run): build it with `cargo build --release --workspace`, or leave sidecar-quota out of --runs",
                quota.display()
            );
        }
        if !args.quota_workload.exists() {
            anyhow::bail!(
                "--quota-workload {}: no such file; run from the repository root or pass --quota-workload",
                args.quota_workload.display()
            );
        }
    }
    let python_command = if modes.contains(&Mode::SidecarPython) {
        energy_sidecar_command()?
    } else {
        String::new()
    };
    let opts = BenchOptions {
        workload: args.workload,
        workload_name: args.workload_name,
        modes,
        repeat: args.repeat,
        sidecar_command,
        quota_command: exec_command(&quota.display().to_string(), &[]),
        quota_workload: (args.quota_workload, args.quota_workload_name),
        python_command,
        sdk_sidecars,
        threads: args.threads,
        seed: args.seed,
        timeout: Duration::from_secs(args.timeout),
    };
    let report = bench::run(&opts, &in_tree_registry(), &mut |r| {
        eprintln!(
            "bench: {} done: {:.0} pods/s, p99 {:.3} ms, {:.1} calls and {:.0} wire bytes per pod",
            r.name,
            r.pods_per_second,
            r.attempt_latency_ms.p99,
            r.remote_calls_per_pod,
            r.wire_bytes_per_pod
        )
    })
    .context("benchmark failed")?;
    match args.output_format {
        OutputFormat::Json => println!("{}", report.to_json()),
        OutputFormat::Table => print!("{}", report.to_table()),
    }
    if report.runs.iter().any(|r| !r.invariants_ok) {
        eprintln!("error: an invariant was violated in a run");
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

/// The system allocator, reporting to `switchyard::fuzz`'s heap counters (which count
/// only while `switchyard fuzz` runs: per-input heap peaks).
struct CountingAlloc;

// SAFETY: every call goes to the system allocator unchanged; only counters are kept
// beside it.
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if !p.is_null() {
            switchyard::fuzz::heap_grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if !p.is_null() {
            switchyard::fuzz::heap_grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.dealloc(ptr, layout) };
        switchyard::fuzz::heap_shrank(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, new) };
        if !p.is_null() {
            if new >= layout.size() {
                switchyard::fuzz::heap_grew(new - layout.size());
            } else {
                switchyard::fuzz::heap_shrank(layout.size() - new);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(e) = &cli.otlp_endpoint {
        // Before any thread starts: children (sidecars) inherit it.
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", e);
    }
    let mut trace_guard = match init_logging(&cli.log_level, cli.log_format) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Simulate(a) => simulate(a),
        Command::Bench(a) => bench(a),
        Command::Fuzz(a) => fuzz(a),
        Command::Run(a) => run(a),
        Command::Conformance(a) => conformance(a),
    };
    if let Some(g) = trace_guard.as_mut() {
        g.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
