//! A Reserve and Permit whose verdict is still on its way when the scheduling cycle
//! ends (Switchyard's `permitInBindingCycle` for remote plugins; upstream has no such
//! thing). The binding cycle settles it before anything else: a pod that would have
//! been allowed is bound as before, one told to wait waits there, and a failed
//! Reserve or a rejection ends the attempt as a rejection from the waiting map does,
//! unreserving and forgetting the pod. The next pods' cycles meanwhile counted the
//! pod on its node, as they do for a pod waiting at Permit.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::status::Status;

/// What the plugin answered, in the order the framework would have asked.
#[derive(Debug)]
pub enum Verdict {
    /// Reserve did not succeed (Permit was not run).
    ReserveFailed(Status),
    /// Reserve succeeded; Permit's status and, for a Wait, its timeout.
    Permit(Status, Duration),
}

pub type VerdictFuture = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// Kept in the attempt's `CycleState` by the profile's only Permit plugin when it
/// left its verdict to the binding cycle; cloned states share it, and whoever
/// settles first takes it.
#[derive(Clone)]
pub struct UnsettledPermit(Arc<Mutex<Option<VerdictFuture>>>);

impl UnsettledPermit {
    pub fn new(verdict: VerdictFuture) -> Self {
        UnsettledPermit(Arc::new(Mutex::new(Some(verdict))))
    }

    pub fn take(&self) -> Option<VerdictFuture> {
        self.0.lock().ok()?.take()
    }
}
