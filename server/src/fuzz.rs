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
}

impl Surface {
    pub const ALL: [Surface; 5] = [
        Surface::Manifest,
        Surface::Config,
        Surface::Workload,
        Surface::Sidecar,
        Surface::Watch,
    ];

    fn name(self) -> &'static str {
        match self {
            Surface::Manifest => "manifest",
            Surface::Config => "config",
            Surface::Workload => "workload",
            Surface::Sidecar => "sidecar",
            Surface::Watch => "watch",
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

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values from the edges of every type a field can hold.
fn hostile_value(rng: &mut Rng) -> Value {
    const STRINGS: &[&str] = &[
        "",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1e2147483647",
        "0.1e-2147483648",
        "1e-2147483649",
        "1e300",
        "100Ei",
        "-1",
        "0",
        "NaN",
        "1.5.5",
        "2562048h",
        "9999999999999999999999s",
        "-1s",
        "0.000000001n",
        "$count",
        "../../etc/passwd",
        "/etc/hostname",
        "a/b/c/d",
        "UPPER",
        "naïve",
        "\u{0}",
        "---",
        "*ref",
        "{{.Index}}",
        "In",
        "Gt",
        "Exists",
        "NoSchedule",
        "NoExecute",
        "Always",
        "kubernetes.io/hostname",
        "metadata.name",
    ];
    match rng.below(12) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => Value::from(i64::MAX),
        3 => Value::from(i64::MIN),
        4 => Value::from(-1),
        5 => serde_json::Number::from_f64(1e300).map_or(Value::Null, Value::Number),
        6 => Value::from(u64::MAX),
        7 => Value::String("x".repeat(1 + rng.below(70_000))),
        8 => Value::Array(Vec::new()),
        9 => Value::Object(Default::default()),
        10 => Value::from(rng.below(3) as i64),
        _ => Value::String(STRINGS[rng.below(STRINGS.len())].to_string()),
    }
}

/// Every path to a value in `v`, for picking one.
fn paths(v: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(prefix.clone());
    if out.len() > 20_000 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                prefix.push(PathStep::Key(k.clone()));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn at_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (PathStep::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (PathStep::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// One structure-aware mutation of `v`.
fn mutate_value(v: &mut Value, rng: &mut Rng, donors: &[Value]) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = all[rng.below(all.len())].clone();
    let op = rng.below(10);
    // Removing a key needs the parent.
    if op == 0 && !path.is_empty() {
        let (last, parent) = path.split_last().expect("non-empty path");
        if let Some(p) = at_mut(v, parent) {
            match (last, p) {
                (PathStep::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (PathStep::Index(i), Value::Array(a)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        return;
    }
    let donor = (!donors.is_empty()).then(|| {
        let d = &donors[rng.below(donors.len())];
        let mut dp = Vec::new();
        paths(d, &mut Vec::new(), &mut dp);
        let p = &dp[rng.below(dp.len())];
        let mut d = d.clone();
        at_mut(&mut d, p).map(|x| x.take()).unwrap_or(Value::Null)
    });
    let Some(target) = at_mut(v, &path) else {
        return;
    };
    match op {
        1 => {
            // Duplicate a list entry many times (millions of labels, huge lists).
            if let Value::Array(a) = target {
                if let Some(first) = a.first().cloned() {
                    let n = [2, 100, 5000][rng.below(3)];
                    a.extend(std::iter::repeat_n(first, n));
                }
            } else if let Value::Object(m) = target {
                let n = [2, 100, 5000][rng.below(3)];
                for i in 0..n {
                    m.insert(
                        format!("k{i}.example.com/x{i}"),
                        Value::String(format!("v{i}")),
                    );
                }
            }
        }
        2 => {
            // Deep nesting.
            let mut x = target.take();
            for _ in 0..[5, 60, 300][rng.below(3)] {
                x = Value::Array(vec![x]);
            }
            *target = x;
        }
        3 | 4 => {
            if let Some(d) = donor {
                *target = d;
            }
        }
        5 => {
            // Numbers near their edges, kept as the same JSON type when possible.
            let new = match &mut *target {
                Value::Number(n) if n.is_i64() => {
                    let x = n.as_i64().unwrap_or(0);
                    Value::from(
                        [
                            x.wrapping_neg(),
                            x.saturating_mul(1 << 20),
                            i64::MAX,
                            i32::MAX as i64 + 1,
                            0,
                        ][rng.below(5)],
                    )
                }
                Value::String(s) => {
                    let mut s = s.clone();
                    match rng.below(4) {
                        0 => s.push_str("e2147483647"),
                        1 => s.insert(0, '-'),
                        2 => s = s.repeat(3),
                        _ => s.push_str("Ei"),
                    }
                    Value::String(s)
                }
                other => other.take(),
            };
            *target = new;
        }
        _ => *target = hostile_value(rng),
    }
}

/// Byte-level damage to a text.
fn mutate_bytes(text: &str, rng: &mut Rng) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(b'{');
        }
        let i = rng.below(b.len());
        match rng.below(6) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => {
                b.remove(i);
            }
            2 => {
                const SPECIAL: &[u8] = b"&*:-[]{}!|>'\"\n\t #%@`";
                b.insert(i, SPECIAL[rng.below(SPECIAL.len())]);
            }
            3 => {
                let j = (i + rng.below(64)).min(b.len());
                let chunk = b[i..j].to_vec();
                b.splice(i..i, chunk);
            }
            4 => b.truncate(i),
            _ => {
                let bomb = b"a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n";
                b.splice(i..i, bomb.iter().copied());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn serialise(v: &Value, yaml: bool) -> String {
    if yaml {
        serde_saphyr::to_string(v).unwrap_or_else(|_| v.to_string())
    } else {
        v.to_string()
    }
}

fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_under(&p, exts, out);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
        {
            out.push(p);
        }
    }
}

/// The seed texts of a surface.
fn seeds(surface: Surface, root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    match surface {
        Surface::Manifest | Surface::Watch => {
            files_under(&root.join("examples/demo"), &["yaml", "json"], &mut files);
            files_under(&root.join("tests/scenarios"), &["yaml", "json"], &mut files);
            files.retain(|f| !f.to_string_lossy().contains("/config"));
        }
        Surface::Config => {
            files_under(&root.join("tests/scenarios/config"), &["yaml"], &mut files);
            files_under(&root.join("examples"), &["yaml"], &mut files);
            files.retain(|f| {
                std::fs::read_to_string(f).is_ok_and(|t| t.contains("KubeSchedulerConfiguration"))
            });
        }
        Surface::Workload => {
            files_under(&root.join("examples/workloads"), &["yaml"], &mut files);
            files.retain(|f| !f.to_string_lossy().contains("templates"));
        }
        Surface::Sidecar => {}
    }
    files_under(
        &root.join("tests/fuzz-corpus").join(surface.name()),
        &["txt", "yaml", "json"],
        &mut files,
    );
    let mut out: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    if surface == Surface::Watch {
        // Watch objects arrive one at a time as JSON.
        let mut objs = Vec::new();
        for t in &out {
            let mut parsed = Vec::new();
            let mut skipped = crate::cluster::manifest::Skipped::default();
            if crate::cluster::manifest::parse_str(t, "seed", &mut parsed, &mut skipped).is_ok() {
                use crate::cluster::manifest::Object;
                objs.extend(parsed.iter().filter_map(|o| match &o.object {
                    Object::Pod(p) => serde_json::to_string(p).ok(),
                    Object::Node(n) => serde_json::to_string(n).ok(),
                    _ => None,
                }));
            }
        }
        out = objs;
    }
    if surface == Surface::Sidecar {
        out = sidecar::seeds();
    }
    out
}

/// Heap counting for `switchyard fuzz`: the binary's global allocator reports every
/// allocation here (the `unsafe` allocator lives in `main.rs`, the library forbids
/// unsafe code), and counting is on only while fuzzing (elsewhere an allocation pays
/// one relaxed load). The resident high-water mark cannot say what an input cost once
/// the allocator keeps freed memory resident; this can.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated minus bytes freed while counting (signed: memory allocated before
/// counting began may be freed during it).
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK_LIVE: AtomicI64 = AtomicI64::new(0);

/// `by` bytes were allocated.
#[inline]
pub fn heap_grew(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        let now = LIVE.fetch_add(by as i64, Ordering::Relaxed) + by as i64;
        PEAK_LIVE.fetch_max(now, Ordering::Relaxed);
    }
}

/// `by` bytes were freed.
#[inline]
pub fn heap_shrank(by: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        LIVE.fetch_sub(by as i64, Ordering::Relaxed);
    }
}

/// Starts one input's heap measurement; the bytes live now.
fn heap_mark() -> i64 {
    let now = LIVE.load(Ordering::Relaxed);
    PEAK_LIVE.store(now, Ordering::Relaxed);
    now
}

/// The most heap bytes live at once since `heap_mark` returned `base`, above it.
fn heap_rise_mib(base: i64) -> f64 {
    (PEAK_LIVE.load(Ordering::Relaxed) - base).max(0) as f64 / (1024.0 * 1024.0)
}

/// What running one input showed.
enum Outcome {
    Refused,
    Accepted,
    /// Accepted, simulated, and the simulation broke an invariant (or did not settle).
    Violation(String),
}

struct Target {
    surface: Surface,
    dir: PathBuf,
    accepted: u64,
    /// Accepted manifests with at least one object: every SIMULATE_EVERY-th is run.
    populated: u64,
    simulations: u64,
    /// Time the last input spent simulating: a simulation settles in simulated time
    /// and has its own limit (not settling is a violation), so it is not a hang.
    simulated_for: Duration,
}

impl Target {
    fn new(surface: Surface, dir: PathBuf) -> Target {
        Target {
            surface,
            dir,
            accepted: 0,
            populated: 0,
            simulations: 0,
            simulated_for: Duration::ZERO,
        }
    }

    /// Runs one input under `catch_unwind`; also returns its time, simulation aside.
    fn run_timed(&mut self, text: &str) -> (std::thread::Result<Outcome>, Duration) {
        self.simulated_for = Duration::ZERO;
        let t0 = Instant::now();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| self.run(text)));
        (result, t0.elapsed().saturating_sub(self.simulated_for))
    }

    fn run(&mut self, text: &str) -> Outcome {
        match self.surface {
            Surface::Manifest => {
                let mut objs = Vec::new();
                let mut skipped = crate::cluster::manifest::Skipped::default();
                if crate::cluster::manifest::parse_str(text, "fuzz.yaml", &mut objs, &mut skipped)
                    .is_err()
                {
                    return Outcome::Refused;
                }
                if crate::cluster::embedded::EmbeddedCluster::from_manifests(&objs).is_err() {
                    return Outcome::Refused;
                }
                self.accepted += 1;
                if !objs.is_empty() {
                    self.populated += 1;
                }
                if !objs.is_empty() && self.populated.is_multiple_of(SIMULATE_EVERY) {
                    self.simulations += 1;
                    let opts = crate::simulate::SimulateOptions {
                        objects: objs,
                        timeout: Duration::from_secs(20),
                        threads: 1,
                        ..Default::default()
                    };
                    let t0 = Instant::now();
                    let result = crate::simulate::run(&opts, &crate::plugins::in_tree_registry());
                    self.simulated_for = t0.elapsed();
                    match result {
                        Ok(r) if !r.invariants.ok => {
                            return Outcome::Violation(format!("{:?}", r.invariants))
                        }
                        Ok(r) if r.unsettled.is_some() => {
                            return Outcome::Violation(r.unsettled.unwrap_or_default())
                        }
                        _ => {}
                    }
                }
                Outcome::Accepted
            }
            Surface::Config => match crate::config::SchedulerConfig::from_yaml(text, "fuzz.yaml") {
                Ok(config) => {
                    // Profiles are built as `run` and `simulate` build them: plugin
                    // args are read and checked here.
                    let registry = crate::plugins::in_tree_registry();
                    let client: std::sync::Arc<dyn crate::client::ClusterClient> =
                        std::sync::Arc::new(crate::cluster::embedded::EmbeddedCluster::new());
                    let waiting =
                        std::sync::Arc::new(crate::framework::waiting_pods::WaitingPods::default());
                    for p in &config.profiles {
                        let handle = std::sync::Arc::new(crate::framework::Handle::new(
                            waiting.clone(),
                            client.clone(),
                        ));
                        if crate::framework::Framework::new(p, &registry, handle).is_err() {
                            return Outcome::Refused;
                        }
                    }
                    self.accepted += 1;
                    Outcome::Accepted
                }
                Err(_) => Outcome::Refused,
            },
            Surface::Workload => {
                let f = self.dir.join("workload.yaml");
                if std::fs::write(&f, text).is_err() {
                    return Outcome::Refused;
                }
                match crate::simulate::workload::load(
                    &f,
                    None,
                    crate::model::input::DEFAULT_MAX_INPUT_BYTES,
                ) {
                    Ok(_) => {
                        self.accepted += 1;
                        Outcome::Accepted
                    }
                    Err(_) => Outcome::Refused,
                }
            }
            Surface::Watch => {
                use k8s_openapi::api::core::v1 as core;
                let v: Value = match serde_json::from_str(text) {
                    Ok(v) => v,
                    Err(_) => return Outcome::Refused,
                };
                let ok = match v.get("kind").and_then(Value::as_str) {
                    Some("Pod") => serde_json::from_value::<core::Pod>(v)
                        .ok()
                        .is_some_and(|p| {
                            crate::model::convert::pod_from_k8s(
                                &p,
                                &crate::model::convert::SystemPriorities,
                                || "u".into(),
                            )
                            .is_ok()
                        }),
                    Some("Node") => serde_json::from_value::<core::Node>(v)
                        .ok()
                        .is_some_and(|n| {
                            crate::model::convert::node_from_k8s(&n, || "u".into()).is_ok()
                        }),
                    _ => {
                        let mut objs = Vec::new();
                        let mut skipped = crate::cluster::manifest::Skipped::default();
                        crate::cluster::manifest::parse_str(
                            text,
                            "watch.json",
                            &mut objs,
                            &mut skipped,
                        )
                        .is_ok()
                            && crate::cluster::embedded::EmbeddedCluster::from_manifests(&objs)
                                .is_ok()
                    }
                };
                if ok {
                    self.accepted += 1;
                    Outcome::Accepted
                } else {
                    Outcome::Refused
                }
            }
            Surface::Sidecar => {
                if sidecar::run(text) {
                    self.accepted += 1;
                    Outcome::Accepted
                } else {
                    Outcome::Refused
                }
            }
        }
    }
}

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

/// The sidecar surface: every reply message a sidecar can send, as
/// `<message index>:<hex of its protobuf encoding>`, decoded and validated as the
/// scheduler validates it (statuses, cluster-event names of the handshake).
mod sidecar {
    use prost::Message;
    use switchyard_proto::v1 as pb;

