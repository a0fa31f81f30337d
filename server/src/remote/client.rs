//! One sidecar connection: a thread with a single-threaded runtime keeps it up
//! (connect, handshake, one stream per extension point, reconnect with backoff), and
//! callers on any thread send requests and wait for the reply with their request id.
//! A single-threaded runtime on the calling side halves round-trip latency compared
//! to a multi-threaded one (see `../shared/STACK.md` measurements in the README).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::plugin_client::PluginClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::error::CallError;
use super::replicate::Replicator;
use super::EndpointConfig;
use crate::framework::waiting_pods::WaitingPods;

impl Outbound {
    fn encoded_len(&self) -> usize {
        use prost::Message;
        match self {
            Outbound::PreEnqueue(r) => r.encoded_len(),
            Outbound::QueueSort(r) => r.encoded_len(),
            Outbound::PreFilter(r) => r.encoded_len(),
            Outbound::Filter(r) => r.encoded_len(),
            Outbound::FilterBatch(r) => r.encoded_len(),
            Outbound::PostFilter(r) => r.encoded_len(),
            Outbound::PreScore(r) => r.encoded_len(),
            Outbound::Score(r) => r.encoded_len(),
            Outbound::NormalizeScore(r) => r.encoded_len(),
            Outbound::Reserve(r)
            | Outbound::Unreserve(r)
            | Outbound::Permit(r)
            | Outbound::PreBind(r)
            | Outbound::Bind(r)
            | Outbound::PostBind(r) => r.encoded_len(),
        }
    }
}

/// A reply, by stream.
#[derive(Debug)]
pub enum Reply {
    Status(pb::StatusResponse),
    QueueSort(pb::QueueSortResponse),
    PreFilter(pb::PreFilterResponse),
    Filter(pb::FilterResponse),
    FilterBatch(pb::FilterBatchResponse),
    PostFilter(pb::PostFilterResponse),
    Score(pb::ScoreResponse),
    Permit(pb::PermitResponse),
}

/// A request, by stream.
pub enum Outbound {
    PreEnqueue(pb::PreEnqueueRequest),
    QueueSort(pb::QueueSortRequest),
    PreFilter(pb::PreFilterRequest),
    Filter(pb::FilterRequest),
    FilterBatch(pb::FilterBatchRequest),
    PostFilter(pb::PostFilterRequest),
    PreScore(pb::PreScoreRequest),
    Score(pb::ScoreRequest),
    NormalizeScore(pb::NormalizeScoreRequest),
    Reserve(pb::CycleRequest),
    Unreserve(pb::CycleRequest),
    Permit(pb::CycleRequest),
    PreBind(pb::CycleRequest),
    Bind(pb::CycleRequest),
    PostBind(pb::CycleRequest),
}

type Tx<T> = mpsc::UnboundedSender<T>;

/// What callers hand to the connection thread.
enum Wire {
    Replicate(pb::ReplicateRequest),
    Call(Outbound),
}

/// A handle on one connection's streams, for callers on any thread.
///
/// Everything goes through one channel to a router task on the connection thread:
/// a pod's messages (snapshot delta, CycleEnd, the next CycleStart, its Filter) then
/// cost the caller one wake-up of that thread, and since the router hands them to
/// their streams in one go, HTTP/2 sends them in one write and the sidecar reads
/// them with one read.
///
/// Replicate messages need no answer, so they are held back until the next call,
/// which needs them anyway (its generation names them), or for at most [`HOLD`]
/// when no call follows. Order is kept: they are queued under one lock.
#[derive(Clone)]
pub struct Streams {
    pub epoch: u64,
    stats: Arc<EndpointStats>,
    tx: Tx<Wire>,
    held: Arc<Mutex<Vec<pb::ReplicateRequest>>>,
    /// The sidecar takes several Replicate messages in one (`more`).
    coalesce: bool,
}

/// How long a caller yields its core before it parks to wait for a reply (unless
/// replies take longer than that).
const YIELD_US: u64 = 250;

/// How long a Replicate message may wait for a call to go out with.
const HOLD: Duration = Duration::from_millis(20);

/// Replies to no outstanding call that a connection may carry beyond one per call
/// sent on it (late replies to calls that timed out are normal): past that the
/// sidecar is flooding, and the connection is dropped.
pub const STRAY_REPLY_ALLOWANCE: u64 = 1024;

/// Unsolicited Permit decisions waiting for their pod to park, at most; more are
/// stray replies.
const DECISIONS_IN_FLIGHT: usize = 1024;

/// Calls in a row that got no reply within the timeout before the connection is
/// dropped as unresponsive (a stopped or wedged sidecar keeps its socket open): calls
/// then fail at once as "not connected" instead of each waiting out its timeout, so
/// a run with a dead `Fail` sidecar ends with its report instead of crawling, and the
/// reconnect loop takes the sidecar back when it answers a handshake again.
pub const UNRESPONSIVE_AFTER: u32 = 3;

