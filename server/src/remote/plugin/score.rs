//! PreScore and Score over the wire: batched Score calls (with PreScore pipelined
//! ahead), score-ahead answers from Filter replies, raw scores kept for alike pods
//! and normalised here as the plugin declared, and NormalizeScore.

use super::*;

/// Scores a Filter reply brought ahead of the Score call: valid for one cycle and
/// exactly this node list.
pub(super) struct Ahead {
    pub(super) cycle: u64,
    pub(super) nodes: Vec<u32>,
    pub(super) result: AheadResult,
}

/// Scores and whether they are normalised; `Ok(None)`: PreScore skipped (Score is
/// skipped for the pod).
pub(super) type AheadResult = Result<Option<(Vec<i64>, bool)>, Status>;

impl RemotePlugin {
    /// The score-ahead answer of this cycle's Filter, if it scored exactly `nodes`.
    pub(super) fn take_ahead(&self, cycle: u64, nodes: &[Arc<NodeInfo>]) -> Option<AheadResult> {
        let a = self.meta.ahead.lock().ok()?.take()?;
        let same = a.cycle == cycle
            && a.nodes.len() == nodes.len()
            && a.nodes.iter().zip(nodes).all(|(id, n)| *id == n.id);
        same.then_some(a.result)
    }
}

/// Keeps the scores of a reply for alike pods (`scored`: their nodes of `fill`'s
/// batch, in order) when they are raw, then normalises raw ones as the plugin
/// declared; whether `scores` are now normalised. Scores already normalised are raw
/// only for a plugin without NormalizeScore.
pub(super) fn keep_raw_scores<'a>(
    meta: &Meta,
    fill: &Fill,
    scored: impl Iterator<Item = &'a NodeKey>,
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
pub(super) fn check_scores(meta: &Meta, scores: &[i64], normalized: bool) -> Result<(), Status> {
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

pub(super) struct RemoteScoreCall {
    /// Ends when the call does.
    pub(super) _span: tracing::Span,
    pub(super) pending: Option<Pending>,
    /// Answered already, by a score-ahead Filter reply.
    pub(super) ready: Option<AheadResult>,
    pub(super) n: usize,
    pub(super) g: u64,
    pub(super) meta: Arc<Meta>,
    /// Where a failure skipped under `Ignore` is noted (the attempt's).
    pub(super) ignored: Option<IgnoredCalls>,
    /// Raw scores asked for, to keep for alike pods and normalise here.
    pub(super) fill: Option<Fill>,
}

impl RemoteScoreCall {
    pub(super) fn result(&mut self) -> Result<(Vec<i64>, bool), Status> {
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
        if self.score_label().is_some() {
            return self.label_pre_score(state);
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
            self.meta.status_reply(reply, g)
        })();
        match self.policy(Some(state), "PreScore", r, Status::skip) {
            Ok(s) | Err(s) => s,
        }
    }

    fn deferrable(&self) -> bool {
        self.score_label().is_none()
    }

    fn start_pre_score(&self, state: &mut CycleState) {
        if self.score_label().is_some() && !self.absent(pb::ExtensionPoint::PreScore) {
            self.start_label_pre_score(state);
        }
    }
}

impl ScorePlugin for RemotePlugin {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        if self.absent(pb::ExtensionPoint::Score) {
            return Ok(0);
        }
        // One node outside the batched path: score it un-normalised.
        if let Some(key) = self.score_label() {
            if let Some(table) = self.label_table(state) {
                return Ok(node
                    .node()
                    .labels
                    .get(key)
                    .and_then(|v| table.get(v))
                    .copied()
                    .unwrap_or(0));
            }
        }
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
            if let Some(ready) = self
                .score_label()
                .and_then(|key| self.label_scores(state, key, nodes))
            {
                return Ok(answered(ready));
            }
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
            let fill = alike
                .filter(|_| declared.scores)
                .and_then(|(epoch, sig)| Fill::new(epoch, sig, nodes.iter().map(|n| &**n)));
            let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
            let (span, traceparent) = self.call_trace(state, "Score", nodes.len());
            if with_pre_score {
                // Its outcome is read by the sidecar's Score, which waits for it; its
                // reply is owed, and dropped on arrival.
                let id = self.ep().next_request_id();
                let pre_score = Outbound::PreScore(pb::PreScoreRequest {
                    request_id: id,
                    plugin: self.meta.name.to_string(),
                    cycle,
                    generation: g,
                    nodes: ids.clone(),
                    traceparent: traceparent.clone(),
                });
                let sent = self.ep().send_unread(&streams, id, pre_score);
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
