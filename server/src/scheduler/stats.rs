//! Counters the scheduler keeps for reports (and, later, metrics).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The outcome of one scheduling attempt (upstream `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptResult {
    Scheduled,
    Unschedulable,
    Error,
}

#[derive(Clone, Copy, Debug)]
pub struct AttemptRecord {
    pub result: AttemptResult,
    /// Scheduling-cycle duration (pop to assume or failure).
    pub duration: Duration,
}

#[derive(Default)]
pub struct Stats {
    pub attempts: AtomicU64,
    pub scheduled: AtomicU64,
    pub unschedulable: AtomicU64,
    pub errors: AtomicU64,
    pub bound: AtomicU64,
    pub preemption_attempts: AtomicU64,
    pub preemption_victims: AtomicU64,
    /// Attempts that failed in the scheduling cycle (not in binding): the pods that
    /// may have failed for room a pod assumed meanwhile held.
    pub cycle_failures: AtomicU64,
    /// Cycle durations in microseconds.
    latencies_us: Mutex<Vec<u32>>,
}

impl Stats {
    pub fn record(&self, r: AttemptRecord) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        match r.result {
            AttemptResult::Scheduled => &self.scheduled,
            AttemptResult::Unschedulable => &self.unschedulable,
            AttemptResult::Error => &self.errors,
        }
        .fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.latencies_us.lock() {
            l.push(r.duration.as_micros().min(u128::from(u32::MAX)) as u32);
        }
    }

    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// p-th percentile (0..=100) of cycle durations, in milliseconds.
    pub fn latency_percentile_ms(&self, p: f64) -> f64 {
        let Ok(l) = self.latencies_us.lock() else {
            return 0.0;
        };
        if l.is_empty() {
            return 0.0;
        }
        let mut v = l.clone();
        v.sort_unstable();
        let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        f64::from(v[idx.min(v.len() - 1)]) / 1000.0
    }
}
