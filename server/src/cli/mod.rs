//! The `switchyard` command line: one file per subcommand, the options shared by all
//! (logging, tracing) here.

mod alloc;
mod bench;
mod conformance;
mod fuzz;
mod run;
mod sidecars;
mod simulate;
mod snapshot;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use bench::BenchArgs;
use conformance::ConformanceArgs;
use fuzz::FuzzArgs;
use run::RunArgs;
use simulate::SimulateArgs;

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
    /// --timeout (its report is printed first); 3 when the scheduler broke an invariant;
    /// 4 when pods ended pending after a scheduler or plugin error (a plugin failing
    /// under failurePolicy Fail, an unreachable sidecar) rather than because they do
    /// not fit (the summary counts them).
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
    /// sidecar replies, watched objects, DRA CEL selectors) with mutations of the seeds in
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

    /// Convert cluster manifests into what a sidecar receives, for a plugin's unit
    /// tests: one Replicate message (binary protobuf) holding a full snapshot of the
    /// Nodes and placed Pods, then a CycleStart per pending Pod (in `more`). The SDKs'
    /// test harnesses read it (they run this command for you when given manifests).
    ///
    /// Exit status: 0 when written, 1 on bad input.
    Snapshot(snapshot::SnapshotArgs),
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
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

/// Parses the command line, starts logging and tracing, runs the subcommand.
pub fn main() -> ExitCode {
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
        Command::Simulate(a) => simulate::simulate(a),
        Command::Bench(a) => bench::bench(a),
        Command::Fuzz(a) => fuzz::fuzz(a),
        Command::Run(a) => run::run(a),
        Command::Conformance(a) => conformance::conformance(a),
        Command::Snapshot(a) => snapshot::snapshot(a),
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
