//! The client-side rate limiter all writes go through (`clientConnection.qps`/`burst`).

use super::*;

/// A token bucket for writes: `burst` at once, then `qps` per second. Waiting
/// callers sleep; the scheduling thread never calls it.
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: f32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: f64::from(qps).max(0.0),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long the caller must wait before its write (reserving the token).
    fn reserve(&self, now: Instant) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO; // unlimited, as a negative qps upstream
        }
        let Ok(mut s) = self.state.lock() else {
            return Duration::ZERO;
        };
        let (tokens, last) = *s;
        let refilled =
            (tokens + now.saturating_duration_since(last).as_secs_f64() * self.qps).min(self.burst);
        let left = refilled - 1.0;
        *s = (left, now);
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.qps)
        }
    }

    pub async fn acquire(&self) {
        let wait = self.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limiter_allows_a_burst_then_qps() {
        let l = RateLimiter::new(10.0, 3);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.reserve(t), Duration::ZERO);
        }
        // The fourth waits one token's time (100 ms), the fifth two.
        assert!((l.reserve(t).as_secs_f64() - 0.1).abs() < 1e-6);
        assert!((l.reserve(t).as_secs_f64() - 0.2).abs() < 1e-6);
        // A second later the debt is paid and tokens refill up to the burst only.
        let later = t + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(l.reserve(later), Duration::ZERO);
        }
        assert!(l.reserve(later) > Duration::ZERO);
    }
}
