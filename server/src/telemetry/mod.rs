//! Observability: OTLP traces, and the HTTP endpoints operators and kubelet probe
//! (`/healthz`, `/livez`, `/readyz`, `/metrics`).

pub mod http;
pub mod metrics;
pub mod otlp_receiver;
pub mod trace;
