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
/// Users in this group skip the authorization check (upstream's
/// `AlwaysAllowGroups`: the API server's own authorizer grants it everything).
const PRIVILEGED_GROUP: &str = "system:masters";
/// How long a TokenReview answer (valid or not) and a SubjectAccessReview answer
/// (allowed or denied) are reused: upstream's defaults, `--authentication-token-
/// webhook-cache-ttl` and `--authorization-webhook-cache-authorized/unauthorized-ttl`.
pub const AUTHN_CACHE_TTL: Duration = Duration::from_secs(10);
pub const AUTHZ_ALLOW_TTL: Duration = Duration::from_secs(10);
pub const AUTHZ_DENY_TTL: Duration = Duration::from_secs(10);
/// Upper bound on one review call (upstream's TokenRequestTimeout / ClientTimeout).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Entries per cache; expired ones are dropped when it fills, all of them if none is.
const CACHE_CAP: usize = 4096;
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

/// Who a request is, as a TokenReview returned it (or the anonymous user).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    /// Upstream's anonymous authenticator's user.
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
            extra: BTreeMap::new(),
        }
    }
}

/// A SubjectAccessReview's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

/// The two reviews, asked of the API server ([`KubeReviews`]) or of a double in tests.
pub trait Reviews: Send + Sync {
    /// `Ok(Some(user))` for a valid token, `Ok(None)` for one the API server does not
    /// accept, `Err` when it could not be asked.
    fn token_review(&self, token: &str) -> BoxFuture<'static, Result<Option<User>, String>>;
    /// Whether `user` may `verb` the non-resource `path`.
    fn access_review(
        &self,
        user: &User,
        path: &str,
        verb: &str,
    ) -> BoxFuture<'static, Result<Decision, String>>;
}

/// Reviews by the API server: `POST` of `authentication.k8s.io/v1` `TokenReview` and
/// `authorization.k8s.io/v1` `SubjectAccessReview` (the ServiceAccount needs
/// `create` on both: deploy/rbac.yaml).
pub struct KubeReviews {
    pub client: kube::Client,
}

impl Reviews for KubeReviews {
    fn token_review(&self, token: &str) -> BoxFuture<'static, Result<Option<User>, String>> {
        use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
        let api: kube::Api<TokenReview> = kube::Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                ..Default::default()
            },
            ..Default::default()
        };
        Box::pin(async move {
            let done = api
                .create(&kube::api::PostParams::default(), &review)
                .await
                .map_err(|e| format!("TokenReview: {e}"))?;
            let Some(st) = done.status.filter(|s| s.authenticated == Some(true)) else {
                return Ok(None);
            };
            let u = st.user.unwrap_or_default();
            Ok(Some(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default(),
            }))
        })
    }

    fn access_review(
        &self,
        user: &User,
        path: &str,
        verb: &str,
    ) -> BoxFuture<'static, Result<Decision, String>> {
        use k8s_openapi::api::authorization::v1::{
            NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        Box::pin(async move {
            let done = api
                .create(&kube::api::PostParams::default(), &review)
                .await
                .map_err(|e| format!("SubjectAccessReview: {e}"))?;
            let st = done.status.unwrap_or_default();
            Ok(Decision {
                allowed: st.allowed && st.denied != Some(true),
                reason: st.reason.unwrap_or_default(),
            })
        })
    }
}

/// A small map whose entries expire.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        let now = Instant::now();
        let map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.get(k)
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, k: K, v: V, ttl: Duration) {
        let now = Instant::now();
        let mut map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CACHE_CAP {
            map.retain(|_, (until, _)| *until > now);
            if map.len() >= CACHE_CAP {
                map.clear();
            }
        }
        map.insert(k, (now + ttl, v));
    }
}

/// Delegated authentication and authorization with upstream's caches.
pub struct DelegatedAuth {
    reviews: Arc<dyn Reviews>,
    /// SHA-256 of the token → the user (None: not a valid token).
    authn: TtlCache<[u8; 32], Option<User>>,
    authz: TtlCache<(User, String, String), Decision>,
}

