//! What happens when an attempt fails (upstream `handleSchedulingFailure`,
//! `handleBindingCycleError`): unreserve and forget what was assumed, requeue the
//! pod unless it is gone or bound, update its nomination, and record a
//! FailedScheduling event and the PodScheduled condition.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::cycle::ScheduledPod;
use super::observer::attempt_failed;
use super::Scheduler;
use crate::client::{EventType, PodCondition, PodEvent, PodStatusUpdate, REMOTE_PLUGIN_IGNORED};
use crate::framework::diagnosis::{fit_error_message, Diagnosis};
use crate::framework::events::{EventObject, EVENT_ASSIGNED_POD_DELETE};
use crate::framework::interface::{NominatingInfo, QueuedPodInfo};
use crate::framework::{CycleState, Framework, Status};
use crate::model::Pod;

/// Kubernetes event notes are cut at this length (upstream `NoteLengthLimit`).
const NOTE_LENGTH_LIMIT: usize = 1024;

/// Why an attempt did not end bound: the status, the diagnosis when no node fit,
/// and what becomes of the pod's nomination (upstream: the status and FitError that
/// `schedulingCycle` returns, with its nominating info).
pub(crate) struct SchedulingFailure {
    pub status: Status,
    pub diagnosis: Option<Box<Diagnosis>>,
    pub nominating: NominatingInfo,
}

impl SchedulingFailure {
    /// A failure that clears the nomination, with no diagnosis.
    pub(crate) fn error(status: Status) -> Self {
        SchedulingFailure {
            status,
            diagnosis: None,
            nominating: NominatingInfo::Override(None),
        }
    }

    /// A Reserve/Permit rejection on `host`, reported as a one-node FitError; errors
    /// stay errors.
    pub(crate) fn on_node(s: Status, host: &Arc<str>) -> Self {
        let (status, diagnosis) = single_node_failure(s, host);
        SchedulingFailure {
            status,
            diagnosis: diagnosis.map(Box::new),
            nominating: NominatingInfo::Override(None),
        }
    }
}

pub(super) fn truncate_message(msg: String) -> String {
    if msg.len() <= NOTE_LENGTH_LIMIT {
        return msg;
    }
    let mut cut = NOTE_LENGTH_LIMIT - 4;
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{} ...", &msg[..cut])
}

impl Scheduler {
    /// Upstream `handleSchedulingFailure`: requeue (unless the pod is gone or bound),
    /// update the nomination, record a FailedScheduling event and the PodScheduled
    /// condition. Never blocks on the backend.
    pub(crate) fn handle_scheduling_failure(
        self: &Arc<Self>,
        fw: &Framework,
        state: &CycleState,
        mut pinfo: QueuedPodInfo,
        failure: SchedulingFailure,
        start: Instant,
    ) {
        let SchedulingFailure {
            status,
            diagnosis: diag,
            nominating,
        } = failure;
        let rejected = status.is_rejected();
        attempt_failed(&self.stats, fw, rejected, start);
        let reason = if rejected {
            "Unschedulable"
        } else {
            "SchedulerError"
        };
        if let Some(d) = &diag {
            pinfo.unschedulable_plugins = d.unschedulable_plugins.clone();
            pinfo.pending_plugins = d.pending_plugins.clone();
        } else if rejected {
            if let Some(p) = status.plugin() {
                pinfo.unschedulable_plugins.insert(p);
            }
        }
        let msg = status.message();
        let uid = pinfo.pod.uid.clone();
        let current = self.pod_store().get(&uid).cloned();
        let pod = match current {
            None => {
                tracing::info!(pod = %pinfo.pod.key(), "pod doesn't exist in informer cache; not requeueing");
                self.queue.done(&uid);
                return;
            }
            Some(p) if p.node_name.is_some() => {
                tracing::info!(pod = %p.key(), "pod has been assigned to a node; not requeueing");
                self.queue.done(&uid);
                return;
            }
            Some(p) => p,
        };
        // The queued copy carries the new nomination at once: the next attempt tries
        // the nominated node first even when it starts before the status update comes
        // back through the watch (upstream relies on the backoff for that; an event
        // can requeue the pod sooner here, as in a simulation).
        pinfo.pod = match &nominating {
            NominatingInfo::Override(n) if pod.nominated_node_name != *n => {
                let mut p = (*pod).clone();
                p.nominated_node_name = n.clone();
                Arc::new(p)
            }
            _ => pod.clone(),
        };
        self.queue.add_unschedulable_if_not_present(pinfo);
        let nominated_update = match &nominating {
            NominatingInfo::Override(n) => {
                self.queue.set_nominated(pod.clone(), n.clone());
                (pod.nominated_node_name != *n).then(|| n.clone())
            }
            NominatingInfo::Noop => {
                if pod.nominated_node_name.is_some() {
                    self.queue
                        .set_nominated(pod.clone(), pod.nominated_node_name.clone());
                }
                None
            }
        };
        tracing::debug!(pod = %pod.key(), reason, message = %msg, "unable to schedule pod");
        self.report_ignored(state, &pod);
        self.record_failed_scheduling(pod, reason, msg, nominated_update);
    }

