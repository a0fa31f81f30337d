//! One pod's journey (upstream `schedule_one.go`): `schedule_one` pops a pod and runs
//! its scheduling cycle — snapshot, PreFilter, Filter, PostFilter when none fit,
//! PreScore, Score, pick a node, assume, Reserve, Permit — which ends in a node or in
//! one `SchedulingFailure` for the one failure handler; a node starts the binding
//! cycle off the scheduling thread. Tracing and metrics go through the attempt's
//! observer. Every pod ends bound or queued with a reason.
//!
//! The stages live beside this file: `schedule_pod` (finding a node), `failure`,
//! `binding_cycle`, `observer`, and Switchyard's `lookahead`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::cycle::{next_cycle_id, ScheduleError, ScheduledPod};
use super::failure::SchedulingFailure;
use super::observer::{run_extension_point, AttemptObserver};
use super::Scheduler;
use crate::client::{EventType, PodEvent};
pub use crate::framework::diagnosis::{fit_error_message, Diagnosis};
use crate::framework::interface::{NominatingInfo, QueuedPodInfo};
use crate::framework::{Code, CycleState, Framework, Status};
use crate::model::Pod;

pub use super::cycle::{LoopState, ScheduleResult};
pub use super::schedule_pod::{
    num_feasible_nodes_to_find, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND, MIN_FEASIBLE_NODES_TO_FIND,
};

/// The scheduling thread: cycles until the queue closes.
pub fn run_scheduling_loop(sched: &Arc<Scheduler>) {
    // Like kube-scheduler, schedule only once the initial listing is in the cache and
    // queue: decisions then see the whole cluster, and priorities order the backlog.
    // A standby replica waits here until it wins the lease.
    if !sched.wait_ready() {
        return;
    }
    let mut st = LoopState::new(sched.seed);
    while let Some(p) = sched.queue.pop() {
        sched.schedule_one(&mut st, p);
    }
    st.drop_lookahead();
}

impl Scheduler {
    /// One attempt for a popped pod (upstream `ScheduleOne`): the scheduling cycle,
    /// then either the failure handler or the binding cycle.
    pub fn schedule_one(self: &Arc<Self>, st: &mut LoopState, pinfo: QueuedPodInfo) {
        let pod = pinfo.pod.clone();
        let ahead = st.adopt_lookahead(&pod);
        let Some(fw) = self.profiles.get(&pod.spec.scheduler_name).cloned() else {
            tracing::error!(pod = %pod.key(), scheduler = %pod.spec.scheduler_name, "profile not found for scheduler name");
            self.queue.done(&pod.uid);
            return;
        };
        if self.skip_pod_schedule(&pod) {
            if let Some(state) = ahead {
                fw.end_cycle(&state);
            }
            self.queue.done(&pod.uid);
            return;
        }
        let mut state = ahead.unwrap_or_else(|| {
            let mut s = CycleState::new();
            s.cycle_id = next_cycle_id();
            s
        });
        let observer = AttemptObserver::begin(&fw, &pinfo, &mut state, &mut st.sample_rng);
        let root = observer.span().clone();
        let _attempt = root.enter();
        match self.scheduling_cycle(st, &fw, &mut state, &pod, &observer) {
            Ok(scheduled) => {
                observer.scheduled(&self.stats, &fw, pinfo.attempts);
                self.spawn_binding_cycle(fw, state, scheduled, pinfo, &observer);
            }
            Err(failure) => {
                self.stats.cycle_failures.fetch_add(1, Ordering::Relaxed);
                observer.failed(&failure.status);
                fw.end_cycle(&state);
                self.handle_scheduling_failure(&fw, &state, pinfo, failure, observer.start());
            }
        }
    }

