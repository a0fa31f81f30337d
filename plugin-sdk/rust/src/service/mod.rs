//! The gRPC service: one task per stream reads requests in order, evaluates them
//! against the replica at the generation they name, and writes replies.
//!
//! This file holds the state every call shares ([`Shared`]), the RPC table (the tonic
//! `Plugin` impl, one line per RPC) and the stream plumbing; the calls themselves live
//! beside it by concern: `handshake`, `replica` (replication, generations), `queue`
//! (PreEnqueue, QueueSort), `filter` (Filter, FilterBatch, dry-run deltas), `score`
//! (PreScore, Score, score-ahead, NormalizeScore) and `cycle` (PreFilter, PostFilter,
//! Reserve to PostBind, Permit).

mod cycle;
mod filter;
mod handshake;
mod queue;
mod replica;
mod score;

pub(crate) use score::has_normalize;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Streaming};

use crate::plugin::{Cycle, Plugin};
use crate::snapshot::Snapshot;
use crate::state::CycleState;
use crate::status::Status;
use crate::waiting::{Handle, WaitingPods};
use crate::{pb, Pod};

use cycle::Point;

type ReplyStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// One scheduling attempt the sidecar knows about (CycleStart to CycleEnd).
struct CycleEntry {
    id: u64,
    pod: Arc<Pod>,
    profile: String,
    /// Generation of the CycleStart message: calls of the cycle name it.
    generation: u64,
    /// Replica generation the cycle's scheduling calls must be evaluated at.
    snapshot_generation: u64,
    /// One state per plugin, by plugin index.
    states: Vec<RwLock<CycleState>>,
    /// PreScore outcomes, for Score calls sent right behind their PreScore.
    pre_scores: Mutex<HashMap<usize, Status>>,
    pre_score_done: Notify,
    /// PreFilter outcomes, for Filter calls sent right behind their PreFilter.
    pre_filters: Mutex<HashMap<usize, Status>>,
    pre_filter_done: Notify,
    /// Reserve outcomes, for Permit calls sent right behind their Reserve.
    reserves: Mutex<HashMap<usize, Status>>,
    reserve_done: Notify,
}

impl CycleEntry {
    /// The cycle as plugin calls see it, over `snapshot`.
    fn view<'a>(&'a self, snapshot: &'a Snapshot) -> Cycle<'a> {
        Cycle {
            id: self.id,
            pod: &self.pod,
            profile: &self.profile,
            snapshot,
        }
    }
}

pub(crate) struct Shared {
    plugins: Vec<Arc<dyn Plugin>>,
    by_name: HashMap<String, usize>,
    replica: RwLock<Snapshot>,
    /// Generation of the last Replicate message applied.
    applied: watch::Sender<u64>,
    cycles: Mutex<HashMap<u64, Arc<CycleEntry>>>,
    /// Pods waiting at Permit, and the open Permit stream.
    waiting: Arc<WaitingPods>,
    generation_wait: Duration,
    parallel_threshold: usize,
    max_batch_nodes: u32,
    /// Offers the optional capabilities at handshake.
    capabilities: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

/// The service the SDK serves.
#[derive(Clone)]
pub struct PluginService {
    shared: Arc<Shared>,
}

impl PluginService {
    pub(crate) fn new(
        plugins: Vec<Arc<dyn Plugin>>,
        generation_wait: Duration,
        parallel_threshold: usize,
        max_batch_nodes: u32,
        capabilities: bool,
    ) -> Self {
        let by_name = plugins
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name().to_string(), i))
            .collect();
        let replica = Snapshot::default().with_indexes(plugins.iter().flat_map(|p| p.indexes()));
        PluginService {
            shared: Arc::new(Shared {
                plugins,
                by_name,
                replica: RwLock::new(replica),
                applied: watch::channel(0).0,
                cycles: Mutex::new(HashMap::new()),
                waiting: Arc::new(WaitingPods::default()),
                generation_wait,
                parallel_threshold,
                max_batch_nodes,
                capabilities,
            }),
        }
    }

    pub(crate) fn handle(&self) -> Handle {
        Handle::new(self.shared.waiting.clone())
    }
}

impl Shared {
    fn plugin(&self, name: &str) -> Result<(usize, &Arc<dyn Plugin>), Status> {
        self.by_name
            .get(name)
            .map(|&i| (i, &self.plugins[i]))
            .ok_or_else(|| Status::error(format!("this sidecar serves no plugin named {name:?}")))
    }

    fn status_reply(request_id: u64, generation: u64, s: Status) -> pb::StatusResponse {
        pb::StatusResponse {
            request_id,
            status: Some(s.to_pb()),
            generation,
        }
    }
}

