//! Scoring: PreScore (recorded for a Score sent right behind it), Score over a batch
//! of nodes (in parallel for big batches) with NormalizeScore when asked, the
//! standalone NormalizeScore, and score-ahead: PreScore, Score and NormalizeScore
//! over the first passing nodes of a Filter batch, answered with the Filter reply.

use std::collections::HashMap;
use std::sync::Mutex;

use rayon::prelude::*;
use tokio::sync::Notify;

use super::replica::nodes_by_id;
use super::{lock, read, write, CycleEntry, Shared};
use crate::label_score;
use crate::pb;
use crate::plugin::{Cycle, Plugin, ScorePlugin};
use crate::snapshot::NodeInfo;
use crate::state::CycleState;
use crate::status::Status;

impl Shared {
    /// PreScore (on a fork, so a later PreScore call is unaffected), Score and
    /// NormalizeScore over the first `score_first` passing items of a Filter batch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn score_ahead(
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

    pub(super) async fn score(&self, req: pb::ScoreRequest) -> pb::ScoreResponse {
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
            .cycle(
                req.cycle,
                req.generation,
                plugin.answers_at_named_generation(),
            )
            .await?;
        let (label, sp) = (plugin.as_label_score(), plugin.as_score());
        if label.is_none() && sp.is_none() {
            return Err(Status::error(format!(
                "plugin {:?} has no Score",
                req.plugin
            )));
        }
        if req.after_pre_score {
            let s = self.pre_score_outcome(&entry, idx).await?;
            if !s.is_success() {
                return Err(s);
            }
        }
        let replica = self.replica_at(&entry, plugin.answers_at_named_generation())?;
        let state = read(&entry.states[idx]);
        let nodes = nodes_by_id(&replica, &req.nodes)?;
        match (label, sp) {
            (Some(lp), _) => label_score::scores(lp, &state, &nodes, req.normalize),
            (None, Some(sp)) => {
                let cycle = entry.view(&replica);
                self.score_nodes(sp, &cycle, &state, &nodes, req.normalize)
            }
            (None, None) => Err(Status::error(format!(
                "plugin {:?} has no Score",
                req.plugin
            ))),
        }
    }

    /// Waits for this cycle's PreScore of plugin `idx` (sent just before the Score).
    async fn pre_score_outcome(&self, entry: &CycleEntry, idx: usize) -> Result<Status, Status> {
        self.outcome(
            entry,
            &entry.pre_scores,
            &entry.pre_score_done,
            idx,
            "Score named a PreScore",
        )
        .await
    }

    /// Waits until `outcomes` holds plugin `idx`'s (a call sent right behind the one
    /// that records it), bounded by the generation wait; `what` names the pair.
    pub(super) async fn outcome(
        &self,
        entry: &CycleEntry,
        outcomes: &Mutex<HashMap<usize, Status>>,
        done: &Notify,
        idx: usize,
        what: &str,
    ) -> Result<Status, Status> {
        let wait = async {
            loop {
                let notified = done.notified();
                if let Some(s) = lock(outcomes).get(&idx) {
                    return s.clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(self.generation_wait, wait)
            .await
            .map_err(|_| {
                Status::error(format!(
                    "{what} of cycle {} that did not arrive within {:?}",
                    entry.id, self.generation_wait
                ))
            })
    }

    pub(super) async fn pre_score(&self, req: pb::PreScoreRequest) -> pb::PreScoreResponse {
        let (s, label_scores) = match self.pre_score_inner(&req).await {
            Ok(r) => r,
            Err(s) => (s, None),
        };
        let r = Self::status_reply(req.request_id, req.generation, s);
        pb::PreScoreResponse {
            request_id: r.request_id,
            status: r.status,
            generation: r.generation,
            label_scores,
        }
    }

    /// The status, and a label-scoring plugin's table when it succeeded.
    async fn pre_score_inner(
        &self,
        req: &pb::PreScoreRequest,
    ) -> Result<(Status, Option<pb::LabelScores>), Status> {
        let (idx, plugin) = self.plugin(&req.plugin)?;
        let entry = self
            .cycle(
                req.cycle,
                req.generation,
                plugin.answers_at_named_generation(),
            )
            .await?;
        let record = |s: Status| {
            lock(&entry.pre_scores).insert(idx, s.clone());
            entry.pre_score_done.notify_waiters();
            s
        };
        if let Some(lp) = plugin.as_label_score() {
            let replica = match self.replica_at(&entry, plugin.answers_at_named_generation()) {
                Ok(r) => r,
                Err(s) => return Ok((record(s), None)),
            };
            let cycle = entry.view(&replica);
            let mut state = write(&entry.states[idx]);
            let s = label_score::pre_score(lp, &cycle, &mut state);
            let table = s.is_success().then(|| label_score::reply(&state)).flatten();
            return Ok((record(s), table));
        }
        let Some(p) = plugin.as_pre_score() else {
            return Ok((
                record(Status::error(format!(
                    "plugin {:?} has no PreScore",
                    req.plugin
                ))),
                None,
            ));
        };
        let replica = match self.replica_at(&entry, plugin.answers_at_named_generation()) {
            Ok(r) => r,
            Err(s) => return Ok((record(s), None)),
        };
        let nodes = match nodes_by_id(&replica, &req.nodes) {
            Ok(n) => n,
            Err(s) => return Ok((record(s), None)),
        };
        let cycle = entry.view(&replica);
        let s = p.pre_score(&cycle, &mut write(&entry.states[idx]), &nodes);
        Ok((record(s), None))
    }

    pub(super) async fn normalize_score(
        &self,
        req: pb::NormalizeScoreRequest,
    ) -> pb::ScoreResponse {
        let mut out = pb::ScoreResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        let r = async {
            let (idx, plugin) = self.plugin(&req.plugin)?;
            let entry = self
                .cycle(
                    req.cycle,
                    req.generation,
                    plugin.answers_at_named_generation(),
                )
                .await?;
            let p = plugin
                .as_score()
                .filter(|p| has_normalize(*p))
                .ok_or_else(|| {
                    Status::error(format!("plugin {:?} has no NormalizeScore", req.plugin))
                })?;
            let replica = self.replica_at(&entry, plugin.answers_at_named_generation())?;
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
}

/// Whether the plugin has a NormalizeScore: its own, or a standard one it declared.
pub(crate) fn has_normalize(sp: &dyn ScorePlugin) -> bool {
    sp.has_normalize() || sp.score_normalization() != pb::ScoreNormalization::Custom
}
