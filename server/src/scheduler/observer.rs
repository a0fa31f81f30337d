//! Tracing and metrics of a scheduling attempt, in one place at the edges of the
//! cycle: the root span and its fields, extension-point durations, the attempt's
//! result and duration (upstream's `metrics.*` calls in `schedule_one.go`).

use std::sync::Arc;
use std::time::Instant;

use super::cycle::{ScheduleError, ScheduleResult};
use super::stats::{AttemptRecord, AttemptResult, Stats};
use crate::framework::interface::QueuedPodInfo;
use crate::framework::{Code, CycleState, Framework, Status};
use crate::model::Pod;
use crate::rand::SplitMix64;
use crate::telemetry::metrics::SCHEDULER;
use crate::telemetry::trace::AttemptTrace;

/// One attempt's observer: created when the attempt starts, told how each stage
/// ended. An unsampled attempt records metrics only.
pub(super) struct AttemptObserver {
    root: tracing::Span,
    sampled: bool,
    start: Instant,
}

impl AttemptObserver {
    /// Starts observing an attempt of `pinfo`'s pod: samples plugin metrics (10%, as
    /// upstream) and, when tracing is on, opens the attempt's root span in `state`.
    pub(super) fn begin(
        fw: &Framework,
        pinfo: &QueuedPodInfo,
        state: &mut CycleState,
        rng: &mut SplitMix64,
    ) -> Self {
        let start = Instant::now();
        state.record_plugin_metrics = rng.below(100) < 10;
        if crate::telemetry::trace::enabled() {
            state.trace = attempt_trace(&pinfo.pod, pinfo, fw.profile_name(), start);
        }
        AttemptObserver {
            root: state.trace.span.clone(),
            sampled: state.trace.sampled,
            start,
        }
    }

    /// The attempt's root span (entered for the whole scheduling cycle).
    pub(super) fn span(&self) -> &tracing::Span {
        &self.root
    }

    pub(super) fn start(&self) -> Instant {
        self.start
    }

    /// `schedulePod` is done: the algorithm's duration, and in the trace the
    /// snapshot generation and, on success, the node and how many were looked at.
    pub(super) fn algorithm_done(
        &self,
        result: &Result<ScheduleResult, ScheduleError>,
        generation: u64,
    ) {
        SCHEDULER
            .algorithm_duration
            .observe(&[], self.start.elapsed().as_secs_f64());
        if !self.sampled {
            return;
        }
        self.root.record("generation", generation);
        if let Ok(r) = result {
            self.root.record("feasible_nodes", r.feasible_nodes);
            self.root.record("evaluated_nodes", r.evaluated_nodes);
            self.root.record("node", &*r.host);
        }
    }

    /// The scheduling cycle failed with `status` (the trace's result and message).
    pub(super) fn failed(&self, status: &Status) {
        if !self.sampled {
            return;
        }
        let result = if status.code() == Code::Error {
            "error"
        } else {
            "unschedulable"
        };
        self.root.record("result", result);
        self.root.record("message", status.message().as_str());
    }

    /// The scheduling cycle reached binding: the attempt counts as scheduled.
    pub(super) fn scheduled(&self, stats: &Stats, fw: &Framework, attempts: u32) {
        let elapsed = self.start.elapsed();
        stats.record(AttemptRecord {
            result: AttemptResult::Scheduled,
            duration: elapsed,
        });
        let profile = fw.profile_name();
        SCHEDULER.schedule_attempts.add(&["scheduled", profile], 1);
        SCHEDULER
            .attempt_duration
            .observe(&["scheduled", profile], elapsed.as_secs_f64());
        SCHEDULER
            .pod_scheduling_attempts
            .observe(&[], f64::from(attempts));
        if self.sampled {
            self.root.record("result", "scheduled");
        }
    }