/// What the `Authorization` header holds.
enum Credential<'a> {
    /// No bearer token: the anonymous user.
    None,
    /// `Bearer` with nothing after it: an invalid token.
    Empty,
    Token(&'a str),
}

fn credential(header: Option<&str>) -> Credential<'_> {
    // As upstream's bearertoken authenticator: a header that is not `Bearer <token>`
    // is no credential at all (the request goes on as anonymous).
    let Some(h) = header else {
        return Credential::None;
    };
    let h = h.trim();
    let Some((scheme, rest)) = h.split_once(' ') else {
        return if h.eq_ignore_ascii_case("bearer") {
            Credential::Empty
        } else {
            Credential::None
        };
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Credential::None;
    }
    match rest.trim() {
        "" => Credential::Empty,
        t if t.contains(' ') => Credential::None,
        t => Credential::Token(t),
    }
}

impl DelegatedAuth {
    pub fn new(reviews: Arc<dyn Reviews>) -> DelegatedAuth {
        DelegatedAuth {
            reviews,
            authn: TtlCache::new(),
            authz: TtlCache::new(),
        }
    }

    /// Against the API server that `client` talks to.
    pub fn kubernetes(client: kube::Client) -> DelegatedAuth {
        DelegatedAuth::new(Arc::new(KubeReviews { client }))
    }

    async fn authenticate(&self, token: &str) -> Result<Option<User>, String> {
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        if let Some(hit) = self.authn.get(&key) {
            return Ok(hit);
        }
        let got = tokio::time::timeout(REVIEW_TIMEOUT, self.reviews.token_review(token))
            .await
            .map_err(|_| "TokenReview timed out".to_string())??;
        // As upstream's AuthenticatedGroupAdder: every authenticated user is in
        // system:authenticated.
        let got = got.map(|mut u| {
            if !u.groups.iter().any(|g| g == "system:authenticated") {
                u.groups.push("system:authenticated".into());
            }
            u
        });
        self.authn.put(key, got.clone(), AUTHN_CACHE_TTL);
        Ok(got)
    }

    async fn decide(&self, user: &User, path: &str, verb: &str) -> Result<Decision, String> {
        let key = (user.clone(), path.to_string(), verb.to_string());
        if let Some(hit) = self.authz.get(&key) {
            return Ok(hit);
        }
        let d = tokio::time::timeout(REVIEW_TIMEOUT, self.reviews.access_review(user, path, verb))
            .await
            .map_err(|_| "SubjectAccessReview timed out".to_string())??;
        let ttl = if d.allowed {
            AUTHZ_ALLOW_TTL
        } else {
            AUTHZ_DENY_TTL
        };
        self.authz.put(key, d.clone(), ttl);
        Ok(d)
    }

    /// `Ok` when the request may go on, else the response that refuses it. As
    /// kube-scheduler answers (k8s.io/apiserver's authentication and authorization
    /// filters, anonymous authentication on as `DelegatingAuthenticationOptions`
    /// sets it):
    ///
    /// * no bearer token: the request is `system:anonymous` and goes to
    ///   authorization like any other, so RBAC refuses it with **403**
    ///   `forbidden: User "system:anonymous" cannot get path "/metrics"` (unless a
    ///   binding allows anonymous scrapes);
    /// * a token the TokenReview rejects (or that cannot be reviewed): **401**
    ///   `Unauthorized`;
    /// * an authenticated user the SubjectAccessReview denies: **403**, the same
    ///   message with the user's name (and the reviewer's reason, if any);
    /// * the SubjectAccessReview cannot be made: **500**.
    pub async fn authorize(
        &self,
        header: Option<&str>,
        path: &str,
        verb: &str,
    ) -> Result<(), Refusal> {
        let user = match credential(header) {
            Credential::None => User::anonymous(),
            Credential::Empty => return Err(Refusal::Unauthorized),
            Credential::Token(t) => match self.authenticate(t).await {
                Ok(Some(u)) => u,
                Ok(None) => return Err(Refusal::Unauthorized),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot authenticate a request to {path}");
                    return Err(Refusal::Unauthorized);
                }
            },
        };
        if user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Ok(());
        }
        match self.decide(&user, path, verb).await {
            Ok(d) if d.allowed => Ok(()),
            Ok(d) => {
                let mut msg = format!(
                    "forbidden: User {:?} cannot {verb} path {:?}",
                    user.name, path
                );
                if !d.reason.is_empty() {
                    msg = format!("{msg}: {}", d.reason);
                }
                Err(Refusal::Forbidden(msg))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot authorize a request to {path}");
                Err(Refusal::Internal(format!("Internal error occurred: {e}")))
            }
        }
    }
}

