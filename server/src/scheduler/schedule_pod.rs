//! Finding a node (upstream `schedulePod`, `findNodesThatFitPod`,
//! `findNodesThatPassFilters`, `prioritizeNodes`, `selectHost`): PreFilter, Filter
//! over nodes (in parallel, stopping once enough fit), PreScore, Score, and a pick
//! among the best.

use std::sync::Arc;
use std::time::Instant;

use super::cycle::{LoopState, ScheduleError, ScheduleResult};
use super::observer::extension_point_metric;
use super::Scheduler;
use crate::framework::cycle_state::PluginSet;
use crate::framework::diagnosis::Diagnosis;
use crate::framework::node_info::{prefetch, PREFETCH_AHEAD};
use crate::framework::runtime::{filter_map_adaptive_into, Parallelism, PARALLEL_THRESHOLD};
use crate::framework::{Code, CycleState, FirstRound, Framework, NodeInfo, PluginName, Status};
use crate::model::Pod;
use crate::queue::NominatedPods;

/// At least this many nodes are checked for feasibility per cycle.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;

/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

/// Upstream `numFeasibleNodesToFind`: all nodes under 100; otherwise the percentage
/// (adaptive `50 - n/125`, at least 5% when unset) of them, at least 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let n = num_all_nodes as i64;
    let mut p = i64::from(percentage);
    if p == 0 {
        p = (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    let num = (n * p / 100) as usize;
    num.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// The feasible nodes of a Filter phase and what it learnt about the others.
type Found = (Vec<Arc<NodeInfo>>, Diagnosis);
impl Scheduler {
    /// Upstream `schedulePod`.
    pub(super) fn schedule_pod(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
    ) -> Result<ScheduleResult, ScheduleError> {
        self.cache().update_snapshot(&mut st.snapshot);
        fw.start_cycle(state, pod, &st.snapshot);
        let num_nodes = st.snapshot.num_nodes();
        if num_nodes == 0 {
            return Err(ScheduleError::NoNodes);
        }
        let nominated = self.queue.nominated_pods();
        let (feasible, diag) = self.find_nodes_that_fit_pod(st, fw, state, pod, &nominated)?;
        if feasible.is_empty() {
            return Err(ScheduleError::Fit(Box::new(diag), num_nodes));
        }
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                host: feasible[0].node().name.clone(),
                evaluated_nodes: 1 + diag.filter_rejected,
                feasible_nodes: 1,
            });
        }
        // PreScore and Score are pipelined (remote plugins get both in one call).
        let score = state.trace.extension_point("Score").entered();
        let t = Instant::now();
        let host = self.prioritize_and_select(st, fw, state, pod, &feasible);
        let code = host.as_ref().map_or_else(|s| s.code(), |_| Code::Success);
        extension_point_metric("Score", code, fw, t);
        let host = host.map_err(ScheduleError::Error)?;
        drop(score);
        Ok(ScheduleResult {
            host,
            evaluated_nodes: feasible.len() + diag.filter_rejected,
            feasible_nodes: feasible.len(),
        })
    }

    /// Upstream `findNodesThatFitPod`. Remote PreFilters are started without waiting
    /// (their calls travel while the in-process plugins and Filter run) unless the
    /// pod or others are nominated; when one did not turn out a plain Success, the
    /// phase is redone as upstream runs it, with their outcomes.
    fn find_nodes_that_fit_pod(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        nominated: &NominatedPods,
    ) -> Result<(Vec<Arc<NodeInfo>>, Diagnosis), ScheduleError> {
        let start = nominated.is_empty() && pod.nominated_node_name.is_none();
        if let Some(found) = self.find_nodes_once(st, fw, state, pod, nominated, start)? {
            return Ok(found);
        }
        let found = self.find_nodes_once(st, fw, state, pod, nominated, false)?;
        found.ok_or_else(|| {
            ScheduleError::Error(Status::error("the PreFilter phase could not be confirmed"))
        })
    }

    /// One Filter phase: the feasible nodes and the diagnosis; `None` when PreFilters were started (`start`) and the phase
    /// must be redone without starting them.
    fn find_nodes_once(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        nominated: &NominatedPods,
        start: bool,
    ) -> Result<Option<Found>, ScheduleError> {
        let mut diag = Diagnosis::default();
        let pre_filter = state.trace.extension_point("PreFilter").entered();
        let t = Instant::now();
        let first = self.first_round(st, fw, pod, nominated);
        if let Some(fr) = first {
            state.write(fr);
        }
        let (pre_res, s, plugins_with_nodes) = if start {
            fw.run_pre_filter_plugins_started(state, pod, &st.snapshot)
        } else {
            fw.run_pre_filter_plugins(state, pod, &st.snapshot)
        };
        if first.is_some() {
            state.delete::<FirstRound>();
        }
        let started = !state.started_pre_filter.is_empty();
        if started && !s.is_success() {
            // A started PreFilter earlier in the order may decide instead.
            state.started_pre_filter = Default::default();
            return Ok(None);
        }
        extension_point_metric("PreFilter", s.code(), fw, t);
        drop(pre_filter);
        diag.unschedulable_plugins = plugins_with_nodes.iter().cloned().collect();
        if !s.is_success() {
            if !s.is_rejected() {
                return Err(ScheduleError::Error(s));
            }
            diag.pre_filter_msg = s.message();
            diag.add_plugin_status(&s);
            diag.node_to_status.set_absent(s);
            return Ok(Some((Vec::new(), diag)));
        }

        // A pod nominated by an earlier preemption tries its nominated node first.
        if let Some(nnn) = &pod.nominated_node_name {
            if let Some(ni) = st.snapshot.get(nnn).cloned() {
                let s = fw.run_filter_plugins_with_nominated_pods(
                    state,
                    pod,
                    &ni,
                    nominated.get(nnn).map_or(&[][..], |v| &v[..]),
                );
                if s.is_success() {
                    return Ok(Some((vec![ni], diag)));
                }
                if s.code() == Code::Error {
                    tracing::error!(pod = %pod.key(), node = %nnn, status = %s, "evaluation failed on nominated node");
                }
            }
        }

        let all = st.snapshot.num_nodes();
        let nodes: Vec<Arc<NodeInfo>>;
        let node_list: &[Arc<NodeInfo>] = if pre_res.all_nodes() {
            st.snapshot.node_infos()
        } else {
            // The named nodes that exist, in snapshot order, found by name: a
            // PreFilter naming one node of 15,000 (a DaemonSet pod's NodeAffinity)
            // costs one lookup, not a pass over every node. Upstream looks them up
            // the same way but in its map's random order.
            let all_infos = st.snapshot.node_infos();
            let mut at: Vec<usize> = pre_res
                .node_names
                .iter()
                .flatten()
                .filter_map(|n| st.snapshot.position(n))
                .collect();
            at.sort_unstable();
            at.dedup();
            nodes = at
                .iter()
                .filter_map(|&i| all_infos.get(i).cloned())
                .collect();
            let mut plugins: Vec<&str> = plugins_with_nodes.iter().map(|p| &**p).collect();
            plugins.sort();
            diag.node_to_status.set_absent(Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                plugins.join(" ")
            )));
            &nodes
        };
        // Split borrows: the node list may borrow the snapshot.
        let filter = state.trace.extension_point("Filter").entered();
        let t = Instant::now();
        let feasible = {
            let percentage = fw
                .percentage_of_nodes_to_score()
                .unwrap_or(self.percentage_of_nodes_to_score);
            find_nodes_that_pass_filters(
                fw,
                state,
                pod,
                &mut diag,
                node_list,
                percentage,
                st.next_start_node_index,
                &mut st.filter_failures,
                nominated,
            )
        };
        let code = feasible
            .as_ref()
            .map_or_else(|s| s.code(), |_| Code::Success);
        extension_point_metric("Filter", code, fw, t);
        drop(filter);
        if started && !fw.confirm_started_pre_filters(state) {
            return Ok(None);
        }
        match feasible {
            Ok(feasible) => {
                let processed = feasible.len() + diag.filter_rejected;
                if all > 0 {
                    st.next_start_node_index = (st.next_start_node_index + processed) % all;
                }
                if !feasible.is_empty() && nominated.is_empty() {
                    self.lookahead(st, processed);
                }
                st.last_processed = processed;
                Ok(Some((feasible, diag)))
            }
            Err(s) => Err(ScheduleError::Error(s)),
        }
    }

    /// How many feasible nodes an attempt of profile `fw` looks for among `n` (the
    /// Filter phase's `numFeasibleNodesToFind`; 1 when nothing scores).
    pub(super) fn feasible_nodes_to_find(&self, fw: &Framework, n: usize) -> usize {
        let percentage = fw
            .percentage_of_nodes_to_score()
            .unwrap_or(self.percentage_of_nodes_to_score);
        if fw.has_score_plugins() {
            num_feasible_nodes_to_find(percentage, n)
        } else {
            1
        }
    }

    /// The first Filter round this attempt will evaluate if no PreFilter narrows the
    /// nodes (see [`FirstRound`]), for remote plugins to send right behind their
    /// PreFilter. None when the attempt will not evaluate one in a batch: no remote
    /// Filter plugin, a nominated node tried first, nominated pods about.
    fn first_round(
        &self,
        st: &LoopState,
        fw: &Framework,
        pod: &Pod,
        nominated: &NominatedPods,
    ) -> Option<FirstRound> {
        let n = st.snapshot.num_nodes();
        if n == 0
            || !fw.has_batch_filters()
            || pod.nominated_node_name.is_some()
            || !nominated.is_empty()
        {
            return None;
        }
        let to_find = self.feasible_nodes_to_find(fw, n);
        Some(FirstRound {
            start: st.next_start_node_index % n,
            len: filter_round(to_find, n),
            score_first: if to_find > 1 { to_find } else { 0 },
            ahead: None,
        })
    }

    /// PreScore, Score, and a uniformly random pick among the best (upstream
    /// `prioritizeNodes` + `selectHost`).
    fn prioritize_and_select(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        feasible: &[Arc<NodeInfo>],
    ) -> Result<Arc<str>, Status> {
        if !fw.has_score_plugins() {
            let i = st.rng.below(feasible.len());
            return Ok(feasible[i].node().name.clone());
        }
        let s = fw.run_pre_score_plugins(state, pod, feasible, &st.snapshot);
        if !s.is_success() {
            return Err(s);
        }
        fw.run_score_plugins(state, pod, feasible, &mut st.scores)?;
        let totals = &st.scores.totals;
        let mut best = i64::MIN;
        let mut chosen = 0usize;
        let mut ties = 0usize;
        for (i, &t) in totals.iter().enumerate() {
            if t > best {
                best = t;
                chosen = i;
                ties = 1;
            } else if t == best {
                ties += 1;
                if st.rng.below(ties) == 0 {
                    chosen = i;
                }
            }
        }
        Ok(feasible[chosen].node().name.clone())
    }
}