impl Streams {
    /// Sends a request; a caller that wants the reply registers a waiter first
    /// ([`Endpoint::start_call`]), otherwise the reply is dropped on arrival.
    /// Queued Replicate messages go first.
    pub fn send(&self, m: Outbound) -> bool {
        self.stats.sent(m.encoded_len());
        self.flush() && self.tx.send(Wire::Call(m)).is_ok()
    }

    /// Sends the held-back Replicate messages: as one gRPC message when the sidecar
    /// takes `more`.
    fn flush(&self) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        if self.coalesce && held.len() > 1 {
            let mut rest = held.drain(..);
            let Some(mut first) = rest.next() else {
                return true;
            };
            first.more = rest.collect();
            // Each message was counted when queued, with a 5-byte gRPC prefix: about
            // what its tag and length take inside `more`.
            return self.tx.send(Wire::Replicate(first)).is_ok();
        }
        let ok = held
            .drain(..)
            .all(|m| self.tx.send(Wire::Replicate(m)).is_ok());
        ok
    }

    /// Queues a Replicate message: it goes out with the next call.
    pub fn replicate(&self, mut m: pb::ReplicateRequest) -> bool {
        // About once a second the sidecar is asked to acknowledge, which is how the
        // replication lag is measured without a reply per message.
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let now_us = EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64;
        let last = self.stats.last_ack_request_us.load(Ordering::Relaxed);
        if now_us.saturating_sub(last) >= 1_000_000 || last == 0 {
            self.stats
                .last_ack_request_us
                .store(now_us.max(1), Ordering::Relaxed);
            m.ack = true;
        }
        self.stats
            .sent_generation
            .store(m.generation, Ordering::Relaxed);
        self.stats.sent(prost::Message::encoded_len(&m));
        match self.held.lock() {
            Ok(mut held) => {
                held.push(m);
                !self.tx.is_closed()
            }
            Err(_) => false,
        }
    }
}

/// The senders of the open streams, on the connection thread.
struct Router {
    replicate: Tx<pb::ReplicateRequest>,
    pre_enqueue: Tx<pb::PreEnqueueRequest>,
    queue_sort: Tx<pb::QueueSortRequest>,
    pre_filter: Tx<pb::PreFilterRequest>,
    filter: Tx<pb::FilterRequest>,
    /// Open only when the handshake negotiated it.
    filter_batch: Option<Tx<pb::FilterBatchRequest>>,
    post_filter: Tx<pb::PostFilterRequest>,
    pre_score: Tx<pb::PreScoreRequest>,
    score: Tx<pb::ScoreRequest>,
    normalize_score: Tx<pb::NormalizeScoreRequest>,
    reserve: Tx<pb::CycleRequest>,
    unreserve: Tx<pb::CycleRequest>,
    permit: Tx<pb::CycleRequest>,
    pre_bind: Tx<pb::CycleRequest>,
    bind: Tx<pb::CycleRequest>,
    post_bind: Tx<pb::CycleRequest>,
}

impl Router {
    /// Hands a message to its stream; false when that stream is gone.
    fn route(&self, w: Wire) -> bool {
        let m = match w {
            Wire::Replicate(r) => return self.replicate.send(r).is_ok(),
            Wire::Call(m) => m,
        };
        match m {
            Outbound::PreEnqueue(r) => self.pre_enqueue.send(r).is_ok(),
            Outbound::QueueSort(r) => self.queue_sort.send(r).is_ok(),
            Outbound::PreFilter(r) => self.pre_filter.send(r).is_ok(),
            Outbound::Filter(r) => self.filter.send(r).is_ok(),
            Outbound::FilterBatch(r) => self
                .filter_batch
                .as_ref()
                .is_some_and(|tx| tx.send(r).is_ok()),
            Outbound::PostFilter(r) => self.post_filter.send(r).is_ok(),
            Outbound::PreScore(r) => self.pre_score.send(r).is_ok(),
            Outbound::Score(r) => self.score.send(r).is_ok(),
            Outbound::NormalizeScore(r) => self.normalize_score.send(r).is_ok(),
            Outbound::Reserve(r) => self.reserve.send(r).is_ok(),
            Outbound::Unreserve(r) => self.unreserve.send(r).is_ok(),
            Outbound::Permit(r) => self.permit.send(r).is_ok(),
            Outbound::PreBind(r) => self.pre_bind.send(r).is_ok(),
            Outbound::Bind(r) => self.bind.send(r).is_ok(),
            Outbound::PostBind(r) => self.post_bind.send(r).is_ok(),
        }
    }

    /// Routes until the callers' channel closes or a stream is gone (the
    /// connection is ending then; its callers are failed by the connection loop).
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Wire>) {
        while let Some(w) = rx.recv().await {
            if !self.route(w) {
                return;
            }
            // Everything already queued goes in the same turn, hence one write.
            while let Ok(w) = rx.try_recv() {
                if !self.route(w) {
                    return;
                }
            }
        }
    }
}

