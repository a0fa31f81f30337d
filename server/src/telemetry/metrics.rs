//! Prometheus metrics, written by hand in the text exposition format (no client
//! library: a few counters and histograms, keyed by small label sets). Recording is
//! a lock-free add for unlabelled metrics and one short lock for labelled ones.

use std::collections::HashMap;
use std::fmt::Write;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// kube-scheduler's buckets for durations (seconds): 1 ms doubling to ~16 s.
pub const DURATION_BUCKETS: [f64; 15] = [
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];
/// Plugin and extension-point durations are shorter: 0.1 ms up.
pub const SHORT_DURATION_BUCKETS: [f64; 15] = [
    0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048,
    0.4096, 0.8192, 1.6384,
];
/// Counts (attempts, victims): 1, 2, 4 ... 16384 (upstream's exponential buckets).
pub const COUNT_BUCKETS: [f64; 15] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0,
];

/// One histogram series.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in micro-units (µs for seconds, 1e-6 for counts), so it stays an integer.
    sum_micros: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((v.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cumulative += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// Label values in the order of the family's label names.
pub type LabelValues = Vec<String>;

/// Series by the hash of their label values, so recording hashes the borrowed values
/// instead of allocating a key (a collision just means two entries in a bucket).
type Series<T> = HashMap<u64, Vec<(LabelValues, T)>>;

fn key_hash(values: &[&str]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    for v in values {
        v.hash(&mut h);
    }
    h.finish()
}

fn same(a: &LabelValues, b: &[&str]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The series sorted by label values, for a stable page.
fn sorted<T>(m: &Series<T>) -> Vec<&(LabelValues, T)> {
    let mut v: Vec<&(LabelValues, T)> = m.values().flatten().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Histograms by label values.
pub struct HistogramFamily {
    pub name: &'static str,
    pub help: &'static str,
    labels: &'static [&'static str],
    bounds: &'static [f64],
    series: Mutex<Option<Series<Arc<Histogram>>>>,
}

impl HistogramFamily {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
    ) -> Self {
        HistogramFamily {
            name,
            help,
            labels,
            bounds,
            series: Mutex::new(None),
        }
    }

    pub fn observe(&self, values: &[&str], v: f64) {
        let k = key_hash(values);
        let h = {
            let Ok(mut m) = self.series.lock() else {
                return;
            };
            let bucket = m.get_or_insert_with(HashMap::new).entry(k).or_default();
            match bucket.iter().find(|(l, _)| same(l, values)) {
                Some((_, h)) => h.clone(),
                None => {
                    let h = Arc::new(Histogram::new(self.bounds));
                    bucket.push((values.iter().map(|s| s.to_string()).collect(), h.clone()));
                    h
                }
            }
        };
        h.observe(v);
    }

    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        let Ok(m) = self.series.lock() else {
            return;
        };
        let Some(m) = m.as_ref() else {
            return;
        };
        for (values, h) in sorted(m) {
            h.render(out, self.name, &labels(self.labels, values));
        }
    }
}

/// Counters by label values.
pub struct CounterFamily {
    pub name: &'static str,
    pub help: &'static str,
    labels: &'static [&'static str],
    series: Mutex<Option<Series<u64>>>,
}

impl CounterFamily {
    pub const fn new(
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        CounterFamily {
            name,
            help,
            labels,
            series: Mutex::new(None),
        }
    }

    pub fn add(&self, values: &[&str], n: u64) {
        let Ok(mut m) = self.series.lock() else {
            return;
        };
        let bucket = m
            .get_or_insert_with(HashMap::new)
            .entry(key_hash(values))
            .or_default();
        match bucket.iter_mut().find(|(l, _)| same(l, values)) {
            Some((_, c)) => *c += n,
            None => bucket.push((values.iter().map(|s| s.to_string()).collect(), n)),
        }
    }

    pub fn get(&self, values: &[&str]) -> u64 {
        let Ok(m) = self.series.lock() else {
            return 0;
        };
        m.as_ref()
            .and_then(|m| m.get(&key_hash(values)))
            .and_then(|b| b.iter().find(|(l, _)| same(l, values)))
            .map_or(0, |(_, c)| *c)
    }

    pub fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} counter", self.name);
        let Ok(m) = self.series.lock() else {
            return;
        };
        let Some(m) = m.as_ref() else {
            return;
        };
        for (values, c) in sorted(m) {
            let l = labels(self.labels, values);
            if l.is_empty() {
                let _ = writeln!(out, "{} {c}", self.name);
            } else {
                let _ = writeln!(out, "{}{{{l}}} {c}", self.name);
            }
        }
    }
}

/// `a="x",b="y"`, values escaped as the text format wants.
pub fn labels(names: &[&str], values: &[String]) -> String {
    names
        .iter()
        .zip(values)
        .map(|(n, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{n}=\"{v}\"")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A gauge or counter line computed at scrape time.
pub fn sample(out: &mut String, name: &str, help: &str, kind: &str, rows: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (l, v) in rows {
        if l.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{l}}} {v}");
        }
    }
}

