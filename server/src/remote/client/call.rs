//! A call in flight: where its caller waits (spin, park, or a oneshot), the reply to
//! a `FilterBatch` message shared by the pods' calls it carries, and routing a reply
//! (or an unsolicited Permit decision) to its waiter.

use super::wire::DECISIONS_IN_FLIGHT;
use super::*;

/// Where a caller waits for its reply: a spin, then a park (synchronous callers), or
/// a oneshot (async callers).
pub(super) enum Waiter {
    Sync(Arc<SyncSlot>),
    Async(tokio::sync::oneshot::Sender<Result<Reply, CallError>>),
    /// A reply that is owed but read by no one: a PreScore sent ahead of its Score,
    /// whose outcome the sidecar's Score reads. Its arrival is not a stray.
    Unread,
}

pub(super) struct SyncSlot {
    pub(super) done: AtomicBool,
    pub(super) value: Mutex<Option<Result<Reply, CallError>>>,
    pub(super) thread: Thread,
    /// When the call went out (about: when its waiter was registered).
    pub(super) sent: Instant,
}

impl Waiter {
    pub(super) fn complete(self, r: Result<Reply, CallError>) {
        match self {
            Waiter::Sync(s) => {
                if let Ok(mut v) = s.value.lock() {
                    *v = Some(r);
                }
                s.done.store(true, Ordering::Release);
                s.thread.unpark();
            }
            Waiter::Async(tx) => {
                let _ = tx.send(r);
            }
            Waiter::Unread => {}
        }
    }
}

/// A call sent and not yet answered.
pub struct Pending {
    pub(super) id: u64,
    pub(super) slot: Arc<SyncSlot>,
    pub(super) sent: Instant,
    pub(super) deadline: Instant,
    pub(super) inner: Arc<Inner>,
}

impl Pending {
    /// Waits for the reply until the endpoint's timeout.
    pub fn wait(self) -> Result<Reply, CallError> {
        // Replies usually come within a few hundred microseconds: yielding that long
        // is cheaper than a park/unpark round through the kernel, and unlike a busy
        // spin it leaves the core to the sidecar and the connection thread (measured
        // on 2 cores: 4,200 pods/s spinning 50 µs, 4,500-5,300 yielding 200-500 µs).
        // A sidecar whose replies take longer than that (a slow plugin, Python)
        // would only be robbed of CPU by the yields: then park at once.
        let slow = self.inner.reply_us.load(Ordering::Relaxed) > YIELD_US;
        let yield_until = Instant::now() + Duration::from_micros(if slow { 0 } else { YIELD_US });
        loop {
            if self.slot.done.load(Ordering::Acquire) {
                break;
            }
            let now = Instant::now();
            if now >= self.deadline {
                self.inner.pending_remove(self.id);
                if self.slot.done.load(Ordering::Acquire) {
                    break;
                }
                return Err(self.inner.timed_out());
            }
            if now < yield_until {
                std::thread::yield_now();
            } else {
                std::thread::park_timeout(self.deadline - now);
            }
        }
        self.inner.observe_call(self.sent);
        let v = self.slot.value.lock().ok().and_then(|mut v| v.take());
        v.unwrap_or_else(|| Err(CallError::Unavailable("reply lost".into())))
    }
}

/// A call given up on (a lookahead not used): its reply is still owed, and dropped
/// on arrival without counting as a stray.
impl Drop for Pending {
    fn drop(&mut self) {
        if !self.slot.done.load(Ordering::Acquire) {
            self.inner.give_up(self.id);
        }
    }
}

/// A call sent and not yet answered, awaited on the tokio runtime.
pub struct AsyncPending {
    pub(super) id: u64,
    pub(super) rx: Option<tokio::sync::oneshot::Receiver<Result<Reply, CallError>>>,
    pub(super) sent: Instant,
    pub(super) deadline: Instant,
    pub(super) inner: Arc<Inner>,
}

impl AsyncPending {
    /// Awaits the reply until the endpoint's timeout (counted from the send).
    pub async fn wait(mut self) -> Result<Reply, CallError> {
        let Some(rx) = self.rx.take() else {
            return Err(CallError::Unavailable("reply lost".into()));
        };
        let deadline = tokio::time::Instant::from_std(self.deadline);
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => {
                self.inner.observe_call(self.sent);
                r
            }
            Ok(Err(_)) => Err(CallError::Unavailable("reply lost".into())),
            Err(_) => {
                self.inner.pending_remove(self.id);
                Err(self.inner.timed_out())
            }
        }
    }
}

