//! Filter over the wire: one call per batch of nodes (or one item of a
//! `FilterBatch` message carrying several pods), what-if deltas for dry runs,
//! lookahead calls taken over by their attempt, answers reused for alike pods, and
//! the score-ahead a Filter reply may bring.

use super::score::{check_scores, keep_raw_scores};
use super::started::StartedPreFilter;
use super::*;

impl RemotePlugin {
    /// The what-if delta for a node copy that differs from what the sidecar holds.
    pub(super) fn delta(
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
    /// `send`: how the call goes out (see [`SendAs`]).
    /// `alike`: the reply is kept for alike pods (see [`Self::alike`]).
    pub(super) fn start_filter_call(
        &self,
        state: &CycleState,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
        from_snapshot: bool,
        send: SendAs,
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
            .and_then(|(epoch, sig)| Fill::new(epoch, sig, nodes.iter().copied()));
        let raw_scores = fill.is_some() && score_first > 0 && {
            let d = self.declared();
            d.scores && d.normalize
        };
        let (span, traceparent) = self.call_trace(state, "Filter", nodes.len());
        let started = self.started(state);
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
            // Behind this attempt's PreFilter, or while a started one has not answered:
            // the sidecar evaluates it after that PreFilter, whatever the order the
            // streams are read in (start_pre_filter needs the capability).
            after_pre_filter: send == SendAs::BehindPreFilter
                || started.as_ref().is_some_and(|s| !s.is_done()),
            traceparent,
        };
        let id = req.request_id;
        // A batched call is kept to be asked again alone if its message fails.
        let mut retry = None;
        let joined = match send {
            SendAs::Batched => {
                retry = Some(req.clone());
                self.ep().add_to_batch(streams.epoch, req)
            }
            SendAs::Alone | SendAs::BehindPreFilter => Err(req),
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
            partial: None,
            pod: RemoteCycles::of(state, self.ep().config().index).map(|c| c.pod),
            retry: retry.map(|r| (r, streams.epoch)),
            pre_filter: started,
        })
    }
}

/// Why a Filter call sent before its attempt asks for it is kept (see `keep_sent`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// A lookahead; `partial`: for the round's nodes without an answer kept for
    /// alike pods only.
    Ahead { partial: bool },
    /// In the attempt's own cycle, right behind its PreFilter.
    BehindPreFilter,
}

/// How a Filter call goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SendAs {
    /// In the `FilterBatch` message being collected (lookahead), if there is one.
    Batched,
    /// Its own message.
    Alone,
    /// Its own message, right behind the cycle's PreFilter, whose outcome the
    /// sidecar waits for (`FilterRequest.after_pre_filter`).
    BehindPreFilter,
}

/// Where a Filter call's reply comes from.
pub(super) enum FilterSource {
    /// Its own message on the Filter stream.
    Call(Pending),
    /// Item `.1` (request id `.2`) of a `FilterBatch` message.
    Batch(Arc<BatchReply>, usize, u64),
}

pub(super) struct RemoteFilterCall {
    /// Ends when the call does.
    pub(super) _span: tracing::Span,
    pub(super) pending: Option<FilterSource>,
    pub(super) n: usize,
    pub(super) g: u64,
    pub(super) meta: Arc<Meta>,
    /// With a score-ahead request: the cycle, the batch's node ids, `score_first`.
    pub(super) ahead: Option<(u64, Vec<u32>, usize)>,
    /// Where a failure skipped under `Ignore` is noted (the attempt's).
    pub(super) ignored: Option<IgnoredCalls>,
    /// Answered with answers reused for alike pods, without a call.
    pub(super) reused: Option<Vec<(usize, Status)>>,
    /// Keep the reply for alike pods.
    pub(super) fill: Option<Fill>,
    /// The call asks for part of the round, the rest answered from alike pods.
    pub(super) partial: Option<Partial>,
    /// The pod's uid fingerprint: its outcome decides whether the pod is a suspect
    /// (see `Endpoint::is_suspect`).
    pub(super) pod: Option<u64>,
    /// A call in a `FilterBatch` message: itself, to be asked again alone on the same
    /// connection (`.1`, its epoch) if the whole message fails.
    pub(super) retry: Option<(pb::FilterRequest, u64)>,
    /// The plugin's PreFilter of this attempt, started without waiting: read before
    /// the reply. When it did not succeed the reply is not the plugin's verdict, and
    /// the call passes every node (the framework then skips the plugin's Filter or
    /// redoes the phase).
    pub(super) pre_filter: Option<StartedPreFilter>,
}