/// A call that may carry the scheduler's trace context.
pub(crate) trait Traced {
    /// (traceparent, plugin); an empty traceparent means the attempt is not traced.
    fn trace(&self) -> (&str, &str) {
        ("", "")
    }
}

macro_rules! traced {
    ($($t:ty),*) => {$(
        impl Traced for $t {
            fn trace(&self) -> (&str, &str) {
                (&self.traceparent, &self.plugin)
            }
        }
    )*};
}
traced!(
    pb::CycleRequest,
    pb::PreFilterRequest,
    pb::FilterRequest,
    pb::PostFilterRequest,
    pb::PreScoreRequest,
    pb::ScoreRequest,
    pb::NormalizeScoreRequest
);
/// Each call of a batch carries its own trace context (see `filter_many`).
impl Traced for pb::FilterBatchRequest {}
impl Traced for pb::PreEnqueueRequest {}
impl Traced for pb::QueueSortRequest {}

/// The sidecar's span for one call, a child of the scheduler's remote-call span
/// (nothing unless tracing is on and the call is traced).
pub(crate) fn call_span(point: &'static str, req: &impl Traced) -> tracing::Span {
    let (traceparent, plugin) = req.trace();
    if traceparent.is_empty() || !crate::telemetry::enabled() {
        return tracing::Span::none();
    }
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let span = tracing::info_span!(
        "plugin_call",
        otel.name = format!("{point} {plugin}"),
        extension_point = point,
        plugin,
    );
    let _ = span.set_parent(switchyard_proto::otel::extract(traceparent));
    span
}

/// Runs `handle` on every request of an inbound stream, in order, and streams the
/// replies back.
fn bidi<Req, Resp, F, Fut>(
    mut inbound: Streaming<Req>,
    point: &'static str,
    handle: F,
) -> ReplyStream<Resp>
where
    Req: Traced + Send + 'static,
    Resp: Send + 'static,
    F: Fn(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Resp> + Send,
{
    use tracing::Instrument;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match inbound.message().await {
                Ok(Some(req)) => {
                    let span = call_span(point, &req);
                    if tx.send(Ok(handle(req).instrument(span).await)).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "plugin stream closed");
                    break;
                }
            }
        }
    });
    Box::pin(UnboundedReceiverStream::new(rx))
}

#[tonic::async_trait]
impl pb::plugin_server::Plugin for PluginService {
    async fn handshake(
        &self,
        request: Request<pb::HandshakeRequest>,
    ) -> Result<Response<pb::HandshakeResponse>, tonic::Status> {
        self.shared
            .handshake(request.into_inner())
            .map(Response::new)
    }

    type ReplicateStream = ReplyStream<pb::ReplicateResponse>;
    async fn replicate(
        &self,
        request: Request<Streaming<pb::ReplicateRequest>>,
    ) -> Result<Response<Self::ReplicateStream>, tonic::Status> {
        let stream = Shared::replicate(self.shared.clone(), request.into_inner());
        Ok(Response::new(stream))
    }

    type PreEnqueueStream = ReplyStream<pb::StatusResponse>;
    async fn pre_enqueue(
        &self,
        request: Request<Streaming<pb::PreEnqueueRequest>>,
    ) -> Result<Response<Self::PreEnqueueStream>, tonic::Status> {
        self.serve_stream(
            request,
            "PreEnqueue",
            |s, req| async move { s.pre_enqueue(req) },
        )
    }

    type QueueSortStream = ReplyStream<pb::QueueSortResponse>;
    async fn queue_sort(
        &self,
        request: Request<Streaming<pb::QueueSortRequest>>,
    ) -> Result<Response<Self::QueueSortStream>, tonic::Status> {
        self.serve_stream(
            request,
            "QueueSort",
            |s, req| async move { s.queue_sort(req) },
        )
    }

    type PreFilterStream = ReplyStream<pb::PreFilterResponse>;
    async fn pre_filter(
        &self,
        request: Request<Streaming<pb::PreFilterRequest>>,
    ) -> Result<Response<Self::PreFilterStream>, tonic::Status> {
        self.serve_stream(request, "PreFilter", |s, req| async move {
            s.pre_filter(req).await
        })
    }

    type FilterStream = ReplyStream<pb::FilterResponse>;
    async fn filter(
        &self,
        request: Request<Streaming<pb::FilterRequest>>,
    ) -> Result<Response<Self::FilterStream>, tonic::Status> {
        self.serve_stream(
            request,
            "Filter",
            |s, req| async move { s.filter(req).await },
        )
    }

    type FilterBatchStream = ReplyStream<pb::FilterBatchResponse>;
    async fn filter_batch(
        &self,
        request: Request<Streaming<pb::FilterBatchRequest>>,
    ) -> Result<Response<Self::FilterBatchStream>, tonic::Status> {
        self.serve_stream(request, "FilterBatch", |s, req| async move {
            s.filter_many(req).await
        })
    }

