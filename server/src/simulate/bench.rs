//! `switchyard bench`: one workload run several ways — every plugin in process; one
//! Filter+Score plugin (TaintToleration) served by a Rust sidecar over a Unix socket;
//! the same over TCP — to show what moving a plugin out of process costs; then a
//! stateful sidecar (TenantQuota, PreFilter with AddPod/RemovePod and Filter, not
//! node-local) and, on request, the Python EnergyAware sidecar, each added to the
//! default profile.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::report::Latency;
use super::{run as simulate, SimulateError, SimulateOptions};
use crate::config::SchedulerConfig;
use crate::framework::Registry;
use crate::remote::sidecar::{socket_dir, Listen, SidecarProcess};
use crate::remote::EndpointConfig;

/// The built-in plugin the sidecar replaces, and the name it serves it under.
pub const BUILT_IN: &str = "TaintToleration";
pub const REMOTE: &str = "RemoteTaintToleration";

/// How a run reaches the plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    InProcess,
    SidecarUds,
    /// The same, with answers never reused for alike pods (`reuseAlikePods: false`):
    /// what reuse is worth.
    SidecarUdsNoReuse,
    SidecarTcp,
    /// TenantQuota (Rust) over a Unix socket, on [`BenchOptions::quota_workload`].
    SidecarQuota,
    /// Coscheduling (Rust; gangs at Permit) over a Unix socket, on
    /// [`BenchOptions::coscheduling_workload`].
    SidecarCoscheduling,
    /// EnergyAware (Python) over a Unix socket.
    SidecarPython,
    /// The Accelerator example of a plugin SDK ([`BenchOptions::sdk_sidecars`], by
    /// index) over a Unix socket, added to the profile: what each SDK costs.
    Sdk(usize),
    /// The RackLocality example of a plugin SDK ([`BenchOptions::rack_sidecars`], by
    /// index) over a Unix socket, added to the profile, on
    /// [`BenchOptions::rack_workload`]: a cluster-aware plugin in that SDK.
    Rack(usize),
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::InProcess,
        Mode::SidecarUds,
        Mode::SidecarUdsNoReuse,
        Mode::SidecarTcp,
        Mode::SidecarQuota,
        Mode::SidecarCoscheduling,
        Mode::SidecarPython,
    ];

    /// The name `--runs` takes (`sdk` for every SDK run).
    pub fn name(self) -> &'static str {
        match self {
            Mode::InProcess => "in-process",
            Mode::SidecarUds => "sidecar-uds",
            Mode::SidecarUdsNoReuse => "sidecar-uds-no-reuse",
            Mode::SidecarTcp => "sidecar-tcp",
            Mode::SidecarQuota => "sidecar-quota",
            Mode::SidecarCoscheduling => "sidecar-coscheduling",
            Mode::SidecarPython => "sidecar-python",
            Mode::Sdk(_) => "sdk",
            Mode::Rack(_) => "rack",
        }
    }

    /// The row's name: `sdk-<name>` for an SDK run.
    pub fn run_name(self, opts: &BenchOptions) -> String {
        match self {
            Mode::Sdk(i) => format!(
                "sdk-{}",
                opts.sdk_sidecars.get(i).map_or("?", |s| s.0.as_str())
            ),
            Mode::Rack(i) => format!(
                "rack-{}",
                opts.rack_sidecars.get(i).map_or("?", |s| s.0.as_str())
            ),
            m => m.name().to_string(),
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }
}

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workload: PathBuf,
    pub workload_name: String,
    pub modes: Vec<Mode>,
    /// Rounds over `modes`; each mode reports its median round.
    pub repeat: usize,
    /// Command that starts the TaintToleration sidecar (it reads its listen address
    /// from `SWITCHYARD_PLUGIN_LISTEN`).
    pub sidecar_command: String,
    /// Command that starts the TenantQuota sidecar, and the workload (file, name)
    /// its run schedules: one whose pods have tenants and whose nodes have limits.
    pub quota_command: String,
    pub quota_workload: (PathBuf, String),
    /// Command that starts the Coscheduling sidecar, and the workload its run
    /// schedules: one whose pods come in gangs (pod-group label, min-member
    /// annotation).
    pub coscheduling_command: String,
    pub coscheduling_workload: (PathBuf, String),
    /// Command that starts the Python EnergyAware sidecar.
    pub python_command: String,
    /// (name, command) of each SDK's Accelerator example sidecar (`Mode::Sdk`).
    pub sdk_sidecars: Vec<(String, String)>,
    /// (name, command) of each SDK's RackLocality example sidecar (`Mode::Rack`),
    /// and the workload (file, name) their runs schedule: racks and jobs.
    pub rack_sidecars: Vec<(String, String)>,
    pub rack_workload: (PathBuf, String),
    pub threads: usize,
    pub seed: u64,
    pub timeout: Duration,
}