/// Why [`DelegatedAuth::authorize`] refused a request (the message for the client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401: a bearer token the API server does not accept.
    Unauthorized,
    /// 403: `forbidden: User "..." cannot get path "..."`.
    Forbidden(String),
    /// 500: the SubjectAccessReview could not be made.
    Internal(String),
}

impl Refusal {
    pub fn code(&self) -> StatusCode {
        match self {
            Refusal::Unauthorized => StatusCode::UNAUTHORIZED,
            Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            Refusal::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// As the API server's libraries write it: a `v1` `Status` in JSON.
    pub fn response(&self) -> Response<Full<Bytes>> {
        match self {
            Refusal::Unauthorized => status(self.code(), "Unauthorized", "Unauthorized"),
            Refusal::Forbidden(m) => status(self.code(), "Forbidden", m),
            Refusal::Internal(m) => status(self.code(), "InternalError", m),
        }
    }
}

// ---------------------------------------------------------------------------
// The serving certificate
// ---------------------------------------------------------------------------

/// The TLS configuration: the certificate chain and key of `--tls-cert-file` and
/// `--tls-private-key-file` (PEM), or, without them, a self-signed certificate made
/// in memory for `localhost`, 127.0.0.1 and `bind` (when it names one address), as
/// kube-scheduler makes one when it is given none.
pub fn tls_config(
    cert_and_key: Option<(&Path, &Path)>,
    bind: IpAddr,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let (chain, key) = match cert_and_key {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--tls-cert-file {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "--tls-cert-file {}: no CERTIFICATE in the file",
                    cert.display()
                ));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--tls-private-key-file {}: {e}", key.display()))?;
            (chain, key)
        }
        None => {
            let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
            if !bind.is_unspecified() && !ips.contains(&bind) {
                ips.push(bind);
            }
            self_signed("localhost", &ips)?
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the serving certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A self-signed ECDSA P-256 certificate for `dns` and `ips`, valid from an hour ago
/// for a year (kube-scheduler's self-signed certificate is valid a year too), and its
/// PKCS#8 key. Written in DER by hand: a dozen fixed structures, no X.509 crate.
pub fn self_signed(
    dns: &str,
    ips: &[IpAddr],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    use ring::rand::SecureRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| "cannot generate a key".to_string())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| "cannot read the generated key".to_string())?;

    let mut serial = [0u8; 16];
    rng.fill(&mut serial)
        .map_err(|_| "no random numbers".to_string())?;
    serial[0] = (serial[0] & 0x7f) | 0x40; // positive, minimal encoding

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = der::seq(&[der::set(&[der::seq(&[
        der::OID_COMMON_NAME.to_vec(),
        der::tlv(0x0c, format!("{dns}@{now}").as_bytes()),
    ])])]);
    let validity = der::seq(&[der::time(now - 3600), der::time(now + 365 * 86_400)]);
    let spki = der::seq(&[
        der::seq(&[der::OID_EC_PUBLIC_KEY.to_vec(), der::OID_P256.to_vec()]),
        der::bit_string(pair.public_key().as_ref()),
    ]);
    let mut alt_names = vec![der::tlv(0x82, dns.as_bytes())];
    for ip in ips {
        alt_names.push(match ip {
            IpAddr::V4(v4) => der::tlv(0x87, &v4.octets()),
            IpAddr::V6(v6) => der::tlv(0x87, &v6.octets()),
        });
    }
    let extension = |oid: &[u8], critical: bool, value: Vec<u8>| {
        let mut parts = vec![oid.to_vec()];
        if critical {
            parts.push(vec![0x01, 0x01, 0xff]);
        }
        parts.push(der::tlv(0x04, &value));
        der::seq(&parts)
    };
    let extensions = der::tlv(
        0xa3,
        &der::seq(&[
            // keyUsage: digitalSignature.
            extension(der::OID_KEY_USAGE, true, vec![0x03, 0x02, 0x07, 0x80]),
            // extKeyUsage: serverAuth.
            extension(
                der::OID_EXT_KEY_USAGE,
                false,
                der::seq(&[der::OID_SERVER_AUTH.to_vec()]),
            ),
            // basicConstraints: not a CA.
            extension(der::OID_BASIC_CONSTRAINTS, true, der::seq(&[])),
            extension(der::OID_SUBJECT_ALT_NAME, false, der::seq(&alt_names)),
        ]),
    );
    let algorithm = der::seq(&[der::OID_ECDSA_SHA256.to_vec()]);
    let tbs = der::seq(&[
        vec![0xa0, 0x03, 0x02, 0x01, 0x02], // version: v3
        der::tlv(0x02, &serial),
        algorithm.clone(),
        name.clone(),
        validity,
        name,
        spki,
        extensions,
    ]);
    let signature = pair
        .sign(&rng, &tbs)
        .map_err(|_| "cannot sign the certificate".to_string())?;
    let cert = der::seq(&[tbs, algorithm, der::bit_string(signature.as_ref())]);
    Ok((
        vec![CertificateDer::from(cert)],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_ref().to_vec())),
    ))
}

