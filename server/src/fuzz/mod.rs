//! `switchyard fuzz`: structure-aware mutation fuzzing of every input surface, on stable
//! Rust, in process.
//!
//! Why this engine: cargo-fuzz needs nightly; afl.rs and honggfuzz need their own
//! compilers and instrumented builds that double the build time on two cores. What
//! finds bugs in a scheduler's input path is not coverage-guided byte flipping but
//! valid objects with one field made hostile (a grace period of 2^63-1, an exponent of
//! 2^31, a count of 1e300), so the mutator parses each seed, changes one field at a
//! time to values chosen from the edges of every type, and re-serialises it (JSON or
//! YAML); a fifth of the inputs get byte-level damage instead. Each input runs under
//! `catch_unwind` (a panic is a finding), with its time measured (over 2 s outside a
//! simulation is a hang) and its heap peak counted (the binary's allocator reports to
//! [`heap_grew`]); the process's peak resident memory is read from /proc. Manifests
//! that load and hold objects are, one in `SIMULATE_EVERY`, run through a whole
//! simulation whose invariant check must pass.
//!
//! Seeds: `examples/`, `tests/scenarios/` and the crash corpus
//! (`tests/fuzz-corpus/<surface>/`); every finding is written there as a regression.

mod heap;
mod mutate;
mod seeds;
mod sidecar;
mod target;

use heap::*;
pub use heap::{heap_grew, heap_shrank};
use mutate::*;
use seeds::*;
use target::*;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

/// The input surfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Surface {
    /// Cluster manifests (YAML and JSON; every kind the reader takes).
    Manifest,
    /// KubeSchedulerConfiguration files.
    Config,
    /// scheduler_perf workload files.
    Workload,
    /// Every message a sidecar sends (decoded from bytes, then validated).
    Sidecar,
    /// Objects arriving from a Kubernetes watch (JSON).
    Watch,
    /// DRA CEL selector expressions: compiled, then evaluated on sample devices under
    /// upstream's cost limit (no panic; bounded time and memory per expression).
    Cel,
}

impl Surface {
    pub const ALL: [Surface; 6] = [
        Surface::Manifest,
        Surface::Config,
        Surface::Workload,
        Surface::Sidecar,
        Surface::Watch,
        Surface::Cel,
    ];

    fn name(self) -> &'static str {
        match self {
            Surface::Manifest => "manifest",
            Surface::Config => "config",
            Surface::Workload => "workload",
            Surface::Sidecar => "sidecar",
            Surface::Watch => "watch",
            Surface::Cel => "cel",
        }
    }
}

/// How long a run goes on, and where it reads and writes.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    pub surfaces: Vec<Surface>,
    /// Stop a surface after this many inputs...
    pub inputs: u64,
    /// ... or after this long, whichever comes first.
    pub seconds: f64,
    pub seed: u64,
    /// The workspace root (seeds are read from its examples/ and tests/).
    pub root: PathBuf,
    /// Where findings are written (per surface folder); none: not written.
    pub crash_dir: Option<PathBuf>,
    /// Let panics print to stderr as they happen (they are findings either way).
    pub show_panics: bool,
}

/// What one surface's run found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SurfaceReport {
    pub surface: Surface,
    pub seeds: usize,
    pub inputs: u64,
    pub execs_per_second: f64,
    /// Inputs accepted (the rest were refused with an error, as they should be).
    pub accepted: u64,
    pub panics: u64,
    pub hangs: u64,
    pub simulations: u64,
    pub invariant_violations: u64,
    pub slowest_ms: f64,
    pub peak_rss_mib: f64,
    /// The input that needed the most heap at once: its size, and that heap above what
    /// was live before it (written as `heaviest.txt` in the surface's findings folder;
    /// 0 when the binary's allocator does not report to [`heap_grew`]).
    pub heaviest_input_bytes: usize,
    pub heaviest_rise_mib: f64,
    /// Heap still allocated after the surface's run minus before it: a leak shows
    /// here (resident memory also keeps what the allocator holds free).
    pub heap_retained_mib: f64,
    /// Files written for findings.
    pub findings: Vec<String>,
}

/// One simulation per this many accepted manifests that hold objects.
const SIMULATE_EVERY: u64 = 100;
/// An input that takes longer than this is a hang.
const HANG: Duration = Duration::from_secs(2);
/// Structure mutations compound (a list duplicated 5,000 times inside one duplicated
/// 5,000 times): a mutant larger than this is replaced by a byte mutation of its seed,
/// so the pass measures hostile structure, not the speed of reading 300 MB. Large
/// legitimate input has its own measurements (docs/reliability.md, "Large input").
const MAX_MUTANT_BYTES: usize = 4 << 20;