/// A round answered partly from alike pods' answers: the call asks for the nodes at
/// `at` (indices in the round, ascending); `reused` are the other nodes' failures.
pub(super) struct Partial {
    pub(super) at: Vec<usize>,
    pub(super) reused: Vec<(usize, Status)>,
}

impl RemoteFilterCall {
    /// A call that passes every one of `n` nodes without asking.
    pub(super) fn passing(p: &RemotePlugin, n: usize) -> Self {
        RemoteFilterCall {
            _span: tracing::Span::none(),
            pending: None,
            n,
            g: 0,
            meta: p.meta.clone(),
            ahead: None,
            ignored: None,
            reused: None,
            fill: None,
            partial: None,
            pod: None,
            retry: None,
            pre_filter: None,
        }
    }

    pub(super) fn result(&mut self) -> Result<Vec<(usize, Status)>, Status> {
        if let Some(p) = self.pre_filter.take() {
            if !p.succeeded() {
                // Its reply is owed, and dropped on arrival.
                self.pending = None;
                self.partial = None;
                return Ok(Vec::new());
            }
        }
        if let Some(r) = self.reused.take() {
            return Ok(r);
        }
        let Some(p) = self.pending.take() else {
            return Ok(Vec::new());
        };
        let r = self.reply(p).and_then(|r| self.check(r));
        if let Some(pod) = self.pod {
            self.meta.ep.note_filter_outcome(pod, r.is_err());
        }
        r
    }

