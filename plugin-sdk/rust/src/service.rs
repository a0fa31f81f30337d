//! The gRPC service: one task per stream reads requests in order, evaluates them
//! against the replica at the generation they name, and writes replies.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rayon::prelude::*;
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Streaming};

use crate::plugin::{Cycle, Plugin, ScorePlugin};
use crate::snapshot::{NodeInfo, Snapshot};
use crate::state::CycleState;
use crate::status::{Code, Status};
use crate::{pb, Pod, PROTOCOL_VERSION};
use switchyard_proto::{CAPABILITY_FILTER_BATCH, CAPABILITY_REPLICATE_BATCH};

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

/// The replica's nodes for the ids of a call; an unknown id fails the call.
fn nodes_by_id<'a>(replica: &'a Snapshot, ids: &[u32]) -> Result<Vec<&'a NodeInfo>, Status> {
    ids.iter()
        .map(|id| {
            replica
                .node(*id)
                .ok_or_else(|| Status::error(format!("unknown node id {id}")))
        })
        .collect()
}

/// A pod some plugin answered Wait for at Permit.
struct Waiting {
    pod: Arc<Pod>,
    plugins: Vec<String>,
}

pub(crate) struct Shared {
    plugins: Vec<Arc<dyn Plugin>>,
    by_name: HashMap<String, usize>,
    replica: RwLock<Snapshot>,
    /// Generation of the last Replicate message applied.
    applied: watch::Sender<u64>,
    cycles: Mutex<HashMap<u64, Arc<CycleEntry>>>,
    waiting: Mutex<HashMap<String, Waiting>>,
    /// The open Permit stream, for decisions about waiting pods.
    permit_tx: Mutex<Option<mpsc::UnboundedSender<Result<pb::PermitResponse, tonic::Status>>>>,
    generation_wait: Duration,
    parallel_threshold: usize,
    max_batch_nodes: u32,
    /// Offers the optional capabilities at handshake.
    capabilities: bool,
}

/// What a plugin uses to decide about pods waiting at Permit, from any thread.
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// Lets `plugin` release the waiting pod `uid`. False when the pod is not waiting
    /// on it (already decided, timed out, or never waited).
    pub fn allow(&self, plugin: &str, uid: &str) -> bool {
        self.decide(plugin, uid, true, String::new())
    }
    /// Rejects the waiting pod `uid`: the scheduler unreserves it and retries it later.
    pub fn reject(&self, plugin: &str, uid: &str, message: impl Into<String>) -> bool {
        self.decide(plugin, uid, false, message.into())
    }
    /// Pods currently waiting on `plugin`.
    pub fn waiting_pods(&self, plugin: &str) -> Vec<Arc<Pod>> {
        lock(&self.shared.waiting)
            .values()
            .filter(|w| w.plugins.iter().any(|p| p == plugin))
            .map(|w| w.pod.clone())
            .collect()
    }

    fn decide(&self, plugin: &str, uid: &str, allow: bool, message: String) -> bool {
        {
            let mut waiting = lock(&self.shared.waiting);
            let Some(w) = waiting.get_mut(uid) else {
                return false;
            };
            let Some(i) = w.plugins.iter().position(|p| p == plugin) else {
                return false;
            };
            w.plugins.swap_remove(i);
            if !allow || w.plugins.is_empty() {
                waiting.remove(uid);
            }
        }
        let tx = lock(&self.shared.permit_tx).clone();
        let Some(tx) = tx else { return false };
        tx.send(Ok(pb::PermitResponse {
            request_id: 0,
            decision: Some(pb::WaitingPodDecision {
                pod_uid: uid.to_string(),
                plugin: plugin.to_string(),
                allow,
                message,
            }),
            ..Default::default()
        }))
        .is_ok()
    }
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
        PluginService {
            shared: Arc::new(Shared {
                plugins,
                by_name,
                replica: RwLock::new(Snapshot::default()),
                applied: watch::channel(0).0,
                cycles: Mutex::new(HashMap::new()),
                waiting: Mutex::new(HashMap::new()),
                permit_tx: Mutex::new(None),
                generation_wait,
                parallel_threshold,
                max_batch_nodes,
                capabilities,
            }),
        }
    }

    pub(crate) fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }
}

