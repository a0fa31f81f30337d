//! A plugin served by a sidecar, behind the same traits as a built-in one. Every
//! failure — sidecar down, timeout, malformed or misaligned reply — becomes a plugin
//! error naming the plugin and endpoint, and the endpoint's failure policy decides
//! what it does to the attempt.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smallvec::SmallVec;
use switchyard_proto::v1 as pb;

use super::alike::{self, AlikeAnswers, Declared};
use super::client::{BatchReply, Outbound, Pending, Reply, Streams};
use super::error::{CallError, RemoteError};
use super::replicate::Replicator;
use super::{convert, Endpoint, FailurePolicy};
use crate::cache::Snapshot;
use crate::framework::cycle_state::IgnoredCalls;
use crate::framework::events::ClusterEventWithHint;
use crate::framework::interface::*;
use crate::framework::{Code, CycleState, NodeInfo, Status};
use crate::model::{Node, Pod, PodSpec};

/// A sidecar cycle this attempt started (or adopted from a lookahead).
#[derive(Clone, Copy)]
struct RemoteCycle {
    endpoint: usize,
    /// The generation its calls name.
    generation: u64,
    /// The connection it lives on.
    epoch: u64,
    /// `Snapshot::update_seq` of the attempt's snapshot, which the sidecar holds.
    snapshot: u64,
}

/// The sidecar cycles of an attempt, one per endpoint.
#[derive(Clone, Default)]
struct RemoteCycles(SmallVec<[RemoteCycle; 2]>);

impl RemoteCycles {
    fn of(state: &CycleState, endpoint: usize) -> Option<RemoteCycle> {
        state
            .read::<RemoteCycles>()
            .and_then(|rc| rc.0.iter().find(|c| c.endpoint == endpoint).copied())
    }

    fn set(state: &mut CycleState, c: RemoteCycle) {
        let mut rc = state.read::<RemoteCycles>().cloned().unwrap_or_default();
        rc.0.retain(|x| x.endpoint != c.endpoint);
        rc.0.push(c);
        state.write(rc);
    }
}

/// A Filter sent ahead of its pod's attempt (see `Framework::lookahead`), kept in the
/// state that attempt begins with until its first Filter round.
struct LookaheadCall {
    plugin: Arc<str>,
    epoch: u64,
    /// The batch: node ids, and each node's generation when it was sent.
    nodes: Vec<(u32, u64)>,
    ahead: Option<ScoreAhead>,
    call: RemoteFilterCall,
}

/// The lookahead calls of an attempt (shared by clones of its state: whichever Filter
/// comes first takes them).
#[derive(Clone, Default)]
struct LookaheadCalls(Arc<Mutex<SmallVec<[LookaheadCall; 1]>>>);

/// Attempt boundaries for one endpoint: replicate, then start or end the cycle.
pub struct EndpointHooks {
    ep: Endpoint,
}

impl EndpointHooks {
    pub fn new(ep: Endpoint) -> Self {
        EndpointHooks { ep }
    }

    /// Records this endpoint's cycle of the attempt: its calls name `generation`.
    fn record(&self, state: &mut CycleState, generation: u64, epoch: u64, snapshot: &Snapshot) {
        RemoteCycles::set(
            state,
            RemoteCycle {
                endpoint: self.ep.config().index,
                generation,
                epoch,
                snapshot: snapshot.update_seq(),
            },
        );
    }
}

impl CycleHooks for EndpointHooks {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.ep.inner) as usize
    }

    fn cycle_start(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        profile: &str,
    ) {
        // Without a connection the calls of this attempt fail and the policy decides.
        let Ok(streams) = self.ep.streams() else {
            return;
        };
        let idx = self.ep.config().index;
        // A cycle started by a lookahead on this connection is the attempt's cycle.
        let adopted = RemoteCycles::of(state, idx).is_some_and(|c| c.epoch == streams.epoch);
        let g = {
            let Ok(mut rep) = self.ep.inner.replicator.lock() else {
                return;
            };
            if rep.epoch != streams.epoch {
                rep.reset(streams.epoch);
            }
            if let Some(d) = rep.delta(snapshot) {
                let g = rep.next_generation();
                if !streams.replicate(pb::ReplicateRequest {
                    generation: g,
                    kind: Some(pb::replicate_request::Kind::Delta(d)),
                    ack: false,
                    more: Vec::new(),
                }) {
                    return;
                }
            }
            if adopted {
                // The sidecar has the pod since the lookahead; calls name the latest
                // generation, which node-local plugins accept and wait for.
                rep.generation
            } else {
                let Some(g) = send_cycle_start(&mut rep, &streams, state.cycle_id, pod, profile)
                else {
                    return;
                };
                g
            }
        };
        self.record(state, g, streams.epoch, snapshot);
    }

    fn lookahead_start(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        profile: &str,
    ) -> bool {
        if !self.ep.all_node_local() {
            return false;
        }
        let Ok(streams) = self.ep.streams() else {
            return false;
        };
        let g = {
            let Ok(mut rep) = self.ep.inner.replicator.lock() else {
                return false;
            };
            // Only a CycleStart goes out: the replica must hold this snapshot already,
            // so the current attempt's calls see no change.
            if rep.epoch != streams.epoch || !rep.is_synced(snapshot) {
                return false;
            }
            let Some(g) = send_cycle_start(&mut rep, &streams, state.cycle_id, pod, profile) else {
                return false;
            };
            g
        };
        self.record(state, g, streams.epoch, snapshot);
        true
    }

    fn lookahead_pods(&self) -> usize {
        if self.ep.all_node_local() {
            self.ep.lookahead_pods()
        } else {
            0
        }
    }

    fn begin_lookahead_batch(&self) {
        if let Ok(streams) = self.ep.streams() {
            self.ep.begin_batch(&streams);
        }
    }

    fn end_lookahead_batch(&self) {
        self.ep.send_batch();
    }

    fn cycle_end(&self, state: &CycleState) {
        let Some(RemoteCycle { epoch, .. }) = RemoteCycles::of(state, self.ep.config().index)
        else {
            return;
        };
        let Ok(streams) = self.ep.streams() else {
            return;
        };
        if streams.epoch != epoch {
            return;
        }
        if let Ok(mut rep) = self.ep.inner.replicator.lock() {
            if rep.epoch != epoch {
                return;
            }
            let g = rep.next_generation();
            streams.replicate(pb::ReplicateRequest {
                generation: g,
                kind: Some(pb::replicate_request::Kind::CycleEnd(pb::CycleEnd {
                    cycle: state.cycle_id,
                })),
                ack: false,
                more: Vec::new(),
            });
        }
    }
}