    type PostFilterStream = ReplyStream<pb::PostFilterResponse>;
    async fn post_filter(
        &self,
        request: Request<Streaming<pb::PostFilterRequest>>,
    ) -> Result<Response<Self::PostFilterStream>, tonic::Status> {
        self.serve_stream(request, "PostFilter", |s, req| async move {
            s.post_filter(req).await
        })
    }

    type PreScoreStream = ReplyStream<pb::PreScoreResponse>;
    async fn pre_score(
        &self,
        request: Request<Streaming<pb::PreScoreRequest>>,
    ) -> Result<Response<Self::PreScoreStream>, tonic::Status> {
        self.serve_stream(request, "PreScore", |s, req| async move {
            s.pre_score(req).await
        })
    }

    type ScoreStream = ReplyStream<pb::ScoreResponse>;
    async fn score(
        &self,
        request: Request<Streaming<pb::ScoreRequest>>,
    ) -> Result<Response<Self::ScoreStream>, tonic::Status> {
        self.serve_stream(request, "Score", |s, req| async move { s.score(req).await })
    }

    type NormalizeScoreStream = ReplyStream<pb::ScoreResponse>;
    async fn normalize_score(
        &self,
        request: Request<Streaming<pb::NormalizeScoreRequest>>,
    ) -> Result<Response<Self::NormalizeScoreStream>, tonic::Status> {
        self.serve_stream(request, "NormalizeScore", |s, req| async move {
            s.normalize_score(req).await
        })
    }

    type ReserveStream = ReplyStream<pb::StatusResponse>;
    async fn reserve(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::ReserveStream>, tonic::Status> {
        Ok(Response::new(self.cycle_stream(request, Point::Reserve)))
    }

    type UnreserveStream = ReplyStream<pb::StatusResponse>;
    async fn unreserve(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::UnreserveStream>, tonic::Status> {
        Ok(Response::new(self.cycle_stream(request, Point::Unreserve)))
    }

    type PermitStream = ReplyStream<pb::PermitResponse>;
    async fn permit(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::PermitStream>, tonic::Status> {
        Ok(Response::new(self.permit_stream(request)))
    }

    type PreBindStream = ReplyStream<pb::StatusResponse>;
    async fn pre_bind(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::PreBindStream>, tonic::Status> {
        Ok(Response::new(self.cycle_stream(request, Point::PreBind)))
    }

    type BindStream = ReplyStream<pb::StatusResponse>;
    async fn bind(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::BindStream>, tonic::Status> {
        Ok(Response::new(self.cycle_stream(request, Point::Bind)))
    }

    type PostBindStream = ReplyStream<pb::StatusResponse>;
    async fn post_bind(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> Result<Response<Self::PostBindStream>, tonic::Status> {
        Ok(Response::new(self.cycle_stream(request, Point::PostBind)))
    }
}

impl PluginService {
    /// A stream whose every request goes to one method of `Shared`.
    fn serve_stream<Req, Resp, F, Fut>(
        &self,
        request: Request<Streaming<Req>>,
        point: &'static str,
        method: F,
    ) -> Result<Response<ReplyStream<Resp>>, tonic::Status>
    where
        Req: Traced + Send + 'static,
        Resp: Send + 'static,
        F: Fn(Arc<Shared>, Req) -> Fut + Send + 'static,
        Fut: Future<Output = Resp> + Send,
    {
        let shared = self.shared.clone();
        Ok(Response::new(bidi(
            request.into_inner(),
            point,
            move |req| method(shared.clone(), req),
        )))
    }

    fn cycle_stream(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
        point: Point,
    ) -> ReplyStream<pb::StatusResponse> {
        let shared = self.shared.clone();
        bidi(request.into_inner(), point.name(), move |req| {
            let shared = shared.clone();
            async move { shared.cycle_call(req, point).await }
        })
    }

    /// The Permit stream: replies, and the decisions [`Handle`] sends about waiting
    /// pods, share its sender.
    fn permit_stream(
        &self,
        request: Request<Streaming<pb::CycleRequest>>,
    ) -> ReplyStream<pb::PermitResponse> {
        let mut inbound = request.into_inner();
        let shared = self.shared.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        shared.waiting.set_permit_stream(tx.clone());
        tokio::spawn(async move {
            while let Ok(Some(req)) = inbound.message().await {
                let span = call_span("Permit", &req);
                let reply = tracing::Instrument::instrument(shared.permit(req), span).await;
                if tx.send(Ok(reply)).is_err() {
                    break;
                }
            }
        });
        Box::pin(UnboundedReceiverStream::new(rx))
    }
}