/// Where a caller waits for its reply: a spin, then a park (synchronous callers), or
/// a oneshot (async callers).
enum Waiter {
    Sync(Arc<SyncSlot>),
    Async(tokio::sync::oneshot::Sender<Result<Reply, CallError>>),
}

struct SyncSlot {
    done: AtomicBool,
    value: Mutex<Option<Result<Reply, CallError>>>,
    thread: Thread,
    /// When the call went out (about: when its waiter was registered).
    sent: Instant,
}

impl Waiter {
    fn complete(self, r: Result<Reply, CallError>) {
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
        }
    }
}

/// A call sent and not yet answered.
pub struct Pending {
    id: u64,
    slot: Arc<SyncSlot>,
    sent: Instant,
    deadline: Instant,
    inner: Arc<Inner>,
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

/// A call given up on (a lookahead not used): its reply, if it comes, is dropped.
impl Drop for Pending {
    fn drop(&mut self) {
        if !self.slot.done.load(Ordering::Acquire) {
            self.inner.pending_remove(self.id);
        }
    }
}

/// The reply to one `FilterBatch` message, shared by the pods' calls it carries: the
/// first call that needs its answer waits for the message, the others find theirs.
pub struct BatchReply {
    /// Whether the message went out; a call in a batch that did not is asked again.
    sent: AtomicBool,
    pending: Mutex<Option<Pending>>,
    /// Each call's reply, taken by it; or why the whole message failed.
    replies: Mutex<Option<Result<Vec<Option<pb::FilterResponse>>, CallError>>>,
}

impl BatchReply {
    pub fn sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
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

/// A `FilterBatch` message being assembled (see [`Endpoint::begin_batch`]).
struct BatchBuilder {
    streams: Streams,
    calls: Vec<pb::FilterRequest>,
    reply: Arc<BatchReply>,
}

/// How many pods a batch goes ahead (K), adapted to how its answers are used.
struct BatchDepth {
    /// The current K, from 1 to `maxBatchPods`; 2 (or the bound) at first.
    pods: usize,
    /// Answers used since K last changed.
    used: usize,
}

struct ConnState {
    streams: Option<Streams>,
    last_error: String,
}

pub(crate) struct Inner {
    pub config: EndpointConfig,
    conn: Mutex<ConnState>,
    handshake: Mutex<Option<pb::HandshakeResponse>>,
    handshake_cv: Condvar,
    pending: Mutex<FxHashMap<u64, Waiter>>,
    next_id: AtomicU64,
    epoch: AtomicU64,
    pub replicator: Mutex<Replicator>,
    pub waiting_pods: OnceLock<Arc<WaitingPods>>,
    /// The framework handle of the first profile using the endpoint: how a reconnect
    /// reaches the scheduling queue.
    pub handle: OnceLock<Arc<crate::framework::Handle>>,
    /// Set once by [`Endpoint::stop`]; the connection thread waits on it.
    stop: tokio::sync::watch::Sender<bool>,
    pub stats: Arc<EndpointStats>,
    /// Stray replies on this connection, and `stats.calls` when it was made.
    strays: AtomicU64,
    calls_at_connect: AtomicU64,
    decisions_in_flight: std::sync::atomic::AtomicUsize,
    batch: Mutex<Option<BatchBuilder>>,
    depth: Mutex<BatchDepth>,
    /// Recent reply latency in µs (a moving average): how a caller waits.
    reply_us: AtomicU64,
    /// Calls in a row that timed out on this connection (see [`UNRESPONSIVE_AFTER`]),
    /// and how to end the connection from a caller's thread.
    timeouts_in_a_row: std::sync::atomic::AtomicU32,
    kick: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

/// Counters for one endpoint. Bytes are gRPC message bytes (the protobuf encoding
/// plus gRPC's 5-byte length prefix), both directions, replication included;
/// HTTP/2 framing is not counted.
#[derive(Default, Debug)]
pub struct EndpointStats {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub reconnects: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub bytes_received: AtomicU64,
    /// The last Replicate generation sent.
    pub sent_generation: AtomicU64,
    /// How many generations the sidecar was behind when it last acknowledged one
    /// (acknowledgements are asked for about once a second).
    pub replication_lag: AtomicU64,
    /// Lookahead Filter answers used, and those dropped (the next attempt was another
    /// pod, or named other or changed nodes) and asked again.
    pub lookahead_hits: AtomicU64,
    pub lookahead_misses: AtomicU64,
    /// Filter rounds and Score calls answered with answers reused for alike pods.
    pub alike_reused: AtomicU64,
    /// Replies to no outstanding call (late, unknown id, or flooding).
    pub stray_replies: AtomicU64,
    /// The last call error or connection loss, as reported.
    pub last_error: Mutex<String>,
    /// When the last acknowledgement was asked for (µs since the first).
    last_ack_request_us: AtomicU64,
}

/// gRPC's per-message prefix: a compression flag and a 4-byte length.
const GRPC_PREFIX: u64 = 5;

impl EndpointStats {
    fn sent(&self, len: usize) {
        self.bytes_sent
            .fetch_add(len as u64 + GRPC_PREFIX, Ordering::Relaxed);
    }
    fn set_last_error(&self, message: &str) {
        if let Ok(mut e) = self.last_error.lock() {
            message.clone_into(&mut e);
        }
    }
    fn received(&self, len: usize) {
        self.bytes_received
            .fetch_add(len as u64 + GRPC_PREFIX, Ordering::Relaxed);
    }
}

impl Inner {
    /// `switchyard_remote_call_duration_seconds` for a call answered now.
    fn observe_call(&self, sent: Instant) {
        self.timeouts_in_a_row.store(0, Ordering::Relaxed);
        crate::telemetry::metrics::REMOTE_CALL_DURATION
            .observe(&[&self.config.endpoint], sent.elapsed().as_secs_f64());
    }

