//! Logging a sidecar's failures the way an operator wants to read them: the first
//! failure after a healthy spell, and each change of cause, at WARN with the cause;
//! the repeats after it counted and summed up at most every [`SUMMARY_EVERY`]
//! (`... 4812 more calls failed: unavailable`), and the recovery when a call
//! succeeds or the sidecar reconnects. A dead sidecar under load fails thousands of
//! calls a second; its log stays a few lines.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often repeats of the same failure are summed up in the log.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    /// The kind of the failure last logged, while failing.
    failing: Option<&'static str>,
    /// Failures since the last line, not logged one by one.
    repeats: u64,
    /// When the last line was written.
    since: Option<Instant>,
}

/// One endpoint's failure log.
#[derive(Default)]
pub struct FailureLog {
    state: Mutex<State>,
}

/// What to write for a failure, decided under the lock and written outside it.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// The first failure after a healthy spell, or one of another kind.
    First,
    /// A summary of `n` repeats since the last line.
    Repeats(u64),
    /// Nothing: counted.
    None,
}

impl FailureLog {
    /// Notes a failure of `kind` at `now`, and says what to log.
    pub fn failure(&self, kind: &'static str, now: Instant) -> Line {
        let Ok(mut s) = self.state.lock() else {
            return Line::First;
        };
        if s.failing != Some(kind) {
            s.failing = Some(kind);
            s.repeats = 0;
            s.since = Some(now);
            return Line::First;
        }
        s.repeats += 1;
        if s.since
            .is_some_and(|t| now.duration_since(t) >= SUMMARY_EVERY)
        {
            let n = std::mem::take(&mut s.repeats);
            s.since = Some(now);
            return Line::Repeats(n);
        }
        Line::None
    }

    /// Notes that the endpoint works again (a call answered, a reconnect): the
    /// repeats not yet logged, when it was failing.
    pub fn recovered(&self) -> Option<u64> {
        let mut s = self.state.lock().ok()?;
        s.failing.take()?;
        s.since = None;
        Some(std::mem::take(&mut s.repeats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_logged_repeats_counted_and_summed_up_then_recovery() {
        let log = FailureLog::default();
        let t0 = Instant::now();
        assert_eq!(log.failure("unavailable", t0), Line::First);
        for i in 1..=1000 {
            assert_eq!(
                log.failure("unavailable", t0 + Duration::from_millis(i)),
                Line::None
            );
        }
        assert_eq!(
            log.failure("unavailable", t0 + SUMMARY_EVERY),
            Line::Repeats(1001)
        );
        assert_eq!(
            log.failure("unavailable", t0 + SUMMARY_EVERY + Duration::from_millis(1)),
            Line::None
        );
        // Another cause is logged at once.
        assert_eq!(log.failure("timeout", t0 + SUMMARY_EVERY), Line::First);
        assert_eq!(log.failure("timeout", t0 + SUMMARY_EVERY), Line::None);
        assert_eq!(log.recovered(), Some(1));
        assert_eq!(log.recovered(), None);
        assert_eq!(log.failure("timeout", t0 + SUMMARY_EVERY * 3), Line::First);
    }
}