/// Sends a `CycleStart` for `pod`; its generation, or None when the stream is closed.
fn send_cycle_start(
    rep: &mut Replicator,
    streams: &Streams,
    cycle: u64,
    pod: &Arc<Pod>,
    profile: &str,
) -> Option<u64> {
    let g = rep.next_generation();
    rep.note_cycle_pod(pod);
    streams
        .replicate(pb::ReplicateRequest {
            generation: g,
            kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle,
                pod: Some(convert::pod(pod)),
                profile: profile.to_string(),
            })),
            ack: false,
            more: Vec::new(),
        })
        .then_some(g)
}

/// What a call in flight needs to judge its reply.
struct Meta {
    name: Arc<str>,
    ep: Endpoint,
    /// The last score-ahead answer (from a Filter reply), for the Score that follows.
    ahead: Mutex<Option<Ahead>>,
    /// Answers reused for alike pods (plugins that declare pod signatures).
    alike: Mutex<AlikeAnswers>,
    /// The last pods' signatures (the current attempt's and the lookaheads'), by
    /// spec (held, so its address is not reused) and name; newest last.
    signatures: Mutex<Vec<SignedPod>>,
}

/// A pod's signature, memoised.
struct SignedPod {
    epoch: u64,
    spec: Arc<PodSpec>,
    namespace: Arc<str>,
    name: Arc<str>,
    signature: Arc<[u8]>,
}

/// How many pods' signatures are memoised: the attempt's and its lookaheads'.
const SIGNATURES_KEPT: usize = 8;

/// What a reply that may be reused for alike pods needs to be kept: the connection,
/// the pod's signature, and the batch's nodes (id and object) in order.
struct Fill {
    epoch: u64,
    signature: Arc<[u8]>,
    nodes: Vec<(u32, Arc<Node>)>,
}

impl Fill {
    fn new(
        epoch: u64,
        signature: Arc<[u8]>,
        nodes: impl Iterator<Item = (u32, Option<Arc<Node>>)>,
    ) -> Option<Fill> {
        let nodes = nodes
            .map(|(id, n)| n.map(|n| (id, n)))
            .collect::<Option<Vec<_>>>()?;
        Some(Fill {
            epoch,
            signature,
            nodes,
        })
    }
}

/// Scores a Filter reply brought ahead of the Score call: valid for one cycle and
/// exactly this node list.
struct Ahead {
    cycle: u64,
    nodes: Vec<u32>,
    result: AheadResult,
}

/// Scores and whether they are normalised; `Ok(None)`: PreScore skipped (Score is
/// skipped for the pod).
type AheadResult = Result<Option<(Vec<i64>, bool)>, Status>;

impl Meta {
    fn policy(&self) -> FailurePolicy {
        self.ep.config().failure_policy
    }

    /// The plugin error `e` becomes: counted by kind, logged, and named after the
    /// plugin and endpoint.
    fn fail(&self, e: RemoteError) -> Status {
        crate::telemetry::metrics::REMOTE_ERRORS.add(&[&self.ep.config().endpoint, e.kind()], 1);
        let s = Status::error(format!(
            "remote plugin {:?} ({}): {e}",
            self.name,
            self.ep.config().endpoint
        ));
        self.ep.count_error(&s.message());
        tracing::warn!(status = %s, policy = ?self.policy(), "sidecar call failed");
        s
    }

    /// A call at `context` that got no usable answer.
    fn call_failed(&self, context: &'static str, e: CallError) -> Status {
        self.fail(RemoteError::call(context, e))
    }

    /// A reply that breaks the contract.
    fn bad_reply(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::BadReply {
            context: "bad reply",
            message: message.into(),
        })
    }

    /// The plugin answered with an error at `context`.
    fn plugin_failed(&self, context: &'static str, message: impl Into<String>) -> Status {
        self.fail(RemoteError::Plugin {
            context,
            message: message.into(),
        })
    }

    fn unavailable(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::Unavailable {
            context: "unavailable",
            message: message.into(),
        })
    }

    fn replication_failed(&self, message: impl Into<String>) -> Status {
        self.fail(RemoteError::Replication {
            context: "replication",
            message: message.into(),
        })
    }

    /// Notes a call skipped under `failurePolicy: Ignore` for the attempt's report.
    fn ignored(&self, log: &IgnoredCalls, point: &str, s: &Status) {
        log.record(format!(
            "{point} skipped under failurePolicy Ignore: {}",
            s.message()
        ));
    }

    /// A reply of the wrong kind for the stream it came on.
    fn unexpected(&self, r: Reply) -> Status {
        self.bad_reply(format!("unexpected {r:?}"))
    }

    fn check_generation(&self, got: u64, want: u64) -> Result<(), Status> {
        if got != want {
            return Err(self.bad_reply(format!(
                "answered for generation {got}, the call named {want}"
            )));
        }
        Ok(())
    }
}

pub struct RemotePlugin {
    meta: Arc<Meta>,
    hooks: Arc<EndpointHooks>,
    /// From the handshake at start; `None` when the sidecar was down then (every
    /// extension point is assumed, calls fail until it is up).
    info: Option<pb::PluginInfo>,
    ext: NoopExtensions,
}

/// The sidecar applies AddPod/RemovePod itself, from the what-if delta each Filter
/// call carries (derived from the node copy the framework passes).
struct NoopExtensions;

impl PreFilterExtensions for NoopExtensions {
    fn add_pod(&self, _: &mut CycleState, _: &Pod, _: &Arc<Pod>, _: &NodeInfo) -> Status {
        Status::success()
    }
    fn remove_pod(&self, _: &mut CycleState, _: &Pod, _: &Arc<Pod>, _: &NodeInfo) -> Status {
        Status::success()
    }
}

impl RemotePlugin {
    pub fn new(
        name: String,
        ep: Endpoint,
        hooks: Arc<EndpointHooks>,
        info: Option<pb::PluginInfo>,
    ) -> Self {
        RemotePlugin {
            meta: Arc::new(Meta {
                name: name.into(),
                ep,
                ahead: Mutex::new(None),
                alike: Mutex::new(AlikeAnswers::default()),
                signatures: Mutex::new(Vec::new()),
            }),
            hooks,
            info,
            ext: NoopExtensions,
        }
    }

    fn implements(&self, p: pb::ExtensionPoint) -> bool {
        self.info
            .as_ref()
            .is_none_or(|i| i.extension_points.contains(&(p as i32)))
    }

    /// A plugin registered before its sidecar's first handshake claims every
    /// extension point; once the handshake says it does not implement `p`, calls there
    /// are answered neutrally here instead of failing.
    fn absent(&self, p: pb::ExtensionPoint) -> bool {
        self.info.is_none() && self.ep().implements(&self.meta.name, p) == Some(false)
    }

    fn ep(&self) -> &Endpoint {
        &self.meta.ep
    }