/// The scheduler's recorded metrics, with kube-scheduler's names and labels. One
/// per process, as kube-scheduler's registry is.
pub struct SchedulerMetrics {
    pub schedule_attempts: CounterFamily,
    pub attempt_duration: HistogramFamily,
    pub algorithm_duration: HistogramFamily,
    pub extension_point_duration: HistogramFamily,
    pub plugin_execution_duration: HistogramFamily,
    pub preemption_attempts: CounterFamily,
    pub preemption_victims: HistogramFamily,
    pub pod_scheduling_attempts: HistogramFamily,
    pub permit_wait_duration: HistogramFamily,
}

pub static SCHEDULER: SchedulerMetrics = SchedulerMetrics {
    schedule_attempts: CounterFamily::new(
        "scheduler_schedule_attempts_total",
        "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
        &["result", "profile"],
    ),
    attempt_duration: HistogramFamily::new(
        "scheduler_scheduling_attempt_duration_seconds",
        "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
        &["result", "profile"],
        &DURATION_BUCKETS,
    ),
    algorithm_duration: HistogramFamily::new(
        "scheduler_scheduling_algorithm_duration_seconds",
        "Scheduling algorithm latency in seconds",
        &[],
        &DURATION_BUCKETS,
    ),
    extension_point_duration: HistogramFamily::new(
        "scheduler_framework_extension_point_duration_seconds",
        "Latency for running all plugins of a specific extension point.",
        &["extension_point", "status", "profile"],
        &SHORT_DURATION_BUCKETS,
    ),
    plugin_execution_duration: HistogramFamily::new(
        "scheduler_plugin_execution_duration_seconds",
        "Duration for running a plugin at a specific extension point (sampled, as upstream).",
        &["plugin", "extension_point", "status"],
        &SHORT_DURATION_BUCKETS,
    ),
    preemption_attempts: CounterFamily::new(
        "scheduler_preemption_attempts_total",
        "Total preemption attempts in the cluster till now",
        &[],
    ),
    preemption_victims: HistogramFamily::new(
        "scheduler_preemption_victims",
        "Number of selected preemption victims",
        &[],
        &COUNT_BUCKETS,
    ),
    pod_scheduling_attempts: HistogramFamily::new(
        "scheduler_pod_scheduling_attempts",
        "Number of attempts to successfully schedule a pod.",
        &[],
        &COUNT_BUCKETS,
    ),
    permit_wait_duration: HistogramFamily::new(
        "scheduler_permit_wait_duration_seconds",
        "Duration of waiting on permit.",
        &["result"],
        &DURATION_BUCKETS,
    ),
};

/// The sidecar path: per endpoint.
pub static REMOTE_CALL_DURATION: HistogramFamily = HistogramFamily::new(
    "switchyard_remote_call_duration_seconds",
    "Time from sending a call to a plugin sidecar to its reply (replied calls only).",
    &["endpoint"],
    &SHORT_DURATION_BUCKETS,
);
pub static REMOTE_ERRORS: CounterFamily = CounterFamily::new(
    "switchyard_remote_errors_total",
    "Sidecar calls that failed, by kind: unavailable (not connected, stream closed), timeout, bad_reply (malformed or misaligned), plugin_error (the plugin answered Error), replication; the failure policy decided what they meant.",
    &["endpoint", "kind"],
);

/// Requests the API server refused or that did not reach it (the Kubernetes
/// backend): verb (`create`, `patch`, `delete`, `update`, `get`, `list`, `watch`),
/// resource (`pods/binding`, `pods/status`, `events`, `leases`, ...), code (the HTTP
/// status, or `transport` when no answer came).
pub static API_ERRORS: CounterFamily = CounterFamily::new(
    "switchyard_api_errors_total",
    "Kubernetes API requests that failed, by verb, resource and HTTP status code ('transport': no answer).",
    &["verb", "resource", "code"],
);

impl SchedulerMetrics {
    pub fn render(&self, out: &mut String) {
        self.schedule_attempts.render(out);
        self.attempt_duration.render(out);
        self.algorithm_duration.render(out);
        self.extension_point_duration.render(out);
        self.plugin_execution_duration.render(out);
        self.preemption_attempts.render(out);
        self.preemption_victims.render(out);
        self.pod_scheduling_attempts.render(out);
        self.permit_wait_duration.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        let f = HistogramFamily::new("x_seconds", "help", &["result"], &DURATION_BUCKETS);
        f.observe(&["ok"], 0.0015);
        f.observe(&["ok"], 0.003);
        f.observe(&["ok"], 100.0);
        let mut out = String::new();
        f.render(&mut out);
        assert!(
            out.contains("x_seconds_bucket{result=\"ok\",le=\"0.001\"} 0\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_bucket{result=\"ok\",le=\"0.002\"} 1\n"));
        assert!(out.contains("x_seconds_bucket{result=\"ok\",le=\"0.004\"} 2\n"));
        assert!(out.contains("x_seconds_bucket{result=\"ok\",le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_seconds_count{result=\"ok\"} 3\n"));
        assert!(out.contains("# TYPE x_seconds histogram"));
    }

    #[test]
    fn counters_add_per_label_set_and_escape() {
        let c = CounterFamily::new("y_total", "help", &["profile"]);
        c.add(&["a\"b"], 2);
        c.add(&["a\"b"], 3);
        c.add(&["z"], 1);
        assert_eq!(c.get(&["a\"b"]), 5);
        let mut out = String::new();
        c.render(&mut out);
        assert!(out.contains("y_total{profile=\"a\\\"b\"} 5\n"), "{out}");
    }
}
