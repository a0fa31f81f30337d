//! Switchyard's batching of remote Filter calls: lookahead (the queue's next pods'
//! first Filter round sent while the current pod is in its cycle), score-ahead, and
//! Filter over many nodes or dry-run copies in one exchange per sidecar. Answers are
//! used only where they equal what node-by-node evaluation gives.

use super::*;
use crate::framework::node_info::prefetch_ahead;

impl Framework {
    /// Lookahead: while the current pod is still in its cycle, sends `pod`'s (the
    /// queue's next) batched Filter over `nodes`, the first round its attempt will
    /// evaluate, to the remote plugins that allow it. The returned state is where that
    /// attempt begins ([`cycle_start`](CycleHooks::cycle_start) adopts it); answers
    /// are used only if that round names the same unchanged nodes, so placements are
    /// what they would be without it. None when no plugin took part.
    pub fn lookahead(
        &self,
        cycle_id: u64,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        nodes: &[&NodeInfo],
        score_first: usize,
    ) -> Option<CycleState> {
        if !self.has_batch_filters() {
            return None;
        }
        let mut state = CycleState::new();
        state.cycle_id = cycle_id;
        let mut started = false;
        for h in &self.cycle_hooks {
            started |= h.lookahead_start(&mut state, pod, snapshot, &self.profile_name);
        }
        if !started {
            return None;
        }
        let mut sent = false;
        for (i, e) in self.filter.iter().enumerate() {
            if !self.batch_filters.contains(i) {
                continue;
            }
            if let Some(b) = e.plugin.as_filter().and_then(|f| f.as_batch()) {
                sent |= b.lookahead_filter(&mut state, pod, nodes, self.ahead_for(i, score_first));
            }
        }
        if !sent {
            self.end_cycle(&state);
            return None;
        }
        Some(state)
    }

    /// How many queued pods one lookahead may cover: the most any of this profile's
    /// sidecars takes in one message (0 when none is node-local).
    pub fn lookahead_pods(&self) -> usize {
        self.cycle_hooks
            .iter()
            .map(|h| h.lookahead_pods())
            .max()
            .unwrap_or(0)
    }

    /// [`Self::lookahead`] for several queued pods (cycle id, pod, first round's
    /// nodes), their Filter calls to each sidecar travelling in one message.
    pub fn lookahead_batch(
        &self,
        pods: &[(u64, Arc<Pod>, Vec<&NodeInfo>)],
        snapshot: &Snapshot,
        score_first: usize,
    ) -> Vec<Option<CycleState>> {
        for h in &self.cycle_hooks {
            h.begin_lookahead_batch();
        }
        let out = pods
            .iter()
            .map(|(id, pod, nodes)| self.lookahead(*id, pod, snapshot, nodes, score_first))
            .collect();
        for h in &self.cycle_hooks {
            h.end_lookahead_batch();
        }
        out
    }

    /// The score-ahead request for batch filter `i` (see [`ScoreAhead`]).
    pub(super) fn ahead_for(&self, i: usize, score_first: usize) -> Option<ScoreAhead> {
        match self.filter_scores_ahead[i] {
            Some(pre_score) if score_first > 0 => Some(ScoreAhead {
                first: score_first,
                pre_score,
            }),
            _ => None,
        }
    }

    /// Whether some Filter plugin evaluates batches (remote plugins).
    pub fn has_batch_filters(&self) -> bool {
        !self.batch_filters.is_empty()
    }

    /// Filter over a batch of nodes without nominated pods when some Filter plugins
    /// are remote: their calls go out first, the in-process plugins run meanwhile, and
    /// each node's status is the first failure in plugin order — what running the
    /// plugins node by node gives. Returns the failing nodes by index, in order.
    /// `score_first`: how many feasible nodes the caller still needs (0: no scoring
    /// follows); remote plugins that also score are asked to score that many ahead.
    pub fn run_filter_plugins_batched(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[&Arc<NodeInfo>],
        parallel: Parallelism,
        score_first: usize,
    ) -> Result<Vec<(usize, Status)>, Status> {
        let refs: Vec<&NodeInfo> = nodes.iter().map(|n| &***n).collect();
        self.filter_batch(
            &[state],
            pod,
            &refs,
            parallel,
            score_first,
            NodeSource::Snapshot,
        )
    }