    /// The attempt's connection and the pod's signature, when this plugin's answers
    /// may be reused for alike pods on that connection (it declared pod signatures
    /// in its handshake, and the endpoint allows it).
    fn alike(&self, state: &CycleState, pod: &Pod) -> Option<(u64, Arc<[u8]>)> {
        if !self.ep().config().reuse_alike_pods {
            return None;
        }
        let epoch = RemoteCycles::of(state, self.ep().config().index)?.epoch;
        let fields = {
            let mut a = self.meta.alike.lock().ok()?;
            a.on_epoch(epoch, || {
                Declared::of(self.ep().plugin_info(&self.meta.name).as_ref(), true)
            });
            if !a.declared.filter {
                return None;
            }
            a.declared.fields.clone()
        };
        let mut memo = self.meta.signatures.lock().ok()?;
        if let Some(m) = memo.iter().rev().find(|m| {
            m.epoch == epoch
                && Arc::ptr_eq(&m.spec, &pod.spec)
                && m.name == pod.name
                && m.namespace == pod.namespace
        }) {
            return Some((epoch, m.signature.clone()));
        }
        let signature: Arc<[u8]> = alike::signature(pod, &fields).into();
        if memo.len() == SIGNATURES_KEPT {
            memo.remove(0);
        }
        memo.push(SignedPod {
            epoch,
            spec: pod.spec.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            signature: signature.clone(),
        });
        Some((epoch, signature))
    }

    fn declared(&self) -> Declared {
        self.meta
            .alike
            .lock()
            .map(|a| a.declared.clone())
            .unwrap_or_default()
    }

    /// The attempt's cycle on this endpoint (id, generation) and the streams it runs on.
    fn cycle(&self, state: &CycleState) -> Result<(u64, u64, Streams), Status> {
        let Some(RemoteCycle {
            generation: g,
            epoch,
            ..
        }) = RemoteCycles::of(state, self.ep().config().index)
        else {
            let why = self.ep().streams().err().map_or_else(
                || "it connected after the attempt started".to_string(),
                |e| e.to_string(),
            );
            return Err(self.meta.unavailable(why));
        };
        let streams = self
            .ep()
            .streams()
            .map_err(|e| self.meta.unavailable(e.to_string()))?;
        if streams.epoch != epoch {
            return Err(self
                .meta
                .unavailable("the sidecar reconnected during the attempt"));
        }
        Ok((state.cycle_id, g, streams))
    }

    fn send(
        &self,
        streams: &Streams,
        build: impl FnOnce(u64) -> Outbound,
    ) -> Result<Pending, Status> {
        let id = self.ep().next_request_id();
        self.ep()
            .start_call(streams, id, build(id))
            .map_err(|e| self.meta.call_failed("send", e))
    }

    /// Applies the failure policy: `Ignore` turns an error into `neutral`, recorded in
    /// the attempt's `ignored` calls (when there is an attempt) to be reported with it.
    fn policy<T>(
        &self,
        state: Option<&CycleState>,
        point: &str,
        r: Result<T, Status>,
        neutral: impl FnOnce() -> T,
    ) -> Result<T, Status> {
        match r {
            Err(s) if s.code() == Code::Error && self.meta.policy() == FailurePolicy::Ignore => {
                if let Some(state) = state {
                    self.meta.ignored(&state.ignored, point, &s);
                }
                Ok(neutral())
            }
            r => r,
        }
    }

    /// A span for one call to the sidecar, under the current span (or the attempt's),
    /// and the `traceparent` that makes the sidecar's spans its children. Nothing
    /// when the attempt is not sampled.
    fn call_trace(
        &self,
        state: &CycleState,
        extension_point: &'static str,
        batch: usize,
    ) -> (tracing::Span, String) {
        if !state.trace.sampled {
            return (tracing::Span::none(), String::new());
        }
        let current = tracing::Span::current();
        let parent = if current.is_disabled() {
            &state.trace.span
        } else {
            &current
        };
        let span = tracing::info_span!(
            parent: parent,
            "remote_call",
            otel.name = format!("{extension_point} {} (remote)", self.meta.name),
            plugin = %self.meta.name,
            endpoint = %self.ep().config().endpoint,
            extension_point,
            batch_size = batch,
            status = tracing::field::Empty,
        );
        let tp = crate::telemetry::trace::traceparent(&span);
        (span, tp)
    }