/// A call given up on before it was awaited: its reply is still owed (see
/// [`Pending`]'s drop).
impl Drop for AsyncPending {
    fn drop(&mut self) {
        if self.rx.is_some() {
            self.inner.give_up(self.id);
        }
    }
}

/// The reply to one `FilterBatch` message, shared by the pods' calls it carries: the
/// first call that needs its answer waits for the message, the others find theirs.
pub struct BatchReply {
    /// Whether the message went out; a call in a batch that did not is asked again.
    pub(super) sent: AtomicBool,
    /// How many pods' calls the message carries.
    pub(super) calls: std::sync::atomic::AtomicUsize,
    pub(super) pending: Mutex<Option<Pending>>,
    /// Each call's reply, taken by it; or why the whole message failed.
    pub(super) replies: Mutex<Option<Result<Vec<Option<pb::FilterResponse>>, CallError>>>,
}

impl BatchReply {
    pub fn sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
    }

    /// How many pods' calls the message carries.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Acquire)
    }

    /// The reply to call `i` of the batch (its request id `id`), waiting for the
    /// message if it has not come yet. A failure of the whole message (connection
    /// lost, timeout, malformed) is every call's failure.
    pub fn take(&self, i: usize, id: u64) -> Result<pb::FilterResponse, CallError> {
        let mut replies = self
            .replies
            .lock()
            .map_err(|_| CallError::Unavailable("batch state poisoned".into()))?;
        if replies.is_none() {
            let pending = self.pending.lock().ok().and_then(|mut p| p.take());
            let r = match pending {
                None => Err(CallError::Unavailable("the batch was not sent".into())),
                Some(p) => match p.wait() {
                    Ok(Reply::FilterBatch(b)) => Ok(b.replies.into_iter().map(Some).collect()),
                    Ok(_) => Err(CallError::BadReply("not a FilterBatch reply".into())),
                    Err(e) => Err(e),
                },
            };
            *replies = Some(r);
        }
        match replies.as_mut() {
            Some(Ok(v)) => {
                let n = v.len();
                match v.get_mut(i).and_then(Option::take) {
                    Some(r) if r.request_id == id => Ok(r),
                    Some(r) => Err(CallError::BadReply(format!(
                        "item {i} of the FilterBatch reply answers request {}, not {id}",
                        r.request_id
                    ))),
                    None => Err(CallError::BadReply(format!(
                        "the FilterBatch reply has {n} items, none for call {i}"
                    ))),
                }
            }
            Some(Err(e)) => Err(e.clone()),
            None => Err(CallError::Unavailable("reply lost".into())),
        }
    }
}

/// How long an unsolicited Permit decision waits for its pod to be parked.
const DECISION_OVERTAKE_WAIT: Duration = Duration::from_secs(1);

/// Routes a reply; false when it answers nothing (a stray).
pub(super) fn handle_reply(inner: &Arc<Inner>, id: u64, r: Reply) -> bool {
    if id != 0 {
        return inner.dispatch(id, r);
    }
    // Unsolicited: a Permit decision about a waiting pod.
    let Reply::Permit(pb::PermitResponse {
        decision: Some(d), ..
    }) = r
    else {
        return false;
    };
    let Some(wp) = inner.waiting_pods.get().cloned() else {
        return false;
    };
    if inner.decisions_in_flight.fetch_add(1, Ordering::AcqRel) >= DECISIONS_IN_FLIGHT {
        inner.decisions_in_flight.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    /// Counts the decision out however its task ends.
    struct Done(Arc<Inner>);
    impl Drop for Done {
        fn drop(&mut self) {
            self.0.decisions_in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let done = Done(inner.clone());
    // The decision can overtake the scheduling thread parking the pod after its own
    // Wait reply: give it a moment to appear.
    tokio::spawn(async move {
        let _done = done;
        match wp.wait_for(&d.pod_uid, DECISION_OVERTAKE_WAIT).await {
            Some(p) if d.allow => p.allow(&d.plugin),
            Some(p) => {
                p.reject(&d.plugin, &d.message);
            }
            None => {
                tracing::debug!(pod = %d.pod_uid, plugin = %d.plugin, "Permit decision for a pod that is not waiting")
            }
        }
    });
    true
}
