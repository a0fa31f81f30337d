//! Backoff: each pod's backoff time from its attempts (aligned to the flush
//! window), and the periodic flushes of backoffQ and of pods unschedulable too long.

use super::*;

impl SchedulingQueue {
    pub(super) fn align(&self, t: Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        let w = BACKOFF_WINDOW.as_nanos();
        let aligned = (since.as_nanos() / w) * w;
        self.epoch + Duration::from_nanos(aligned as u64)
    }

    /// Upstream `calculateBackoffDuration`: initial × 2^(count-1), capped at max.
    pub(super) fn backoff_duration(&self, count: u32) -> Duration {
        let shift = count.saturating_sub(1);
        let max = self.max_backoff;
        if shift >= 32 {
            return max;
        }
        match self.initial_backoff.checked_mul(1u32 << shift) {
            Some(d) if d <= max => d,
            _ => max,
        }
    }

    /// The pod's backoff expiry (cached), or `None` when it has no backoff.
    pub(super) fn backoff_time(&self, p: &mut QueuedPodInfo) -> Option<Instant> {
        if self.max_backoff.is_zero() {
            return None;
        }
        let count = if p.consecutive_errors_count > 0 {
            p.consecutive_errors_count
        } else {
            p.unschedulable_count
        };
        if count == 0 {
            return None;
        }
        if p.backoff_expiration.is_none() {
            p.backoff_expiration = Some(self.align(p.timestamp + self.backoff_duration(count)));
        }
        p.backoff_expiration
    }

    pub(super) fn is_backing_off(&self, p: &mut QueuedPodInfo) -> bool {
        let now = self.align(self.clock.now());
        match self.backoff_time(p) {
            Some(t) => t >= now,
            None => false,
        }
    }

    pub(super) fn flush_backoff_completed_locked(&self, inner: &mut Inner) {
        let now = self.align(self.clock.now());
        for which in 0..2 {
            loop {
                let heap = if which == 0 {
                    &mut inner.backoff
                } else {
                    &mut inner.error_backoff
                };
                let done = heap
                    .peek()
                    .and_then(|p| p.backoff_expiration)
                    .is_some_and(|t| t < now);
                if !done {
                    break;
                }
                let Some(p) = heap.pop() else { break };
                let event = ClusterEvent {
                    custom_label: Some("BackoffComplete"),
                    ..EVENT_UNSCHEDULABLE_TIMEOUT
                };
                self.move_to_active(inner, p, &event, true);
            }
        }
    }

    /// Moves pods whose backoff is over to activeQ (runs every second).
    pub fn flush_backoff_completed(&self) {
        let mut inner = self.lock();
        let before = inner.active.len();
        self.flush_backoff_completed_locked(&mut inner);
        let moved = inner.active.len() > before;
        drop(inner);
        if moved {
            self.cond.notify_all();
        }
    }

    /// Retries pods that waited in unschedulable pods longer than the limit (runs every
    /// 30 seconds). Gated pods stay: only their gate's events move them.
    pub fn flush_unschedulable_leftover(&self) {
        let now = self.clock.now();
        let stale: Vec<Uid> = {
            let inner = self.lock();
            inner
                .unschedulable
                .rejected()
                .filter(|(_, p)| {
                    now.saturating_duration_since(p.timestamp) > self.max_in_unschedulable
                })
                .map(|(k, _)| k.clone())
                .collect()
        };
        if stale.is_empty() {
            return;
        }
        let set: std::collections::HashSet<Uid> = stale.into_iter().collect();
        self.move_all_to_active_or_backoff(
            EVENT_UNSCHEDULABLE_TIMEOUT,
            None,
            None,
            Some(&|p: &Pod| set.contains(&p.uid)),
        );
    }
}
