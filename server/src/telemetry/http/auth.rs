//! Delegated authentication and authorization, as kube-scheduler's secure serving:
//! TokenReview for the bearer token, SubjectAccessReview for the path and verb, both
//! answers cached.

use super::*;

/// Users in this group skip the authorization check (upstream's
/// `AlwaysAllowGroups`: the API server's own authorizer grants it everything).
pub(super) const PRIVILEGED_GROUP: &str = "system:masters";

/// How long a TokenReview answer (valid or not) and a SubjectAccessReview answer
/// (allowed or denied) are reused: upstream's defaults, `--authentication-token-
/// webhook-cache-ttl` and `--authorization-webhook-cache-authorized/unauthorized-ttl`.
pub const AUTHN_CACHE_TTL: Duration = Duration::from_secs(10);

pub const AUTHZ_ALLOW_TTL: Duration = Duration::from_secs(10);

pub const AUTHZ_DENY_TTL: Duration = Duration::from_secs(10);

/// Upper bound on one review call (upstream's TokenRequestTimeout / ClientTimeout).
pub(super) const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Entries per cache; expired ones are dropped when it fills, all of them if none is.
pub(super) const CACHE_CAP: usize = 4096;

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

/// Why a review could not be asked of the API server (the request is then refused).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    #[error("{0}: {1}")]
    Failed(&'static str, String),
    #[error("{0} timed out")]
    Timeout(&'static str),
}

/// The two reviews, asked of the API server ([`KubeReviews`]) or of a double in tests.
pub trait Reviews: Send + Sync {
    /// `Ok(Some(user))` for a valid token, `Ok(None)` for one the API server does not
    /// accept, `Err` when it could not be asked.
    fn token_review(&self, token: &str) -> BoxFuture<'static, Result<Option<User>, ReviewError>>;
    /// Whether `user` may `verb` the non-resource `path`.
    fn access_review(
        &self,
        user: &User,
        path: &str,
        verb: &str,
    ) -> BoxFuture<'static, Result<Decision, ReviewError>>;
}

/// Reviews by the API server: `POST` of `authentication.k8s.io/v1` `TokenReview` and
/// `authorization.k8s.io/v1` `SubjectAccessReview` (the ServiceAccount needs
/// `create` on both: deploy/rbac.yaml).
pub struct KubeReviews {
    pub client: kube::Client,
}

impl Reviews for KubeReviews {
    fn token_review(&self, token: &str) -> BoxFuture<'static, Result<Option<User>, ReviewError>> {
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
                .map_err(|e| ReviewError::Failed("TokenReview", e.to_string()))?;
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
    ) -> BoxFuture<'static, Result<Decision, ReviewError>> {
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
                .map_err(|e| ReviewError::Failed("SubjectAccessReview", e.to_string()))?;
            let st = done.status.unwrap_or_default();
            Ok(Decision {
                allowed: st.allowed && st.denied != Some(true),
                reason: st.reason.unwrap_or_default(),
            })
        })
    }
}

/// A small map whose entries expire.
pub(super) struct TtlCache<K, V> {
    pub(super) entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(super) fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn get(&self, k: &K) -> Option<V> {
        let now = Instant::now();
        let map = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        map.get(k)
            .filter(|(until, _)| *until > now)
            .map(|(_, v)| v.clone())
    }

    pub(super) fn put(&self, k: K, v: V, ttl: Duration) {
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
    pub(super) reviews: Arc<dyn Reviews>,
    /// SHA-256 of the token → the user (None: not a valid token).
    pub(super) authn: TtlCache<[u8; 32], Option<User>>,
    pub(super) authz: TtlCache<(User, String, String), Decision>,
}

/// What the `Authorization` header holds.
pub(super) enum Credential<'a> {
    /// No bearer token: the anonymous user.
    None,
    /// `Bearer` with nothing after it: an invalid token.
    Empty,
    Token(&'a str),
}

pub(super) fn credential(header: Option<&str>) -> Credential<'_> {
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

    pub(super) async fn authenticate(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or([0; 32]);
        if let Some(hit) = self.authn.get(&key) {
            return Ok(hit);
        }
        let got = tokio::time::timeout(REVIEW_TIMEOUT, self.reviews.token_review(token))
            .await
            .map_err(|_| ReviewError::Timeout("TokenReview"))??;
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

    pub(super) async fn decide(
        &self,
        user: &User,
        path: &str,
        verb: &str,
    ) -> Result<Decision, ReviewError> {
        let key = (user.clone(), path.to_string(), verb.to_string());
        if let Some(hit) = self.authz.get(&key) {
            return Ok(hit);
        }
        let d = tokio::time::timeout(REVIEW_TIMEOUT, self.reviews.access_review(user, path, verb))
            .await
            .map_err(|_| ReviewError::Timeout("SubjectAccessReview"))??;
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
