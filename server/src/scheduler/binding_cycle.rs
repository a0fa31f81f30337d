//! The binding cycle (upstream `bindingCycle`), on tokio, concurrent with the next
//! scheduling cycles: PreBind pre-flight and the nomination, wait on Permit, PreBind,
//! Bind, PostBind. Failures after Permit
//! are errors, never "unschedulable".

use std::sync::Arc;
use std::time::Instant;

use super::cycle::ScheduledPod;
use super::failure::SchedulingFailure;
use super::observer::{extension_point_metric, permit_waited, AttemptObserver};
use super::Scheduler;
use crate::client::{EventType, PodEvent, PodStatusUpdate};
use crate::framework::interface::QueuedPodInfo;
use crate::framework::{Code, CycleState, Framework, Status};

impl Scheduler {
    /// Starts `scheduled`'s binding cycle off the scheduling thread, under the
    /// attempt's binding span.
    pub(super) fn spawn_binding_cycle(
        self: &Arc<Self>,
        fw: Arc<Framework>,
        state: CycleState,
        scheduled: ScheduledPod,
        pinfo: QueuedPodInfo,
        observer: &AttemptObserver,
    ) {
        let span = observer.binding_span(&scheduled.host);
        let me = self.clone();
        self.op_started();
        self.runtime.spawn(tracing::Instrument::instrument(
            async move {
                me.binding_cycle(fw, state, scheduled, pinfo).await;
                me.op_finished();
            },
            span,
        ));
    }

    /// The binding cycle, then the end of the attempt for sidecars.
    async fn binding_cycle(
        self: &Arc<Self>,
        fw: Arc<Framework>,
        mut state: CycleState,
        scheduled: ScheduledPod,
        pinfo: QueuedPodInfo,
    ) {
        let bound = self
            .binding_cycle_steps(&fw, &mut state, scheduled, pinfo)
            .await;
        if state.trace.sampled {
            tracing::Span::current().record("result", if bound { "bound" } else { "failed" });
        }
        fw.end_cycle(&state);
    }

    /// The binding cycle (upstream `bindingCycle`), on tokio; true when bound.
    async fn binding_cycle_steps(
        self: &Arc<Self>,
        fw: &Arc<Framework>,
        state: &mut CycleState,
        scheduled: ScheduledPod,
        pinfo: QueuedPodInfo,
    ) -> bool {
        let ScheduledPod { assumed, host, .. } = &scheduled;
        let start = Instant::now();
        // A Reserve and Permit left to the binding cycle (`permitInBindingCycle`):
        // its failure is the scheduling cycle's Reserve or Permit failure, reported
        // late; the pods scheduled meanwhile saw this one on its node.
        let s = fw.settle_permit(state, assumed, host).await;
        if !s.is_success() {
            let failure = SchedulingFailure::on_node(s, host);
            self.handle_late_verdict_error(fw, state, &scheduled, pinfo, failure, start);
            return false;
        }
        // KEP-5278 (NominatedNodeNameForExpectation, on since v1.35): PreBind's
        // pre-flight first; when the binding will take a while (a Permit wait, or
        // PreBind work), the chosen node is written as the pod's nomination so that
        // others see where it is going meanwhile. The API server clears it on bind.
        let pre_flight = fw.run_pre_bind_pre_flights(state, assumed, host);
        if pre_flight.code() == Code::Error || pre_flight.is_rejected() {
            let failure = SchedulingFailure::error(pre_flight);
            self.handle_binding_cycle_error(fw, state, &scheduled, pinfo, failure, start);
            return false;
        }
        if (pre_flight.is_success() || fw.will_wait_on_permit(assumed))
            && assumed.nominated_node_name.as_deref() != Some(&**host)
        {
            let update = PodStatusUpdate {
                condition: None,
                nominated_node_name: Some(Some(host.clone())),
            };
            if let Err(e) = self.client.update_pod_status(assumed, update).await {
                tracing::error!(pod = %assumed.key(), node = %host, error = %e,
                    "Failed to update the nominated node name in the binding cycle");
            }
        }
        let s = fw.wait_on_permit(assumed).await;
        permit_waited(s.is_success(), start);
        if !s.is_success() {
            let failure = SchedulingFailure::on_node(s, host);
            self.handle_binding_cycle_error(fw, state, &scheduled, pinfo, failure, start);
            return false;
        }
        // Failures after Permit are errors, never "unschedulable".
        self.queue.done(&assumed.uid);
        let t = Instant::now();
        let s = fw.run_pre_bind_plugins(state, assumed, host).await;
        extension_point_metric("PreBind", s.code(), fw, t);
        if !s.is_success() {
            let failure = SchedulingFailure::error(s);
            self.handle_binding_cycle_error(fw, state, &scheduled, pinfo, failure, start);
            return false;
        }
        let t = Instant::now();
        let s = fw.run_bind_plugins(state, assumed, host).await;
        extension_point_metric("Bind", s.code(), fw, t);
        self.cache().finish_binding(&assumed.uid, self.clock.now());
        if !s.is_success() {
            let s = if s.is_skip() {
                Status::error(format!("no bind plugin bound pod {:?}", assumed.name))
            } else {
                s
            };
            let failure = SchedulingFailure::error(s);
            self.handle_binding_cycle_error(fw, state, &scheduled, pinfo, failure, start);
            return false;
        }
        self.stats
            .bound
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.report_ignored(state, assumed);
        self.client.record_event(PodEvent::new(
            assumed,
            EventType::Normal,
            "Scheduled",
            "Binding",
            format!(
                "Successfully assigned {}/{} to {}",
                assumed.namespace, assumed.name, host
            ),
        ));
        fw.run_post_bind_plugins(state, assumed, host).await;
        true
    }
}
