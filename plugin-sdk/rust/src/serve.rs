//! Serving: listen on a Unix socket (the default for sidecars), TCP or TLS, answer
//! until SIGTERM or Ctrl-C, then finish the calls in flight and remove the socket.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use switchyard_proto::{
    shutdown_signal, LISTEN_ENV, TLS_CERT_ENV, TLS_CLIENT_CA_ENV, TLS_KEY_ENV,
};

use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use switchyard_proto::error_chain;

use crate::health::HealthService;
use crate::pb;
use crate::plugin::Plugin;
use crate::service::PluginService;
use crate::waiting::Handle;

/// Where a sidecar listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
    /// TCP with TLS (`https://host:port`); the certificate comes from [`ServerTls`].
    Tls(SocketAddr),
}

/// The sidecar's TLS certificate and key (PEM), and the CA client certificates must
/// chain to when mutual TLS is wanted.
#[derive(Clone, Debug)]
pub struct ServerTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// Reads the files named by `SWITCHYARD_PLUGIN_TLS_CERT`, `..._KEY` and
    /// (optionally) `..._CLIENT_CA`.
    pub fn from_env() -> Result<Self, Error> {
        let read = |var: &str, required: bool| -> Result<Option<Vec<u8>>, Error> {
            match std::env::var(var).ok().filter(|v| !v.trim().is_empty()) {
                Some(path) => std::fs::read(&path)
                    .map(Some)
                    .map_err(|e| Error::Usage(format!("{var}={path}: cannot read: {e}"))),
                None if required => Err(Error::Usage(format!(
                    "an https:// listen address needs {var} (a PEM file); set {TLS_CERT_ENV} and {TLS_KEY_ENV}"
                ))),
                None => Ok(None),
            }
        };
        Ok(ServerTls {
            cert: read(TLS_CERT_ENV, true)?.unwrap_or_default(),
            key: read(TLS_KEY_ENV, true)?.unwrap_or_default(),
            client_ca: read(TLS_CLIENT_CA_ENV, false)?,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listen address {0:?}: expected unix:///path/to.sock, tcp://host:port, https://host:port or host:port")]
    Address(String),
    #[error("cannot listen on {0}: {1}; {2}")]
    Listen(String, std::io::Error, String),
    #[error("serving: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("plugin {0:?} is registered twice")]
    Duplicate(String),
    #[error("health check of {0}: {1}")]
    Unhealthy(String, String),
}

/// A listen failure with what fixes it.
fn listen_error(addr: &dyn std::fmt::Display, unix: bool, e: std::io::Error) -> Error {
    let addr = addr.to_string();
    let hint = switchyard_proto::listen_hint(
        &addr,
        unix,
        &e,
        &format!("{} (or --listen)", switchyard_proto::LISTEN_ENV),
    );
    Error::Listen(addr, e, hint)
}

/// Parses `unix:///path.sock`, `unix:path.sock`, `tcp://host:port`, `http://host:port`,
/// `https://host:port` (TLS) or `host:port`.
pub fn parse_listen_address(s: &str) -> Result<Listen, Error> {
    if let Some(p) = s
        .strip_prefix("unix://")
        .or_else(|| s.strip_prefix("unix:"))
    {
        if p.is_empty() {
            return Err(Error::Address(s.into()));
        }
        return Ok(Listen::Unix(PathBuf::from(p)));
    }
    if let Some(hostport) = s.strip_prefix("https://") {
        return hostport
            .parse()
            .map(Listen::Tls)
            .map_err(|_| Error::Address(s.into()));
    }
    let hostport = s
        .strip_prefix("tcp://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    hostport
        .parse()
        .map(Listen::Tcp)
        .map_err(|_| Error::Address(s.into()))
}

/// The environment fallback of `--no-optional-capabilities`: `off` (or `false`, `0`)
/// sets [`ServeOptions::capabilities`] to false in [`ServeOptions::from_env`], the
/// only place the SDK reads it.
pub const CAPABILITIES_ENV: &str = "SWITCHYARD_PLUGIN_CAPABILITIES";

/// How the sidecar serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub listen: Listen,
    /// Longest a call waits for the replica to reach the generation it names.
    pub generation_wait: Duration,
    /// Batches of at least this many nodes are evaluated in parallel (0 = never).
    pub parallel_threshold: usize,
    /// Advertised batch limit (0 = none).
    pub max_batch_nodes: u32,
    /// Offer the protocol's optional capabilities when the scheduler does
    /// (`filter-batch`: several pods' Filter calls per message for node-local
    /// plugins; `replicate-batch`: several Replicate messages per message;
    /// `filter-after-pre-filter`: a Filter sent behind its PreFilter). On by
    /// default; false serves as a sidecar built before them would (the scheduler
    /// then calls it one pod at a time). The command line's
    /// `--no-optional-capabilities` turns it off ([`SidecarArgs`](crate::SidecarArgs)),
    /// and so does [`CAPABILITIES_ENV`]`=off` through [`ServeOptions::from_env`].
    pub capabilities: bool,
    /// Required for [`Listen::Tls`].
    pub tls: Option<ServerTls>,
}

impl ServeOptions {
    pub fn new(listen: Listen) -> Self {
        ServeOptions {
            listen,
            generation_wait: Duration::from_secs(5),
            parallel_threshold: 2048,
            max_batch_nodes: 0,
            capabilities: true,
            tls: None,
        }
    }

    /// [`ServeOptions::new`], with what the environment sets: the TLS files when
    /// `listen` is an https:// address, and `capabilities` off when
    /// [`CAPABILITIES_ENV`] is `off` (or `false`, `0`; the fallback of
    /// `--no-optional-capabilities`).
    pub fn from_env(listen: Listen) -> Result<Self, Error> {
        let mut o = ServeOptions::new(listen);
        o.capabilities = !std::env::var(CAPABILITIES_ENV)
            .is_ok_and(|v| matches!(v.trim(), "off" | "false" | "0"));
        if matches!(o.listen, Listen::Tls(_)) {
            o.tls = Some(ServerTls::from_env()?);
        }
        Ok(o)
    }
}

/// Refuses what the scheduler could not use: two plugins of one name, or a node-local
/// plugin with a PreFilter (its state may span nodes, which the lookahead assumes it
/// does not).
fn check_plugins(plugins: &[Arc<dyn Plugin>]) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::new();
    for p in plugins {
        if !seen.insert(p.name().to_string()) {
            return Err(Error::Duplicate(p.name().to_string()));
        }
        if p.node_local() && p.as_pre_filter().is_some() {
            return Err(Error::Usage(format!(
                "plugin {:?} declares node_local but has a PreFilter, whose state may span \
                 nodes: drop one of the two",
                p.name()
            )));
        }
        if !p.signature().is_empty() && !p.node_local() && !p.signature_node_pods() {
            return Err(Error::Usage(format!(
                "plugin {:?} declares a signature but neither node_local nor \
                 signature_node_pods: answers reused across pods must depend on the \
                 node alone (and, with signature_node_pods, its pods) as well",
                p.name()
            )));
        }
        if !p.signature_label_keys().is_empty() && (!p.signature_node_pods() || p.node_local()) {
            return Err(Error::Usage(format!(
                "plugin {:?} declares signature_label_keys without signature_node_pods, or \
                 with node_local: declare signature_node_pods and drop node_local",
                p.name()
            )));
        }
        if p.pre_filter_pod_only() && (!p.signature_node_pods() || p.node_local()) {
            return Err(Error::Usage(format!(
                "plugin {:?} declares pre_filter_pod_only without signature_node_pods, or \
                 with node_local: declare signature_node_pods (and a signature) and drop \
                 node_local",
                p.name()
            )));
        }
        if let Some(l) = p.as_label_score() {
            if p.as_pre_filter().is_some() {
                return Err(Error::Usage(format!(
                    "plugin {:?} scores by a node label and has a PreFilter: its label scores \
                     are asked for as the cycle starts, before PreFilter, and keep the cycle \
                     state; serve the PreFilter from a plugin of its own",
                    p.name()
                )));
            }
            if p.as_pre_score().is_some() || p.as_score().is_some() {
                return Err(Error::Usage(format!(
                    "plugin {:?} scores by a node label and also has a PreScore or Score: \
                     the label scores are its PreScore and Score, drop the others",
                    p.name()
                )));
            }
            if l.score_node_label().is_empty() {
                return Err(Error::Usage(format!(
                    "plugin {:?} scores by a node label but names none: return the label \
                     key from score_node_label",
                    p.name()
                )));
            }
        }
        if p.signature_node_pods() && p.signature().is_empty() {
            return Err(Error::Usage(format!(
                "plugin {:?} declares signature_node_pods without a signature: list the \
                 pod fields its answers read",
                p.name()
            )));
        }
    }
    Ok(())
}

/// Serves `plugins` until `shutdown` completes. `on_handle` receives the handle for
/// Permit decisions before the first call.
pub async fn serve(
    plugins: Vec<Arc<dyn Plugin>>,
    options: ServeOptions,
    on_handle: impl FnOnce(Handle),
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    check_plugins(&plugins)?;
    let svc = PluginService::new(
        plugins,
        options.generation_wait,
        options.parallel_threshold,
        options.max_batch_nodes,
        options.capabilities,
    );
    on_handle(svc.handle());
    let (health, health_status) = HealthService::new();
    // Health turns NOT_SERVING as soon as shutdown starts, while calls drain.
    let shutdown = async move {
        shutdown.await;
        let _ = health_status
            .send(switchyard_proto::health::health_check_response::ServingStatus::NotServing);
    };
    let mut builder = tonic::transport::Server::builder().tcp_nodelay(true);
    if let Listen::Tls(addr) = &options.listen {
        let Some(tls) = &options.tls else {
            return Err(Error::Usage(format!(
                "https://{addr}: TLS needs a certificate (ServeOptions::tls, or {TLS_CERT_ENV}/{TLS_KEY_ENV})"
            )));
        };
        let mut c = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(&tls.cert, &tls.key));
        if let Some(ca) = &tls.client_ca {
            c = c.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        builder = builder.tls_config(c)?;
    }
    let server = builder
        .add_service(switchyard_proto::health::health_server::HealthServer::new(
            health,
        ))
        .add_service(
            pb::plugin_server::PluginServer::new(svc)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        );
    match &options.listen {
        Listen::Unix(path) => {
            // A socket left by a previous run would make bind fail.
            let _ = std::fs::remove_file(path);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| listen_error(&path.display(), true, e))?;
            }
            let listener = tokio::net::UnixListener::bind(path)
                .map_err(|e| listen_error(&path.display(), true, e))?;
            tracing::info!(socket = %path.display(), "serving plugins");
            let r = server
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await;
            let _ = std::fs::remove_file(path);
            r?;
        }
        Listen::Tcp(addr) | Listen::Tls(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| listen_error(addr, false, e))?;
            tracing::info!(address = %addr, "serving plugins");
            server
                .serve_with_incoming_shutdown(
                    // Server::tcp_nodelay covers only listeners tonic binds itself:
                    // without it, Nagle and delayed ACKs stall replies for ~40 ms.
                    tokio_stream::StreamExt::map(TcpListenerStream::new(listener), |s| {
                        if let Ok(s) = &s {
                            let _ = s.set_nodelay(true);
                        }
                        s
                    }),
                    shutdown,
                )
                .await?;
        }
    }
    Ok(())
}

