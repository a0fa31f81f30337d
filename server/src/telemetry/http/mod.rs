//! The scheduler's health and metrics endpoint (`--health-address`): `/healthz` and
//! `/livez` answer 200 while the process serves; `/readyz` answers 200 once the cache
//! has synced and every `Fail`-policy sidecar has completed its handshake (a standby
//! replica is ready too: readiness is about serving, not about leading), 503 with
//! the reason otherwise; `/metrics` is the Prometheus text format.
//!
//! Two ways to serve it ([`Serving`]):
//!
//! * **Secure** (the default of `switchyard run`), as kube-scheduler's secure serving
//!   (port 10259): HTTPS, and every path but `/healthz`, `/livez` and `/readyz`
//!   (upstream's `alwaysAllowPaths`) goes through delegated authentication and
//!   authorization against the API server: the bearer token is checked with a
//!   `TokenReview`, then the user it names with a `SubjectAccessReview` for the
//!   non-resource path and verb (`get /metrics`). Both answers are cached for 10 s,
//!   as upstream caches them, so a scrape every few seconds costs an API call now
//!   and then, not every time.
//! * **Plain** HTTP without authentication, for development and tests; the caller
//!   allows it only on a loopback address.

mod auth;
mod tls;

pub use auth::*;
pub use tls::*;

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Answers `/readyz`: `Ok` when ready, else why not.
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
/// Renders `/metrics`.
pub type MetricsPage = Arc<dyn Fn() -> String + Send + Sync>;

/// Paths served to anyone, without authentication (kube-scheduler's default
/// `--authorization-always-allow-paths`): the kubelet's probes carry no token.
pub const ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/livez", "/readyz"];
/// A client that opens a connection and never finishes the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How [`serve`] serves.
pub enum Serving {
    /// Plain HTTP, every path open (loopback only: the caller checks).
    Plain,
    /// HTTPS with delegated authentication and authorization.
    Secure {
        tls: Arc<rustls::ServerConfig>,
        auth: Arc<DelegatedAuth>,
    },
}

/// Binds `addr` and serves until the runtime stops; returns the bound address
/// (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    serving: Serving,
    ready: ReadyCheck,
    metrics: MetricsPage,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let (tls, auth) = match serving {
        Serving::Plain => (None, None),
        Serving::Secure { tls, auth } => (Some(tokio_rustls::TlsAcceptor::from(tls)), Some(auth)),
    };
    let handler = Arc::new(Handler {
        ready,
        metrics,
        auth,
    });
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handler = handler.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler.handle(req).await) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                match tls {
                    None => {
                        let _ = http
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                            .await;
                    }
                    Some(tls) => {
                        let Ok(Ok(stream)) =
                            tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await
                        else {
                            return;
                        };
                        let _ = http
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                            .await;
                    }
                }
            });
        }
    });
    Ok(bound)
}

struct Handler {
    ready: ReadyCheck,
    metrics: MetricsPage,
    auth: Option<Arc<DelegatedAuth>>,
}

impl Handler {
    async fn handle<B>(&self, req: Request<B>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if let Some(auth) = &self.auth {
            // Upstream authenticates these paths too and then always allows them;
            // skipping authentication is the same for the probes (no token) and
            // costs no TokenReview when a scraper sends one.
            if !ALWAYS_ALLOW_PATHS.contains(&path) {
                let header = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                // Non-resource requests: the verb is the lower-case HTTP method.
                let verb = req.method().as_str().to_ascii_lowercase();
                if let Err(refused) = auth.authorize(header, path, &verb).await {
                    return refused.response();
                }
            }
        }
        answer(path, &self.ready, &self.metrics)
    }
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

/// A failure as the API server's libraries write it: a `v1` `Status` in JSON.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason,
        "details": {}, "code": code.as_u16(),
    });
    let mut r = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

