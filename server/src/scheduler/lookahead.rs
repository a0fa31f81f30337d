//! Switchyard's lookahead on the scheduling thread: the queue's next pods' first
//! Filter round sent to node-local sidecars while the current pod is in its cycle
//! (see [`Framework::lookahead`]).

use std::sync::Arc;

use super::cycle::{next_cycle_id, Lookahead, LoopState};
use super::schedule_pod::filter_round;
use super::Scheduler;
use crate::framework::NodeInfo;
use crate::model::Pod;

impl Scheduler {
    /// How many covered pods are enough lead for the sidecar to answer the next
    /// message before its first answer is needed: on 2 cores shared with the
    /// sidecar, a lead of 2 left the scheduling thread waiting more often (measured
    /// with `switchyard bench`: 70-76% of in-process with 2, 77-78% with 3).
    const LOOKAHEAD_LEAD: usize = 3;

    /// Sends the first Filter round of the queue's next pods to node-local sidecars
    /// now, so their answers are ready when their attempts begin (see
    /// [`Framework::lookahead`]). Up to K pods are covered (K from the sidecars, see
    /// [`Framework::lookahead_pods`]); once half of them are used, the next ones go
    /// in one message, so an answer is computed while the ones before it are used
    /// and the scheduling thread does not wait for the sidecar.
    ///
    /// Pod j after this one (j = 1, 2, ...) is expected to start where the j-1 before
    /// it stopped, each going through as many nodes as this one did (`processed`).
    /// A pod is covered only when its round cannot reach the nodes this attempt and
    /// the previous one went through, nor those of the pods before it: each of those
    /// places a pod on one of its nodes (the previous one's binding is likely still in
    /// flight), and any change voids the answer. So small clusters, where rounds wrap
    /// around quickly, look ahead less or not at all.
    pub(super) fn lookahead(&self, st: &mut LoopState, processed: usize) {
        let mut covered = st.lookahead.len();
        let n = st.snapshot.node_infos().len();
        // Enough pods are covered whatever K is (and no queue lock is taken).
        if n == 0 || covered > Self::LOOKAHEAD_LEAD {
            return;
        }
        let Some(first) = self.queue.peek_n(covered + 1).into_iter().nth(covered) else {
            return;
        };
        let Some(fw) = self.profiles.get(&first.spec.scheduler_name) else {
            return;
        };
        if !fw.has_batch_filters() {
            return;
        }
        let to_find = self.feasible_nodes_to_find(fw, n);
        // The first round of `find_nodes_that_pass_filters` for each.
        let round = filter_round(to_find, n);
        let step = processed.max(1);
        // The most pods whose rounds stay clear (j from 1 to `reach`). From the
        // second on, an answer waits longer before it is used: the binding of the pod
        // before the previous one must be kept clear of too.
        let behind = processed + st.last_processed + round;
        let reach = if behind > n {
            0
        } else if behind + st.last_processed > n {
            1
        } else {
            (n - behind - st.last_processed) / step + 1
        };
        let target = fw.lookahead_pods().min(reach);
        if covered >= target || covered > (target / 2).min(Self::LOOKAHEAD_LEAD) {
            return;
        }
        let mut next = self.queue.peek_n(target);
        let still = next.len() >= covered
            && st
                .lookahead
                .iter()
                .zip(&next)
                .all(|(la, p)| Arc::ptr_eq(&la.pod, p));
        if !still {
            // The queue changed order: these answers would go unused.
            st.drop_lookahead();
            covered = 0;
        }
        let nodes = st.snapshot.node_infos();
        let mut pods: Vec<(u64, Arc<Pod>, Vec<&NodeInfo>)> = Vec::new();
        for (j, pod) in next
            .drain(..)
            .enumerate()
            .skip(covered)
            .map(|(i, p)| (i + 1, p))
        {
            if pod.nominated_node_name.is_some()
                || pod.deletion_timestamp.is_some()
                || !self
                    .profiles
                    .get(&pod.spec.scheduler_name)
                    .is_some_and(|f| Arc::ptr_eq(f, fw))
            {
                break;
            }
            let start = st.next_start_node_index + (j - 1) * step;
            let window: Vec<&NodeInfo> = (0..round).map(|i| &*nodes[(start + i) % n]).collect();
            pods.push((next_cycle_id(), pod, window));
        }
        if pods.is_empty() {
            return;
        }
        let score_first = if to_find > 1 { to_find } else { 0 };
        let states = fw.lookahead_batch(&pods, &st.snapshot, score_first);
        for ((_, pod, _), state) in pods.into_iter().zip(states) {
            if let Some(state) = state {
                st.lookahead.push_back(Lookahead {
                    pod,
                    fw: fw.clone(),
                    state,
                });
            }
        }
    }
}
