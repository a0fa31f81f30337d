//! The standard gRPC health service (`grpc.health.v1`): SERVING from the moment the
//! sidecar listens, NOT_SERVING once shutdown begins (so a probe fails while calls in
//! flight drain), for the whole server ("") and for the plugin service. `--probe`
//! checks it from the same binary, for exec probes on a Unix socket.

use std::pin::Pin;

use switchyard_proto::health::health_check_response::ServingStatus;
use switchyard_proto::health::health_server::Health;
use switchyard_proto::health::{HealthCheckRequest, HealthCheckResponse};
use switchyard_proto::PLUGIN_SERVICE;
use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub(crate) struct HealthService {
    status: watch::Receiver<ServingStatus>,
}

impl HealthService {
    /// The service and the sender that flips it (to NOT_SERVING at shutdown).
    pub(crate) fn new() -> (Self, watch::Sender<ServingStatus>) {
        let (tx, rx) = watch::channel(ServingStatus::Serving);
        (HealthService { status: rx }, tx)
    }

    fn known(service: &str) -> bool {
        service.is_empty() || service == PLUGIN_SERVICE
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if !Self::known(&request.get_ref().service) {
            return Err(Status::not_found(format!(
                "unknown service {:?}; this sidecar reports \"\" and {PLUGIN_SERVICE:?}",
                request.get_ref().service
            )));
        }
        Ok(Response::new(HealthCheckResponse {
            status: *self.status.borrow() as i32,
        }))
    }

    type WatchStream = WatchStream;

    /// Sends the status now and on every change, until the server stops.
    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let known = Self::known(&request.get_ref().service);
        let mut rx = self.status.clone();
        let stream = async_stream(move |tx| async move {
            loop {
                let s = if known {
                    *rx.borrow_and_update()
                } else {
                    ServingStatus::ServiceUnknown
                };
                if tx
                    .send(Ok(HealthCheckResponse { status: s as i32 }))
                    .await
                    .is_err()
                    || rx.changed().await.is_err()
                {
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }
}

/// A stream fed by a task (no extra crate for generators).
fn async_stream<F, Fut>(f: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<HealthCheckResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(f(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
