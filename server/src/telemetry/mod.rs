//! Observability: the HTTP endpoints operators and kubelet probe (`/healthz`,
//! `/livez`, `/readyz`). Tracing and metrics join them here.

pub mod http;