/// Runs every surface of `opts`, calling `progress` about once a second.
pub fn run(opts: &FuzzOptions, progress: &mut dyn FnMut(&SurfaceReport)) -> Vec<SurfaceReport> {
    // Panics are findings, reported in the table: keep them off stderr.
    let hook = std::panic::take_hook();
    if !opts.show_panics {
        std::panic::set_hook(Box::new(|_| {}));
    }
    let mut out = Vec::new();
    COUNTING.store(true, Ordering::Relaxed);
    for &surface in &opts.surfaces {
        let before = LIVE.load(Ordering::Relaxed);
        let mut r = run_surface(opts, surface, progress);
        let retained = (LIVE.load(Ordering::Relaxed) - before).max(0) as f64 / (1024.0 * 1024.0);
        r.heap_retained_mib = (retained * 10.0).round() / 10.0;
        out.push(r);
    }
    COUNTING.store(false, Ordering::Relaxed);
    std::panic::set_hook(hook);
    out
}

fn run_surface(
    opts: &FuzzOptions,
    surface: Surface,
    progress: &mut dyn FnMut(&SurfaceReport),
) -> SurfaceReport {
    let dir = std::env::temp_dir().join(format!(
        "switchyard-fuzz-{}-{}",
        std::process::id(),
        surface.name()
    ));
    let _ = std::fs::create_dir_all(&dir);
    if surface == Surface::Workload {
        // Templates the seeds name, beside the fuzzed workload file.
        let t = opts.root.join("examples/workloads/templates");
        let _ = std::fs::create_dir_all(dir.join("templates"));
        if let Ok(rd) = std::fs::read_dir(&t) {
            for e in rd.flatten() {
                let _ = std::fs::copy(e.path(), dir.join("templates").join(e.file_name()));
            }
        }
    }
    // Peak memory per surface: reset the high-water mark (Linux 4.0+; elsewhere the
    // process's peak so far stands).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let seed_texts = seeds(surface, &opts.root);
    let seed_values: Vec<Value> = seed_texts
        .iter()
        .filter_map(|t| {
            if surface == Surface::Cel {
                // Expressions are text: byte mutations only.
                return None;
            }
            if surface == Surface::Sidecar {
                serde_json::from_str(t).ok()
            } else {
                let docs = crate::yaml::from_multiple::<Value>(t).ok()?;
                let kind = |d: &Value| d.get("kind").and_then(Value::as_str).map(str::to_owned);
                match surface {
                    // A scenario file's objects, as one List (its first document is
                    // the expectation, which the reader skips: mutating it would
                    // test nothing).
                    Surface::Manifest => {
                        let items: Vec<Value> = docs
                            .into_iter()
                            .filter(|d| !d.is_null() && kind(d).as_deref() != Some("Scenario"))
                            .collect();
                        (!items.is_empty()).then(|| {
                            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items})
                        })
                    }
                    // The configuration, also where a scenario carries it.
                    Surface::Config => docs.into_iter().find_map(|d| match kind(&d).as_deref() {
                        Some("KubeSchedulerConfiguration") => Some(d),
                        Some("Scenario") => d.get("config").cloned(),
                        _ => None,
                    }),
                    _ => docs.into_iter().find(|d| !d.is_null()),
                }
            }
        })
        .collect();
    let mut rng = Rng(opts.seed ^ (surface as u64 + 1).wrapping_mul(0x9E3779B97F4A7C15) | 1);
    let mut report = SurfaceReport {
        surface,
        seeds: seed_texts.len(),
        inputs: 0,
        execs_per_second: 0.0,
        accepted: 0,
        panics: 0,
        hangs: 0,
        simulations: 0,
        invariant_violations: 0,
        slowest_ms: 0.0,
        peak_rss_mib: 0.0,
        heaviest_input_bytes: 0,
        heaviest_rise_mib: 0.0,
        heap_retained_mib: 0.0,
        findings: Vec::new(),
    };
    let mut target = Target::new(surface, dir.clone());
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds.clamp(0.0, 30.0 * 86_400.0));
    let mut last_progress = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut heaviest = 0.0f64;
    while report.inputs < opts.inputs && Instant::now() < deadline {
        report.inputs += 1;
        let input = if surface == Surface::Sidecar {
            let base = &seed_texts[rng.below(seed_texts.len())];
            sidecar::mutate(base, &mut rng)
        } else if seed_values.is_empty() || rng.below(5) == 0 {
            let base = seed_texts
                .get(rng.below(seed_texts.len()))
                .map_or("", String::as_str);
            mutate_bytes(base, &mut rng)
        } else {
            let mut v = seed_values[rng.below(seed_values.len())].clone();
            for _ in 0..1 + rng.below(3) {
                mutate_value(&mut v, &mut rng, &seed_values);
            }
            let json_only = matches!(surface, Surface::Watch | Surface::Sidecar);
            let text = serialise(&v, !json_only && rng.below(2) == 0);
            if text.len() > MAX_MUTANT_BYTES {
                let base = seed_texts
                    .get(rng.below(seed_texts.len()))
                    .map_or("", String::as_str);
                mutate_bytes(base, &mut rng)
            } else {
                text
            }
        };
        let base = heap_mark();
        let (result, took) = target.run_timed(&input);
        slowest = slowest.max(took);
        // What this input cost: the most heap live at once while it ran, above what was
        // live before (counted when the binary's allocator reports to `heap_grew`).
        {
            let rise = heap_rise_mib(base);
            if rise > heaviest {
                heaviest = rise;
                report.heaviest_rise_mib = (rise * 10.0).round() / 10.0;
                report.heaviest_input_bytes = input.len();
                if let Some(crash_dir) = &opts.crash_dir {
                    let d = crash_dir.join(surface.name());
                    let _ = std::fs::create_dir_all(&d);
                    let _ = std::fs::write(d.join("heaviest.txt"), &input);
                }
            }
        }
        let finding = match result {
            Err(p) => {
                report.panics += 1;
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Some(("panic", msg))
            }
            Ok(Outcome::Violation(m)) => {
                report.invariant_violations += 1;
                Some(("violation", m))
            }
            Ok(_) if took > HANG => {
                report.hangs += 1;
                Some(("hang", format!("{took:?}")))
            }
            Ok(_) => None,
        };
        if let (Some((kind, msg)), Some(crash_dir)) = (finding, &opts.crash_dir) {
            let d = crash_dir.join(surface.name());
            let _ = std::fs::create_dir_all(&d);
            let name = format!("{kind}-{:016x}.txt", fnv(&input));
            let _ = std::fs::write(d.join(&name), &input);
            report
                .findings
                .push(format!("{name}: {}", msg.lines().next().unwrap_or("")));
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            fill(&mut report, &target, started, slowest);
            progress(&report);
        }
    }
    fill(&mut report, &target, started, slowest);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn fill(r: &mut SurfaceReport, t: &Target, started: Instant, slowest: Duration) {
    r.accepted = t.accepted;
    r.simulations = t.simulations;
    r.execs_per_second = (r.inputs as f64 / started.elapsed().as_secs_f64().max(1e-9)).round();
    r.slowest_ms = (slowest.as_secs_f64() * 1e5).round() / 100.0;
    r.peak_rss_mib = (crate::remote::procfs::peak_rss_mib() * 10.0).round() / 10.0;
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// The table `switchyard fuzz` prints.
pub fn table(reports: &[SurfaceReport]) -> String {
    let mut s = String::from(
        "SURFACE    SEEDS    INPUTS   EXECS/S  ACCEPTED  PANICS  HANGS  SIMULATED  VIOLATIONS  SLOWEST ms  PEAK RSS MiB  HEAVIEST INPUT\n",
    );
    for r in reports {
        s += &format!(
            "{:<9} {:>6} {:>9} {:>9} {:>9} {:>7} {:>6} {:>10} {:>11} {:>11.2} {:>13.1}  {} B: +{:.0} MiB\n",
            r.surface.name(),
            r.seeds,
            r.inputs,
            r.execs_per_second,
            r.accepted,
            r.panics,
            r.hangs,
            r.simulations,
            r.invariant_violations,
            r.slowest_ms,
            r.peak_rss_mib,
            r.heaviest_input_bytes,
            r.heaviest_rise_mib
        );
        for f in &r.findings {
            s += &format!("  finding: {f}\n");
        }
    }
    s
}

/// Replays every saved input of `dir/<surface>/` once; the findings (panics, hangs,
/// violations) as `(file, what)`. The regression test runs this over the corpus.
pub fn replay(dir: &Path) -> Vec<(String, String)> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut bad = Vec::new();
    for surface in Surface::ALL {
        let mut files = Vec::new();
        files_under(
            &dir.join(surface.name()),
            &["txt", "yaml", "json"],
            &mut files,
        );
        let tmp = std::env::temp_dir().join(format!(
            "switchyard-replay-{}-{}",
            std::process::id(),
            surface.name()
        ));
        let _ = std::fs::create_dir_all(&tmp);
        let mut target = Target::new(surface, tmp.clone());
        for f in files {
            let Ok(text) = std::fs::read_to_string(&f) else {
                continue;
            };
            // Every accepted manifest is simulated on replay.
            target.populated = SIMULATE_EVERY - 1;
            let (r, took) = target.run_timed(&text);
            let what = match r {
                Err(_) => Some("panic".to_string()),
                Ok(Outcome::Violation(m)) => Some(format!("violation: {m}")),
                Ok(_) if took > HANG => Some(format!("hang: {took:?}")),
                Ok(_) => None,
            };
            if let Some(w) = what {
                bad.push((f.display().to_string(), w));
            }
        }
        let _ = std::fs::remove_dir_all(&tmp);
    }
    std::panic::set_hook(hook);
    bad
}

/// Panics, hangs and invariant violations found over all surfaces.
pub fn findings(reports: &[SurfaceReport]) -> u64 {
    reports
        .iter()
        .map(|r| r.panics + r.hangs + r.invariant_violations)
        .sum()
}
