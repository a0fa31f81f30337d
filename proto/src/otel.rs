//! OpenTelemetry set-up shared by the scheduler and the SDK sidecars: an OTLP/gRPC
//! exporter configured by the standard `OTEL_*` variables (endpoint, service name,
//! resource attributes, sampler; the SDK reads them), batched off the caller's
//! threads, and the W3C trace-context propagator, so a sidecar's spans join the
//! scheduler's trace through the `traceparent` each call carries.

use std::collections::HashMap;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// Whether the environment asks for trace export.
pub fn requested() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    set("OTEL_EXPORTER_OTLP_ENDPOINT")
        || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim() == "otlp")
}

/// Owns the tracer provider and the exporter's runtime thread; dropping it flushes
/// the spans still queued (bounded by the exporter's timeout), since the SDK's
/// flush blocks.
pub struct TraceGuard {
    provider: Option<SdkTracerProvider>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TraceGuard {
    /// Exports what is queued and stops the exporter.
    pub fn shutdown(&mut self) {
        if let Some(p) = self.provider.take() {
            let h = std::thread::spawn(move || {
                if let Err(e) = p.shutdown() {
                    eprintln!("warning: flushing traces: {e}");
                }
            });
            let _ = h.join();
        }
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[derive(Debug, thiserror::Error)]
#[error("OTLP trace exporter: {0}")]
pub struct TraceInitError(String);

/// The tracer for `service` (used when `OTEL_SERVICE_NAME` is unset) and the guard
/// that flushes it. The exporter's gRPC channel lives on a runtime thread of its
/// own, so export never shares a thread with scheduling or serving. Also registers
/// the W3C trace-context propagator.
pub fn tracer(
    service: impl Into<String>,
) -> Result<(opentelemetry_sdk::trace::Tracer, TraceGuard), TraceInitError> {
    let service: String = service.into();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("otel-export".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            rt.block_on(async move {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .build()
                    .map_err(|e| e.to_string());
                let _ = ready_tx.send(exporter);
                let _ = stop_rx.await;
            });
        })
        .map_err(|e| TraceInitError(e.to_string()))?;
    let exporter = ready_rx
        .recv()
        .map_err(|_| TraceInitError("the exporter thread ended".into()))?
        .map_err(TraceInitError)?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(service);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = provider.tracer("switchyard");
    Ok((
        tracer,
        TraceGuard {
            provider: Some(provider),
            stop: Some(stop_tx),
            thread: Some(thread),
        },
    ))
}

/// The OpenTelemetry context a `traceparent` names (the empty context when it is
/// empty or malformed).
pub fn extract(traceparent: &str) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator;
    let mut carrier = HashMap::with_capacity(1);
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier)
}