    fn status_call(
        &self,
        state: &CycleState,
        node: &str,
        extension_point: &'static str,
        wrap: fn(pb::CycleRequest) -> Outbound,
    ) -> Status {
        let (span, traceparent) = self.call_trace(state, extension_point, 1);
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                wrap(pb::CycleRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    node_name: node.to_string(),
                    traceparent,
                })
            };
            let reply = self
                .send(&streams, req)?
                .wait()
                .map_err(|e| self.meta.call_failed("call", e))?;
            self.status_reply(reply, g)
        })();
        let r = self.policy(Some(state), extension_point, r, Status::success);
        if !span.is_disabled() {
            let s = match &r {
                Ok(s) | Err(s) => s,
            };
            span.record("status", tracing::field::debug(s.code()));
        }
        match r {
            Ok(s) | Err(s) => s,
        }
    }

    fn status_reply(&self, reply: Reply, g: u64) -> Result<Status, Status> {
        match reply {
            Reply::Status(r) => {
                self.meta.check_generation(r.generation, g)?;
                let s = convert::status_from_pb(r.status.as_ref());
                if s.code() == Code::Error {
                    return Err(self.meta.plugin_failed("plugin error", s.message()));
                }
                Ok(s)
            }
            other => Err(self.meta.unexpected(other)),
        }
    }

    async fn async_status_call(
        &self,
        state: &CycleState,
        node: &str,
        extension_point: &'static str,
        wrap: fn(pb::CycleRequest) -> Outbound,
    ) -> Status {
        let (_span, traceparent) = self.call_trace(state, extension_point, 1);
        let r = async {
            let (cycle, g, _streams) = self.cycle(state)?;
            let name = self.meta.name.to_string();
            let node = node.to_string();
            let reply = self
                .ep()
                .call_async(move |id| {
                    wrap(pb::CycleRequest {
                        request_id: id,
                        plugin: name,
                        cycle,
                        generation: g,
                        node_name: node,
                        traceparent,
                    })
                })
                .await
                .map_err(|e| self.meta.call_failed("call", e))?;
            self.status_reply(reply, g)
        }
        .await;
        match self.policy(Some(state), extension_point, r, Status::skip) {
            Ok(s) | Err(s) => s,
        }
    }

    /// The score-ahead answer of this cycle's Filter, if it scored exactly `nodes`.
    fn take_ahead(&self, cycle: u64, nodes: &[Arc<NodeInfo>]) -> Option<AheadResult> {
        let a = self.meta.ahead.lock().ok()?.take()?;
        let same = a.cycle == cycle
            && a.nodes.len() == nodes.len()
            && a.nodes.iter().zip(nodes).all(|(id, n)| *id == n.id);
        same.then_some(a.result)
    }

    /// The what-if delta for a node copy that differs from what the sidecar holds.
    fn delta(
        &self,
        rep: &Replicator,
        index: usize,
        ni: &NodeInfo,
    ) -> Result<Option<pb::NodeDelta>, Status> {
        if rep.sent_generation(ni.id) == Some(ni.generation) {
            return Ok(None);
        }
        let Some(sent) = rep.sent_pods(ni.id) else {
            return Err(self
                .meta
                .replication_failed(format!("node {} was never replicated", ni.name())));
        };
        let mut d = pb::NodeDelta {
            index: index as u32,
            ..Default::default()
        };
        for uid in sent.keys() {
            if !ni.pods.iter().any(|p| p.uid == *uid) {
                d.remove_pods.push(uid.to_string());
            }
        }
        for p in &ni.pods {
            match sent.get(&p.uid) {
                Some(old) if Arc::ptr_eq(old, p) => {}
                Some(_) => {
                    d.remove_pods.push(p.uid.to_string());
                    d.add_pod_objects.push(convert::pod(p));
                }
                None => d.add_pod_objects.push(convert::pod(p)),
            }
        }
        Ok((!d.remove_pods.is_empty() || !d.add_pod_objects.is_empty()).then_some(d))
    }

    /// `from_snapshot`: the nodes are the attempt's snapshot's own, not what-if copies;
    /// while the sidecar holds that snapshot none of them needs a delta, and checking
    /// each (a cache miss per node) is skipped.
    /// `batched`: the call may join the `FilterBatch` message being collected.
    /// `alike`: the reply is kept for alike pods (see [`Self::alike`]).
    fn start_filter_call(
        &self,
        state: &CycleState,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
        from_snapshot: bool,
        batched: bool,
        alike: Option<(u64, Arc<[u8]>)>,
    ) -> Result<RemoteFilterCall, Status> {
        let (cycle, g, streams) = self.cycle(state)?;
        let mut deltas = Vec::new();
        {
            let rep = self
                .ep()
                .inner
                .replicator
                .lock()
                .map_err(|_| self.meta.replication_failed("state poisoned"))?;
            let synced = from_snapshot
                && RemoteCycles::of(state, self.ep().config().index)
                    .is_some_and(|c| rep.synced_to(c.snapshot));
            if !synced {
                for (i, ni) in nodes.iter().enumerate() {
                    if let Some(d) = self.delta(&rep, i, ni)? {
                        deltas.push(d);
                    }
                }
            }
        }
        let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        // Ahead only when the sidecar scores, and never for what-if items.
        let ahead =
            ahead.filter(|_| deltas.is_empty() && self.implements(pb::ExtensionPoint::Score));
        let (score_first, pre_score, kept) = match ahead {
            Some(a) => (
                a.first as u32,
                a.pre_score && self.implements(pb::ExtensionPoint::PreScore),
                Some((cycle, ids.clone(), a.first)),
            ),
            None => (0, false, None),
        };
        // What-if items are never kept: their answers are not the node's own.
        let fill = alike
            .filter(|_| deltas.is_empty())
            .and_then(|(epoch, sig)| {
                Fill::new(
                    epoch,
                    sig,
                    nodes.iter().map(|n| (n.id, n.node_arc().cloned())),
                )
            });
        let raw_scores = fill.is_some() && score_first > 0 && {
            let d = self.declared();
            d.scores && d.normalize
        };
        let (span, traceparent) = self.call_trace(state, "Filter", nodes.len());
        let req = pb::FilterRequest {
            request_id: self.ep().next_request_id(),
            plugin: self.meta.name.to_string(),
            cycle,
            generation: g,
            nodes: ids,
            deltas,
            score_first,
            pre_score,
            group_failures: true,
            raw_scores,
            traceparent,
        };
        let id = req.request_id;
        let joined = match batched {
            true => self.ep().add_to_batch(streams.epoch, req),
            false => Err(req),
        };
        let source = match joined {
            Ok((batch, i)) => FilterSource::Batch(batch, i, id),
            Err(req) => FilterSource::Call(
                self.ep()
                    .start_call(&streams, id, Outbound::Filter(req))
                    .map_err(|e| self.meta.call_failed("send", e))?,
            ),
        };
        Ok(RemoteFilterCall {
            _span: span,
            pending: Some(source),
            n: nodes.len(),
            g,
            meta: self.meta.clone(),
            ahead: kept,
            ignored: Some(state.ignored.clone()),
            reused: None,
            fill,
        })
    }
}

/// Where a Filter call's reply comes from.
enum FilterSource {
    /// Its own message on the Filter stream.
    Call(Pending),
    /// Item `.1` (request id `.2`) of a `FilterBatch` message.
    Batch(Arc<BatchReply>, usize, u64),
}

struct RemoteFilterCall {
    /// Ends when the call does.
    _span: tracing::Span,
    pending: Option<FilterSource>,
    n: usize,
    g: u64,
    meta: Arc<Meta>,
    /// With a score-ahead request: the cycle, the batch's node ids, `score_first`.
    ahead: Option<(u64, Vec<u32>, usize)>,
    /// Where a failure skipped under `Ignore` is noted (the attempt's).
    ignored: Option<IgnoredCalls>,
    /// Answered with answers reused for alike pods, without a call.
    reused: Option<Vec<(usize, Status)>>,
    /// Keep the reply for alike pods.
    fill: Option<Fill>,
}

impl RemoteFilterCall {
    fn result(&mut self) -> Result<Vec<(usize, Status)>, Status> {
        if let Some(r) = self.reused.take() {
            return Ok(r);
        }
        let Some(p) = self.pending.take() else {
            return Ok(Vec::new());
        };
        let r = match p {
            FilterSource::Call(p) => {
                match p.wait().map_err(|e| self.meta.call_failed("Filter", e))? {
                    Reply::Filter(r) => r,
                    other => return Err(self.meta.unexpected(other)),
                }
            }
            FilterSource::Batch(b, i, id) => b
                .take(i, id)
                .map_err(|e| self.meta.call_failed("Filter", e))?,
        };
        if let Some(e) = &r.error {
            let s = convert::status_from_pb(Some(e));
            return Err(self.meta.plugin_failed("Filter failed", s.message()));
        }
        self.meta.check_generation(r.generation, self.g)?;
        if r.evaluated as usize != self.n {
            return Err(self.meta.bad_reply(format!(
                "evaluated {} nodes of a batch of {}",
                r.evaluated, self.n
            )));
        }
        let grouped: usize = r.failure_groups.iter().map(|g| g.indices.len()).sum();
        let mut out = Vec::with_capacity(r.failures.len() + grouped);
        for (i, status) in switchyard_proto::failures(&r) {
            let i = i as usize;
            if i >= self.n {
                return Err(self
                    .meta
                    .bad_reply(format!("a status for item {i} of a batch of {}", self.n)));
            }
            let s = convert::status_from_pb(status);
            match s.code() {
                Code::Success => {}
                Code::Unschedulable | Code::UnschedulableAndUnresolvable => out.push((i, s)),
                Code::Error => return Err(self.meta.plugin_failed("Filter failed", s.message())),
                c => {
                    return Err(self
                        .meta
                        .bad_reply(format!("Filter returned {} for a node", c.as_str())))
                }
            }
        }
        out.sort_by_key(|(i, _)| *i);
        if let Some(f) = &self.fill {
            if let Ok(mut a) = self.meta.alike.lock() {
                a.keep_filter(f.epoch, &f.signature, &f.nodes, &out);
            }
        }
        if let Some((cycle, ids, first)) = self.ahead.take() {
            self.keep_ahead(cycle, ids, first, &out, r.score);
        }
        Ok(out)
    }

