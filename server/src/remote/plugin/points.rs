//! The other extension points over the wire, one call each: PreEnqueue, QueueSort
//! keys, PreFilter, PostFilter, Reserve/Unreserve, Permit, PreBind, Bind, PostBind.

use super::started::{pre_filter_policy, pre_filter_reply};
use super::*;

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
            self.meta.status_reply(reply, 0)
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
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        if self.absent(pb::ExtensionPoint::PreFilter) {
            return (None, Status::success());
        }
        // Started earlier in this attempt (the phase is being redone): its outcome.
        if let Some(started) = self.started(state) {
            return started.outcome();
        }
        let (_span, traceparent) = self.call_trace(state, "PreFilter", 0);
        let r = (|| {
            let (pending, g) = self.send_pre_filter(state, traceparent)?;
            self.filter_behind_pre_filter(state, pod, snapshot);
            let reply = pending
                .wait()
                .map_err(|e| self.meta.call_failed("PreFilter", e))?;
            pre_filter_reply(&self.meta, reply, g)
        })();
        pre_filter_policy(&self.meta, &state.ignored, r)
    }

    /// Only where the plugin's Filter calls can be marked to wait for it
    /// (`filter-after-pre-filter`): the sidecar reads its streams in any order.
    fn start_pre_filter(&self, state: &mut CycleState, pod: &Pod, snapshot: &Snapshot) -> bool {
        let filters =
            self.implements(pb::ExtensionPoint::Filter) && !self.absent(pb::ExtensionPoint::Filter);
        !self.absent(pb::ExtensionPoint::PreFilter)
            && (!filters || self.ep().filters_after_pre_filter())
            && self.start_remote_pre_filter(state, pod, snapshot)
    }

    fn finish_pre_filter(&self, state: &CycleState) -> Option<(Option<PreFilterResult>, Status)> {
        self.started(state).map(|s| s.outcome())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        self.info
            .as_ref()
            .is_some_and(|i| i.pre_filter_extensions)
            .then_some(&self.ext as &dyn PreFilterExtensions)
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

impl ReservePlugin for RemotePlugin {
    fn reserve(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> Status {
        if self.absent(pb::ExtensionPoint::Reserve) {
            return Status::success();
        }
        if !(state.permit_follows_reserve
            && !self.absent(pb::ExtensionPoint::Permit)
            && self.ep().permits_after_reserve())
        {
            return self.status_call(state, node, "Reserve", Outbound::Reserve);
        }
        if self.may_leave_permit(state) {
            return self.leave_reserve_and_permit(state, node);
        }
        let mut behind = None;
        let s = self.status_call_then(state, node, "Reserve", Outbound::Reserve, || {
            behind = self.send_permit_behind_reserve(state, node);
        });
        if let Some(b) = behind {
            state.write(b);
        }
        s
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

/// A Permit sent right behind this plugin's Reserve (`permit-after-reserve`), for its
/// Permit to wait for instead of sending one. Dropped with its reply owed when the
/// attempt ends before Permit (a Reserve that failed).
#[derive(Clone)]
struct PermitBehindReserve {
    plugin: Arc<str>,
    node: Arc<str>,
    pending: Arc<Mutex<Option<Pending>>>,
}

impl RemotePlugin {
    /// Sends the cycle's Permit now, on the Permit stream, marked to be evaluated
    /// after the Reserve this plugin has just sent: the two cost one round trip.
    /// The framework sets `permit_follows_reserve` only when nothing runs between
    /// them, so the sidecar's Permit (with its side effects) runs exactly when it
    /// would have run anyway.
    fn send_permit_behind_reserve(
        &self,
        state: &CycleState,
        node: &str,
    ) -> Option<PermitBehindReserve> {
        let (cycle, g, streams) = self.cycle(state).ok()?;
        let (_span, traceparent) = self.call_trace(state, "Permit", 1);
        let pending = self
            .send(&streams, |id| {
                Outbound::Permit(pb::CycleRequest {
                    after_reserve: true,
                    ..cycle_request(id, &self.meta.name, cycle, g, node, traceparent)
                })
            })
            .ok()?;
        Some(PermitBehindReserve {
            plugin: self.meta.name.clone(),
            node: Arc::from(node),
            pending: Arc::new(Mutex::new(Some(pending))),
        })
    }

    /// The Permit sent behind this attempt's Reserve for `node`, if any.
    fn take_permit_behind_reserve(&self, state: &mut CycleState, node: &str) -> Option<Pending> {
        let sent = state.read::<PermitBehindReserve>()?;
        if *sent.plugin != *self.meta.name || *sent.node != *node {
            return None;
        }
        let pending = sent.pending.lock().ok()?.take();
        state.delete::<PermitBehindReserve>();
        pending
    }
}

impl PermitPlugin for RemotePlugin {
    fn permit(&self, state: &mut CycleState, _pod: &Pod, node: &str) -> (Status, Duration) {
        if self.absent(pb::ExtensionPoint::Permit) {
            return (Status::success(), Duration::ZERO);
        }
        if self.permit_left(state) {
            return (Status::success(), Duration::ZERO);
        }
        let ahead = self.take_permit_behind_reserve(state, node);
        let (_span, traceparent) = self.call_trace(state, "Permit", 1);
        let r = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let pending = match ahead {
                Some(p) => {
                    self.ep()
                        .inner
                        .stats
                        .permit_behind_reserve
                        .fetch_add(1, Ordering::Relaxed);
                    p
                }
                None => self.send(&streams, |id| {
                    Outbound::Permit(cycle_request(
                        id,
                        &self.meta.name,
                        cycle,
                        g,
                        node,
                        traceparent,
                    ))
                })?,
            };
            let reply = pending
                .wait()
                .map_err(|e| self.meta.call_failed("Permit", e))?;
            self.meta.permit_reply(reply, g)
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
