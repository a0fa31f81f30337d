//! PreScore, Score, NormalizeScore and weighting (upstream `RunPreScorePlugins`,
//! `RunScorePlugins`).

use super::parallel::worth_parallel;
use super::*;

impl Framework {
    /// PreScore plugins; Skip marks the plugin's Score to be skipped.
    pub fn run_pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let mut skip = PluginSet::default();
        let mut deferred = PluginSet::default();
        state.deferred_pre_score = deferred;
        for (i, e) in self.pre_score.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_score() else {
                continue;
            };
            if p.deferrable() {
                if let Some(si) = self.pre_score_to_score[i] {
                    if self.score[si]
                        .entry
                        .plugin
                        .as_score()
                        .is_some_and(|s| s.as_batch().is_some())
                    {
                        deferred.insert(si);
                        continue;
                    }
                }
            }
            let s = p.pre_score(state, pod, nodes, snapshot);
            if s.is_skip() {
                if let Some(si) = self.pre_score_to_score[i] {
                    skip.insert(si);
                }
                continue;
            }
            if !s.is_success() {
                state.skip_score_plugins = skip;
                return wrap(format!(
                    "running PreScore plugin {:?}: {}",
                    e.name,
                    s.message()
                ))
                .with_plugin(&e.name);
            }
        }
        state.skip_score_plugins = skip;
        state.deferred_pre_score = deferred;
        Status::success()
    }

    /// Score, NormalizeScore and weighting over `nodes` (upstream `RunScorePlugins`):
    /// nodes are split into chunks, each plugin scoring a whole chunk at once, in
    /// parallel when the first chunk's time says it pays; totals land in `buf.totals`
    /// in input order.
    pub fn run_score_plugins(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        buf: &mut ScoreBuffer,
    ) -> Result<(), Status> {
        let active: Vec<usize> = (0..self.score.len())
            .filter(|i| !state.skip_score_plugins.contains(*i))
            .collect();
        let np = active.len();
        let n = nodes.len();
        buf.totals.clear();
        buf.totals.resize(n, 0);
        if np == 0 || n == 0 {
            return Ok(());
        }
        buf.scores.clear();
        buf.scores.resize(n * np, 0);
        // Remote plugins' calls go out before the in-process scoring starts.
        let mut remote = Vec::new();
        for (slot, &pi) in active.iter().enumerate() {
            let e = &self.score[pi].entry;
            if let Some(b) = e.plugin.as_score().and_then(|p| p.as_batch()) {
                let call = b
                    .start_score(state, pod, nodes, state.deferred_pre_score.contains(pi))
                    .map_err(|s| {
                        wrap(format!(
                            "running Score plugins: plugin {:?} failed with: {}",
                            e.name,
                            s.message()
                        ))
                        .with_plugin(&e.name)
                    })?;
                remote.push((slot, call));
            }
        }
        let mut remote_results: Vec<(usize, Vec<i64>, bool)> = Vec::new();
        // Chunk-major layout: chunk k holds, plugin by plugin, the scores of its nodes.
        let chunk = if n >= PARALLEL_THRESHOLD {
            n.div_ceil(rayon::current_num_threads().max(1) * 4)
                .max(PARALLEL_CHUNK)
        } else {
            n
        };
        let entries = &self.score;
        let score_chunk = |(scores, nodes): (&mut [i64], &[Arc<NodeInfo>])| -> Result<(), Status> {
            let len = nodes.len();
            for (slot, &pi) in active.iter().enumerate() {
                let e = &entries[pi].entry;
                let Some(p) = e.plugin.as_score() else {
                    continue;
                };
                if p.as_batch().is_some() {
                    continue;
                }
                p.score_nodes(state, pod, nodes, &mut scores[slot * len..(slot + 1) * len])
                    .map_err(|s| {
                        wrap(format!(
                            "running Score plugins: plugin {:?} failed with: {}",
                            e.name,
                            s.message()
                        ))
                        .with_plugin(&e.name)
                    })?;
            }
            Ok(())
        };
        if chunk < n {
            // The first chunk here, timed; the rest in parallel only if it pays (see
            // filter_map_adaptive). The layout is the same either way.
            let (head, tail) = buf.scores.split_at_mut(chunk * np);
            let t0 = Instant::now();
            score_chunk((head, &nodes[..chunk]))?;
            if worth_parallel(t0.elapsed(), chunk, n - chunk, rayon::current_num_threads()) {
                tail.par_chunks_mut(chunk * np)
                    .zip(nodes[chunk..].par_chunks(chunk))
                    .try_for_each(score_chunk)?;
            } else {
                tail.chunks_mut(chunk * np)
                    .zip(nodes[chunk..].chunks(chunk))
                    .try_for_each(score_chunk)?;
            }
        } else {
            score_chunk((&mut buf.scores[..], nodes))?;
        }
        for (slot, call) in remote {
            let e = &self.score[active[slot]].entry;
            let (scores, normalized) = call.wait().map_err(|s| {
                wrap(format!(
                    "running Score plugins: plugin {:?} failed with: {}",
                    e.name,
                    s.message()
                ))
                .with_plugin(&e.name)
            })?;
            remote_results.push((slot, scores, normalized));
        }
        let at = |node: usize, slot: usize| -> usize {
            let k = node / chunk;
            let start = k * chunk;
            let len = chunk.min(n - start);
            start * np + slot * len + (node - start)
        };
        // NormalizeScore per plugin, then range check and weights.
        for (slot, &pi) in active.iter().enumerate() {
            let e = &self.score[pi];
            let Some(p) = e.entry.plugin.as_score() else {
                continue;
            };
            buf.column.clear();
            let mut normalized = false;
            match remote_results.iter_mut().find(|(s, _, _)| *s == slot) {
                Some((_, scores, norm)) => {
                    buf.column.append(scores);
                    normalized = *norm;
                }
                None => buf.column.extend((0..n).map(|i| buf.scores[at(i, slot)])),
            }
            if p.has_normalize_score() && !normalized {
                let s = p.normalize_score(state, pod, nodes, &mut buf.column);
                if !s.is_success() {
                    return Err(wrap(format!(
                        "running Normalize on Score plugins: plugin {:?} failed with: {}",
                        e.entry.name,
                        s.message()
                    ))
                    .with_plugin(&e.entry.name));
                }
            }
            for (total, &v) in buf.totals.iter_mut().zip(buf.column.iter()) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&v) {
                    return Err(wrap(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {v}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.entry.name
                    ))
                    .with_plugin(&e.entry.name));
                }
                *total += v * e.weight;
            }
        }
        Ok(())
    }
}