    /// Checks a score-ahead answer and keeps it for the Score call: the scored nodes are
    /// the first `first` items that passed. A malformed answer is kept as the error the
    /// Score call will report.
    fn keep_ahead(
        &self,
        cycle: u64,
        ids: Vec<u32>,
        first: usize,
        failures: &[(usize, Status)],
        answer: Option<pb::ScoreAhead>,
    ) {
        let Some(answer) = answer else {
            return;
        };
        let items =
            switchyard_proto::score_ahead_items(ids.len(), failures.iter().map(|(i, _)| *i), first);
        let nodes: Vec<u32> = items.iter().map(|&i| ids[i]).collect();
        let s = convert::status_from_pb(answer.status.as_ref());
        let result = if s.is_skip() {
            Ok(None)
        } else if !s.is_success() {
            // Whatever went wrong, the Score call will say it again.
            return;
        } else if answer.scores.len() != nodes.len() {
            Err(self.meta.bad_reply(format!(
                "{} scores ahead for {} passing nodes",
                answer.scores.len(),
                nodes.len()
            )))
        } else {
            let mut scores = answer.scores;
            let normalized = match &self.fill {
                Some(f) => keep_raw_scores(
                    &self.meta,
                    f,
                    items.iter().filter_map(|&i| f.nodes.get(i)),
                    &mut scores,
                    answer.normalized,
                ),
                None => answer.normalized,
            };
            check_scores(&self.meta, &scores, normalized).map(|()| Some((scores, normalized)))
        };
        if let Ok(mut slot) = self.meta.ahead.lock() {
            *slot = Some(Ahead {
                cycle,
                nodes,
                result,
            });
        }
    }
}

/// Keeps the scores of a reply for alike pods (`scored`: their nodes of `fill`'s
/// batch, in order) when they are raw, then normalises raw ones as the plugin
/// declared; whether `scores` are now normalised. Scores already normalised are raw
/// only for a plugin without NormalizeScore.
fn keep_raw_scores<'a>(
    meta: &Meta,
    fill: &Fill,
    scored: impl Iterator<Item = &'a (u32, Arc<Node>)>,
    scores: &mut [i64],
    normalized: bool,
) -> bool {
    let Ok(mut a) = meta.alike.lock() else {
        return normalized;
    };
    if normalized && a.declared.normalize {
        return true;
    }
    a.keep_scores(fill.epoch, &fill.signature, scored, scores);
    normalized || a.declared.normalize(scores)
}

/// Normalised scores must be in range.
fn check_scores(meta: &Meta, scores: &[i64], normalized: bool) -> Result<(), Status> {
    if normalized {
        if let Some(bad) = scores
            .iter()
            .find(|v| !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(*v))
        {
            return Err(meta.bad_reply(format!(
                "score {bad} is outside [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}]"
            )));
        }
    }
    Ok(())
}

impl PendingFilter for RemoteFilterCall {
    fn wait(mut self: Box<Self>) -> Result<Vec<(usize, Status)>, Status> {
        let r = self.result();
        match r {
            Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                if let Some(log) = &self.ignored {
                    self.meta.ignored(log, "Filter", &s);
                }
                Ok(Vec::new())
            }
            r => r,
        }
    }
}

struct RemoteScoreCall {
    /// Ends when the call does.
    _span: tracing::Span,
    pending: Option<Pending>,
    /// Answered already, by a score-ahead Filter reply.
    ready: Option<AheadResult>,
    n: usize,
    g: u64,
    meta: Arc<Meta>,
    /// Where a failure skipped under `Ignore` is noted (the attempt's).
    ignored: Option<IgnoredCalls>,
    /// Raw scores asked for, to keep for alike pods and normalise here.
    fill: Option<Fill>,
}

impl RemoteScoreCall {
    fn result(&mut self) -> Result<(Vec<i64>, bool), Status> {
        if let Some(r) = self.ready.take() {
            return r.map(|v| v.unwrap_or_else(|| (vec![0; self.n], true)));
        }
        let Some(p) = self.pending.take() else {
            return Ok((vec![0; self.n], true));
        };
        let r = match p.wait().map_err(|e| self.meta.call_failed("Score", e))? {
            Reply::Score(r) => r,
            other => return Err(self.meta.unexpected(other)),
        };
        self.meta.check_generation(r.generation, self.g)?;
        let s = convert::status_from_pb(r.status.as_ref());
        if s.is_skip() {
            return Ok((vec![0; self.n], true));
        }
        if !s.is_success() {
            return Err(self.meta.plugin_failed("Score failed", s.message()));
        }
        if r.scores.len() != self.n {
            return Err(self.meta.bad_reply(format!(
                "{} scores for a batch of {} nodes",
                r.scores.len(),
                self.n
            )));
        }
        let mut scores = r.scores;
        let normalized = match &self.fill {
            Some(f) => keep_raw_scores(&self.meta, f, f.nodes.iter(), &mut scores, r.normalized),
            None => r.normalized,
        };
        check_scores(&self.meta, &scores, normalized)?;
        Ok((scores, normalized))
    }
}

impl PendingScore for RemoteScoreCall {
    fn wait(mut self: Box<Self>) -> Result<(Vec<i64>, bool), Status> {
        let n = self.n;
        match self.result() {
            Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                if let Some(log) = &self.ignored {
                    self.meta.ignored(log, "Score", &s);
                }
                Ok((vec![0; n], true))
            }
            r => r,
        }
    }
}