    /// A call got no reply within the timeout: the message for the caller. After
    /// [`UNRESPONSIVE_AFTER`] in a row the connection is dropped as unresponsive.
    fn timed_out(&self) -> CallError {
        let n = self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if n == UNRESPONSIVE_AFTER {
            let why = format!(
                "unresponsive: {n} calls in a row got no reply within {:?}",
                self.config.timeout
            );
            tracing::warn!(endpoint = %self.config.endpoint, "sidecar {why}; dropping the connection");
            if let Some(k) = self.kick.lock().ok().and_then(|k| k.clone()) {
                let _ = k.send(why);
            }
        }
        CallError::Timeout(self.config.timeout)
    }

    fn pending_remove(&self, id: u64) -> Option<Waiter> {
        self.pending.lock().ok()?.remove(&id)
    }

    fn fail_all(&self, why: &str) {
        let drained: Vec<Waiter> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, w)| w).collect(),
            Err(_) => Vec::new(),
        };
        for w in drained {
            w.complete(Err(CallError::Unavailable(why.to_string())));
        }
    }

    /// Completes call `id`; false when no call waits for it.
    fn dispatch(&self, id: u64, r: Reply) -> bool {
        match self.pending_remove(id) {
            Some(w) => {
                if let Waiter::Sync(s) = &w {
                    // A moving average over about the last 8 replies, as they arrive
                    // (not when they are used: batch replies wait for their pods).
                    let us = s.sent.elapsed().as_micros().min(u64::MAX as u128) as u64;
                    let avg = self.reply_us.load(Ordering::Relaxed);
                    self.reply_us
                        .store(avg - avg / 8 + us / 8, Ordering::Relaxed);
                }
                w.complete(Ok(r));
                true
            }
            None => false,
        }
    }

    /// Counts a stray reply; the connection's end when there are too many.
    fn stray(&self, stream: &str) -> Option<String> {
        self.stats.stray_replies.fetch_add(1, Ordering::Relaxed);
        let strays = self.strays.fetch_add(1, Ordering::Relaxed) + 1;
        let calls = self
            .stats
            .calls
            .load(Ordering::Relaxed)
            .saturating_sub(self.calls_at_connect.load(Ordering::Relaxed));
        (strays > calls.saturating_add(STRAY_REPLY_ALLOWANCE)).then(|| {
            format!(
                "{stream} stream: {strays} replies to no outstanding call, more than the {calls} calls sent plus {STRAY_REPLY_ALLOWANCE} (the sidecar is flooding); connection dropped"
            )
        })
    }

    fn set_error(&self, e: String) {
        if let Ok(mut c) = self.conn.lock() {
            c.streams = None;
            c.last_error = e;
        }
    }
}

/// A sidecar endpoint shared by the remote plugins it serves.
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) inner: Arc<Inner>,
}

impl Endpoint {
    /// Starts the connection thread; it keeps reconnecting until the endpoint is
    /// dropped by [`Endpoint::stop`].
    pub fn start(config: EndpointConfig) -> Result<Endpoint, String> {
        let depth = BatchDepth {
            pods: config.max_batch_pods.clamp(1, 2),
            used: 0,
        };
        let inner = Arc::new(Inner {
            config,
            conn: Mutex::new(ConnState {
                streams: None,
                last_error: "not connected yet".into(),
            }),
            handshake: Mutex::new(None),
            handshake_cv: Condvar::new(),
            pending: Mutex::new(FxHashMap::default()),
            next_id: AtomicU64::new(1),
            epoch: AtomicU64::new(0),
            replicator: Mutex::new(Replicator::default()),
            waiting_pods: OnceLock::new(),
            handle: OnceLock::new(),
            stop: tokio::sync::watch::Sender::new(false),
            stats: Arc::new(EndpointStats::default()),
            strays: AtomicU64::new(0),
            calls_at_connect: AtomicU64::new(0),
            decisions_in_flight: Default::default(),
            batch: Mutex::new(None),
            depth: Mutex::new(depth),
            reply_us: AtomicU64::new(0),
            timeouts_in_a_row: Default::default(),
            kick: Mutex::new(None),
        });
        let i = inner.clone();
        std::thread::Builder::new()
            .name(format!("sidecar-{}", inner.config.index))
            .spawn(move || connection_thread(i))
            .map_err(|e| format!("cannot start the connection thread: {e}"))?;
        Ok(Endpoint { inner })
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.inner.config
    }