/// One row of the result.
#[derive(Serialize, Clone, Debug)]
pub struct BenchRun {
    pub name: String,
    /// Over the workload's measured pods.
    pub pods_per_second: f64,
    /// Every attempt of the run.
    pub attempt_latency_ms: Latency,
    /// Calls (every extension point) per pod bound over the whole run.
    pub remote_calls_per_pod: f64,
    /// gRPC message bytes both ways, replication included, per pod bound.
    pub wire_bytes_per_pod: f64,
    /// Share of Filter answers sent ahead for the next pod that were used (the rest
    /// were dropped and asked again); absent when none were sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookahead_used: Option<f64>,
    /// Filter rounds and Score calls per pod answered with answers reused for alike
    /// pods, without a call.
    pub alike_reused_per_pod: f64,
    /// Pods bound over the whole run.
    pub pods: usize,
    /// Share of the in-process run's throughput, when that ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_throughput: Option<f64>,
    pub invariants_ok: bool,
    /// Pods/s of every round, in order, when there were several (the row is the
    /// median one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<f64>,
    /// CPU time per measured pod, in µs: where an out-of-process plugin's cost goes
    /// when every core is busy (Linux).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_pod: Option<CpuPerPod>,
}

/// CPU µs per measured pod: the scheduler process (of which its sidecar connection
/// threads) and the sidecar process.
#[derive(Serialize, Clone, Copy, Debug)]
pub struct CpuPerPod {
    pub scheduler: f64,
    pub connection_threads: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecar: Option<f64>,
}

impl CpuPerPod {
    fn of(m: &super::report::MeasuredReport) -> Option<CpuPerPod> {
        let c = m.cpu_seconds?.micros_per(m.pods);
        Some(CpuPerPod {
            scheduler: c.scheduler.round(),
            connection_threads: c.connection_threads.round(),
            sidecar: c.sidecars.map(f64::round),
        })
    }

