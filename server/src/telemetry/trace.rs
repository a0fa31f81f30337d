//! Traces over OTLP/gRPC (Jaeger receives OTLP natively), configured by the standard
//! variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (tracing is on when it, or
//! `OTEL_TRACES_EXPORTER=otlp`, is set), `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`
//! (read by the OpenTelemetry SDK itself).
//!
//! Cost: with tracing off no OpenTelemetry layer is installed, and the attempt's
//! spans are `Span::none()` (a branch on a global flag). With it on, each attempt
//! makes one root span and asks for the sampling decision at once; only a sampled
//! attempt gets child spans (extension points, plugins, remote calls, binding,
//! preemption). Export is batched on the SDK's own thread, so a slow or absent
//! collector never reaches the scheduling thread (spans beyond the queue are
//! dropped).

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (an OpenTelemetry layer is installed).
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

pub use switchyard_proto::otel::{requested, TraceGuard, TraceInitError};

/// The tracer for `service` (when `OTEL_SERVICE_NAME` is unset) and the guard that
/// flushes it; marks tracing on for the attempts.
pub fn tracer(
    service: &'static str,
) -> Result<(opentelemetry_sdk::trace::Tracer, TraceGuard), TraceInitError> {
    let r = switchyard_proto::otel::tracer(service)?;
    ENABLED.store(true, Ordering::Relaxed);
    Ok(r)
}

/// Whether `span` is recorded and exported (the sampler said yes). Builds the span's
/// OpenTelemetry context, which takes the sampling decision.
pub fn is_sampled(span: &tracing::Span) -> bool {
    enabled() && !span.is_disabled() && span.context().span().span_context().is_sampled()
}

/// The trace id of `span` in hex, as Jaeger shows it.
pub fn trace_id(span: &tracing::Span) -> String {
    span.context().span().span_context().trace_id().to_string()
}

/// The W3C `traceparent` of `span`, for a remote call ("" when not sampled).
pub fn traceparent(span: &tracing::Span) -> String {
    if span.is_disabled() {
        return String::new();
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if !sc.is_valid() || !sc.is_sampled() {
        return String::new();
    }
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// An attempt's trace: its root span, and whether it is sampled. Unsampled (or with
/// tracing off) every helper returns a disabled span, which costs a branch.
#[derive(Clone, Debug)]
pub struct AttemptTrace {
    pub span: tracing::Span,
    pub sampled: bool,
}

impl Default for AttemptTrace {
    fn default() -> Self {
        AttemptTrace {
            span: tracing::Span::none(),
            sampled: false,
        }
    }
}

impl AttemptTrace {
    /// A span for one extension point under the attempt.
    pub fn extension_point(&self, name: &'static str) -> tracing::Span {
        if !self.sampled {
            return tracing::Span::none();
        }
        tracing::info_span!(parent: &self.span, "extension_point", otel.name = name, extension_point = name)
    }

    /// A span for one plugin at an extension point, under the current span (the
    /// extension point's, when entered).
    pub fn plugin(&self, extension_point: &'static str, plugin: &str) -> tracing::Span {
        if !self.sampled {
            return tracing::Span::none();
        }
        tracing::info_span!(
            "plugin",
            otel.name = format!("{extension_point} {plugin}"),
            extension_point,
            plugin
        )
    }
}