/// Checks a running sidecar's gRPC health at `listen` (within 5 seconds): `Ok` when
/// it answers SERVING. For exec probes (`my-sidecar --probe`), since kubelet's gRPC
/// probes cannot reach a Unix socket. An https:// address is dialled on the loopback
/// and its certificate verified for `localhost` against the CA in
/// `SWITCHYARD_PLUGIN_TLS_CLIENT_CA` (presenting the sidecar's own certificate as
/// the client's), else against the sidecar's own certificate (self-signed).
pub fn probe(listen: &Listen) -> Result<(), Error> {
    use switchyard_proto::health::health_check_response::ServingStatus;
    use switchyard_proto::health::health_client::HealthClient;
    use switchyard_proto::health::HealthCheckRequest;
    let what = match listen {
        Listen::Unix(p) => format!("unix://{}", p.display()),
        Listen::Tcp(a) => format!("http://{a}"),
        Listen::Tls(a) => format!("https://{a}"),
    };
    let fail = |e: String| Error::Unhealthy(what.clone(), e);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    rt.block_on(async {
        let channel = tokio::time::timeout(Duration::from_secs(5), connect(listen))
            .await
            .map_err(|_| fail("no connection within 5s".into()))?
            .map_err(fail)?;
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            HealthClient::new(channel).check(HealthCheckRequest {
                service: String::new(),
            }),
        )
        .await
        .map_err(|_| fail("no answer within 5s".into()))?
        .map_err(|s| {
            fail(format!(
                "{}: {}",
                s.code(),
                switchyard_proto::status_text(&s)
            ))
        })?;
        match ServingStatus::try_from(reply.into_inner().status) {
            Ok(ServingStatus::Serving) => Ok(()),
            Ok(other) => Err(fail(other.as_str_name().to_string())),
            Err(_) => Err(fail("unknown status".into())),
        }
    })
}