    /// Filter for preemption's dry runs over many node copies at once, each with its
    /// own state fork and nominated pods: what
    /// [`run_filter_plugins_with_nominated_pods_mut`](Self::run_filter_plugins_with_nominated_pods_mut)
    /// gives per copy, but remote plugins answer every copy without relevant nominated
    /// pods in one batched call (each item carrying its what-if delta), so a reprieve
    /// step over many candidate nodes is one exchange.
    pub fn run_filter_plugins_what_if(
        &self,
        pod: &Pod,
        items: &mut [(&CycleState, &mut NodeInfo, &[NominatedPod])],
    ) -> Vec<Status> {
        let one = |(st, ni, nominated): &mut (&CycleState, &mut NodeInfo, &[NominatedPod])| {
            self.run_filter_plugins_with_nominated_pods_mut(st, pod, ni, nominated)
        };
        if !self.has_batch_filters() || items.len() < 2 {
            let min_len = PARALLEL_CHUNK.min(items.len().max(1));
            return items
                .par_iter_mut()
                .with_min_len(min_len)
                .map(one)
                .collect();
        }
        let mut out: Vec<Status> = vec![Status::success(); items.len()];
        let mut batched = Vec::with_capacity(items.len());
        for (i, it) in items.iter_mut().enumerate() {
            if relevant_nominated(pod, it.2).is_empty() {
                batched.push(i);
            } else {
                out[i] = one(it);
            }
        }
        let states: Vec<&CycleState> = batched.iter().map(|&i| items[i].0).collect();
        let refs: Vec<&NodeInfo> = batched.iter().map(|&i| &*items[i].1).collect();
        match self.filter_batch(
            &states,
            pod,
            &refs,
            Parallelism::for_nodes(refs.len()),
            0,
            NodeSource::WhatIf,
        ) {
            Ok(failures) => {
                for (k, s) in failures {
                    out[batched[k]] = s;
                }
            }
            Err(s) => {
                for &i in &batched {
                    out[i] = s.clone();
                }
            }
        }
        out
    }

    /// Batched Filter: `states` holds one state for every node, or one for all;
    /// `source` as in [`BatchFilter::start_filter`].
    fn filter_batch(
        &self,
        states: &[&CycleState],
        pod: &Pod,
        refs: &[&NodeInfo],
        parallel: Parallelism,
        score_first: usize,
        source: NodeSource,
    ) -> Result<Vec<(usize, Status)>, Status> {
        let Some(&state) = states.first() else {
            return Ok(Vec::new());
        };
        let state_of = |i: usize| if states.len() == 1 { state } else { states[i] };
        let skip = state.skip_filter_plugins;
        let mut pending = Vec::new();
        for (i, e) in self.filter.iter().enumerate() {
            if !self.batch_filters.contains(i) || skip.contains(i) {
                continue;
            }
            if let Some(b) = e.plugin.as_filter().and_then(|f| f.as_batch()) {
                let ahead = self.ahead_for(i, score_first);
                let call = b
                    .start_filter(state, pod, refs, ahead, source)
                    .map_err(|s| {
                        wrap(format!(
                            "running {:?} filter plugin: {}",
                            e.name,
                            s.message()
                        ))
                    })?;
                pending.push((i, call));
            }
        }
        // The batched plugins answer by call, the rest here.
        let run = self.filter_run(state, self.batch_filters);
        // The in-process path's prefetch (see `find_nodes_that_pass_filters`): a round's
        // node infos are mostly cold, and the first plugin to read one waits for memory.
        let local = |k: usize| -> Option<(usize, Status)> {
            prefetch_ahead(refs, k);
            run.first_failure(state_of(k), pod, refs[k])
        };
        let mut first: Vec<Option<(usize, Status)>> = match parallel {
            Parallelism::Adaptive => filter_map_adaptive(refs.len(), |k| Some(local(k))),
            Parallelism::Serial => (0..refs.len()).map(local).collect(),
        };
        for (pi, call) in pending {
            let failures = call.wait().map_err(|s| {
                wrap(format!(
                    "running {:?} filter plugin: {}",
                    self.filter[pi].name,
                    s.message()
                ))
            })?;
            for (ni, s) in failures {
                let Some(slot) = first.get_mut(ni) else {
                    continue;
                };
                if slot.as_ref().is_none_or(|(i, _)| pi < *i) {
                    *slot = Some((pi, s));
                }
            }
        }
        Ok(first
            .into_iter()
            .enumerate()
            .filter_map(|(ni, f)| {
                let (pi, s) = f?;
                let name = &self.filter[pi].name;
                let s = if s.is_rejected() {
                    s
                } else {
                    wrap(format!("running {:?} filter plugin: {}", name, s.message()))
                };
                Some((ni, s.with_plugin(name)))
            })
            .collect())
    }
}