    use super::Rng;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Option<Vec<u8>> {
        if !s.len().is_multiple_of(2) {
            return None;
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect()
    }

    fn status(code: i32, reasons: &[&str]) -> Option<pb::Status> {
        Some(pb::Status {
            code,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        })
    }

    pub fn seeds() -> Vec<String> {
        let handshake = pb::HandshakeResponse {
            protocol_version: "switchyard.plugin.v1".into(),
            plugins: vec![pb::PluginInfo {
                name: "Gang".into(),
                extension_points: vec![1, 2, 3, 4],
                pre_filter_extensions: true,
                normalize_score: true,
                events: vec![pb::ClusterEvent {
                    resource: "Pod".into(),
                    actions: vec!["Add".into(), "Delete".into()],
                }],
                node_local: true,
                signature: vec![pb::PodField::Tolerations as i32],
                score_normalization: pb::ScoreNormalization::DefaultReverse as i32,
            }],
            max_batch_nodes: 512,
            capabilities: vec!["filter-batch".into()],
        };
        let filter = pb::FilterResponse {
            request_id: 7,
            generation: 3,
            evaluated: 100,
            failures: vec![pb::NodeStatus {
                index: 4,
                status: status(3, &["node(s) didn't match"]),
            }],
            error: None,
            score: None,
            failure_groups: vec![pb::FailureGroup {
                status: status(2, &["node(s) lack an accelerator"]),
                indices: vec![9, 11, 12],
            }],
        };
        let score = pb::ScoreResponse {
            request_id: 8,
            status: status(0, &[]),
            generation: 3,
            scores: vec![0, 50, 100, -1, i64::MAX],
            normalized: true,
        };
        vec![
            format!("0:{}", hex(&handshake.encode_to_vec())),
            format!("1:{}", hex(&filter.encode_to_vec())),
            format!("2:{}", hex(&score.encode_to_vec())),
            format!(
                "3:{}",
                hex(&pb::StatusResponse {
                    request_id: 1,
                    status: status(2, &["x"]),
                    generation: 9
                }
                .encode_to_vec())
            ),
            format!(
                "4:{}",
                hex(&pb::PreFilterResponse {
                    request_id: 1,
                    status: status(0, &[]),
                    generation: 1,
                    has_node_names: true,
                    node_names: vec!["n1".into()]
                }
                .encode_to_vec())
            ),
            format!(
                "5:{}",
                hex(&pb::PostFilterResponse {
                    request_id: 1,
                    status: status(0, &[]),
                    generation: 1,
                    nominated_node_name: "n1".into()
                }
                .encode_to_vec())
            ),
            format!(
                "6:{}",
                hex(&pb::PermitResponse {
                    request_id: 1,
                    status: status(4, &[]),
                    generation: 1,
                    timeout_millis: 1000,
                    decision: None
                }
                .encode_to_vec())
            ),
            format!(
                "7:{}",
                hex(&pb::QueueSortResponse {
                    request_id: 1,
                    sort_key: vec![1, 2, 3],
                    status: status(0, &[])
                }
                .encode_to_vec())
            ),
            format!(
                "8:{}",
                hex(&pb::ReplicateResponse {
                    applied_generation: 4
                }
                .encode_to_vec())
            ),
        ]
    }

    pub fn mutate(seed: &str, rng: &mut Rng) -> String {
        let (kind, body) = seed.split_once(':').unwrap_or(("0", seed));
        let mut b = unhex(body).unwrap_or_default();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len() + 1);
            match rng.below(5) {
                0 if !b.is_empty() => {
                    let k = i.min(b.len() - 1);
                    b[k] ^= 1 << rng.below(8);
                }
                1 => b.insert(i, [0xff, 0x80, 0x00, 0x7f, 0x01][rng.below(5)]),
                2 if i < b.len() => {
                    b.remove(i);
                }
                3 => {
                    // A length-delimited field claiming a huge length.
                    b.splice(i..i, [0x22, 0xff, 0xff, 0xff, 0xff, 0x0f]);
                }
                _ => {
                    let j = (i + rng.below(32)).min(b.len());
                    let chunk = b[i.min(j)..j].to_vec();
                    b.splice(
                        i.min(j)..i.min(j),
                        chunk
                            .iter()
                            .copied()
                            .cycle()
                            .take(chunk.len() * (1 + rng.below(50))),
                    );
                }
            }
        }
        let kind = if rng.below(20) == 0 {
            rng.below(9).to_string()
        } else {
            kind.to_string()
        };
        format!("{kind}:{}", hex(&b))
    }