    /// The call's reply. A call whose `FilterBatch` message failed as a whole (a
    /// timeout, a reply too large, a malformed one) is asked again alone while the
    /// connection lasts: one pod the sidecar chokes on fails alone, not the pods
    /// that shared its message.
    fn reply(&mut self, p: FilterSource) -> Result<pb::FilterResponse, Status> {
        let (b, i, id) = match p {
            FilterSource::Call(p) => return self.wait_call(p),
            FilterSource::Batch(b, i, id) => (b, i, id),
        };
        let e = match b.take(i, id) {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        let ep = &self.meta.ep;
        let again = self
            .retry
            .take()
            .filter(|_| b.calls() > 1)
            .and_then(|(mut req, epoch)| {
                let streams = ep.streams().ok().filter(|s| s.epoch == epoch)?;
                req.request_id = ep.next_request_id();
                ep.start_call(&streams, req.request_id, Outbound::Filter(req))
                    .ok()
            });
        match again {
            Some(p) => {
                ep.inner
                    .stats
                    .batch_retried_apart
                    .fetch_add(1, Ordering::Relaxed);
                self.wait_call(p)
            }
            None => Err(self.meta.call_failed("Filter", e)),
        }
    }

    fn wait_call(&self, p: Pending) -> Result<pb::FilterResponse, Status> {
        match p.wait().map_err(|e| self.meta.call_failed("Filter", e))? {
            Reply::Filter(r) => Ok(r),
            other => Err(self.meta.unexpected(other)),
        }
    }

    /// Checks a reply and turns it into the round's failures.
    fn check(&mut self, r: pb::FilterResponse) -> Result<Vec<(usize, Status)>, Status> {
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
        if let Some(p) = self.partial.take() {
            let mut all = p.reused;
            all.extend(out.into_iter().map(|(i, s)| (p.at[i], s)));
            all.sort_by_key(|(i, _)| *i);
            return Ok(all);
        }
        Ok(out)
    }

    /// Checks a score-ahead answer and keeps it for the Score call: the scored nodes are
    /// the first `first` items that passed. A malformed answer is kept as the error the
    /// Score call will report.
    pub(super) fn keep_ahead(
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

impl FilterPlugin for RemotePlugin {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        if self.absent(pb::ExtensionPoint::Filter) {
            return Status::success();
        }
        let r = self
            .start_filter_call(state, &[node], None, false, SendAs::Alone, None)
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
    pub(super) fn take_lookahead(
        &self,
        state: &CycleState,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
    ) -> Option<RemoteFilterCall> {
        let calls = state.read::<LookaheadCalls>()?;
        let epoch = self.cycle(state).ok().map(|(_, _, streams)| streams.epoch);
        let same = |la: &LookaheadCall| {
            let sent = match &la.call.pending {
                Some(FilterSource::Batch(b, ..)) => b.sent(),
                _ => true,
            };
            sent && epoch == Some(la.epoch)
                && la.ahead == ahead
                && la.nodes.len() == nodes.len()
                && la
                    .nodes
                    .iter()
                    .zip(nodes)
                    .all(|(&(id, g), n)| id == n.id && g == n.generation)
        };
        let (la, used) = {
            let mut v = calls.0.lock().ok()?;
            let i = v.iter().position(|c| c.plugin == self.meta.name)?;
            let used = same(&v[i]);
            // A round sent behind the PreFilter, or ahead for the nodes without an
            // answer kept for alike pods, may be asked for by a later Filter call of
            // the attempt (after the nodes an alike pod answered): it waits for that
            // one, and is dropped with the attempt if none asks for it.
            if !used && (v[i].behind_pre_filter || v[i].partial) {
                return None;
            }
            (v.swap_remove(i), used)
        };
        let stats = &self.ep().inner.stats;
        if la.behind_pre_filter {
            stats
                .filter_behind_pre_filter
                .fetch_add(1, Ordering::Relaxed);
        } else {
            self.ep().lookahead_outcome(used);
            if used {
                stats.lookahead_hits.fetch_add(1, Ordering::Relaxed);
            } else {
                stats.lookahead_misses.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !used {
            return None;
        }
        let mut call = la.call;
        call.ignored = Some(state.ignored.clone());
        Some(call)
    }

    /// Sends the attempt's first Filter round (the [`FirstRound`] the scheduler
    /// expects it to evaluate, less the nodes answered for alike pods) right behind
    /// this plugin's PreFilter, so both cost one round trip; the sidecar evaluates it
    /// after the PreFilter (`after_pre_filter`). Used only if the attempt's round is
    /// exactly that one ([`Self::take_lookahead`]); dropped, its reply owed, if not.
    pub(super) fn filter_behind_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) {
        let Some(fr) = state.read::<FirstRound>().copied() else {
            return;
        };
        if self.absent(pb::ExtensionPoint::Filter) || !self.ep().filters_after_pre_filter() {
            return;
        }
        let infos = snapshot.node_infos();
        let n = infos.len();
        if n == 0 {
            return;
        }
        let round: Vec<&NodeInfo> = (0..fr.len.min(n))
            .map(|i| &*infos[(fr.start + i) % n])
            .collect();
        let alike = self.alike(state, pod);
        // What `start_filter` will ask for: the nodes without an answer for alike
        // pods, or the whole round.
        let (ask, ahead) = match &alike {
            Some((_, sig)) => {
                let Ok(a) = self.meta.alike.lock() else {
                    return;
                };
                if a.filter(sig, &round).is_some() {
                    return;
                }
                match a
                    .filter_partly(sig, &round)
                    .filter(|_| !self.implements(pb::ExtensionPoint::Score))
                {
                    Some((_, at)) => (at.iter().map(|&i| round[i]).collect(), None),
                    None => (round, fr.ahead),
                }
            }
            None => (round, fr.ahead),
        };
        let Ok(call) =
            self.start_filter_call(state, &ask, ahead, true, SendAs::BehindPreFilter, alike)
        else {
            return;
        };
        self.keep_sent(state, &ask, ahead, call, Kept::BehindPreFilter);
    }

    /// Keeps a Filter call sent before the attempt asks for it (a lookahead, or a
    /// round behind the PreFilter) in the attempt's state, for
    /// [`Self::take_lookahead`]; false when it could not be kept.
    fn keep_sent(
        &self,
        state: &mut CycleState,
        nodes: &[&NodeInfo],
        ahead: Option<ScoreAhead>,
        call: RemoteFilterCall,
        kept: Kept,
    ) -> bool {
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
            behind_pre_filter: kept == Kept::BehindPreFilter,
            partial: kept == (Kept::Ahead { partial: true }),
        };
        let calls = state.read::<LookaheadCalls>().cloned().unwrap_or_default();
        let kept = calls.0.lock().map(|mut v| v.push(la)).is_ok();
        state.write(calls);
        kept
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
        // A PreFilter that reads only the pod (the endpoint looks ahead only then)
        // goes ahead too, and the Filter round waits for it in the sidecar; the
        // attempt takes its outcome instead of sending another.
        if self.implements(pb::ExtensionPoint::PreFilter)
            && !self.absent(pb::ExtensionPoint::PreFilter)
            && !self.keep_pre_filter_sent(state)
        {
            return false;
        }
        let alike = self.alike(state, pod);
        // What `start_filter` will ask for: nothing when answers kept for alike pods
        // cover the round, the nodes without one (`filter_partly`), or the round.
        let (ask, ahead, partial) = match &alike {
            Some((_, sig)) => {
                let Ok(a) = self.meta.alike.lock() else {
                    return false;
                };
                // One pass over the round's nodes (their infos are cold here).
                match a.filter_partly(sig, nodes) {
                    Some((_, at)) if at.is_empty() => return true,
                    Some((_, at)) if !self.implements(pb::ExtensionPoint::Score) => {
                        (at.iter().map(|&i| nodes[i]).collect(), None, true)
                    }
                    _ => (nodes.to_vec(), ahead, false),
                }
            }
            None => (nodes.to_vec(), ahead, false),
        };
        let Ok(call) = self.start_filter_call(state, &ask, ahead, true, SendAs::Batched, alike)
        else {
            return self.started(state).is_some();
        };
        self.keep_sent(state, &ask, ahead, call, Kept::Ahead { partial })
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
        // A PreFilter of this attempt that was started early and did not succeed: the
        // plugin's Filter does not decide (see RemoteFilterCall::pre_filter).
        let started = self.started(state);
        if started
            .as_ref()
            .is_some_and(|s| s.is_done() && !s.succeeded())
        {
            return Ok(Box::new(RemoteFilterCall::passing(self, nodes.len())));
        }
        if let Some(call) = self.take_lookahead(state, nodes, ahead) {
            return Ok(Box::new(call));
        }
        let absent = self.absent(pb::ExtensionPoint::Filter);
        // Nodes copied for a what-if are not the node's own: never reused.
        let alike = (!absent && from_snapshot)
            .then(|| self.alike(state, pod))
            .flatten();
        // The nodes with an answer kept for alike pods, in one pass: all of them
        // (answered without a call), some, or none.
        let mut partly = alike
            .as_ref()
            .and_then(|(_, sig)| self.meta.alike.lock().ok()?.filter_partly(sig, nodes));
        if partly.as_ref().is_some_and(|(_, ask)| ask.is_empty()) {
            if let Some((failures, _)) = partly.take() {
                if started.as_ref().is_some_and(|s| !s.succeeded()) {
                    return Ok(Box::new(RemoteFilterCall::passing(self, nodes.len())));
                }
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
                    partial: None,
                    pod: None,
                    retry: None,
                    pre_filter: None,
                }));
            }
        }
        // Passes every node: the plugin does not filter, or its failure is ignored.
        let passes = || Box::new(RemoteFilterCall::passing(self, nodes.len()));
        if absent {
            return Ok(passes());
        }
        // Some nodes answered for alike pods: ask for the others only. Not with a
        // score-ahead, which covers the whole round.
        let partly = partly.filter(|_| !self.implements(pb::ExtensionPoint::Score));
        if let Some((reused, at)) = partly {
            let ask: Vec<&NodeInfo> = at.iter().map(|&i| nodes[i]).collect();
            let call = match self.take_lookahead(state, &ask, None) {
                Some(c) => Ok(c),
                None => {
                    self.start_filter_call(state, &ask, None, from_snapshot, SendAs::Alone, alike)
                }
            };
            let stats = &self.ep().inner.stats;
            stats.alike_partly.fetch_add(1, Ordering::Relaxed);
            return match call {
                Ok(mut c) => {
                    c.partial = Some(Partial { at, reused });
                    Ok(Box::new(c))
                }
                Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                    self.meta.ignored(&state.ignored, "Filter", &s);
                    Ok(passes())
                }
                Err(s) => Err(s),
            };
        }
        match self.start_filter_call(state, nodes, ahead, from_snapshot, SendAs::Alone, alike) {
            Ok(c) => Ok(Box::new(c)),
            Err(s) if self.meta.policy() == FailurePolicy::Ignore => {
                self.meta.ignored(&state.ignored, "Filter", &s);
                Ok(passes())
            }
            Err(s) => Err(s),
        }
    }
}