    /// Upstream `skipPodSchedule`: a pod being deleted (with an event saying so), or
    /// one already assumed, is not scheduled.
    fn skip_pod_schedule(&self, pod: &Pod) -> bool {
        if pod.deletion_timestamp.is_some() {
            self.client.record_event(PodEvent::new(
                pod,
                EventType::Warning,
                "FailedScheduling",
                "Scheduling",
                format!("skip schedule deleting pod: {}/{}", pod.namespace, pod.name),
            ));
            return true;
        }
        self.cache().is_assumed(&pod.uid)
    }

    /// Upstream `schedulingCycle`: find a node, assume the pod on it, Reserve and
    /// Permit. A failure has unreserved and forgotten whatever it assumed.
    fn scheduling_cycle(
        &self,
        st: &mut LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        observer: &AttemptObserver,
    ) -> Result<ScheduledPod, SchedulingFailure> {
        let result = self.schedule_pod(st, fw, state, pod);
        observer.algorithm_done(&result, st.snapshot.generation());
        let host = match result {
            Ok(r) => r.host,
            Err(e) => return Err(self.post_filter(st, fw, state, pod, e)),
        };

        // Assume: the cache counts the pod on its node before the binding lands.
        let assumed = Arc::new(pod.with_node(host.clone()));
        if let Err(e) = self.cache().assume_pod(assumed.clone()) {
            return Err(SchedulingFailure::error(Status::error(e.to_string())));
        }
        self.queue.delete_nominated(&pod.uid);

        let s = run_extension_point(
            "Reserve",
            fw,
            state,
            |state| fw.run_reserve_plugins_reserve(state, &assumed, &host),
            Status::code,
        );
        if !s.is_success() {
            fw.run_reserve_plugins_unreserve(state, &assumed, &host);
            self.forget(&assumed);
            return Err(SchedulingFailure::on_node(s, &host));
        }
        let s = run_extension_point(
            "Permit",
            fw,
            state,
            |state| fw.run_permit_plugins(state, &assumed, &host),
            Status::code,
        );
        if !s.is_success() && !s.is_wait() {
            fw.run_reserve_plugins_unreserve(state, &assumed, &host);
            self.forget(&assumed);
            return Err(SchedulingFailure::on_node(s, &host));
        }
        Ok(ScheduledPod {
            assumed,
            host,
            cycle_failures_at_assume: self.stats.cycle_failures.load(Ordering::Relaxed),
        })
    }

    /// The failure of `schedule_pod`, with PostFilter (preemption) run when no node
    /// fit: its message joins the FitError's, and it may nominate a node.
    fn post_filter(
        &self,
        st: &LoopState,
        fw: &Framework,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        e: ScheduleError,
    ) -> SchedulingFailure {
        match e {
            ScheduleError::NoNodes => SchedulingFailure::error(Status::unresolvable(
                "no nodes available to schedule pods",
            )),
            ScheduleError::Error(s) => SchedulingFailure::error(s),
            ScheduleError::Fit(mut diag, num_nodes) => {
                let mut nominating = NominatingInfo::Override(None);
                if fw.has_post_filter_plugins() {
                    let _ep = state.trace.extension_point("PostFilter").entered();
                    let nominated = self.queue.nominated_pods();
                    let (r, s) = fw.run_post_filter_plugins(
                        state,
                        pod,
                        &diag.node_to_status,
                        &st.snapshot,
                        &nominated,
                    );
                    diag.post_filter_msg = s.message();
                    if s.code() == Code::Error {
                        tracing::error!(pod = %pod.key(), status = %s, "PostFilter failed");
                    }
                    nominating = r.map_or(NominatingInfo::Noop, |r| r.nominating_info);
                }
                let msg = fit_error_message(num_nodes, &diag);
                SchedulingFailure {
                    status: Status::unschedulable(msg),
                    diagnosis: Some(diag),
                    nominating,
                }
            }
        }
    }

    fn forget(&self, assumed: &Pod) {
        if let Err(e) = self.cache().forget_pod(assumed) {
            tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache ForgetPod failed");
        }
    }
}