async fn connect(listen: &Listen) -> Result<tonic::transport::Channel, String> {
    use tonic::transport::Endpoint;
    let e = |e: tonic::transport::Error| format!("cannot connect: {}", error_chain(&e));
    match listen {
        Listen::Unix(path) => switchyard_proto::connect_unix(
            Endpoint::from_static("http://sidecar.local"),
            path.clone(),
        )
        .await
        .map_err(e),
        Listen::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))
            .map_err(e)?
            .connect()
            .await
            .map_err(e),
        Listen::Tls(addr) => {
            let tls = ServerTls::from_env().map_err(|e| e.to_string())?;
            // Under mutual TLS the probe presents the sidecar's own certificate, so
            // it must allow clientAuth too.
            let identity = tls
                .client_ca
                .is_some()
                .then(|| tonic::transport::Identity::from_pem(&tls.cert, &tls.key));
            let ca = tls.client_ca.clone().unwrap_or_else(|| tls.cert.clone());
            // The probe dials the listen address, which may be 0.0.0.0: name the
            // loopback instead, and verify the certificate for "localhost".
            let target = if addr.ip().is_unspecified() {
                SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
            } else {
                *addr
            };
            let mut c = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca))
                .domain_name("localhost");
            if let Some(id) = identity {
                c = c.identity(id);
            }
            Endpoint::from_shared(format!("https://{target}"))
                .map_err(e)?
                .tls_config(c)
                .map_err(e)?
                .connect()
                .await
                .map_err(e)
        }
    }
}

