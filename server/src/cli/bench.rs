//! `switchyard bench`: what an out-of-process plugin costs, run by run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use switchyard::plugins::in_tree_registry;
use switchyard::remote::sidecar::exec_command;

use super::sidecars::energy_sidecar_command;
use super::OutputFormat;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
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
    /// --quota-workload), sidecar-coscheduling (the Coscheduling sidecar, on
    /// --coscheduling-workload: gangs of 8), sidecar-python (the Python EnergyAware
    /// sidecar; needs grpcio, see scripts/demo.sh).
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

    /// The workload file of the sidecar-coscheduling run: its pods come in gangs
    /// (the pod-group label and min-member annotation of plugins/coscheduling).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "examples/workloads/coscheduling.yaml"
    )]
    coscheduling_workload: PathBuf,

    /// The workload of --coscheduling-workload to run, as `Case/Workload`.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "Coscheduling/5000Nodes_10000Pods"
    )]
    coscheduling_workload_name: String,

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

    /// Add a run `rack-NAME` after --runs: the sidecar CMD starts serves a plugin
    /// named `RackLocality` (a job's pods packed by rack: the topology example of the
    /// Go and Python SDKs), added to the profile, on --rack-workload. Repeatable:
    /// scripts/bench-sdks.sh --racks runs the Go and Python ones.
    #[arg(long, value_name = "NAME=CMD")]
    rack_sidecar: Vec<String>,

    /// The workload file of the rack-NAME runs: racks of nodes (label
    /// switchyard.dev/rack) and pods in jobs (label switchyard.dev/job).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "examples/workloads/rack-locality.yaml"
    )]
    rack_workload: PathBuf,

    /// The workload of --rack-workload to run, as `Case/Workload`.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "RackLocality/5000Nodes_10000Pods"
    )]
    rack_workload_name: String,

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

/// `NAME=COMMAND` of `flag` (the example's Python file named in the error).
fn named_command(flag: &str, spec: &str, example: &str) -> anyhow::Result<(String, String)> {
    match spec
        .split_once('=')
        .filter(|(n, c)| !n.trim().is_empty() && !c.trim().is_empty())
    {
        Some((name, cmd)) => Ok((name.trim().to_string(), cmd.to_string())),
        None => anyhow::bail!(
            "{flag} {spec:?}: expected NAME=COMMAND, e.g. python='python3 plugin-sdk/python/examples/{example}'"
        ),
    }
}

pub fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
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
        modes.push(Mode::Sdk(sdk_sidecars.len()));
        sdk_sidecars.push(named_command("--sdk-sidecar", spec, "accelerator.py")?);
    }
    let mut rack_sidecars = Vec::new();
    for spec in &args.rack_sidecar {
        modes.push(Mode::Rack(rack_sidecars.len()));
        rack_sidecars.push(named_command("--rack-sidecar", spec, "racklocality.py")?);
    }
    if modes.is_empty() {
        anyhow::bail!(
            "nothing to run: --runs is empty and there is no --sdk-sidecar or --rack-sidecar"
        );
    }
    if !rack_sidecars.is_empty() && !args.rack_workload.exists() {
        anyhow::bail!(
            "--rack-workload {}: no such file; run from the repository root or pass --rack-workload",
            args.rack_workload.display()
        );
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
    let cosched = exe.with_file_name("switchyard-coscheduling");
    if modes.contains(&Mode::SidecarCoscheduling) {
        if !cosched.exists() {
            anyhow::bail!(
                "{} not found (the sidecar-coscheduling run): build it with `cargo build --release --workspace`, or leave sidecar-coscheduling out of --runs",
                cosched.display()
            );
        }
        if !args.coscheduling_workload.exists() {
            anyhow::bail!(
                "--coscheduling-workload {}: no such file; run from the repository root or pass --coscheduling-workload",
                args.coscheduling_workload.display()
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
        coscheduling_command: exec_command(&cosched.display().to_string(), &[]),
        coscheduling_workload: (args.coscheduling_workload, args.coscheduling_workload_name),
        python_command,
        sdk_sidecars,
        rack_sidecars,
        rack_workload: (args.rack_workload, args.rack_workload_name),
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