/// The few DER encodings a certificate needs.
mod der {
    pub const OID_COMMON_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
    pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    pub const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    pub const OID_ECDSA_SHA256: &[u8] =
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    pub const OID_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0f];
    pub const OID_SUBJECT_ALT_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];
    pub const OID_BASIC_CONSTRAINTS: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x13];
    pub const OID_EXT_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x25];
    pub const OID_SERVER_AUTH: &[u8] =
        &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes: Vec<u8> = n
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(content);
        out
    }

    pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    pub fn set(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x31, &parts.concat())
    }

    pub fn bit_string(bits: &[u8]) -> Vec<u8> {
        let mut content = vec![0];
        content.extend_from_slice(bits);
        tlv(0x03, &content)
    }

    /// UTCTime before 2050, GeneralizedTime from then on (RFC 5280 4.1.2.5).
    pub fn time(unix: u64) -> Vec<u8> {
        let days = (unix / 86_400) as i64;
        let secs = unix % 86_400;
        let (y, m, d) = civil_from_days(days);
        let hms = format!("{:02}{:02}{:02}Z", secs / 3600, (secs / 60) % 60, secs % 60);
        if y < 2050 {
            tlv(0x17, format!("{:02}{m:02}{d:02}{hms}", y % 100).as_bytes())
        } else {
            tlv(0x18, format!("{y:04}{m:02}{d:02}{hms}").as_bytes())
        }
    }

    /// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard
    /// Hinnant's algorithm).
    pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let y = yoe + era * 400 + i64::from(m <= 2);
        (y, m, d)
    }
}

#[cfg(test)]
mod tests {
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
        fn token_review(&self, token: &str) -> BoxFuture<'static, Result<Option<User>, String>> {
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
        ) -> BoxFuture<'static, Result<Decision, String>> {
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
