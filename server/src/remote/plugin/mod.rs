//! A plugin served by a sidecar, behind the same traits as a built-in one. Every
//! failure — sidecar down, timeout, malformed or misaligned reply — becomes a plugin
//! error naming the plugin and endpoint, and the endpoint's failure policy decides
//! what it does to the attempt.
//!
//! By concern: `hooks` (attempt boundaries), `policy` (failures), `signatures` (alike
//! pods), `filter`, `started` (a PreFilter that travels while Filter runs), `score`,
//! `label_score` (plugins that score by a node label), and `points` (the other
//! extension points), `unsettled` (a Reserve and Permit awaited in the binding
//! cycle).

mod filter;
mod hooks;
mod label_score;
mod points;
mod policy;
mod score;
mod signatures;
mod started;
mod unsettled;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smallvec::SmallVec;
use switchyard_proto::v1 as pb;

use super::alike::{self, AlikeAnswers, Declared, NodeKey};
use super::client::{BatchReply, Outbound, Pending, Reply, Streams};
use super::error::{CallError, RemoteError};
use super::replicate::Replicator;
use super::{convert, Endpoint, FailurePolicy};
use crate::cache::Snapshot;
use crate::framework::cycle_state::IgnoredCalls;
use crate::framework::events::ClusterEventWithHint;
use crate::framework::interface::*;
use crate::framework::{Code, CycleState, NodeInfo, Status};
use crate::model::{Pod, PodSpec};
use filter::RemoteFilterCall;
pub use hooks::EndpointHooks;
use hooks::{LookaheadCall, LookaheadCalls, RemoteCycle, RemoteCycles};
use policy::Meta;
use score::Ahead;
use signatures::{Fill, SignedPod};

/// Values of one kind kept in an attempt's state per remote plugin (by name): a
/// profile rarely has more than one remote plugin at a point.
#[derive(Clone)]
struct ByPlugin<T>(SmallVec<[(Arc<str>, T); 1]>);

impl<T: Clone + Send + Sync + 'static> ByPlugin<T> {
    fn get(state: &CycleState, plugin: &str) -> Option<T> {
        let all = state.read::<ByPlugin<T>>()?;
        all.0
            .iter()
            .find(|(p, _)| **p == *plugin)
            .map(|(_, v)| v.clone())
    }

    fn set(state: &mut CycleState, plugin: &Arc<str>, value: T) {
        if state.read::<ByPlugin<T>>().is_none() {
            state.write(ByPlugin::<T>(SmallVec::new()));
        }
        let Some(all) = state.read_mut::<ByPlugin<T>>() else {
            return;
        };
        match all.0.iter_mut().find(|(p, _)| **p == **plugin) {
            Some(e) => e.1 = value,
            None => all.0.push((plugin.clone(), value)),
        }
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
                label_domains: Mutex::new(Default::default()),
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
        self.status_call_then(state, node, extension_point, wrap, || {})
    }

    /// [`Self::status_call`], running `after_send` once the call is on its way and
    /// before its reply is awaited (to send another call behind it).
    fn status_call_then(
        &self,
        state: &CycleState,
        node: &str,
        extension_point: &'static str,
        wrap: fn(pb::CycleRequest) -> Outbound,
        after_send: impl FnOnce(),
    ) -> Status {
        let (span, traceparent) = self.call_trace(state, extension_point, 1);
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let req = |id| {
                wrap(cycle_request(
                    id,
                    &self.meta.name,
                    cycle,
                    g,
                    node,
                    traceparent,
                ))
            };
            let pending = self.send(&streams, req)?;
            after_send();
            let reply = pending
                .wait()
                .map_err(|e| self.meta.call_failed("call", e))?;
            self.meta.status_reply(reply, g)
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
                .call_async(move |id| wrap(cycle_request(id, &name, cycle, g, &node, traceparent)))
                .await
                .map_err(|e| self.meta.call_failed("call", e))?;
            self.meta.status_reply(reply, g)
        }
        .await;
        match self.policy(Some(state), extension_point, r, Status::skip) {
            Ok(s) | Err(s) => s,
        }
    }
}

/// A Reserve, Unreserve, Permit, PreBind, Bind or PostBind call of a cycle on `node`.
fn cycle_request(
    request_id: u64,
    plugin: &str,
    cycle: u64,
    generation: u64,
    node: &str,
    traceparent: String,
) -> pb::CycleRequest {
    pb::CycleRequest {
        request_id,
        plugin: plugin.to_string(),
        cycle,
        generation,
        node_name: node.to_string(),
        after_reserve: false,
        traceparent,
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