    /// The binding cycle's span: a child of the attempt that ends when the pod is
    /// bound or rejected.
    pub(super) fn binding_span(&self, host: &Arc<str>) -> tracing::Span {
        if self.sampled {
            tracing::info_span!(parent: &self.root, "binding_cycle", node = &**host, result = tracing::field::Empty)
        } else {
            tracing::Span::none()
        }
    }
}

/// Runs extension point `point` through `f` inside its span, and records its
/// duration by the code `code_of` reads from the outcome.
pub(super) fn run_extension_point<T>(
    point: &'static str,
    fw: &Framework,
    state: &mut CycleState,
    f: impl FnOnce(&mut CycleState) -> T,
    code_of: impl Fn(&T) -> Code,
) -> T {
    let _span = state.trace.extension_point(point).entered();
    let t = Instant::now();
    let out = f(state);
    extension_point_metric(point, code_of(&out), fw, t);
    out
}

/// A failed attempt (scheduling or binding cycle) in the stats and metrics.
pub(super) fn attempt_failed(stats: &Stats, fw: &Framework, rejected: bool, start: Instant) {
    let elapsed = start.elapsed();
    stats.record(AttemptRecord {
        result: if rejected {
            AttemptResult::Unschedulable
        } else {
            AttemptResult::Error
        },
        duration: elapsed,
    });
    let result = if rejected { "unschedulable" } else { "error" };
    SCHEDULER
        .schedule_attempts
        .add(&[result, fw.profile_name()], 1);
    SCHEDULER
        .attempt_duration
        .observe(&[result, fw.profile_name()], elapsed.as_secs_f64());
}

/// How long a pod waited at Permit (the binding cycle's first step).
pub(super) fn permit_waited(success: bool, start: Instant) {
    SCHEDULER.permit_wait_duration.observe(
        &[if success { "success" } else { "failure" }],
        start.elapsed().as_secs_f64(),
    );
}

/// `scheduler_framework_extension_point_duration_seconds` for one extension point.
pub(super) fn extension_point_metric(point: &str, code: Code, fw: &Framework, start: Instant) {
    SCHEDULER.extension_point_duration.observe(
        &[point, code.as_str(), fw.profile_name()],
        start.elapsed().as_secs_f64(),
    );
}

/// The root span of an attempt, and whether it is sampled; an unsampled attempt
/// keeps no span at all.
fn attempt_trace(pod: &Pod, pinfo: &QueuedPodInfo, profile: &str, now: Instant) -> AttemptTrace {
    // Fields are filled only once the attempt is known to be sampled: an unsampled
    // attempt pays for an empty span and the sampling decision, nothing more.
    // One operation name for every attempt (Jaeger groups by it); the pod is in the
    // attributes.
    let span = tracing::info_span!(
        "scheduling_attempt",
        pod.namespace = tracing::field::Empty,
        pod.name = tracing::field::Empty,
        pod.uid = tracing::field::Empty,
        profile = tracing::field::Empty,
        attempt = tracing::field::Empty,
        queue_wait_ms = tracing::field::Empty,
        result = tracing::field::Empty,
        message = tracing::field::Empty,
        node = tracing::field::Empty,
        feasible_nodes = tracing::field::Empty,
        evaluated_nodes = tracing::field::Empty,
        generation = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    let sampled = crate::telemetry::trace::is_sampled(&span);
    if sampled {
        // Log lines inside the attempt carry the span's fields: this one links them
        // to the trace in Jaeger.
        span.record(
            "trace_id",
            crate::telemetry::trace::trace_id(&span).as_str(),
        );
        let queue_wait_ms = now.saturating_duration_since(pinfo.timestamp).as_secs_f64() * 1000.0;
        span.record("pod.namespace", &*pod.namespace);
        span.record("pod.name", &*pod.name);
        span.record("pod.uid", &*pod.uid);
        span.record("profile", profile);
        span.record("attempt", pinfo.attempts);
        span.record("queue_wait_ms", queue_wait_ms);
    }
    AttemptTrace {
        span: if sampled { span } else { tracing::Span::none() },
        sampled,
    }
}