/// Runs `handle` on every request of an inbound stream, in order, and streams the
/// replies back.
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

impl Shared {
    fn plugin(&self, name: &str) -> Result<(usize, &Arc<dyn Plugin>), Status> {
        self.by_name
            .get(name)
            .map(|&i| (i, &self.plugins[i]))
            .ok_or_else(|| Status::error(format!("this sidecar serves no plugin named {name:?}")))
    }

    /// The cycle a call names, once the replica has reached its generation. A call to
    /// a node-local plugin may name a generation after the cycle's start (`relaxed`):
    /// its answers depend only on the nodes it names, which the scheduler checks.
    async fn cycle(
        &self,
        cycle: u64,
        generation: u64,
        relaxed: bool,
    ) -> Result<Arc<CycleEntry>, Status> {
        self.reached(generation).await?;
        let entry = lock(&self.cycles).get(&cycle).cloned();
        match entry {
            Some(e) if e.generation == generation || (relaxed && e.generation <= generation) => {
                Ok(e)
            }
            Some(e) => Err(Status::error(format!(
                "cycle {cycle} started at generation {}, not {generation}",
                e.generation
            ))),
            None => Err(Status::error(format!(
                "cycle {cycle} is unknown (never started, or already ended)"
            ))),
        }
    }

    /// Waits (bounded) until the replica has applied `generation`.
    async fn reached(&self, generation: u64) -> Result<(), Status> {
        let mut rx = self.applied.subscribe();
        let ok = matches!(
            tokio::time::timeout(self.generation_wait, rx.wait_for(|&g| g >= generation)).await,
            Ok(Ok(_))
        );
        match ok {
            true => Ok(()),
            false => Err(Status::error(format!(
                "generation {generation} not reached within {:?} (replica at {})",
                self.generation_wait,
                *self.applied.borrow()
            ))),
        }
    }

