//! The scheduler's plain-HTTP endpoint (`--health-address`): `/healthz` and `/livez`
//! answer 200 while the process serves; `/readyz` answers 200 once the cache has
//! synced and every `Fail`-policy sidecar has completed its handshake (a standby
//! replica is ready too: readiness is about serving, not about leading), 503 with
//! the reason otherwise; `/metrics` is the Prometheus text format.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};

/// Answers `/readyz`: `Ok` when ready, else why not.
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
/// Renders `/metrics`.
pub type MetricsPage = Arc<dyn Fn() -> String + Send + Sync>;

/// Binds `addr` and serves until the runtime stops; returns the bound address
/// (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    ready: ReadyCheck,
    metrics: MetricsPage,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let ready = ready.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let ready = ready.clone();
                    let metrics = metrics.clone();
                    async move { Ok::<_, Infallible>(answer(req.uri().path(), &ready, &metrics)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(bound)
}

fn text(code: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn answer(path: &str, ready: &ReadyCheck, metrics: &MetricsPage) -> Response<Full<Bytes>> {
    match path {
        "/metrics" => {
            let mut r = text(StatusCode::OK, metrics());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match ready() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; try /healthz, /livez, /readyz or /metrics\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readyz_reports_the_reason() {
        let m: MetricsPage = Arc::new(|| "x 1\n".into());
        let not: ReadyCheck = Arc::new(|| Err("cache not synced".into()));
        let r = answer("/readyz", &not, &m);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer("/livez", &not, &m).status(), StatusCode::OK);
        let yes: ReadyCheck = Arc::new(|| Ok(()));
        assert_eq!(answer("/readyz", &yes, &m).status(), StatusCode::OK);
        assert_eq!(answer("/metrics", &yes, &m).status(), StatusCode::OK);
        assert_eq!(answer("/metricz", &yes, &m).status(), StatusCode::NOT_FOUND);
    }
}