    /// "scheduler+sidecar" (the sidecar part only where there is one).
    fn cell(&self) -> String {
        match self.sidecar {
            Some(sc) => format!("{:.0}+{:.0}", self.scheduler, sc),
            None => format!("{:.0}", self.scheduler),
        }
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct BenchReport {
    pub workload: String,
    pub runs: Vec<BenchRun>,
}

/// Runs each mode in turn, `repeat` times over; `progress` hears about each run as it
/// finishes. Each mode's row is its median round (by pods/s).
pub fn run(
    opts: &BenchOptions,
    registry: &Registry,
    progress: &mut dyn FnMut(&BenchRun),
) -> Result<BenchReport, SimulateError> {
    let mut all: Vec<Vec<BenchRun>> = vec![Vec::new(); opts.modes.len()];
    for _ in 0..opts.repeat.max(1) {
        for (i, &mode) in opts.modes.iter().enumerate() {
            let row = run_one(opts, registry, mode)?;
            progress(&row);
            all[i].push(row);
        }
    }
    let mut runs: Vec<BenchRun> = Vec::new();
    for (i, mut rounds) in all.into_iter().enumerate() {
        let per_round: Vec<f64> = rounds.iter().map(|r| r.pods_per_second).collect();
        rounds.sort_by(|a, b| a.pods_per_second.total_cmp(&b.pods_per_second));
        let invariants_ok = rounds.iter().all(|r| r.invariants_ok);
        let mut row = rounds.swap_remove(rounds.len() / 2);
        row.invariants_ok = invariants_ok;
        if per_round.len() > 1 {
            row.rounds = per_round;
        }
        let base = runs
            .iter()
            .find(|r| r.name == Mode::InProcess.name())
            .map(|r| r.pods_per_second);
        row.relative_throughput = base
            .filter(|b| *b > 0.0 && opts.modes[i] != Mode::InProcess)
            .map(|b| (row.pods_per_second / b * 1000.0).round() / 1000.0);
        runs.push(row);
    }
    Ok(BenchReport {
        workload: opts.workload_name.clone(),
        runs,
    })
}

/// One run of one mode, in a fresh simulated cluster (and a fresh sidecar).
fn run_one(
    opts: &BenchOptions,
    registry: &Registry,
    mode: Mode,
) -> Result<BenchRun, SimulateError> {
    let mut config = SchedulerConfig::default_config();
    let (workload, workload_name) = match mode {
        Mode::SidecarQuota => opts.quota_workload.clone(),
        Mode::SidecarCoscheduling => opts.coscheduling_workload.clone(),
        Mode::Rack(_) => opts.rack_workload.clone(),
        _ => (opts.workload.clone(), opts.workload_name.clone()),
    };
    // The sidecar's command, socket name, and the plugin it serves (replacing the
    // built-in TaintToleration, or added to the profile).
    let sidecar = match mode {
        Mode::InProcess => None,
        Mode::SidecarUds
        | Mode::SidecarUdsNoReuse
        | Mode::SidecarTcp
        | Mode::SidecarQuota
        | Mode::SidecarCoscheduling
        | Mode::SidecarPython
        | Mode::Sdk(_)
        | Mode::Rack(_) => {
            let (command, socket, plugin) = match mode {
                Mode::SidecarQuota => (&opts.quota_command, "bench-quota.sock", "TenantQuota"),
                Mode::SidecarCoscheduling => (
                    &opts.coscheduling_command,
                    "bench-cosched.sock",
                    "Coscheduling",
                ),
                Mode::SidecarPython => (&opts.python_command, "bench-energy.sock", "EnergyAware"),
                Mode::Sdk(i) => {
                    let (_, command) = opts
                        .sdk_sidecars
                        .get(i)
                        .ok_or(SimulateError::NoSdkSidecar(i))?;
                    (command, "bench-sdk.sock", "Accelerator")
                }
                Mode::Rack(i) => {
                    let (_, command) = opts
                        .rack_sidecars
                        .get(i)
                        .ok_or(SimulateError::NoSdkSidecar(i))?;
                    (command, "bench-rack.sock", "RackLocality")
                }
                _ => (&opts.sidecar_command, "bench-taint.sock", REMOTE),
            };
            let listen = if mode == Mode::SidecarTcp {
                Listen::free_tcp().map_err(SimulateError::Port)?
            } else {
                Listen::Unix(socket_dir().join(socket))
            };
            let p = SidecarProcess::start(command, listen, Duration::from_secs(30))?;
            let mut ep =
                EndpointConfig::new(0, &p.endpoint).map_err(|error| SimulateError::Endpoint {
                    flag: format!("sidecar endpoint {:?}", p.endpoint),
                    error,
                })?;
            ep.plugins = vec![plugin.to_string()];
            ep.reuse_alike_pods = mode != Mode::SidecarUdsNoReuse;
            // A gang plugin's Permit mostly waits: its verdict is awaited in the
            // binding cycle, as its README recommends.
            ep.permit_in_binding_cycle = mode == Mode::SidecarCoscheduling;
            if plugin == REMOTE {
                config.rename_plugin(BUILT_IN, REMOTE);
            } else {
                ep.auto_enable = true;
            }
            config.remote_plugins.push(ep);
            Some(p)
        }
    };
    let sim = SimulateOptions {
        workload: Some(workload),
        workload_name: Some(workload_name),
        scheduler_config: Some(config),
        seed: opts.seed,
        threads: opts.threads,
        timeout: opts.timeout,
        cpu_groups: sidecar.iter().map(|p| p.process_group()).collect(),
        ..SimulateOptions::default()
    };
    let report = simulate(&sim, registry)?;
    let bound = report.summary.bound.max(1) as f64;
    let calls: u64 = report.remote.iter().map(|r| r.calls).sum();
    let bytes: u64 = report
        .remote
        .iter()
        .map(|r| r.bytes_sent + r.bytes_received)
        .sum();
    let hits: u64 = report.remote.iter().map(|r| r.lookahead_hits).sum();
    let misses: u64 = report.remote.iter().map(|r| r.lookahead_misses).sum();
    let lookahead_used = (hits + misses > 0)
        .then(|| (hits as f64 / (hits + misses) as f64 * 1000.0).round() / 1000.0);
    let pods_per_second = report
        .measured
        .as_ref()
        .map(|m| m.pods_per_second)
        .unwrap_or(report.summary.pods_per_second);
    Ok(BenchRun {
        name: mode.run_name(opts),
        pods_per_second,
        attempt_latency_ms: report.summary.attempt_latency_ms.clone(),
        remote_calls_per_pod: round1(calls as f64 / bound),
        wire_bytes_per_pod: round1(bytes as f64 / bound),
        lookahead_used,
        alike_reused_per_pod: round1(
            report.remote.iter().map(|r| r.alike_reused).sum::<u64>() as f64 / bound,
        ),
        pods: report.summary.bound,
        relative_throughput: None,
        invariants_ok: report.invariants.ok,
        rounds: Vec::new(),
        cpu_us_per_pod: report.measured.as_ref().and_then(CpuPerPod::of),
    })
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

impl BenchReport {
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "Workload: {}", self.workload);
        let _ = writeln!(
            s,
            "{:<20} {:>10} {:>9} {:>9} {:>9} {:>12} {:>14} {:>10} {:>8} {:>14}  INVARIANTS",
            "RUN",
            "PODS/S",
            "VS IN-PROC",
            "P50 MS",
            "P99 MS",
            "CALLS/POD",
            "WIRE B/POD",
            "LOOKAHEAD",
            "REUSED",
            "CPU µS/POD",
        );
        for r in &self.runs {
            let _ = writeln!(
                s,
                "{:<20} {:>10.0} {:>10} {:>9.3} {:>9.3} {:>12.1} {:>14.1} {:>10} {:>8.1} {:>14}  {}",
                r.name,
                r.pods_per_second,
                r.relative_throughput
                    .map(|x| format!("{:.0}%", x * 100.0))
                    .unwrap_or_else(|| "-".into()),
                r.attempt_latency_ms.p50,
                r.attempt_latency_ms.p99,
                r.remote_calls_per_pod,
                r.wire_bytes_per_pod,
                r.lookahead_used
                    .map(|x| format!("{:.0}%", x * 100.0))
                    .unwrap_or_else(|| "-".into()),
                r.alike_reused_per_pod,
                r.cpu_us_per_pod
                    .map(|c| c.cell())
                    .unwrap_or_else(|| "-".into()),
                if r.invariants_ok { "ok" } else { "VIOLATED" }
            );
        }
        if self.runs.iter().any(|r| r.cpu_us_per_pod.is_some()) {
            let _ = writeln!(
                s,
                "CPU µs/pod: scheduler process + sidecar process, user and system, over the measured pods\nREUSED: Filter rounds and Score calls per pod answered with a plugin's answers for alike pods, without a call"
            );
        }
        for r in self.runs.iter().filter(|r| !r.rounds.is_empty()) {
            let rounds: Vec<String> = r.rounds.iter().map(|p| format!("{p:.0}")).collect();
            let _ = writeln!(
                s,
                "{}: median of {} rounds, pods/s {}",
                r.name,
                r.rounds.len(),
                rounds.join(", ")
            );
        }
        s
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