impl Plugin for RemotePlugin {
    fn name(&self) -> &str {
        &self.meta.name
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        self.implements(pb::ExtensionPoint::PreEnqueue)
            .then_some(self as &dyn PreEnqueuePlugin)
    }
    /// Unlike the other points, only a sidecar whose handshake declared QueueSort
    /// sorts: a profile has exactly one QueueSort, and a sidecar down at start must
    /// not displace PrioritySort from every profile that enables it at multiPoint.
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        self.info
            .as_ref()
            .is_some_and(|i| {
                i.extension_points
                    .contains(&(pb::ExtensionPoint::QueueSort as i32))
            })
            .then_some(self as &dyn QueueSortPlugin)
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        self.implements(pb::ExtensionPoint::PreFilter)
            .then_some(self as &dyn PreFilterPlugin)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        self.implements(pb::ExtensionPoint::Filter)
            .then_some(self as &dyn FilterPlugin)
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        self.implements(pb::ExtensionPoint::PostFilter)
            .then_some(self as &dyn PostFilterPlugin)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        self.implements(pb::ExtensionPoint::PreScore)
            .then_some(self as &dyn PreScorePlugin)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        self.implements(pb::ExtensionPoint::Score)
            .then_some(self as &dyn ScorePlugin)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        self.implements(pb::ExtensionPoint::Reserve)
            .then_some(self as &dyn ReservePlugin)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        self.implements(pb::ExtensionPoint::Permit)
            .then_some(self as &dyn PermitPlugin)
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        self.implements(pb::ExtensionPoint::PreBind)
            .then_some(self as &dyn PreBindPlugin)
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        self.implements(pb::ExtensionPoint::Bind)
            .then_some(self as &dyn BindPlugin)
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        self.implements(pb::ExtensionPoint::PostBind)
            .then_some(self as &dyn PostBindPlugin)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        let info = self.info.as_ref()?;
        match convert::events(&info.events) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(plugin = %self.meta.name, error = %e, "sidecar declared an event this scheduler does not know; every event requeues its pods");
                None
            }
        }
    }
    fn cycle_hooks(&self) -> Option<Arc<dyn CycleHooks>> {
        Some(self.hooks.clone())
    }
}

impl PreEnqueuePlugin for RemotePlugin {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        if self.absent(pb::ExtensionPoint::PreEnqueue) {
            return Status::success();
        }
        let r = (|| {
            let name = self.meta.name.to_string();
            let reply = self
                .ep()
                .call(|id| {
                    Outbound::PreEnqueue(pb::PreEnqueueRequest {
                        request_id: id,
                        plugin: name,
                        pod: Some(convert::pod(pod)),
                    })
                })
                .map_err(|e| self.meta.call_failed("PreEnqueue", e))?;
            self.status_reply(reply, 0)
        })();
        match self.policy(None, "PreEnqueue", r, Status::success) {
            Ok(s) | Err(s) => s,
        }
    }
}

/// A remote QueueSort never compares over the wire: the sidecar gives each pod a key
/// once, at enqueue (or when the pod changes), and the heap compares keys bytewise,
/// equal keys in enqueue order. A pod whose key could not be had (sidecar down, an
/// error status) sorts after every keyed pod, in enqueue order, under either failure
/// policy: the queue cannot fail a pod, and the key is asked for again when the pod
/// is updated.
impl QueueSortPlugin for RemotePlugin {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match (&a.sort_key, &b.sort_key) {
            (Some(x), Some(y)) if x != y => x < y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            _ => a.timestamp < b.timestamp,
        }
    }

    fn sort_key(&self, pod: &Pod) -> Option<Arc<[u8]>> {
        if self.absent(pb::ExtensionPoint::QueueSort) {
            return None;
        }
        let reply = self
            .ep()
            .call(|id| {
                Outbound::QueueSort(pb::QueueSortRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    pod: Some(convert::pod(pod)),
                })
            })
            .map_err(|e| self.meta.call_failed("QueueSort", e));
        let r = match reply {
            Ok(Reply::QueueSort(r)) => r,
            Ok(other) => {
                self.meta.unexpected(other);
                return None;
            }
            Err(_) => return None,
        };
        let s = convert::status_from_pb(r.status.as_ref());
        if !s.is_success() {
            self.meta.plugin_failed("QueueSort failed", s.message());
            return None;
        }
        Some(r.sort_key.into())
    }
}

impl PreFilterPlugin for RemotePlugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if self.absent(pb::ExtensionPoint::PreFilter) {
            return (None, Status::success());
        }
        let (_span, traceparent) = self.call_trace(state, "PreFilter", 0);
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                Outbound::PreFilter(pb::PreFilterRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    traceparent,
                })
            };
            match self
                .send(&streams, req)?
                .wait()
                .map_err(|e| self.meta.call_failed("PreFilter", e))?
            {
                Reply::PreFilter(r) => {
                    self.meta.check_generation(r.generation, g)?;
                    let s = convert::status_from_pb(r.status.as_ref());
                    if s.code() == Code::Error {
                        return Err(self.meta.plugin_failed("PreFilter failed", s.message()));
                    }
                    let res = r.has_node_names.then(|| {
                        PreFilterResult::nodes(r.node_names.iter().map(|n| Arc::from(n.as_str())))
                    });
                    Ok((res, s))
                }
                other => Err(self.meta.unexpected(other)),
            }
        })();
        // Ignoring a failed PreFilter skips the plugin's Filter too.
        match self.policy(Some(state), "PreFilter", r, || (None, Status::skip())) {
            Ok(x) => x,
            Err(s) => (None, s),
        }
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        self.info
            .as_ref()
            .is_some_and(|i| i.pre_filter_extensions)
            .then_some(&self.ext as &dyn PreFilterExtensions)
    }
}

impl FilterPlugin for RemotePlugin {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        if self.absent(pb::ExtensionPoint::Filter) {
            return Status::success();
        }
        let r = self
            .start_filter_call(state, &[node], None, false, false, None)
            .and_then(|mut c| c.result());
        match self.policy(Some(state), "Filter", r, Vec::new) {
            Ok(v) => v
                .into_iter()
                .next()
                .map_or_else(Status::success, |(_, s)| s),
            Err(s) => s,
        }
    }

    fn as_batch(&self) -> Option<&dyn BatchFilter> {
        Some(self)
    }
}

