//! A sidecar's logs and traces: log lines to stderr (`RUST_LOG`, default `warn`),
//! and, when the standard `OTEL_*` variables ask for it (`OTEL_EXPORTER_OTLP_ENDPOINT`
//! or `OTEL_TRACES_EXPORTER=otlp`), spans over OTLP. A call carrying the scheduler's
//! `traceparent` gets a span under the scheduler's remote-call span, so the sidecar's
//! work shows inside the scheduling attempt's trace. Plugins' own `tracing` spans
//! nest under it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

pub use switchyard_proto::otel::TraceGuard;

static ENABLED: AtomicBool = AtomicBool::new(false);
static GUARD: Mutex<Option<TraceGuard>> = Mutex::new(None);

/// Whether spans are exported.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Installs the subscriber (once; a sidecar that installed its own keeps it, and
/// then gets no OTLP export from the SDK). `service` names the sidecar when
/// `OTEL_SERVICE_NAME` is unset.
pub fn init(service: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour only on a terminal (a pod's log is a pipe).
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let mut guard = None;
    let otel = if switchyard_proto::otel::requested() {
        match switchyard_proto::otel::tracer(service.to_string()) {
            Ok((tracer, g)) => {
                guard = Some(g);
                Some(
                    tracing_opentelemetry::layer()
                        .with_tracer(tracer)
                        .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
                )
            }
            Err(e) => {
                eprintln!("{service}: tracing disabled: {e}");
                None
            }
        }
    } else {
        None
    };
    let has_otel = otel.is_some();
    if tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .is_ok()
        && has_otel
    {
        ENABLED.store(true, Ordering::Relaxed);
        if let Ok(mut g) = GUARD.lock() {
            *g = guard;
        }
    }
}

/// Flushes the spans still queued (at shutdown).
pub fn shutdown() {
    let g = GUARD.lock().ok().and_then(|mut g| g.take());
    if let Some(mut g) = g {
        ENABLED.store(false, Ordering::Relaxed);
        g.shutdown();
    }
}
