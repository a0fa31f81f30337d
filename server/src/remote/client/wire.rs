//! The messages of each stream, and how they reach their streams: one channel to a
//! router task on the connection thread, Replicate messages held back for the next
//! call.

use super::*;

impl Outbound {
    pub(super) fn encoded_len(&self) -> usize {
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
    PreScore(pb::PreScoreResponse),
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

pub(super) type Tx<T> = mpsc::UnboundedSender<T>;

/// What callers hand to the connection thread.
pub(super) enum Wire {
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
    pub(super) stats: Arc<EndpointStats>,
    pub(super) tx: Tx<Wire>,
    pub(super) held: Arc<Mutex<Vec<pb::ReplicateRequest>>>,
    /// The sidecar takes several Replicate messages in one (`more`).
    pub(super) coalesce: bool,
}

/// How long a caller yields its core before it parks to wait for a reply (unless
/// replies take longer than that).
pub(super) const YIELD_US: u64 = 250;

/// How long a Replicate message may wait for a call to go out with.
pub(super) const HOLD: Duration = Duration::from_millis(20);

/// Replies to no outstanding call that a connection may carry beyond one per call
/// sent on it (late replies to calls that timed out are normal): past that the
/// sidecar is flooding, and the connection is dropped.
pub const STRAY_REPLY_ALLOWANCE: u64 = 1024;

/// Replies owed to requests no one reads ([`Endpoint::send_unread`]) that are
/// expected at most; past that a sidecar is not answering them.
pub(super) const UNREAD_IN_FLIGHT: usize = 4096;

/// Unsolicited Permit decisions waiting for their pod to park, at most; more are
/// stray replies.
pub(super) const DECISIONS_IN_FLIGHT: usize = 1024;

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
    pub(super) fn flush(&self) -> bool {
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
pub(super) struct Router {
    pub(super) replicate: Tx<pb::ReplicateRequest>,
    pub(super) pre_enqueue: Tx<pb::PreEnqueueRequest>,
    pub(super) queue_sort: Tx<pb::QueueSortRequest>,
    pub(super) pre_filter: Tx<pb::PreFilterRequest>,
    pub(super) filter: Tx<pb::FilterRequest>,
    /// Open only when the handshake negotiated it.
    pub(super) filter_batch: Option<Tx<pb::FilterBatchRequest>>,
    pub(super) post_filter: Tx<pb::PostFilterRequest>,
    pub(super) pre_score: Tx<pb::PreScoreRequest>,
    pub(super) score: Tx<pb::ScoreRequest>,
    pub(super) normalize_score: Tx<pb::NormalizeScoreRequest>,
    pub(super) reserve: Tx<pb::CycleRequest>,
    pub(super) unreserve: Tx<pb::CycleRequest>,
    pub(super) permit: Tx<pb::CycleRequest>,
    pub(super) pre_bind: Tx<pb::CycleRequest>,
    pub(super) bind: Tx<pb::CycleRequest>,
    pub(super) post_bind: Tx<pb::CycleRequest>,
}

impl Router {
    /// Hands a message to its stream; false when that stream is gone.
    pub(super) fn route(&self, w: Wire) -> bool {
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
    pub(super) async fn run(self, mut rx: mpsc::UnboundedReceiver<Wire>) {
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
