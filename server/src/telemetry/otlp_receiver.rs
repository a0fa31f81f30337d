//! An OTLP trace receiver: a real `TraceService` gRPC server that keeps every span
//! it is sent, with the service that sent it. The conformance kit uses it to see a
//! sidecar's spans (clause T1), and the end-to-end tests to see everyone's.

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;

/// One received span, flattened.
#[derive(Clone, Debug)]
pub struct Span {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: Vec<(String, String)>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The `TraceService` that keeps what it is sent; [`Collector::spans`] reads it.
#[derive(Clone, Default)]
pub struct Collector(Arc<Mutex<Vec<Span>>>);

impl Collector {
    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Serves OTLP/gRPC trace export on `listener` until the future is dropped.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
    ) -> Result<(), tonic::transport::Error> {
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(self))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = Vec::new();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(&a.value))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(Span {
                        service: service.clone(),
                        name: s.name.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        attributes: s
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(&a.value)))
                            .collect(),
                    });
                }
            }
        }
        if let Ok(mut v) = self.0.lock() {
            v.extend(out);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}
