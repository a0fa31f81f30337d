//! One sidecar connection: a thread with a single-threaded runtime keeps it up
//! (connect, handshake, one stream per extension point, reconnect with backoff), and
//! callers on any thread send requests and wait for the reply with their request id.
//! A single-threaded runtime on the calling side halves round-trip latency compared
//! to a multi-threaded one (see `docs/performance.md`).
//!
//! `wire` holds the messages and the stream router, `call` a call waiting for its
//! reply, `connect` the connection's life.

mod call;
mod connect;
pub mod faillog;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::plugin_client::PluginClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::error::{CallError, SetupError};
use super::replicate::Replicator;
use super::EndpointConfig;
use crate::framework::waiting_pods::WaitingPods;
pub use call::{AsyncPending, BatchReply, Pending};
use call::{SyncSlot, Waiter};
pub(crate) use connect::channel;
use connect::{connection_thread, serves};
pub use wire::{Outbound, Reply, Streams, STRAY_REPLY_ALLOWANCE, UNRESPONSIVE_AFTER};
use wire::{Wire, UNREAD_IN_FLIGHT, YIELD_US};

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
    /// When an established connection was last lost, until the next one is up.
    lost_at: Option<Instant>,
}

pub(crate) struct Inner {
    pub config: EndpointConfig,
    conn: Mutex<ConnState>,
    /// Notified when a connection is up (see [`Endpoint::streams_or_wait`]).
    conn_cv: Condvar,
    handshake: Mutex<Option<pb::HandshakeResponse>>,
    handshake_cv: Condvar,
    pending: Mutex<FxHashMap<u64, Waiter>>,
    /// The failed calls' log: first failure and change of cause, then counts.
    failures: faillog::FailureLog,
    /// The last connection loss was a repeat counted, not logged (a flapping
    /// sidecar): its reconnect is not logged either.
    flapping: AtomicBool,
    /// `Waiter::Unread` entries in `pending`, at most [`UNREAD_IN_FLIGHT`].
    unread: std::sync::atomic::AtomicUsize,
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
    /// Pods (by uid hash) whose last Filter call here failed: they are not sent in a
    /// `FilterBatch` with other pods, so a pod the sidecar chokes on cannot fail the
    /// pods batched with it attempt after attempt.
    suspects: Mutex<rustc_hash::FxHashSet<u64>>,
    /// `suspects.len()`, read without the lock: with no suspect (the usual case) the
    /// hot path takes no lock for them.
    suspect_count: std::sync::atomic::AtomicUsize,
}