impl RemotePlugin {
    /// This attempt's lookahead call, if it was sent for exactly this request: the
    /// same nodes, none changed since (so a node-local plugin answers as it would
    /// now), the same score-ahead, on the same connection. Otherwise it is dropped.
    fn take_lookahead(
        &self,
        state: &CycleState,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
    ) -> Option<RemoteFilterCall> {
        let calls = state.read::<LookaheadCalls>()?;
        let la = {
            let mut v = calls.0.lock().ok()?;
            let i = v.iter().position(|c| c.plugin == self.meta.name)?;
            v.swap_remove(i)
        };
        let epoch = self.cycle(state).ok().map(|(_, _, streams)| streams.epoch);
        let sent = match &la.call.pending {
            Some(FilterSource::Batch(b, ..)) => b.sent(),
            _ => true,
        };
        let same = sent
            && epoch == Some(la.epoch)
            && la.ahead == ahead
            && la.nodes.len() == nodes.len()
            && la
                .nodes
                .iter()
                .zip(nodes)
                .all(|(&(id, g), n)| id == n.id && g == n.generation);
        let stats = &self.ep().inner.stats;
        self.ep().lookahead_outcome(same);
        if same {
            stats.lookahead_hits.fetch_add(1, Ordering::Relaxed);
            let mut call = la.call;
            call.ignored = Some(state.ignored.clone());
            Some(call)
        } else {
            stats.lookahead_misses.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl BatchFilter for RemotePlugin {
    fn lookahead_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
    ) -> bool {
        if self.absent(pb::ExtensionPoint::Filter) {
            return false;
        }
        let alike = self.alike(state, pod);
        if let Some((_, sig)) = &alike {
            // The attempt will be answered from reused answers: nothing to send.
            if self.meta.alike.lock().is_ok_and(|a| a.covers(sig, nodes)) {
                return true;
            }
        }
        let Ok(call) = self.start_filter_call(state, nodes, ahead, true, true, alike) else {
            return false;
        };
        // The call went out on the cycle's connection (start_filter_call checked it).
        let Some(RemoteCycle { epoch, .. }) = RemoteCycles::of(state, self.ep().config().index)
        else {
            return false;
        };
        let la = LookaheadCall {
            plugin: self.meta.name.clone(),
            epoch,
            nodes: nodes.iter().map(|n| (n.id, n.generation)).collect(),
            ahead,
            call,
        };
        let calls = state.read::<LookaheadCalls>().cloned().unwrap_or_default();
        let kept = calls.0.lock().map(|mut v| v.push(la)).is_ok();
        state.write(calls);
        kept
    }

    fn start_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
        source: NodeSource,
    ) -> Result<Box<dyn PendingFilter>, Status> {
        let from_snapshot = source == NodeSource::Snapshot;
        if let Some(call) = self.take_lookahead(state, nodes, ahead) {
            return Ok(Box::new(call));
        }
        let absent = self.absent(pb::ExtensionPoint::Filter);
        // Nodes copied for a what-if are not the node's own: never reused.
        let alike = (!absent && from_snapshot)
            .then(|| self.alike(state, pod))
            .flatten();
        if let Some((_, sig)) = &alike {
            let reused = self
                .meta
                .alike
                .lock()
                .ok()
                .and_then(|a| a.filter(sig, nodes));
            if let Some(failures) = reused {
                self.ep()
                    .inner
                    .stats
                    .alike_reused
                    .fetch_add(1, Ordering::Relaxed);
                return Ok(Box::new(RemoteFilterCall {
                    _span: tracing::Span::none(),
                    pending: None,
                    n: nodes.len(),
                    g: 0,
                    meta: self.meta.clone(),
                    ahead: None,
                    ignored: None,
                    reused: Some(failures),
                    fill: None,
                }));
            }
        }
        // Passes every node: the plugin does not filter, or its failure is ignored.
        let passes = || {
            Box::new(RemoteFilterCall {
                _span: tracing::Span::none(),
                pending: None,
                n: nodes.len(),
                g: 0,
                meta: self.meta.clone(),
                ahead: None,
                ignored: None,
                reused: None,
                fill: None,
            })
        };
        if absent {
            return Ok(passes());
        }
        match self.start_filter_call(state, nodes, ahead, from_snapshot, false, alike) {
            Ok(c) => Ok(Box::new(c)),
            Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                self.meta.ignored(&state.ignored, "Filter", &s);
                Ok(passes())
            }
            Err(s) => Err(s),
        }
    }
}

impl PostFilterPlugin for RemotePlugin {
    fn post_filter(
        &self,
        ctx: PostFilterContext<'_>,
        _pod: &Arc<Pod>,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if self.absent(pb::ExtensionPoint::PostFilter) {
            return (
                None,
                Status::unschedulable("remote PostFilter not implemented"),
            );
        }
        let (_span, traceparent) = self.call_trace(ctx.state, "PostFilter", statuses.len());
        let r = (|| {
            let (cycle, g, streams) = self.cycle(ctx.state)?;
            let node_statuses: HashMap<String, pb::Status> = statuses
                .iter()
                .map(|(n, s)| (n.to_string(), convert::status_to_pb(s)))
                .collect();
            let req = |id| {
                Outbound::PostFilter(pb::PostFilterRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    node_statuses,
                    traceparent,
                })
            };
            match self
                .send(&streams, req)?
                .wait()
                .map_err(|e| self.meta.call_failed("PostFilter", e))?
            {
                Reply::PostFilter(r) => {
                    self.meta.check_generation(r.generation, g)?;
                    let s = convert::status_from_pb(r.status.as_ref());
                    let res = (!r.nominated_node_name.is_empty()).then(|| PostFilterResult {
                        nominating_info: NominatingInfo::Override(Some(Arc::from(
                            r.nominated_node_name.as_str(),
                        ))),
                    });
                    Ok((res, s))
                }
                other => Err(self.meta.unexpected(other)),
            }
        })();
        match self.policy(Some(ctx.state), "PostFilter", r, || {
            (None, Status::unschedulable("remote PostFilter skipped"))
        }) {
            Ok(x) => x,
            Err(s) => (None, s),
        }
    }
}

impl PreScorePlugin for RemotePlugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        if self.absent(pb::ExtensionPoint::PreScore) {
            return Status::skip();
        }
        let (_span, traceparent) = self.call_trace(state, "PreScore", nodes.len());
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                Outbound::PreScore(pb::PreScoreRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    nodes: nodes.iter().map(|n| n.id).collect(),
                    traceparent,
                })
            };
            let reply = self
                .send(&streams, req)?
                .wait()
                .map_err(|e| self.meta.call_failed("PreScore", e))?;
            self.status_reply(reply, g)
        })();
        match self.policy(Some(state), "PreScore", r, Status::skip) {
            Ok(s) | Err(s) => s,
        }
    }

    fn deferrable(&self) -> bool {
        true
    }
}

impl ScorePlugin for RemotePlugin {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        if self.absent(pb::ExtensionPoint::Score) {
            return Ok(0);
        }
        // One node outside the batched path: score it un-normalised.
        let (cycle, g, streams) = self.cycle(state)?;
        let (_span, traceparent) = self.call_trace(state, "Score", 1);
        let req = |id| {
            Outbound::Score(pb::ScoreRequest {
                request_id: id,
                plugin: self.meta.name.to_string(),
                cycle,
                generation: g,
                nodes: vec![node.id],
                normalize: false,
                after_pre_score: false,
                traceparent,
            })
        };
        let mut call = RemoteScoreCall {
            _span: tracing::Span::none(),
            ready: None,
            pending: Some(self.send(&streams, req)?),
            n: 1,
            g,
            meta: self.meta.clone(),
            ignored: None, // result() is read directly; `policy` notes a skip
            fill: None,
        };
        let r = call.result().map(|(v, _)| v[0]);
        self.policy(Some(state), "Score", r, || 0)
    }

    fn as_batch(&self) -> Option<&dyn BatchScore> {
        Some(self)
    }

    fn has_normalize_score(&self) -> bool {
        self.info.as_ref().is_none_or(|i| i.normalize_score)
    }

    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        if self.absent(pb::ExtensionPoint::Score) {
            return Status::success();
        }
        let (_span, traceparent) = self.call_trace(state, "NormalizeScore", nodes.len());
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                Outbound::NormalizeScore(pb::NormalizeScoreRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    nodes: nodes.iter().map(|n| n.id).collect(),
                    scores: scores.to_vec(),
                    traceparent,
                })
            };
            let mut call = RemoteScoreCall {
                _span: tracing::Span::none(),
                ready: None,
                pending: Some(self.send(&streams, req)?),
                n: nodes.len(),
                g,
                meta: self.meta.clone(),
                ignored: None, // result() is read directly; `policy` notes a skip
                fill: None,
            };
            call.result().map(|(v, _)| v)
        })();
        match self.policy(Some(state), "NormalizeScore", r, || vec![0; scores.len()]) {
            Ok(v) => {
                scores.copy_from_slice(&v);
                Status::success()
            }
            Err(s) => s,
        }
    }
}

