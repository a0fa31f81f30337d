//! Settling: waiting until no pod can make progress (every pod bound, or
//! unschedulable with nothing left that could requeue it), with a progress line.

use super::*;
use std::sync::Mutex;

/// How a simulation decides that pods retrying after errors cannot make progress.
#[derive(Clone, Debug)]
pub struct StuckRule {
    /// Consecutive errors every erroring pod must have had.
    pub errors: u32,
    /// How long nothing else may have happened meanwhile.
    pub quiet: Duration,
    /// Since when only erroring pods are left, and the bound count then. Kept across
    /// a workload's ops: pods a later op creates that fail as the earlier ones did
    /// (a sidecar still down) settle once they have their errors, without waiting
    /// out the quiet period again.
    since: Arc<Mutex<Option<(Instant, u64)>>>,
}

impl StuckRule {
    /// In process an error repeats as long as the cluster does not change (no nodes, a
    /// plugin that fails on this pod): two in a row settle it. A sidecar may come back,
    /// so with sidecars it takes three errors each and 5 s without any other progress
    /// (counted from when only erroring pods were left).
    pub fn for_run(with_sidecars: bool) -> Self {
        if with_sidecars {
            StuckRule {
                errors: 3,
                quiet: Duration::from_secs(5),
                since: Arc::default(),
            }
        } else {
            StuckRule {
                errors: 2,
                quiet: Duration::ZERO,
                since: Arc::default(),
            }
        }
    }
}

/// Waits until no pod can make progress: the scheduler has nothing left to do, or the
/// only pods left retry after errors that repeat (see [`StuckRule`]). Terminations
/// still under their grace period are finished by letting simulated time jump to them
/// once everything else is idle. Checked twice, a moment apart.
pub(super) fn wait_settled(
    sched: &Arc<Scheduler>,
    cluster: &EmbeddedCluster,
    timeout: Duration,
    stuck: &StuckRule,
    progress: &mut Progress,
) -> Result<(), SimulateError> {
    let now = Instant::now();
    let deadline = now
        .checked_add(timeout)
        .unwrap_or(now + Duration::from_secs(31_536_000));
    let mut idle_since: Option<Instant> = None;
    let mut stuck_since = stuck.since.lock().map(|g| *g).unwrap_or(None);
    let keep = |since: Option<(Instant, u64)>| {
        if let Ok(mut g) = stuck.since.lock() {
            *g = since;
        }
    };
    loop {
        let terminating = cluster.advance();
        let p = sched.queue.pending();
        let quiet = sched.event_backlog() == 0
            && p.active == 0
            && p.in_flight == 0
            && sched.in_flight_ops() == 0;
        if quiet && p.backoff == 0 {
            match idle_since {
                Some(t) if t.elapsed() >= Duration::from_millis(3) => {
                    if terminating == 0 {
                        keep(None);
                        return Ok(());
                    }
                    cluster.finish_next_termination();
                    idle_since = None;
                }
                Some(_) => {}
                None => idle_since = Some(Instant::now()),
            }
        } else {
            idle_since = None;
        }
        let bound = sched.stats.bound.load(std::sync::atomic::Ordering::Relaxed);
        // Every pod left backs off after an error or retries after one; counted
        // also while a retry runs, so that retries that keep the scheduler busy (a
        // sidecar that never answers some pods, each attempt waiting out the
        // timeout) do not keep the run from settling.
        let only_errors_left = sched.event_backlog() == 0
            && sched.in_flight_ops() == 0
            && terminating == 0
            && p.backoff == p.errored
            && p.errored > 0
            && p.active + p.in_flight == sched.queue.errored_retrying();
        if only_errors_left {
            match stuck_since {
                Some((t, b)) if b == bound => {
                    if p.min_consecutive_errors >= stuck.errors && t.elapsed() >= stuck.quiet {
                        tracing::info!(
                            pods = p.errored,
                            "settled: every pod left fails with an error at each attempt"
                        );
                        keep(stuck_since);
                        return Ok(());
                    }
                }
                _ => stuck_since = Some((Instant::now(), bound)),
            }
        } else if quiet || terminating > 0 {
            stuck_since = None;
        }
        // Else a retry is in flight (an erroring pod's backoff expired): keep the
        // clock. Retries come every few seconds, so resetting here would never let
        // `quiet` pass; the retry either errors again (the same state), binds (the
        // bound count moves) or turns unschedulable (then not only errors are left).
        if Instant::now() > deadline {
            let mut terminating = cluster.terminating_pods();
            let waiting_on = if terminating.is_empty() {
                String::new()
            } else {
                let more = terminating.len().saturating_sub(5);
                terminating.truncate(5);
                format!(
                    "; still terminating: {}{}",
                    terminating.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            };
            return Err(SimulateError::Timeout {
                timeout,
                pending: format!(
                    "{} active, {} backing off ({} after errors, the fewest with {} in a row), {} in flight, {} binding/backend calls, {} events unhandled{waiting_on}",
                    p.active,
                    p.backoff,
                    p.errored,
                    p.min_consecutive_errors,
                    p.in_flight,
                    sched.in_flight_ops(),
                    sched.event_backlog()
                ),
            });
        }
        progress.tick(sched, cluster);
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// A one-line progress display on stderr.
pub(super) struct Progress {
    pub(super) enabled: bool,
    pub(super) total: usize,
    pub(super) last: Option<Instant>,
    pub(super) started: Instant,
}

impl Progress {
    pub(super) fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            total: 0,
            last: None,
            started: Instant::now(),
        }
    }

    pub(super) fn tick(&mut self, sched: &Scheduler, _cluster: &EmbeddedCluster) {
        if !self.enabled || self.total < 200 {
            return;
        }
        if self
            .last
            .is_some_and(|l| l.elapsed() < Duration::from_millis(150))
        {
            return;
        }
        self.last = Some(Instant::now());
        let bound = sched.stats.bound.load(std::sync::atomic::Ordering::Relaxed) as usize;
        let p = sched.queue.pending();
        let width = 30usize;
        let done = (bound + p.unschedulable).min(self.total);
        let filled = (done * width).checked_div(self.total).unwrap_or(0);
        let rate = bound as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2Kscheduling [{}{}] {bound}/{} bound, {} unschedulable, {:.0} pods/s",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.total,
            p.unschedulable,
            rate
        );
        let _ = err.flush();
    }

    pub(super) fn finish(&mut self) {
        if self.enabled && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}