    /// A FailedScheduling event and the PodScheduled=False condition (`reason`:
    /// Unschedulable or SchedulerError) with `msg`, and the nomination change if any;
    /// the status patch goes off the scheduling path.
    pub(crate) fn record_failed_scheduling(
        self: &Arc<Self>,
        pod: Arc<Pod>,
        reason: &'static str,
        msg: String,
        nominated_update: Option<Option<Arc<str>>>,
    ) {
        let msg = truncate_message(msg);
        self.client.record_event(PodEvent::new(
            &pod,
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            msg.clone(),
        ));
        // Upstream `updatePod` patches only what changed: the same condition and no
        // new nomination write nothing.
        let unchanged = pod
            .unschedulable_condition
            .as_deref()
            .is_some_and(|(r, m)| **r == *reason && **m == *msg);
        if unchanged && nominated_update.is_none() {
            return;
        }
        let me = self.clone();
        self.spawn_op(async move {
            let update = PodStatusUpdate {
                condition: Some(PodCondition {
                    status: "False",
                    reason,
                    message: msg,
                }),
                nominated_node_name: nominated_update,
            };
            if let Err(e) = me.client.update_pod_status(&pod, update).await {
                tracing::warn!(pod = %pod.key(), error = %e, "error updating pod status");
            }
        });
    }

    /// Plugin calls of this attempt that failed and were skipped under
    /// `failurePolicy: Ignore`, as one Warning event before the attempt's outcome, so a
    /// placement made without a plugin's say is not mistaken for its decision.
    pub(super) fn report_ignored(&self, state: &CycleState, pod: &Pod) {
        let ignored = state.ignored.take();
        if ignored.is_empty() {
            return;
        }
        self.client.record_event(PodEvent::new(
            pod,
            EventType::Warning,
            REMOTE_PLUGIN_IGNORED,
            "Scheduling",
            truncate_message(ignored.join("; ")),
        ));
    }

    /// Upstream `handleBindingCycleError`: Unreserve, forget the assumed pod, let pods
    /// its resources were blocking try again, and requeue it.
    pub(super) fn handle_binding_cycle_error(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        scheduled: &ScheduledPod,
        pinfo: QueuedPodInfo,
        failure: SchedulingFailure,
        start: Instant,
    ) {
        self.undo_assume(fw, state, scheduled, &failure, true);
        self.handle_scheduling_failure(fw, state, pinfo, failure, start);
    }

    /// A Reserve or Permit verdict awaited in the binding cycle
    /// (`permitInBindingCycle`) did not let the pod through: undone as the scheduling
    /// cycle undoes it, and the pods whose attempts failed while it was assumed (they
    /// may have lacked the room it held) are requeued as a deleted assigned pod
    /// requeues them. When none failed meanwhile, no pod is moved: none saw it
    /// in a way that matters, as when the verdict came in the scheduling cycle.
    pub(super) fn handle_late_verdict_error(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        scheduled: &ScheduledPod,
        pinfo: QueuedPodInfo,
        failure: SchedulingFailure,
        start: Instant,
    ) {
        let failed_meanwhile =
            self.stats.cycle_failures.load(Ordering::Relaxed) != scheduled.cycle_failures_at_assume;
        self.undo_assume(fw, state, scheduled, &failure, failed_meanwhile);
        self.handle_scheduling_failure(fw, state, pinfo, failure, start);
    }

    /// Unreserve and forget an assumed pod; with `requeue`, the pods its room may
    /// help are moved as upstream moves them on a deleted assigned pod (the pod
    /// itself too unless its failure is a rejection).
    fn undo_assume(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        scheduled: &ScheduledPod,
        failure: &SchedulingFailure,
        requeue: bool,
    ) {
        let exclude_self = failure.status.is_rejected();
        let ScheduledPod { assumed, host, .. } = scheduled;
        fw.run_reserve_plugins_unreserve(state, assumed, host);
        let forgot = self.cache().forget_pod(assumed);
        match forgot {
            Err(e) => {
                tracing::error!(pod = %assumed.key(), error = %e, "scheduler cache ForgetPod failed")
            }
            Ok(()) if !requeue => {}
            Ok(()) => {
                let uid = assumed.uid.clone();
                let not_self = move |p: &Pod| !exclude_self || p.uid != uid;
                self.queue.move_all_to_active_or_backoff(
                    EVENT_ASSIGNED_POD_DELETE,
                    Some(EventObject::Pod(assumed.clone())),
                    None,
                    Some(&not_self),
                );
            }
        }
    }
}

/// A Reserve/Permit rejection reported as a one-node FitError; errors stay errors.
fn single_node_failure(s: Status, host: &Arc<str>) -> (Status, Option<Diagnosis>) {
    if !s.is_rejected() {
        return (s, None);
    }
    let mut d = Diagnosis::default();
    d.add_plugin_status(&s);
    let code = s.code();
    d.node_to_status.set(host.clone(), s);
    let msg = fit_error_message(1, &d);
    (Status::new(code, msg), Some(d))
}