/// Serves on a single-threaded runtime (the fastest for request/reply over a socket)
/// until SIGTERM or Ctrl-C, handing the Permit handle to `on_handle` first, with the
/// options of [`ServeOptions::from_env`].
pub fn serve_until_signal(
    plugins: Vec<Arc<dyn Plugin>>,
    listen: Listen,
    on_handle: impl FnOnce(Handle),
) -> Result<(), Error> {
    serve_until_signal_with(plugins, ServeOptions::from_env(listen)?, on_handle)
}

/// [`serve_until_signal`] with the given options (e.g. from
/// [`SidecarArgs::serve_options`](crate::SidecarArgs::serve_options)).
pub fn serve_until_signal_with(
    plugins: Vec<Arc<dyn Plugin>>,
    options: ServeOptions,
    on_handle: impl FnOnce(Handle),
) -> Result<(), Error> {
    let service = match plugins.first() {
        Some(p) => format!("switchyard-sidecar-{}", p.name().to_lowercase()),
        None => "switchyard-sidecar".into(),
    };
    crate::telemetry::init(&service);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let r = rt.block_on(serve(plugins, options, on_handle, shutdown_signal()));
    crate::telemetry::shutdown();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Local(bool);

    impl Plugin for Local {
        fn name(&self) -> &str {
            if self.0 {
                "WithPreFilter"
            } else {
                "Local"
            }
        }
        fn node_local(&self) -> bool {
            true
        }
        fn as_pre_filter(&self) -> Option<&dyn crate::plugin::PreFilterPlugin> {
            self.0
                .then_some(self as &dyn crate::plugin::PreFilterPlugin)
        }
    }

    impl crate::plugin::PreFilterPlugin for Local {
        fn pre_filter(
            &self,
            _cycle: &crate::Cycle,
            _state: &mut crate::CycleState,
        ) -> crate::plugin::PreFilterResult {
            crate::Status::success().into()
        }
    }

    #[test]
    fn node_local_plugins_may_not_have_a_pre_filter() {
        assert!(check_plugins(&[Arc::new(Local(false))]).is_ok());
        let e = check_plugins(&[Arc::new(Local(false)), Arc::new(Local(true))]).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"WithPreFilter\" declares node_local"),
            "{e}"
        );
        let e = check_plugins(&[Arc::new(Local(false)), Arc::new(Local(false))]).unwrap_err();
        assert!(matches!(e, Error::Duplicate(_)), "{e}");
    }

    /// A PreFilter plugin declaring `pre_filter_pod_only`, with `signature_node_pods`
    /// (`.0`) or not.
    struct PodOnly(bool);

    impl Plugin for PodOnly {
        fn name(&self) -> &str {
            "PodOnly"
        }
        fn signature(&self) -> Vec<crate::pb::PodField> {
            vec![crate::pb::PodField::None]
        }
        fn signature_node_pods(&self) -> bool {
            self.0
        }
        fn node_local(&self) -> bool {
            !self.0
        }
        fn pre_filter_pod_only(&self) -> bool {
            true
        }
    }

    /// Only with `signature_node_pods` does `pre_filter_pod_only` make a plugin's calls
    /// answerable at the generation they name (and declared in the handshake).
    #[test]
    fn pre_filter_pod_only_needs_signature_node_pods() {
        assert!(check_plugins(&[Arc::new(PodOnly(true))]).is_ok());
        assert!(PodOnly(true).answers_at_named_generation());
        let e = check_plugins(&[Arc::new(PodOnly(false))]).unwrap_err();
        assert!(e.to_string().contains("pre_filter_pod_only"), "{e}");
        struct Pinned;
        impl Plugin for Pinned {
            fn name(&self) -> &str {
                "Pinned"
            }
            fn pre_filter_pod_only(&self) -> bool {
                true
            }
        }
        assert!(!Pinned.answers_at_named_generation());
    }

    /// Scores by zone: z1 3, z2 1. `.0`: also a PreFilter; `.1` the label.
    struct ByZone(bool, &'static str);

    impl Plugin for ByZone {
        fn name(&self) -> &str {
            "ByZone"
        }
        fn as_pre_filter(&self) -> Option<&dyn crate::plugin::PreFilterPlugin> {
            // Local's PreFilter: any one will do.
            static PRE_FILTER: Local = Local(true);
            self.0
                .then_some(&PRE_FILTER as &dyn crate::plugin::PreFilterPlugin)
        }
        fn as_label_score(&self) -> Option<&dyn crate::plugin::LabelScorePlugin> {
            Some(self)
        }
    }

    impl crate::plugin::LabelScorePlugin for ByZone {
        fn score_node_label(&self) -> &str {
            self.1
        }
        fn label_scores(
            &self,
            _cycle: &crate::Cycle,
        ) -> Result<std::collections::HashMap<String, i64>, crate::Status> {
            Ok([("z1".to_string(), 3), ("z2".to_string(), 1)].into())
        }
        fn score_normalization(&self) -> crate::pb::ScoreNormalization {
            crate::pb::ScoreNormalization::Default
        }
    }

    #[test]
    fn label_scores_are_served_as_pre_score_and_score() {
        use crate::label_score;
        assert!(check_plugins(&[Arc::new(ByZone(false, "zone"))]).is_ok());
        let e = check_plugins(&[Arc::new(ByZone(true, "zone"))]).unwrap_err();
        assert!(e.to_string().contains("has a PreFilter"), "{e}");
        let e = check_plugins(&[Arc::new(ByZone(false, ""))]).unwrap_err();
        assert!(e.to_string().contains("names none"), "{e}");

        let p = ByZone(false, "zone");
        let node = |name: &str, zone: Option<&str>| crate::NodeInfo {
            node: crate::pb::Node {
                name: name.into(),
                labels: zone
                    .map(|z| [("zone".to_string(), z.to_string())].into())
                    .unwrap_or_default(),
                ..Default::default()
            },
            pods: Vec::new(),
        };
        let (a, b, c) = (
            node("a", Some("z1")),
            node("b", Some("z2")),
            node("c", None),
        );
        let pod = Arc::new(crate::Pod::default());
        let snapshot = crate::Snapshot::default();
        let cycle = crate::Cycle {
            id: 1,
            pod: &pod,
            profile: "p",
            snapshot: &snapshot,
        };
        let mut state = crate::CycleState::default();
        assert!(label_score::pre_score(&p, &cycle, &mut state).is_success());
        let table = label_score::reply(&state).expect("the table for the reply");
        assert_eq!(
            (table.values, table.scores),
            (vec!["z1".into(), "z2".into()], vec![3, 1])
        );
        let nodes = [&a, &b, &c];
        assert_eq!(
            label_score::scores(&p, &state, &nodes, true).unwrap(),
            (vec![100, 33, 0], true)
        );
        assert_eq!(
            label_score::scores(&p, &state, &nodes, false).unwrap(),
            (vec![3, 1, 0], false)
        );
        let empty = crate::CycleState::default();
        assert!(label_score::scores(&p, &empty, &nodes, true).is_err());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen_address("unix:///tmp/a.sock").unwrap(),
            Listen::Unix("/tmp/a.sock".into())
        );
        assert_eq!(
            parse_listen_address("127.0.0.1:9000").unwrap(),
            Listen::Tcp("127.0.0.1:9000".parse().unwrap())
        );
        assert_eq!(
            parse_listen_address("tcp://127.0.0.1:9000").unwrap(),
            Listen::Tcp("127.0.0.1:9000".parse().unwrap())
        );
        assert!(parse_listen_address("unix://").is_err());
        assert!(parse_listen_address("nonsense").is_err());
    }
}