    fn check_status(s: Option<&pb::Status>) {
        let st = crate::remote::convert::status_from_pb(s);
        let _ = st.message();
    }

    /// Decodes and validates one message; true when it was well-formed.
    pub fn run(text: &str) -> bool {
        let Some((kind, body)) = text.trim().split_once(':') else {
            return false;
        };
        let Some(b) = unhex(body) else { return false };
        let b = b.as_slice();
        match kind {
            "0" => pb::HandshakeResponse::decode(b).is_ok_and(|h| {
                h.plugins
                    .iter()
                    .all(|p| crate::remote::convert::events(&p.events).is_ok())
            }),
            "1" => pb::FilterResponse::decode(b).is_ok_and(|r| {
                r.failures
                    .iter()
                    .for_each(|f| check_status(f.status.as_ref()));
                check_status(r.error.as_ref());
                true
            }),
            "2" => pb::ScoreResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "3" => pb::StatusResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "4" => pb::PreFilterResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "5" => pb::PostFilterResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "6" => pb::PermitResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "7" => pb::QueueSortResponse::decode(b).is_ok_and(|r| {
                check_status(r.status.as_ref());
                true
            }),
            "8" => pb::ReplicateResponse::decode(b).is_ok(),
            _ => false,
        }
    }
}