/// The most pods remembered as suspects (see `Inner::suspects`); past it a failing
/// pod may be batched again, nothing worse.
const SUSPECTS_MAX: usize = 4096;

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
    /// Filter rounds answered partly so (plugins whose answers read the node's pods):
    /// a call asked for the changed nodes only.
    pub alike_partly: AtomicU64,
    /// First Filter rounds sent right behind their PreFilter and used.
    pub filter_behind_pre_filter: AtomicU64,
    /// Permit calls sent right behind their Reserve and used.
    pub permit_behind_reserve: AtomicU64,
    /// Of those, the ones whose verdict was awaited in the binding cycle
    /// (`permitInBindingCycle`).
    pub permit_in_binding_cycle: AtomicU64,
    /// Score rounds answered here from a PreScore's scores by node label, without a
    /// Score call.
    pub label_scored: AtomicU64,
    /// Calls of a failed `FilterBatch` message asked again alone.
    pub batch_retried_apart: AtomicU64,
    /// Replies to no outstanding call (late, unknown id, or flooding).
    pub stray_replies: AtomicU64,
    /// The last call error or connection loss, as reported.
    pub last_error: Mutex<String>,
    /// Why the connection was last lost (kept when later calls fail otherwise).
    pub last_disconnect: Mutex<String>,
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

    /// Nobody waits for call `id` any more, but its reply is owed: it is expected
    /// (`Waiter::Unread`) while fewer than [`UNREAD_IN_FLIGHT`] are, so that it is not
    /// a stray when it comes.
    fn give_up(&self, id: u64) {
        let Ok(mut p) = self.pending.lock() else {
            return;
        };
        let Some(w) = p.get_mut(&id) else {
            return;
        };
        if self.reserve_unread() {
            *w = Waiter::Unread;
        } else {
            p.remove(&id);
        }
    }

    /// Takes one of the [`UNREAD_IN_FLIGHT`] owed replies that may be expected;
    /// false when they are all taken.
    fn reserve_unread(&self) -> bool {
        if self.unread.fetch_add(1, Ordering::Relaxed) < UNREAD_IN_FLIGHT {
            return true;
        }
        self.unread.fetch_sub(1, Ordering::Relaxed);
        false
    }

    fn fail_all(&self, why: &str) {
        let drained: Vec<Waiter> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, w)| w).collect(),
            Err(_) => Vec::new(),
        };
        for w in drained {
            if let Waiter::Unread = w {
                self.unread.fetch_sub(1, Ordering::Relaxed);
            }
            w.complete(Err(CallError::Unavailable(why.to_string())));
        }
    }

    /// Completes call `id`; false when no call waits for it.
    fn dispatch(&self, id: u64, r: Reply) -> bool {
        match self.pending_remove(id) {
            Some(Waiter::Unread) => {
                self.unread.fetch_sub(1, Ordering::Relaxed);
                true
            }
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

    /// An established connection ended: attempts starting now wait a moment for the
    /// next one (see [`Endpoint::streams_or_wait`]).
    pub(super) fn connection_lost(&self) {
        if let Ok(mut c) = self.conn.lock() {
            c.lost_at.get_or_insert_with(Instant::now);
        }
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
    pub fn start(config: EndpointConfig) -> Result<Endpoint, SetupError> {
        let depth = BatchDepth {
            pods: config.max_batch_pods.clamp(1, 2),
            used: 0,
        };
        let inner = Arc::new(Inner {
            config,
            conn: Mutex::new(ConnState {
                streams: None,
                last_error: "not connected yet".into(),
                lost_at: None,
            }),
            conn_cv: Condvar::new(),
            handshake: Mutex::new(None),
            handshake_cv: Condvar::new(),
            pending: Mutex::new(FxHashMap::default()),
            unread: Default::default(),
            failures: Default::default(),
            flapping: AtomicBool::new(false),
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
            suspects: Default::default(),
            suspect_count: Default::default(),
        });
        let i = inner.clone();
        std::thread::Builder::new()
            .name(format!("sidecar-{}", inner.config.index))
            .spawn(move || connection_thread(i))
            .map_err(SetupError::Thread)?;
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

    /// Whether the latest handshake declares every plugin node-local: without a
    /// PreFilter (`node_local`), or with one that reads only the pod
    /// (`pre_filter_pod_only` with `signature_node_pods`, where the sidecar takes a
    /// Filter behind its PreFilter). The condition for sending a pod's PreFilter and
    /// Filter ahead of its attempt: the sidecar answers those plugins' calls at the
    /// generation they name.
    pub fn all_node_local(&self) -> bool {
        let Ok(h) = self.inner.handshake.lock() else {
            return false;
        };
        let Some(h) = h.as_ref() else {
            return false;
        };
        let after_pre_filter = serves(h, switchyard_proto::CAPABILITY_FILTER_AFTER_PRE_FILTER);
        !h.plugins.is_empty()
            && h.plugins.iter().all(|p| {
                let pre_filter = p
                    .extension_points
                    .contains(&(pb::ExtensionPoint::PreFilter as i32));
                if p.node_local {
                    !pre_filter
                } else {
                    p.pre_filter_pod_only && p.signature_node_pods && after_pre_filter
                }
            })
    }

    /// Whether the sidecar takes a Filter sent right behind its cycle's PreFilter.
    pub fn filters_after_pre_filter(&self) -> bool {
        self.serves(switchyard_proto::CAPABILITY_FILTER_AFTER_PRE_FILTER)
    }

    /// Whether the sidecar takes a Permit sent right behind its cycle's Reserve.
    pub fn permits_after_reserve(&self) -> bool {
        self.serves(switchyard_proto::CAPABILITY_PERMIT_AFTER_RESERVE)
    }

    /// Whether the sidecar agreed to `capability` at handshake.
    fn serves(&self, capability: &str) -> bool {
        self.inner
            .handshake
            .lock()
            .is_ok_and(|h| h.as_ref().is_some_and(|h| serves(h, capability)))
    }

    /// Whether the sidecar serves `FilterBatch` (negotiated at handshake).
    pub fn batches_pods(&self) -> bool {
        self.serves(switchyard_proto::CAPABILITY_FILTER_BATCH)
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
                calls: Default::default(),
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
        b.reply.calls.store(b.calls.len(), Ordering::Release);
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

    /// The open streams; in the moment after a connection was lost, waits for the
    /// reconnect, until the call timeout after the loss at most (once per outage:
    /// later attempts of a long outage fail at once). So a sidecar that drops its
    /// connection (a stream it closed, a reply over the size limit, a flood) and is
    /// back within a timeout costs the pods scheduled meanwhile nothing.
    pub fn streams_or_wait(&self) -> Result<Streams, CallError> {
        let unavailable = |c: &ConnState| {
            CallError::Unavailable(format!(
                "sidecar {} is not connected: {}",
                self.inner.config.endpoint, c.last_error
            ))
        };
        let mut c = self
            .inner
            .conn
            .lock()
            .map_err(|_| CallError::Unavailable("connection state poisoned".into()))?;
        loop {
            if let Some(s) = &c.streams {
                return Ok(s.clone());
            }
            let Some(deadline) = c.lost_at.map(|t| t + self.inner.config.timeout) else {
                return Err(unavailable(&c));
            };
            let now = Instant::now();
            if now >= deadline || *self.inner.stop.borrow() {
                return Err(unavailable(&c));
            }
            c = match self.inner.conn_cv.wait_timeout(c, deadline - now) {
                Ok((c, _)) => c,
                Err(_) => return Err(CallError::Unavailable("connection state poisoned".into())),
            };
        }
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

    /// Sends a request whose reply no one reads (a PreScore pipelined ahead of the
    /// Score that reads its outcome inside the sidecar), expecting the reply so that
    /// it is not counted as a stray. Past [`UNREAD_IN_FLIGHT`] owed replies (a sidecar
    /// that does not answer them) the request goes out unexpected. False when the
    /// stream is closed.
    pub fn send_unread(&self, streams: &Streams, id: u64, m: Outbound) -> bool {
        let expect = self.inner.reserve_unread();
        if expect {
            if let Ok(mut p) = self.inner.pending.lock() {
                p.insert(id, Waiter::Unread);
            }
        }
        if streams.send(m) {
            return true;
        }
        if expect {
            if let Some(Waiter::Unread) = self.inner.pending_remove(id) {
                self.inner.unread.fetch_sub(1, Ordering::Relaxed);
            }
        }
        false
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
        let streams = self.streams()?;
        let id = self.next_request_id();
        self.start_async_call(&streams, id, build(id))?.wait().await
    }

    /// Sends a request on `streams` and returns the call to await (on the tokio
    /// runtime; the reply wakes no thread).
    pub fn start_async_call(
        &self,
        streams: &Streams,
        id: u64,
        m: Outbound,
    ) -> Result<AsyncPending, CallError> {
        self.inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Ok(mut p) = self.inner.pending.lock() {
            p.insert(id, Waiter::Async(tx));
        }
        if !streams.send(m) {
            self.inner.pending_remove(id);
            return Err(CallError::Unavailable(format!(
                "sidecar {}: the stream is closed",
                self.inner.config.endpoint
            )));
        }
        let sent = Instant::now();
        Ok(AsyncPending {
            id,
            rx: Some(rx),
            sent,
            deadline: sent + self.inner.config.timeout,
            inner: self.inner.clone(),
        })
    }

    pub fn stats(&self) -> &EndpointStats {
        &self.inner.stats
    }

    /// Records whether pod `key`'s Filter call failed on this endpoint (see
    /// [`Self::is_suspect`]).
    pub fn note_filter_outcome(&self, key: u64, failed: bool) {
        if !failed && self.inner.suspect_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Ok(mut s) = self.inner.suspects.lock() else {
            return;
        };
        if !failed {
            s.remove(&key);
        } else if s.len() < SUSPECTS_MAX {
            s.insert(key);
        }
        self.inner.suspect_count.store(s.len(), Ordering::Relaxed);
    }

    /// Whether pod `key`'s last Filter call here failed: it is then asked alone,
    /// never in a `FilterBatch` with other pods' calls.
    pub fn is_suspect(&self, key: u64) -> bool {
        self.inner.suspect_count.load(Ordering::Relaxed) > 0
            && self.inner.suspects.lock().is_ok_and(|s| s.contains(&key))
    }

    /// Counts a failed call, keeping its message for the report, and logs it as
    /// [`faillog::FailureLog`] decides: the first of its `kind` at WARN with
    /// `message`, the repeats summed up.
    pub fn count_error(&self, kind: &'static str, message: &str) {
        self.inner.stats.errors.fetch_add(1, Ordering::Relaxed);
        self.inner.stats.set_last_error(message);
        let endpoint = &self.inner.config.endpoint;
        let policy = self.inner.config.failure_policy;
        match self.inner.failures.failure(kind, Instant::now()) {
            faillog::Line::First => tracing::warn!(
                endpoint = %endpoint,
                kind,
                policy = ?policy,
                "sidecar call failed: {message} (further {kind} failures are counted, and summed up every {:?})",
                faillog::SUMMARY_EVERY
            ),
            faillog::Line::Repeats(n) => tracing::warn!(
                endpoint = %endpoint,
                kind,
                "{n} more calls failed ({kind}); last: {message}"
            ),
            faillog::Line::None => {}
        }
    }
}