    /// Stops reconnecting and closes the connection.
    pub fn stop(&self) {
        self.inner.stop.send_replace(true);
        self.inner.set_error("endpoint stopped".into());
    }

    /// Waits for the first handshake, at most `timeout`.
    pub fn wait_handshake(&self, timeout: Duration) -> Option<pb::HandshakeResponse> {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.handshake.lock().ok()?;
        loop {
            if let Some(h) = g.as_ref() {
                return Some(h.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            g = self
                .inner
                .handshake_cv
                .wait_timeout(g, deadline - now)
                .ok()?
                .0;
        }
    }

    pub fn handshake(&self) -> Option<pb::HandshakeResponse> {
        self.inner.handshake.lock().ok()?.clone()
    }

    /// Whether the latest handshake declares every plugin node-local (and none with a
    /// PreFilter): the condition for sending a pod's Filter ahead of its attempt.
    pub fn all_node_local(&self) -> bool {
        let Ok(h) = self.inner.handshake.lock() else {
            return false;
        };
        h.as_ref().is_some_and(|h| {
            !h.plugins.is_empty()
                && h.plugins.iter().all(|p| {
                    p.node_local
                        && !p
                            .extension_points
                            .contains(&(pb::ExtensionPoint::PreFilter as i32))
                })
        })
    }

    /// Whether the sidecar serves `FilterBatch` (negotiated at handshake).
    pub fn batches_pods(&self) -> bool {
        self.inner.handshake.lock().is_ok_and(|h| {
            h.as_ref()
                .is_some_and(|h| serves(h, switchyard_proto::CAPABILITY_FILTER_BATCH))
        })
    }

    /// How many pods the next lookahead may cover on this endpoint: 1 without
    /// `FilterBatch`; otherwise K, which doubles (up to `maxBatchPods`) each time K
    /// answers in a row were used and halves at every answer dropped, so a workload
    /// whose answers go unused falls back to one pod ahead.
    pub fn lookahead_pods(&self) -> usize {
        if !self.batches_pods() {
            return 1;
        }
        self.inner.depth.lock().map_or(1, |d| d.pods)
    }

    /// Records whether a lookahead answer was used (see [`Self::lookahead_pods`]).
    pub fn lookahead_outcome(&self, used: bool) {
        let max = self.inner.config.max_batch_pods.max(1);
        if let Ok(mut d) = self.inner.depth.lock() {
            let k = d.pods;
            if used {
                d.used += 1;
                if d.used >= k {
                    d.pods = (k * 2).min(max);
                    d.used = 0;
                }
            } else {
                d.pods = (k / 2).max(1);
                d.used = 0;
            }
        }
    }

    /// Starts collecting Filter calls into one `FilterBatch` message on `streams`'
    /// connection; false when the sidecar does not serve it.
    pub fn begin_batch(&self, streams: &Streams) -> bool {
        if !self.batches_pods() {
            return false;
        }
        let Ok(mut b) = self.inner.batch.lock() else {
            return false;
        };
        *b = Some(BatchBuilder {
            streams: streams.clone(),
            calls: Vec::new(),
            reply: Arc::new(BatchReply {
                sent: AtomicBool::new(false),
                pending: Mutex::new(None),
                replies: Mutex::new(None),
            }),
        });
        true
    }

    /// Adds a Filter call to the batch being collected on `epoch`'s connection: its
    /// reply and index, or the request back when no batch is open there.
    #[allow(clippy::result_large_err)] // the Err is the caller's request, handed back
    pub fn add_to_batch(
        &self,
        epoch: u64,
        req: pb::FilterRequest,
    ) -> Result<(Arc<BatchReply>, usize), pb::FilterRequest> {
        let Ok(mut b) = self.inner.batch.lock() else {
            return Err(req);
        };
        match b.as_mut().filter(|b| b.streams.epoch == epoch) {
            Some(b) => {
                b.calls.push(req);
                Ok((b.reply.clone(), b.calls.len() - 1))
            }
            None => Err(req),
        }
    }

    /// Sends the batch collected since [`Self::begin_batch`] as one message.
    pub fn send_batch(&self) {
        let Some(b) = self.inner.batch.lock().ok().and_then(|mut b| b.take()) else {
            return;
        };
        if b.calls.is_empty() {
            return;
        }
        let id = self.next_request_id();
        let m = Outbound::FilterBatch(pb::FilterBatchRequest {
            request_id: id,
            calls: b.calls,
        });
        // One round trip, counted once (`calls` counts messages that get a reply).
        if let Ok(p) = self.start_call(&b.streams, id, m) {
            if let Ok(mut slot) = b.reply.pending.lock() {
                *slot = Some(p);
                b.reply.sent.store(true, Ordering::Release);
            }
        }
    }

    /// Whether the latest handshake lists extension point `point` for `plugin`;
    /// `None` before the first handshake. Reads it in place (no copy).
    pub fn implements(&self, plugin: &str, point: pb::ExtensionPoint) -> Option<bool> {
        let h = self.inner.handshake.lock().ok()?;
        let h = h.as_ref()?;
        Some(
            h.plugins
                .iter()
                .any(|i| i.name == plugin && i.extension_points.contains(&(point as i32))),
        )
    }

    /// `plugin`'s entry in the latest handshake.
    pub fn plugin_info(&self, plugin: &str) -> Option<pb::PluginInfo> {
        let h = self.inner.handshake.lock().ok()?;
        h.as_ref()?
            .plugins
            .iter()
            .find(|i| i.name == plugin)
            .cloned()
    }

    /// The open streams, or why there are none.
    pub fn streams(&self) -> Result<Streams, CallError> {
        let c = self
            .inner
            .conn
            .lock()
            .map_err(|_| CallError::Unavailable("connection state poisoned".into()))?;
        c.streams.clone().ok_or_else(|| {
            CallError::Unavailable(format!(
                "sidecar {} is not connected: {}",
                self.inner.config.endpoint, c.last_error
            ))
        })
    }

    pub fn next_request_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request on `streams` and returns the call to wait on.
    pub fn start_call(
        &self,
        streams: &Streams,
        id: u64,
        m: Outbound,
    ) -> Result<Pending, CallError> {
        self.inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(SyncSlot {
            done: AtomicBool::new(false),
            value: Mutex::new(None),
            thread: std::thread::current(),
            sent: Instant::now(),
        });
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(id, Waiter::Sync(slot.clone()));
        }
        if !streams.send(m) {
            self.inner.pending_remove(id);
            return Err(CallError::Unavailable(format!(
                "sidecar {}: the stream is closed",
                self.inner.config.endpoint
            )));
        }
        let sent = Instant::now();
        Ok(Pending {
            id,
            slot,
            sent,
            deadline: sent + self.inner.config.timeout,
            inner: self.inner.clone(),
        })
    }

    /// Sends and waits (synchronous callers: the scheduling thread).
    pub fn call(&self, build: impl FnOnce(u64) -> Outbound) -> Result<Reply, CallError> {
        let streams = self.streams()?;
        let id = self.next_request_id();
        self.start_call(&streams, id, build(id))?.wait()
    }

    /// Sends and awaits (binding-cycle callers on the tokio runtime).
    pub async fn call_async(
        &self,
        build: impl FnOnce(u64) -> Outbound,
    ) -> Result<Reply, CallError> {
        self.inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        let streams = self.streams()?;
        let id = self.next_request_id();
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(id, Waiter::Async(tx));
        }
        if !streams.send(build(id)) {
            self.inner.pending_remove(id);
            return Err(CallError::Unavailable("the stream is closed".into()));
        }
        let sent = Instant::now();
        match tokio::time::timeout(self.inner.config.timeout, rx).await {
            Ok(Ok(r)) => {
                self.inner.observe_call(sent);
                r
            }
            Ok(Err(_)) => Err(CallError::Unavailable("reply lost".into())),
            Err(_) => {
                self.inner.pending_remove(id);
                Err(self.inner.timed_out())
            }
        }
    }