impl BatchScore for RemotePlugin {
    fn start_score(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        with_pre_score: bool,
    ) -> Result<Box<dyn PendingScore>, Status> {
        let with_pre_score = with_pre_score && !self.absent(pb::ExtensionPoint::PreScore);
        // Adds nothing: the plugin does not score, or its failure is ignored.
        let neutral = || {
            Box::new(RemoteScoreCall {
                _span: tracing::Span::none(),
                ready: None,
                pending: None,
                n: nodes.len(),
                g: 0,
                meta: self.meta.clone(),
                ignored: None,
                fill: None,
            })
        };
        if self.absent(pb::ExtensionPoint::Score) {
            return Ok(neutral());
        }
        let started = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            // Answered already, without a call of its own.
            let answered = |ready: AheadResult| RemoteScoreCall {
                _span: tracing::Span::none(),
                ready: Some(ready),
                pending: None,
                n: nodes.len(),
                g,
                meta: self.meta.clone(),
                ignored: Some(state.ignored.clone()),
                fill: None,
            };
            if let Some(ready) = self.take_ahead(cycle, nodes) {
                return Ok(answered(ready));
            }
            let alike = self.alike(state, pod);
            let declared = match &alike {
                Some(_) => self.declared(),
                None => Declared::default(),
            };
            if let Some((_, sig)) = &alike {
                let raw = self
                    .meta
                    .alike
                    .lock()
                    .ok()
                    .and_then(|a| a.raw_scores(sig, nodes));
                if let Some(mut scores) = raw {
                    if declared.normalize(&mut scores) {
                        self.ep()
                            .inner
                            .stats
                            .alike_reused
                            .fetch_add(1, Ordering::Relaxed);
                        let ready =
                            check_scores(&self.meta, &scores, true).map(|()| Some((scores, true)));
                        return Ok(answered(ready));
                    }
                }
            }
            let fill = alike.filter(|_| declared.scores).and_then(|(epoch, sig)| {
                Fill::new(
                    epoch,
                    sig,
                    nodes.iter().map(|n| (n.id, n.node_arc().cloned())),
                )
            });
            let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
            let (span, traceparent) = self.call_trace(state, "Score", nodes.len());
            if with_pre_score {
                // Its reply is read by the sidecar's Score, which waits for it.
                let id = self.ep().next_request_id();
                let sent = streams.send(Outbound::PreScore(pb::PreScoreRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    nodes: ids.clone(),
                    traceparent: traceparent.clone(),
                }));
                if !sent {
                    return Err(self.meta.call_failed(
                        "send",
                        CallError::Unavailable("the stream is closed".into()),
                    ));
                }
            }
            let req = |id| {
                Outbound::Score(pb::ScoreRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    nodes: ids,
                    // Raw scores are kept for alike pods and normalised here.
                    normalize: fill.is_none() || !declared.normalize,
                    after_pre_score: with_pre_score,
                    traceparent,
                })
            };
            Ok(RemoteScoreCall {
                _span: span,
                ready: None,
                pending: Some(self.send(&streams, req)?),
                n: nodes.len(),
                g,
                meta: self.meta.clone(),
                ignored: Some(state.ignored.clone()),
                fill,
            })
        })();
        match started {
            Ok(c) => Ok(Box::new(c)),
            Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                self.meta.ignored(&state.ignored, "Score", &s);
                Ok(neutral())
            }
            Err(s) => Err(s),
        }
    }
}

impl ReservePlugin for RemotePlugin {
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        if self.absent(pb::ExtensionPoint::Reserve) {
            return Status::success();
        }
        self.status_call(state, node, "Reserve", Outbound::Reserve)
    }
    fn unreserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) {
        if self.absent(pb::ExtensionPoint::Reserve) {
            return;
        }
        let s = self.status_call(state, node, "Unreserve", Outbound::Unreserve);
        if !s.is_success() {
            tracing::warn!(plugin = %self.meta.name, status = %s, "remote Unreserve failed");
        }
    }
}

impl PermitPlugin for RemotePlugin {
    fn permit(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> (Status, Duration) {
        if self.absent(pb::ExtensionPoint::Permit) {
            return (Status::success(), Duration::ZERO);
        }
        let (_span, traceparent) = self.call_trace(state, "Permit", 1);
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                Outbound::Permit(pb::CycleRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    node_name: node.to_string(),
                    traceparent,
                })
            };
            match self
                .send(&streams, req)?
                .wait()
                .map_err(|e| self.meta.call_failed("Permit", e))?
            {
                Reply::Permit(r) => {
                    self.meta.check_generation(r.generation, g)?;
                    let s = convert::status_from_pb(r.status.as_ref());
                    if s.code() == Code::Error {
                        return Err(self.meta.plugin_failed("Permit failed", s.message()));
                    }
                    Ok((s, Duration::from_millis(u64::from(r.timeout_millis))))
                }
                other => Err(self.meta.unexpected(other)),
            }
        })();
        match self.policy(Some(state), "Permit", r, || {
            (Status::success(), Duration::ZERO)
        }) {
            Ok(x) => x,
            Err(s) => (s, Duration::ZERO),
        }
    }
}

impl PreBindPlugin for RemotePlugin {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            if self.absent(pb::ExtensionPoint::PreBind) {
                return Status::success();
            }
            let s = self
                .async_status_call(state, node, "PreBind", Outbound::PreBind)
                .await;
            if s.is_skip() {
                Status::success()
            } else {
                s
            }
        })
    }
}

impl BindPlugin for RemotePlugin {
    fn bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            if self.absent(pb::ExtensionPoint::Bind) {
                return Status::skip();
            }
            self.async_status_call(state, node, "Bind", Outbound::Bind)
                .await
        })
    }
}

impl PostBindPlugin for RemotePlugin {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Arc<Pod>,
        node: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if self.absent(pb::ExtensionPoint::PostBind) {
                return;
            }
            let _ = self
                .async_status_call(state, node, "PostBind", Outbound::PostBind)
                .await;
        })
    }
}