/// How many nodes a Filter round checks to find `need` more feasible ones among `left`:
/// a margin for some failing, so one round usually suffices.
pub(super) fn filter_round(need: usize, left: usize) -> usize {
    (need + need / 4 + 16).min(left)
}

/// The size of a later round, from what the rounds so far found (`found` feasible among
/// `checked`, the last round `prev` nodes): the pass rate seen so far, with the same
/// margin, and at least four times the last round when nothing passed. A pod that fits
/// few nodes then takes three rounds of 5,000 nodes, not eight: each round is a
/// parallel fork and join. Round sizes never change the result, only the work past it.
fn next_filter_round(need: usize, left: usize, checked: usize, found: usize, prev: usize) -> usize {
    let want = if found == 0 {
        prev.saturating_mul(4)
    } else {
        let at_rate = need.saturating_mul(checked).div_ceil(found);
        at_rate.saturating_add(at_rate / 4 + 16)
    };
    want.max(filter_round(need, left)).min(left)
}

/// Upstream `findNodesThatPassFilters`: checks nodes from `start` onwards (wrapping) in
/// rounds, in parallel when a round's projected work pays for it
/// ([`filter_map_adaptive_into`]), stopping once `numFeasibleNodesToFind` fit. Rounds keep the
/// result deterministic: the feasible nodes are the first ones in list order.
///
/// The rejected nodes are counted in `diag.filter_rejected`; their statuses go into
/// `diag.node_to_status` (named, with their plugins in the diagnosis) only when no node
/// fits, the only case that reads them. A pod that fits one node of 5,000 would
/// otherwise clone 4,999 node names, each a cache miss, to throw them away.
#[allow(clippy::too_many_arguments)]
fn find_nodes_that_pass_filters(
    fw: &Framework,
    state: &CycleState,
    pod: &Pod,
    diag: &mut Diagnosis,
    nodes: &[Arc<NodeInfo>],
    percentage: i32,
    start: usize,
    failures: &mut Vec<(usize, Status)>,
    nominated: &NominatedPods,
) -> Result<Vec<Arc<NodeInfo>>, Status> {
    let n = nodes.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut to_find = num_feasible_nodes_to_find(percentage, n);
    if !fw.has_score_plugins() {
        to_find = 1;
    }
    // `(start + i) % n` without a division per node (the prefetch asks past the end).
    let start = start % n;
    let at = |i: usize| {
        let j = start + i;
        &nodes[if j < n {
            j
        } else if j < 2 * n {
            j - n
        } else {
            j % n
        }]
    };
    if !fw.has_filter_plugins() {
        return Ok((0..to_find.min(n)).map(|i| at(i).clone()).collect());
    }
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::with_capacity(to_find);
    let mut offset = 0usize;
    let run = fw.filter_run(state, PluginSet::default());
    let check = |ni: &Arc<NodeInfo>| -> Status {
        if nominated.is_empty() {
            run.run(state, pod, ni)
        } else {
            match nominated.get(&ni.node().name) {
                Some(np) => fw.run_filter_plugins_with_nominated_pods(state, pod, ni, np),
                None => run.run(state, pod, ni),
            }
        }
    };
    // Rejections so far, by position from `start`, in order; only failures are
    // materialised, as most nodes usually pass.
    failures.clear();
    let mut round = 0usize;
    while offset < n && feasible.len() < to_find {
        let need = to_find - feasible.len();
        round = if offset == 0 {
            // The first round matches `FirstRound`'s (remote answers sent ahead).
            filter_round(need, n)
        } else {
            next_filter_round(need, n - offset, offset, feasible.len(), round)
        };
        let round_start = failures.len();
        if fw.has_batch_filters() {
            // Remote plugins get the round's nodes in one call; nodes with nominated
            // pods take the node-by-node path (its what-if deltas).
            let mut plain: Vec<&Arc<NodeInfo>> = Vec::with_capacity(round);
            let mut plain_at: Vec<usize> = Vec::with_capacity(round);
            for i in 0..round {
                let ni = at(offset + i);
                if !nominated.is_empty() && nominated.contains_key(&ni.node().name) {
                    let s = check(ni);
                    if !s.is_success() {
                        failures.push((offset + i, s));
                    }
                } else {
                    plain.push(ni);
                    plain_at.push(i);
                }
            }
            let score_first = if to_find > 1 { need } else { 0 };
            let found = fw.run_filter_plugins_batched(
                state,
                pod,
                &plain,
                Parallelism::for_nodes(round),
                score_first,
            )?;
            failures.extend(found.into_iter().map(|(k, s)| (offset + plain_at[k], s)));
            failures[round_start..].sort_by_key(|(i, _)| *i);
        } else if round >= PARALLEL_THRESHOLD {
            filter_map_adaptive_into(
                round,
                |i| {
                    prefetch(at(offset + i + PREFETCH_AHEAD));
                    let s = check(at(offset + i));
                    (!s.is_success()).then_some((offset + i, s))
                },
                failures,
            );
        } else {
            for i in 0..round {
                prefetch(at(offset + i + PREFETCH_AHEAD));
                let s = check(at(offset + i));
                if !s.is_success() {
                    failures.push((offset + i, s));
                }
            }
        }
        let mut next = round_start;
        for i in offset..offset + round {
            if failures.get(next).is_some_and(|(fi, _)| *fi == i) {
                if failures[next].1.code() == Code::Error {
                    return Err(std::mem::take(&mut failures[next].1));
                }
                next += 1;
            } else {
                feasible.push(at(i).clone());
                if feasible.len() == to_find {
                    // Nodes after this one count as not evaluated, as upstream's
                    // cancelled checks do.
                    failures.truncate(next);
                    break;
                }
            }
        }
        offset += round;
    }
    diag.filter_rejected += failures.len();
    if feasible.is_empty() {
        diag.node_to_status.reserve(failures.len());
        // Most rejections come from one plugin with one code: add each (plugin, code)
        // to the diagnosis once instead of hashing it per node.
        let mut last_added: Option<(Option<PluginName>, Code)> = None;
        for (i, s) in failures.drain(..) {
            let key = (s.plugin(), s.code());
            if last_added != Some(key) {
                diag.add_plugin_status(&s);
                last_added = Some(key);
            }
            diag.node_to_status.push_new(at(i).node().name.clone(), s);
        }
    } else {
        failures.clear();
    }
    Ok(feasible)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::diagnosis::fit_error_message;

    #[test]
    fn adaptive_percentage_of_nodes_to_score() {
        assert_eq!(num_feasible_nodes_to_find(0, 50), 50);
        assert_eq!(num_feasible_nodes_to_find(0, 100), 100);
        // 50 - 5000/125 = 10% of 5000
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500);
        // below 5% floors at 5%: 50 - 6000/125 = 2 -> 5% of 6000
        assert_eq!(num_feasible_nodes_to_find(0, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420);
        assert_eq!(num_feasible_nodes_to_find(10, 500), 100);
        assert_eq!(num_feasible_nodes_to_find(100, 500), 500);
    }

    #[test]
    fn later_filter_rounds_grow_with_what_failed() {
        // Nothing passed: four times the last round, at most what is left.
        assert_eq!(next_filter_round(500, 4359, 641, 0, 641), 2564);
        assert_eq!(next_filter_round(500, 1795, 3205, 0, 2564), 1795);
        // A quarter passed: the rate predicts four times the need, plus the margin.
        assert_eq!(next_filter_round(400, 4359, 641, 160, 641), 2019);
        // Never below the first round's rule.
        assert_eq!(
            next_filter_round(400, 4359, 641, 641, 641),
            filter_round(400, 4359)
        );
    }

    #[test]
    fn fit_error_messages() {
        let mut d = Diagnosis::default();
        d.node_to_status.set(
            "a".into(),
            Status::unresolvable("node(s) had untolerated taint(s)"),
        );
        d.node_to_status
            .set("b".into(), Status::unschedulable("Insufficient cpu"));
        d.node_to_status.set(
            "c".into(),
            Status::with_reasons(
                Code::Unschedulable,
                vec!["Insufficient cpu".into(), "Insufficient memory".into()],
            ),
        );
        assert_eq!(
            fit_error_message(3, &d),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
        );
        d.post_filter_msg = "preemption: not helpful".into();
        assert!(fit_error_message(3, &d).ends_with("2 Insufficient cpu. preemption: not helpful"));
        let p = Diagnosis {
            pre_filter_msg: "pod affinity terms conflict".into(),
            ..Default::default()
        };
        assert_eq!(
            fit_error_message(5, &p),
            "0/5 nodes are available: pod affinity terms conflict."
        );
    }
}