    /// The replica for a scheduling-cycle call: it must still be at the cycle's
    /// generation, never a later one, unless the plugin is node-local (`relaxed`).
    fn replica_at(
        &self,
        entry: &CycleEntry,
        relaxed: bool,
    ) -> Result<std::sync::RwLockReadGuard<'_, Snapshot>, Status> {
        let r = read(&self.replica);
        if !relaxed && r.generation() != entry.snapshot_generation {
            return Err(Status::error(format!(
                "the replica moved on to generation {} since cycle {} (at {}) started",
                r.generation(),
                entry.id,
                entry.snapshot_generation
            )));
        }
        Ok(r)
    }

    fn apply(&self, msg: pb::ReplicateRequest, expect: &mut Option<u64>) -> Result<(), String> {
        let g = msg.generation;
        let full = matches!(&msg.kind, Some(pb::replicate_request::Kind::Delta(d)) if d.full);
        match expect {
            None if !full => {
                return Err(format!(
                    "the first message of a Replicate stream must be a full snapshot (got generation {g})"
                ))
            }
            Some(e) if !full && *e != g => {
                return Err(format!("generation gap: expected {e}, got {g}"));
            }
            _ => {}
        }
        match msg.kind {
            Some(pb::replicate_request::Kind::Delta(d)) => {
                if full {
                    lock(&self.cycles).clear();
                    lock(&self.waiting).clear();
                }
                write(&self.replica).apply(g, d)?;
            }
            Some(pb::replicate_request::Kind::CycleStart(c)) => {
                let pod = Arc::new(c.pod.unwrap_or_default());
                write(&self.replica).note_cycle_pod(&pod);
                let entry = CycleEntry {
                    id: c.cycle,
                    pod,
                    profile: c.profile,
                    generation: g,
                    snapshot_generation: read(&self.replica).generation(),
                    states: self.plugins.iter().map(|_| RwLock::default()).collect(),
                    pre_scores: Mutex::new(HashMap::new()),
                    pre_score_done: Notify::new(),
                };
                lock(&self.cycles).insert(c.cycle, Arc::new(entry));
            }
            Some(pb::replicate_request::Kind::CycleEnd(c)) => {
                if let Some(e) = lock(&self.cycles).remove(&c.cycle) {
                    lock(&self.waiting).remove(&e.pod.uid);
                }
            }
            None => return Err(format!("generation {g}: empty Replicate message")),
        }
        *expect = Some(g + 1);
        self.applied.send_replace(g);
        Ok(())
    }

    fn status_reply(request_id: u64, generation: u64, s: Status) -> pb::StatusResponse {
        pb::StatusResponse {
            request_id,
            status: Some(s.to_pb()),
            generation,
        }
    }

    async fn filter(&self, req: pb::FilterRequest) -> pb::FilterResponse {
        let mut out = pb::FilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        match self.filter_batch(&req).await {
            Ok((failures, ahead)) => {
                out.evaluated = req.nodes.len() as u32;
                if req.group_failures {
                    out.failure_groups = switchyard_proto::group_failures(failures);
                } else {
                    out.failures = failures;
                }
                out.score = ahead;
            }
            Err(s) => out.error = Some(s.to_pb()),
        }
        out
    }

    /// The calls of a `FilterBatch` message, each answered as it would be alone on
    /// the Filter stream (with its own span), in order.
    async fn filter_many(&self, req: pb::FilterBatchRequest) -> pb::FilterBatchResponse {
        use tracing::Instrument;
        // One bounded wait for the latest generation the calls name: a replica that
        // never gets there fails them all at once, not one wait after another.
        let latest = req.calls.iter().map(|c| c.generation).max().unwrap_or(0);
        let missed = self.reached(latest).await.err();
        let mut replies = Vec::with_capacity(req.calls.len());
        for call in req.calls {
            replies.push(match &missed {
                Some(s) => pb::FilterResponse {
                    request_id: call.request_id,
                    generation: call.generation,
                    error: Some(s.to_pb()),
                    ..Default::default()
                },
                None => {
                    let span = call_span("Filter", &call);
                    self.filter(call).instrument(span).await
                }
            });
        }
        pb::FilterBatchResponse {
            request_id: req.request_id,
            replies,
        }
    }

    /// PreScore (on a fork, so a later PreScore call is unaffected), Score and
    /// NormalizeScore over the first `score_first` passing items of a Filter batch.
    #[allow(clippy::too_many_arguments)]
    fn score_ahead(
        &self,
        req: &pb::FilterRequest,
        plugin: &dyn Plugin,
        cycle: &Cycle,
        state: &CycleState,
        nodes: &[&NodeInfo],
        deltas: &[Option<&pb::NodeDelta>],
        failures: &[pb::NodeStatus],
    ) -> Option<pb::ScoreAhead> {
        let sp = plugin.as_score()?;
        let items = switchyard_proto::score_ahead_items(
            nodes.len(),
            failures.iter().map(|f| f.index as usize),
            req.score_first as usize,
        );
        if items.iter().any(|&i| deltas[i].is_some()) {
            return None;
        }
        let scored: Vec<&NodeInfo> = items.iter().map(|&i| nodes[i]).collect();
        let answer = |r: Result<(Vec<i64>, bool), Status>| match r {
            Ok((scores, normalized)) => pb::ScoreAhead {
                status: Some(Status::success().to_pb()),
                scores,
                normalized,
            },
            Err(s) => pb::ScoreAhead {
                status: Some(s.to_pb()),
                ..Default::default()
            },
        };
        let fork;
        let state = match plugin.as_pre_score().filter(|_| req.pre_score) {
            Some(p) => {
                let mut f = state.clone();
                let s = p.pre_score(cycle, &mut f, &scored);
                if !s.is_success() {
                    return Some(answer(Err(s)));
                }
                fork = f;
                &fork
            }
            None => state,
        };
        Some(answer(self.score_nodes(
            sp,
            cycle,
            state,
            &scored,
            !req.raw_scores,
        )))
    }

    /// Score over `nodes` (in parallel for big batches), then NormalizeScore when
    /// asked; the flag says whether the scores are normalised.
    fn score_nodes(
        &self,
        sp: &dyn ScorePlugin,
        cycle: &Cycle,
        state: &CycleState,
        nodes: &[&NodeInfo],
        normalize: bool,
    ) -> Result<(Vec<i64>, bool), Status> {
        let mut scores: Vec<i64> =
            if nodes.len() >= self.parallel_threshold && self.parallel_threshold > 0 {
                nodes
                    .par_iter()
                    .with_min_len(self.parallel_threshold / 2)
                    .map(|n| sp.score(cycle, state, n))
                    .collect::<Result<_, _>>()?
            } else {
                nodes
                    .iter()
                    .map(|n| sp.score(cycle, state, n))
                    .collect::<Result<_, _>>()?
            };
        if !has_normalize(sp) {
            return Ok((scores, true));
        }
        if !normalize {
            return Ok((scores, false));
        }
        if switchyard_proto::normalize_scores(sp.score_normalization(), &mut scores) {
            return Ok((scores, true));
        }
        let s = sp.normalize(cycle, state, &mut scores);
        if !s.is_success() {
            return Err(s);
        }
        Ok((scores, true))
    }

    async fn filter_batch(
        &self,
        req: &pb::FilterRequest,
    ) -> Result<(Vec<pb::NodeStatus>, Option<pb::ScoreAhead>), Status> {
        let (idx, plugin) = self.plugin(&req.plugin)?;
        let entry = self
            .cycle(req.cycle, req.generation, plugin.node_local())
            .await?;
        let f = plugin
            .as_filter()
            .ok_or_else(|| Status::error(format!("plugin {:?} has no Filter", req.plugin)))?;
        let pf = plugin.as_pre_filter().filter(|p| p.has_extensions());
        let replica = self.replica_at(&entry, plugin.node_local())?;
        let state = read(&entry.states[idx]);
        let cycle = entry.view(&replica);
        let nodes = nodes_by_id(&replica, &req.nodes)?;
        let mut deltas: Vec<Option<&pb::NodeDelta>> = vec![None; nodes.len()];
        for d in &req.deltas {
            let slot = deltas.get_mut(d.index as usize).ok_or_else(|| {
                Status::error(format!(
                    "delta for item {} of a batch of {}",
                    d.index,
                    nodes.len()
                ))
            })?;
            *slot = Some(d);
        }
        let eval = |i: usize| -> Status {
            match deltas[i] {
                None => f.filter(&cycle, &state, nodes[i]),
                Some(d) => filter_with_delta(f, pf, &cycle, &state, nodes[i], d),
            }
        };
        let failures: Vec<pb::NodeStatus> =
            if nodes.len() >= self.parallel_threshold && self.parallel_threshold > 0 {
                (0..nodes.len())
                    .into_par_iter()
                    .with_min_len(self.parallel_threshold / 2)
                    .filter_map(|i| failure(i, eval(i)))
                    .collect()
            } else {
                (0..nodes.len())
                    .filter_map(|i| failure(i, eval(i)))
                    .collect()
            };
        let ahead = if req.score_first > 0 {
            self.score_ahead(req, &**plugin, &cycle, &state, &nodes, &deltas, &failures)
        } else {
            None
        };
        Ok((failures, ahead))
    }

    async fn score(&self, req: pb::ScoreRequest) -> pb::ScoreResponse {
        let mut out = pb::ScoreResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        match self.score_batch(&req).await {
            Ok((scores, normalized)) => {
                out.status = Some(Status::success().to_pb());
                out.scores = scores;
                out.normalized = normalized;
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    async fn score_batch(&self, req: &pb::ScoreRequest) -> Result<(Vec<i64>, bool), Status> {
        let (idx, plugin) = self.plugin(&req.plugin)?;
        let entry = self
            .cycle(req.cycle, req.generation, plugin.node_local())
            .await?;
        let sp = plugin
            .as_score()
            .ok_or_else(|| Status::error(format!("plugin {:?} has no Score", req.plugin)))?;
        if req.after_pre_score {
            let s = self.pre_score_outcome(&entry, idx).await?;
            if !s.is_success() {
                return Err(s);
            }
        }
        let replica = self.replica_at(&entry, plugin.node_local())?;
        let state = read(&entry.states[idx]);
        let cycle = entry.view(&replica);
        let nodes = nodes_by_id(&replica, &req.nodes)?;
        self.score_nodes(sp, &cycle, &state, &nodes, req.normalize)
    }

    /// Waits for this cycle's PreScore of plugin `idx` (sent just before the Score).
    async fn pre_score_outcome(&self, entry: &CycleEntry, idx: usize) -> Result<Status, Status> {
        let wait = async {
            loop {
                let notified = entry.pre_score_done.notified();
                if let Some(s) = lock(&entry.pre_scores).get(&idx) {
                    return s.clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(self.generation_wait, wait)
            .await
            .map_err(|_| {
                Status::error(format!(
                    "Score named a PreScore of cycle {} that did not arrive within {:?}",
                    entry.id, self.generation_wait
                ))
            })
    }

    async fn pre_score(&self, req: pb::PreScoreRequest) -> pb::StatusResponse {
        let s = match self.pre_score_inner(&req).await {
            Ok(s) | Err(s) => s,
        };
        Self::status_reply(req.request_id, req.generation, s)
    }

    async fn pre_score_inner(&self, req: &pb::PreScoreRequest) -> Result<Status, Status> {
        let (idx, plugin) = self.plugin(&req.plugin)?;
        let entry = self
            .cycle(req.cycle, req.generation, plugin.node_local())
            .await?;
        let record = |s: Status| {
            lock(&entry.pre_scores).insert(idx, s.clone());
            entry.pre_score_done.notify_waiters();
            s
        };
        let Some(p) = plugin.as_pre_score() else {
            return Ok(record(Status::error(format!(
                "plugin {:?} has no PreScore",
                req.plugin
            ))));
        };
        let replica = match self.replica_at(&entry, plugin.node_local()) {
            Ok(r) => r,
            Err(s) => return Ok(record(s)),
        };
        let nodes = match nodes_by_id(&replica, &req.nodes) {
            Ok(n) => n,
            Err(s) => return Ok(record(s)),
        };
        let cycle = entry.view(&replica);
        let s = p.pre_score(&cycle, &mut write(&entry.states[idx]), &nodes);
        Ok(record(s))
    }

    async fn pre_filter(&self, req: pb::PreFilterRequest) -> pb::PreFilterResponse {
        let mut out = pb::PreFilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(req.cycle, req.generation, plugin.node_local())
                .await?;
            let p = plugin.as_pre_filter().ok_or_else(|| {
                Status::error(format!("plugin {:?} has no PreFilter", req.plugin))
            })?;
            let replica = self.replica_at(&entry, plugin.node_local())?;
            let cycle = entry.view(&replica);
            let r = p.pre_filter(&cycle, &mut write(&entry.states[idx]));
            Ok::<_, Status>(r)
        }
        .await;
        match r {
            Ok(res) => {
                out.status = Some(res.status.to_pb());
                if let Some(names) = res.node_names {
                    out.has_node_names = true;
                    out.node_names = names;
                }
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    async fn post_filter(&self, req: pb::PostFilterRequest) -> pb::PostFilterResponse {
        let mut out = pb::PostFilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(req.cycle, req.generation, plugin.node_local())
                .await?;
            let p = plugin.as_post_filter().ok_or_else(|| {
                Status::error(format!("plugin {:?} has no PostFilter", req.plugin))
            })?;
            let statuses: HashMap<String, Status> = req
                .node_statuses
                .iter()
                .map(|(k, v)| (k.clone(), Status::from_pb(v)))
                .collect();
            let replica = self.replica_at(&entry, plugin.node_local())?;
            let cycle = entry.view(&replica);
            let r = p.post_filter(&cycle, &mut write(&entry.states[idx]), &statuses);
            Ok::<_, Status>(r)
        }
        .await;
        match r {
            Ok((s, nominate)) => {
                out.status = Some(s.to_pb());
                out.nominated_node_name = nominate.unwrap_or_default();
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    async fn normalize_score(&self, req: pb::NormalizeScoreRequest) -> pb::ScoreResponse {
        let mut out = pb::ScoreResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(req.cycle, req.generation, plugin.node_local())
                .await?;
            let p = plugin
                .as_score()
                .filter(|p| has_normalize(*p))
                .ok_or_else(|| {
                    Status::error(format!("plugin {:?} has no NormalizeScore", req.plugin))
                })?;
            let replica = self.replica_at(&entry, plugin.node_local())?;
            let cycle = entry.view(&replica);
            let mut scores = req.scores.clone();
            if switchyard_proto::normalize_scores(p.score_normalization(), &mut scores) {
                return Ok(scores);
            }
            let s = p.normalize(&cycle, &read(&entry.states[idx]), &mut scores);
            if s.is_success() {
                Ok(scores)
            } else {
                Err(s)
            }
        }
        .await;
        match r {
            Ok(scores) => {
                out.status = Some(Status::success().to_pb());
                out.scores = scores;
                out.normalized = true;
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }

    /// Reserve, Unreserve, PreBind, Bind, PostBind: a cycle, a node, a status.
    async fn cycle_call(&self, req: pb::CycleRequest, point: Point) -> pb::StatusResponse {
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(req.cycle, req.generation, plugin.node_local())
                .await?;
            let replica = read(&self.replica);
            let cycle = entry.view(&replica);
            let node = req.node_name.as_str();
            let missing = || Status::error(format!("plugin {:?} has no {point:?}", req.plugin));
            let state = &entry.states[idx];
            Ok::<_, Status>(match point {
                Point::Reserve => plugin.as_reserve().ok_or_else(missing)?.reserve(
                    &cycle,
                    &mut write(state),
                    node,
                ),
                Point::Unreserve => {
                    plugin.as_reserve().ok_or_else(missing)?.unreserve(
                        &cycle,
                        &mut write(state),
                        node,
                    );
                    Status::success()
                }
                Point::PreBind => {
                    plugin
                        .as_pre_bind()
                        .ok_or_else(missing)?
                        .pre_bind(&cycle, &read(state), node)
                }
                Point::Bind => {
                    plugin
                        .as_bind()
                        .ok_or_else(missing)?
                        .bind(&cycle, &read(state), node)
                }
                Point::PostBind => {
                    plugin.as_post_bind().ok_or_else(missing)?.post_bind(
                        &cycle,
                        &read(state),
                        node,
                    );
                    Status::success()
                }
            })
        }
        .await;
        let s = match r {
            Ok(s) | Err(s) => s,
        };
        Self::status_reply(req.request_id, req.generation, s)
    }

    async fn permit(self: &Arc<Self>, req: pb::CycleRequest) -> pb::PermitResponse {
        let mut out = pb::PermitResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(req.cycle, req.generation, plugin.node_local())
                .await?;
            let p = plugin
                .as_permit()
                .ok_or_else(|| Status::error(format!("plugin {:?} has no Permit", req.plugin)))?;
            let handle = Handle {
                shared: self.clone(),
            };
            // The pod is registered as waiting only after the plugin answers Wait (below):
            // `Handle::waiting_pods` inside `permit` lists its siblings, not itself.
            let (s, timeout) = {
                let replica = read(&self.replica);
                let cycle = entry.view(&replica);
                p.permit(
                    &cycle,
                    &mut write(&entry.states[idx]),
                    &req.node_name,
                    &handle,
                )
            };
            if s.code == Code::Wait {
                let mut waiting = lock(&self.waiting);
                let w = waiting
                    .entry(entry.pod.uid.clone())
                    .or_insert_with(|| Waiting {
                        pod: entry.pod.clone(),
                        plugins: Vec::new(),
                    });
                if !w.plugins.contains(&req.plugin) {
                    w.plugins.push(req.plugin.clone());
                }
            }
            Ok::<_, Status>((s, timeout))
        }
        .await;
        match r {
            Ok((s, timeout)) => {
                out.status = Some(s.to_pb());
                out.timeout_millis = timeout.as_millis().min(u32::MAX as u128) as u32;
            }
            Err(s) => out.status = Some(s.to_pb()),
        }
        out
    }
}

#[derive(Clone, Copy, Debug)]
enum Point {
    Reserve,
    Unreserve,
    PreBind,
    Bind,
    PostBind,
}

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::Reserve => "Reserve",
            Point::Unreserve => "Unreserve",
            Point::PreBind => "PreBind",
            Point::Bind => "Bind",
            Point::PostBind => "PostBind",
        }
    }
}

fn failure(i: usize, s: Status) -> Option<pb::NodeStatus> {
    (!s.is_success()).then(|| pb::NodeStatus {
        index: i as u32,
        status: Some(s.to_pb()),
    })
}

/// Filter on a what-if copy of the node: pods removed and added, the plugin's state
/// forked and updated by its RemovePod/AddPod (in that order, as upstream's dry run).
fn filter_with_delta(
    f: &dyn crate::FilterPlugin,
    pf: Option<&dyn crate::PreFilterPlugin>,
    cycle: &Cycle,
    base: &CycleState,
    node: &NodeInfo,
    d: &pb::NodeDelta,
) -> Status {
    let mut ni = node.clone();
    let mut state = base.clone();
    for uid in &d.remove_pods {
        let Some(p) = ni.remove_pod(uid) else {
            return Status::error(format!(
                "delta removes pod {uid}, which is not on node {}",
                node.name()
            ));
        };
        if let Some(pf) = pf {
            let s = pf.remove_pod(cycle, &mut state, &p, &ni);
            if !s.is_success() {
                return Status::error(format!("RemovePod: {}", s.message()));
            }
        }
    }
    let adds = d
        .add_pods
        .iter()
        .map(|uid| {
            cycle
                .snapshot
                .pod(uid)
                .map(|p| (**p).clone())
                .ok_or_else(|| {
                    Status::error(format!(
                        "delta adds pod {uid}, which the replica does not hold"
                    ))
                })
        })
        .chain(d.add_pod_objects.iter().map(|p| Ok(p.clone())));
    for p in adds {
        let mut p = match p {
            Ok(p) => p,
            Err(s) => return s,
        };
        p.node_name = ni.node.name.clone();
        let p = Arc::new(p);
        ni.pods.push(p.clone());
        if let Some(pf) = pf {
            let s = pf.add_pod(cycle, &mut state, &p, &ni);
            if !s.is_success() {
                return Status::error(format!("AddPod: {}", s.message()));
            }
        }
    }
    f.filter(cycle, &state, &ni)
}

fn points(p: &dyn Plugin) -> Vec<i32> {
    use pb::ExtensionPoint as E;
    let mut v = Vec::new();
    let mut add = |has: bool, e: E| {
        if has {
            v.push(e as i32)
        }
    };
    add(p.as_pre_enqueue().is_some(), E::PreEnqueue);
    add(p.as_queue_sort().is_some(), E::QueueSort);
    add(p.as_pre_filter().is_some(), E::PreFilter);
    add(p.as_filter().is_some(), E::Filter);
    add(p.as_post_filter().is_some(), E::PostFilter);
    add(p.as_pre_score().is_some(), E::PreScore);
    add(p.as_score().is_some(), E::Score);
    add(p.as_reserve().is_some(), E::Reserve);
    add(p.as_permit().is_some(), E::Permit);
    add(p.as_pre_bind().is_some(), E::PreBind);
    add(p.as_bind().is_some(), E::Bind);
    add(p.as_post_bind().is_some(), E::PostBind);
    v
}

#[tonic::async_trait]
impl pb::plugin_server::Plugin for PluginService {
    async fn handshake(
        &self,
        request: Request<pb::HandshakeRequest>,
    ) -> Result<Response<pb::HandshakeResponse>, tonic::Status> {
        let req = request.into_inner();
        if !req.protocol_versions.iter().any(|v| v == PROTOCOL_VERSION) {
            return Err(tonic::Status::failed_precondition(format!(
                "this sidecar speaks protocol {PROTOCOL_VERSION}; the scheduler offered {:?}",
                req.protocol_versions
            )));
        }
        let plugins = self
            .shared
            .plugins
            .iter()
            .map(|p| pb::PluginInfo {
                name: p.name().to_string(),
                extension_points: points(p.as_ref()),
                pre_filter_extensions: p.as_pre_filter().is_some_and(|f| f.has_extensions()),
                normalize_score: p.as_score().is_some_and(has_normalize),
                events: p.events(),
                node_local: p.node_local(),
                signature: p.signature().into_iter().map(|f| f as i32).collect(),
                score_normalization: p
                    .as_score()
                    .map_or(pb::ScoreNormalization::Custom, |s| s.score_normalization())
                    as i32,
            })
            .collect();
        Ok(Response::new(pb::HandshakeResponse {
            protocol_version: PROTOCOL_VERSION.to_string(),
            plugins,
            max_batch_nodes: self.shared.max_batch_nodes,
            // Pod batches are only sent for node-local plugins; offering them costs
            // nothing.
            capabilities: req
                .capabilities
                .into_iter()
                .filter(|c| {
                    self.shared.capabilities
                        && (c == CAPABILITY_FILTER_BATCH || c == CAPABILITY_REPLICATE_BATCH)
                })
                .collect(),
        }))
    }

    type ReplicateStream = ReplyStream<pb::ReplicateResponse>;
    async fn replicate(
        &self,
        request: Request<Streaming<pb::ReplicateRequest>>,
    ) -> Result<Response<Self::ReplicateStream>, tonic::Status> {
        let mut inbound = request.into_inner();
        let shared = self.shared.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut expect = None;
            loop {
                match inbound.message().await {
                    Ok(Some(mut first)) => {
                        let more = std::mem::take(&mut first.more);
                        let mut failed = None;
                        for msg in std::iter::once(first).chain(more) {
                            let (g, ack) = (msg.generation, msg.ack);
                            let r = if msg.more.is_empty() {
                                shared.apply(msg, &mut expect)
                            } else {
                                Err(format!(
                                    "generation {g}: a message inside `more` has `more`"
                                ))
                            };
                            if let Err(e) = r {
                                failed = Some(e);
                                break;
                            }
                            if ack {
                                let _ = tx.send(Ok(pb::ReplicateResponse {
                                    applied_generation: g,
                                }));
                            }
                        }
                        if let Some(e) = failed {
                            tracing::warn!(error = %e, "replication failed; closing the stream");
                            let _ = tx.send(Err(tonic::Status::failed_precondition(e)));
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "replication stream closed");
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    type PreEnqueueStream = ReplyStream<pb::StatusResponse>;
    async fn pre_enqueue(
        &self,
        request: Request<Streaming<pb::PreEnqueueRequest>>,
    ) -> Result<Response<Self::PreEnqueueStream>, tonic::Status> {
        let shared = self.shared.clone();
        Ok(Response::new(bidi(
            request.into_inner(),
            "PreEnqueue",
            move |req: pb::PreEnqueueRequest| {
                let shared = shared.clone();
                async move {
                    let s = match shared.plugin(&req.plugin) {
                        Ok((_, p)) => match (p.as_pre_enqueue(), &req.pod) {
                            (Some(pe), Some(pod)) => pe.pre_enqueue(pod),
                            (None, _) => {
                                Status::error(format!("plugin {:?} has no PreEnqueue", req.plugin))
                            }
                            (_, None) => Status::error("PreEnqueue request without a pod"),
                        },
                        Err(s) => s,
                    };
                    Shared::status_reply(req.request_id, 0, s)
                }
            },
        )))
    }

    type QueueSortStream = ReplyStream<pb::QueueSortResponse>;
    async fn queue_sort(
        &self,
        request: Request<Streaming<pb::QueueSortRequest>>,
    ) -> Result<Response<Self::QueueSortStream>, tonic::Status> {
        let shared = self.shared.clone();
        Ok(Response::new(bidi(
            request.into_inner(),
            "QueueSort",
            move |req: pb::QueueSortRequest| {
                let shared = shared.clone();
                async move {
                    let mut out = pb::QueueSortResponse {
                        request_id: req.request_id,
                        ..Default::default()
                    };
                    match shared.plugin(&req.plugin) {
                        Ok((_, p)) => match (p.as_queue_sort(), &req.pod) {
                            (Some(q), Some(pod)) => {
                                out.sort_key = q.sort_key(pod);
                                out.status = Some(Status::success().to_pb());
                            }
                            _ => {
                                out.status = Some(
                                    Status::error(format!(
                                        "plugin {:?} has no QueueSort, or the request has no pod",
                                        req.plugin
                                    ))
                                    .to_pb(),
                                )
                            }
                        },
                        Err(s) => out.status = Some(s.to_pb()),
                    }
                    out
                }
            },
        )))
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

    type PreScoreStream = ReplyStream<pb::StatusResponse>;
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
        // Replies and unsolicited decisions share the stream's sender.
        let mut inbound = request.into_inner();
        let shared = self.shared.clone();
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&shared.permit_tx) = Some(tx.clone());
        tokio::spawn(async move {
            while let Ok(Some(req)) = inbound.message().await {
                let span = call_span("Permit", &req);
                let reply = tracing::Instrument::instrument(shared.permit(req), span).await;
                if tx.send(Ok(reply)).is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
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
}
/// Whether the plugin has a NormalizeScore: its own, or a standard one it declared.
fn has_normalize(sp: &dyn ScorePlugin) -> bool {
    sp.has_normalize() || sp.score_normalization() != pb::ScoreNormalization::Custom
}
