//! An OTLP trace receiver for tests on 127.0.0.1, on a runtime of its own: the
//! scheduler's receiver (`switchyard::telemetry::otlp_receiver`).

use switchyard::telemetry::otlp_receiver::Collector;
pub use switchyard::telemetry::otlp_receiver::Span;

/// The receiver; stops with its runtime when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    collector: Collector,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    pub fn start() -> Receiver {
        let (runtime, listener, addr) = crate::local_server();
        let collector = Collector::default();
        runtime.spawn(collector.clone().serve(listener));
        Receiver {
            endpoint: format!("http://{addr}"),
            collector,
            _runtime: runtime,
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.collector.spans()
    }
}
