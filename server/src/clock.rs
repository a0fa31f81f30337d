//! Time as the queue and cache see it: real in production, steppable in tests.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
pub struct FakeClock(Mutex<Instant>);

impl FakeClock {
    pub fn new() -> Self {
        FakeClock(Mutex::new(Instant::now()))
    }

    pub fn step(&self, d: Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += d;
        }
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        match self.0.lock() {
            Ok(t) => *t,
            Err(p) => *p.into_inner(),
        }
    }
}