    pub fn stats(&self) -> &EndpointStats {
        &self.inner.stats
    }

    /// Counts a failed call, keeping its message for the report.
    pub fn count_error(&self, message: &str) {
        self.inner.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.inner.stats.set_last_error(message);
    }
}

/// Whether the sidecar's handshake accepted capability `cap`.
fn serves(hs: &pb::HandshakeResponse, cap: &str) -> bool {
    hs.capabilities.iter().any(|c| c == cap)
}

fn connection_thread(inner: Arc<Inner>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            inner.set_error(format!("cannot start the connection runtime: {e}"));
            return;
        }
    };
    rt.block_on(async {
        let mut backoff = Duration::from_millis(50);
        let mut stop = inner.stop.subscribe();
        while !*stop.borrow() {
            let started = Instant::now();
            let e = connect_once(&inner).await;
            inner.set_error(e.clone());
            inner.stats.set_last_error(&format!("connection lost: {e}"));
            inner.fail_all(&format!(
                "sidecar {} connection lost: {e}",
                inner.config.endpoint
            ));
            if *stop.borrow() {
                break;
            }
            tracing::warn!(endpoint = %inner.config.endpoint, error = %e, "sidecar unavailable; reconnecting");
            if started.elapsed() > Duration::from_secs(10) {
                backoff = Duration::from_millis(50);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
}

pub(crate) async fn channel(
    endpoint: &str,
    tls: Option<&super::TlsFiles>,
) -> Result<tonic::transport::Channel, String> {
    use tonic::transport::Endpoint as TEndpoint;
    if let Some(path) = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
    {
        let ep = TEndpoint::from_static("http://sidecar.local")
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        switchyard_proto::connect_unix(ep, path.into())
            .await
            .map_err(|e| format!("cannot connect: {}", switchyard_proto::error_chain(&e)))
    } else {
        let ep = TEndpoint::from_shared(endpoint.to_string())
            .map_err(|e| format!("bad endpoint: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        let connected = match tls {
            Some(t) => {
                ep.tls_config(client_tls(t)?)
                    .map_err(|e| format!("TLS configuration: {e}"))?
                    .connect()
                    .await
            }
            None => switchyard_proto::connect_tcp(ep).await,
        };
        connected.map_err(|e| format!("cannot connect: {}", switchyard_proto::error_chain(&e)))
    }
}

/// The TLS client settings, read from the PEM files at every connect so that rotated
/// certificates apply on reconnect.
fn client_tls(t: &super::TlsFiles) -> Result<tonic::transport::ClientTlsConfig, String> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&t.ca)?));
    if let Some((cert, key)) = &t.identity {
        c = c.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &t.server_name {
        c = c.domain_name(name.clone());
    }
    Ok(c)
}

/// One connection's life: returns why it ended.
async fn connect_once(inner: &Arc<Inner>) -> String {
    let ch = match channel(&inner.config.endpoint, inner.config.tls.as_ref()).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut client = PluginClient::new(ch)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let hs = tokio::time::timeout(
        inner.config.timeout.max(Duration::from_secs(1)),
        client.handshake(pb::HandshakeRequest {
            protocol_versions: vec![switchyard_proto::PROTOCOL_VERSION.to_string()],
            scheduler: format!("switchyard {}", env!("CARGO_PKG_VERSION")),
            capabilities: vec![
                switchyard_proto::CAPABILITY_FILTER_BATCH.to_string(),
                switchyard_proto::CAPABILITY_REPLICATE_BATCH.to_string(),
            ],
        }),
    )
    .await;
    let hs = match hs {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            let text = switchyard_proto::status_text(&s);
            // TLS 1.3: a server that wants a client certificate refuses it after the
            // client's side of the handshake is done, so its alert
            // (CertificateRequired) may lose the race with the closed connection.
            let no_identity = inner
                .config
                .tls
                .as_ref()
                .is_some_and(|t| t.identity.is_none());
            let hint = if no_identity && !text.contains("CertificateRequired") {
                "; if the sidecar requires a client certificate (mutual TLS), set tls.certFile and tls.keyFile"
            } else {
                ""
            };
            return format!("handshake failed: {text}{hint}");
        }
        Err(_) => return "handshake timed out".into(),
    };
    if hs.protocol_version != switchyard_proto::PROTOCOL_VERSION {
        return format!(
            "sidecar chose protocol {:?}; this scheduler speaks {}",
            hs.protocol_version,
            switchyard_proto::PROTOCOL_VERSION
        );
    }
    let epoch = inner.epoch.fetch_add(1, Ordering::AcqRel) + 1;
    if epoch > 1 {
        inner.stats.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    let (closed_tx, mut closed_rx) = mpsc::unbounded_channel::<String>();
    inner.strays.store(0, Ordering::Relaxed);
    inner
        .calls_at_connect
        .store(inner.stats.calls.load(Ordering::Relaxed), Ordering::Relaxed);

    macro_rules! open {
        ($method:ident, $req:ty, $reply:ident) => {{
            let (tx, rx) = mpsc::unbounded_channel::<$req>();
            let mut c = client.clone();
            let inner = inner.clone();
            let closed = closed_tx.clone();
            tokio::spawn(async move {
                let why = match c.$method(UnboundedReceiverStream::new(rx)).await {
                    Ok(resp) => {
                        let mut s = resp.into_inner();
                        loop {
                            match s.message().await {
                                Ok(Some(m)) => {
                                    inner.stats.received(prost::Message::encoded_len(&m));
                                    if !handle_reply(&inner, m.request_id, Reply::$reply(m)) {
                                        if let Some(why) = inner.stray(stringify!($method)) {
                                            break why;
                                        }
                                    }
                                }
                                Ok(None) => break format!("{} stream ended", stringify!($method)),
                                Err(e) => {
                                    break format!(
                                        "{} stream failed: {}",
                                        stringify!($method),
                                        e.message()
                                    )
                                }
                            }
                        }
                    }
                    Err(e) => format!(
                        "cannot open the {} stream: {}",
                        stringify!($method),
                        e.message()
                    ),
                };
                let _ = closed.send(why);
            });
            tx
        }};
    }

    let router = Router {
        replicate: {
            let (tx, rx) = mpsc::unbounded_channel::<pb::ReplicateRequest>();
            let mut c = client.clone();
            let closed = closed_tx.clone();
            let stats = inner.stats.clone();
            tokio::spawn(async move {
                let why = match c.replicate(UnboundedReceiverStream::new(rx)).await {
                    Ok(resp) => {
                        let mut s = resp.into_inner();
                        loop {
                            match s.message().await {
                                Ok(Some(ack)) => {
                                    stats.received(prost::Message::encoded_len(&ack));
                                    let sent = stats.sent_generation.load(Ordering::Relaxed);
                                    stats.replication_lag.store(
                                        sent.saturating_sub(ack.applied_generation),
                                        Ordering::Relaxed,
                                    );
                                }
                                Ok(None) => break "replication stream ended".to_string(),
                                Err(e) => break format!("replication failed: {}", e.message()),
                            }
                        }
                    }
                    Err(e) => format!("cannot open the replication stream: {}", e.message()),
                };
                let _ = closed.send(why);
            });
            tx
        },
        pre_enqueue: open!(pre_enqueue, pb::PreEnqueueRequest, Status),
        queue_sort: open!(queue_sort, pb::QueueSortRequest, QueueSort),
        pre_filter: open!(pre_filter, pb::PreFilterRequest, PreFilter),
        filter: open!(filter, pb::FilterRequest, Filter),
        filter_batch: serves(&hs, switchyard_proto::CAPABILITY_FILTER_BATCH)
            .then(|| open!(filter_batch, pb::FilterBatchRequest, FilterBatch)),
        post_filter: open!(post_filter, pb::PostFilterRequest, PostFilter),
        pre_score: open!(pre_score, pb::PreScoreRequest, Status),
        score: open!(score, pb::ScoreRequest, Score),
        normalize_score: open!(normalize_score, pb::NormalizeScoreRequest, Score),
        reserve: open!(reserve, pb::CycleRequest, Status),
        unreserve: open!(unreserve, pb::CycleRequest, Status),
        permit: open!(permit, pb::CycleRequest, Permit),
        pre_bind: open!(pre_bind, pb::CycleRequest, Status),
        bind: open!(bind, pb::CycleRequest, Status),
        post_bind: open!(post_bind, pb::CycleRequest, Status),
    };
    let (tx, rx) = mpsc::unbounded_channel::<Wire>();
    let routing = tokio::spawn(router.run(rx));
    let streams = Streams {
        epoch,
        stats: inner.stats.clone(),
        tx,
        held: Arc::new(Mutex::new(Vec::new())),
        coalesce: serves(&hs, switchyard_proto::CAPABILITY_REPLICATE_BATCH),
    };
    // Held-back Replicate messages go out within HOLD even when no call follows.
    let holding = {
        let s = streams.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HOLD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !s.flush() {
                    break;
                }
            }
        })
    };
    inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
    if let Ok(mut k) = inner.kick.lock() {
        *k = Some(closed_tx);
    }
    if let Ok(mut c) = inner.conn.lock() {
        c.streams = Some(streams);
    }
    // The handshake is announced once the streams are up: a caller that waited for it
    // (the scheduler's start) can call at once instead of finding no connection.
    let plugins: Vec<String> = hs.plugins.iter().map(|p| p.name.clone()).collect();
    if let Ok(mut h) = inner.handshake.lock() {
        *h = Some(hs);
    }
    inner.handshake_cv.notify_all();
    tracing::info!(endpoint = %inner.config.endpoint, epoch, "sidecar connected");
    if let Some(services) = inner.handle.get().and_then(|h| h.services()) {
        // Requeueing calls plugins (PreEnqueue, QueueSort keys), some of them on this
        // very sidecar: never on this thread, which must stay free to read the replies.
        tokio::task::spawn_blocking(move || services.plugins_recovered(&plugins));
    }
    let mut stop = inner.stop.subscribe();
    let stopped = stop.wait_for(|s| *s);
    let why = tokio::select! {
        why = closed_rx.recv() => why.unwrap_or_else(|| "connection closed".into()),
        _ = stopped => "endpoint stopped".into(),
    };
    if let Ok(mut k) = inner.kick.lock() {
        *k = None;
    }
    // Callers still holding these streams find them closed.
    routing.abort();
    holding.abort();
    why
}

/// Routes a reply; false when it answers nothing (a stray).
fn handle_reply(inner: &Arc<Inner>, id: u64, r: Reply) -> bool {
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
        for _ in 0..200 {
            if let Some(p) = wp.get(&d.pod_uid) {
                if d.allow {
                    p.allow(&d.plugin);
                } else {
                    p.reject(&d.plugin, &d.message);
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::debug!(pod = %d.pod_uid, plugin = %d.plugin, "Permit decision for a pod that is not waiting");
    });
    true
}