// ---------------------------------------------------------------------------
// Delegated authentication and authorization
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// The serving certificate
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::tls::der;
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// Tokens "reader" (allowed) and "other" (denied) are valid; counts the calls.
    #[derive(Default)]
    struct FakeReviews {
        tokens: AtomicUsize,
        accesses: AtomicUsize,
    }

    impl Reviews for FakeReviews {
        fn token_review(
            &self,
            token: &str,
        ) -> BoxFuture<'static, Result<Option<User>, ReviewError>> {
            self.tokens.fetch_add(1, Ordering::SeqCst);
            let user = matches!(token, "reader" | "other" | "admin").then(|| User {
                name: token.to_string(),
                uid: "u".into(),
                groups: if token == "admin" {
                    vec!["system:masters".into()]
                } else {
                    vec![]
                },
                extra: BTreeMap::new(),
            });
            Box::pin(async move { Ok(user) })
        }
        fn access_review(
            &self,
            user: &User,
            path: &str,
            verb: &str,
        ) -> BoxFuture<'static, Result<Decision, ReviewError>> {
            self.accesses.fetch_add(1, Ordering::SeqCst);
            let allowed = user.name == "reader" && path == "/metrics" && verb == "get";
            assert!(
                user.groups.contains(&"system:authenticated".to_string())
                    || user.name == "system:anonymous"
            );
            Box::pin(async move {
                Ok(Decision {
                    allowed,
                    reason: String::new(),
                })
            })
        }
    }

    #[test]
    fn delegated_auth_answers_as_upstream_and_caches() {
        let fake = Arc::new(FakeReviews::default());
        let auth = DelegatedAuth::new(fake.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let check = |h: Option<&str>| rt.block_on(auth.authorize(h, "/metrics", "get"));

        let anon = check(None).unwrap_err();
        assert_eq!(
            anon,
            Refusal::Forbidden(
                r#"forbidden: User "system:anonymous" cannot get path "/metrics""#.into()
            )
        );
        assert_eq!(anon.response().status(), StatusCode::FORBIDDEN);
        assert_eq!(
            check(Some("Bearer nope")).unwrap_err().code(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            check(Some("Bearer ")).unwrap_err().code(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            check(Some("Bearer other")).unwrap_err().code(),
            StatusCode::FORBIDDEN
        );
        assert!(check(Some("Bearer reader")).is_ok());
        assert!(check(Some("bearer  reader ")).is_ok());
        assert!(check(Some("Bearer admin")).is_ok());
        let (t, a) = (
            fake.tokens.load(Ordering::SeqCst),
            fake.accesses.load(Ordering::SeqCst),
        );
        // nope, other, reader, admin; anonymous, other, reader (admin skips it).
        assert_eq!((t, a), (4, 3));
        for _ in 0..10 {
            assert!(check(Some("Bearer reader")).is_ok());
            assert_eq!(
                check(Some("Bearer other")).unwrap_err().code(),
                StatusCode::FORBIDDEN
            );
            assert_eq!(
                check(Some("Bearer nope")).unwrap_err().code(),
                StatusCode::UNAUTHORIZED
            );
        }
        assert_eq!(
            fake.tokens.load(Ordering::SeqCst),
            t,
            "token reviews are cached"
        );
        assert_eq!(
            fake.accesses.load(Ordering::SeqCst),
            a,
            "access reviews are cached"
        );
        // Another path is another question.
        let other_path = rt.block_on(auth.authorize(Some("Bearer reader"), "/debug", "get"));
        assert_eq!(other_path.unwrap_err().code(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(der::civil_from_days(0), (1970, 1, 1));
        assert_eq!(der::civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(der::time(951_782_400), der::tlv(0x17, b"000229000000Z"));
        assert_eq!(der::time(2_524_608_000), der::tlv(0x18, b"20500101000000Z"));
    }

    /// The self-signed certificate is well-formed: a rustls client that trusts it
    /// completes a handshake for `localhost` and for 127.0.0.1 and gets `/healthz`
    /// and (in plain mode of the handler, authorization aside) a page.
    #[test]
    fn self_signed_certificate_serves_https() {
        let (chain, key) = self_signed("localhost", &[IpAddr::from([127, 0, 0, 1])]).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        roots.add(chain[0].clone()).unwrap();
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let fake: Arc<dyn Reviews> = Arc::new(FakeReviews::default());
            let addr = serve(
                "127.0.0.1:0".parse().unwrap(),
                Serving::Secure {
                    tls: Arc::new(config),
                    auth: Arc::new(DelegatedAuth::new(fake)),
                },
                Arc::new(|| Ok(())),
                Arc::new(|| "x 1\n".into()),
            )
            .await
            .unwrap();
            for (name, path, token, want) in [
                ("localhost", "/healthz", "", "200 OK"),
                ("127.0.0.1", "/metrics", "reader", "200 OK"),
                ("127.0.0.1", "/metrics", "other", "403 Forbidden"),
                ("localhost", "/metrics", "", "403 Forbidden"),
            ] {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let server_name =
                    rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
                let mut tls = tokio_rustls::TlsConnector::from(client.clone())
                    .connect(server_name, tcp)
                    .await
                    .unwrap_or_else(|e| panic!("handshake for {name}: {e}"));
                let auth = if token.is_empty() {
                    String::new()
                } else {
                    format!("Authorization: Bearer {token}\r\n")
                };
                tls.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .unwrap();
                let mut out = Vec::new();
                let _ = tls.read_to_end(&mut out).await;
                let out = String::from_utf8_lossy(&out);
                assert!(
                    out.starts_with(&format!("HTTP/1.1 {want}")),
                    "{path} {token}: {out}"
                );
            }
        });
    }
}
