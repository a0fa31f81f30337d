//! `switchyard run`: the scheduler against a Kubernetes API server, as
//! kube-scheduler runs. The cache is filled from the watches at once (a standby
//! replica stays warm), scheduling starts when this replica holds the leader Lease,
//! and SIGTERM stops it cleanly: no new cycle, bindings in flight finish (bounded),
//! then the lease is released so a standby takes over at once. Losing the lease
//! ends the process with an error, as kube-scheduler exits, so that two replicas
//! never schedule at once.

mod metrics_page;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{event_channel, ClusterBackend};
use crate::cluster::kubernetes::{KubernetesCluster, KubernetesOptions};
use crate::cluster::leaderelection::{LeaderElector, LeadingEnded};
use crate::config::SchedulerConfig;
use crate::framework::Registry;
use crate::remote::FailurePolicy;
use crate::scheduler::{Options, Scheduler};

/// What `switchyard run` needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub config: SchedulerConfig,
    /// None: the config file's `clientConnection.kubeconfig`, else the default
    /// kubeconfig (`$KUBECONFIG`, `~/.kube/config`) if present,
    /// else the in-cluster configuration.
    pub kubeconfig: Option<PathBuf>,
    /// Where `/healthz`, `/livez`, `/readyz` and `/metrics` are served.
    pub health_address: SocketAddr,
    /// Plain HTTP without authentication (development, tests): only on a loopback
    /// `health_address`. Otherwise HTTPS with delegated authentication and
    /// authorization of `/metrics` (TokenReview, SubjectAccessReview).
    pub plain_http: bool,
    /// The serving certificate chain and its key (PEM); None: a self-signed one
    /// made at start.
    pub tls_cert_and_key: Option<(PathBuf, PathBuf)>,
    /// This replica's name in the Lease and in events (default: hostname + random).
    pub identity: Option<String>,
    /// How long SIGTERM waits for bindings in flight.
    pub shutdown_grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--kubeconfig {0}")]
    Kubeconfig(String),
    #[error("no Kubernetes client configuration: {0}; pass --kubeconfig, or run in a pod")]
    NoConfig(String),
    #[error("cannot create the Kubernetes client: {0}")]
    Client(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("remote plugins: {0}")]
    Remote(#[from] crate::remote::SetupError),
    #[error(transparent)]
    Build(#[from] crate::scheduler::BuildError),
    #[error("--health-address {0}: {1}; {hint}", hint = switchyard_proto::listen_hint(&.0.to_string(), false, .1, "--health-address"))]
    Health(SocketAddr, std::io::Error),
    #[error("--plain-http serves /metrics without authentication, so only on a loopback address, not {0}: pass --health-address 127.0.0.1:PORT, or drop --plain-http to serve HTTPS with delegated authentication")]
    PlainNotLoopback(SocketAddr),
    #[error(
        "--plain-http serves no TLS: drop --tls-cert-file/--tls-private-key-file or --plain-http"
    )]
    PlainWithTls,
    #[error("TLS: {0}")]
    Tls(String),
    #[error("leader election lost: {0}")]
    LostLease(String),
}

/// A name for this replica: `$POD_NAME` or the hostname, plus a random suffix (as
/// kube-scheduler's `hostname_uuid`), so a restarted process is a new candidate.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "switchyard".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mix = (nanos as u64) ^ (u64::from(std::process::id()) << 32);
    format!("{host}_{:016x}", mix.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, RunError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| RunError::Kubeconfig(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::NoConfig(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| RunError::Client(e.to_string()))
}

/// Runs until SIGTERM (Ok) or until the lease is lost (Err).
pub fn run(opts: RunOptions, registry: &Registry) -> Result<(), RunError> {
    if opts.plain_http {
        if !opts.health_address.ip().is_loopback() {
            return Err(RunError::PlainNotLoopback(opts.health_address));
        }
        if opts.tls_cert_and_key.is_some() {
            return Err(RunError::PlainWithTls);
        }
    }
    let tls = if opts.plain_http {
        None
    } else {
        let files = opts
            .tls_cert_and_key
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()));
        Some(
            crate::telemetry::http::tls_config(files, opts.health_address.ip())
                .map_err(RunError::Tls)?,
        )
    };
    let config = opts.config;
    // One I/O worker, as `simulate` has: the scheduling cycle runs on its own thread,
    // and a second worker mostly woke and parked the first (futex wake-ups were a
    // third of the I/O thread's CPU through a real API server). One worker carries
    // 2,000 pods/s of bindings, events and watch events, the whole process at
    // 0.18 ms of CPU per pod (`scripts/bench-k8s.sh`).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("switchyard-io")
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    // `--kubeconfig`, else the config file's `clientConnection.kubeconfig` (where
    // kube-scheduler takes it from), else the defaults.
    let kubeconfig = opts
        .kubeconfig
        .as_ref()
        .or(config.client_kubeconfig.as_ref());
    let client = runtime.block_on(client(kubeconfig))?;
    let identity = opts.identity.unwrap_or_else(default_identity);

    let mut registry = registry.clone();
    let endpoints = crate::remote::register(&config.remote_plugins, &mut registry)?;
    let required: Vec<crate::remote::Endpoint> = endpoints
        .iter()
        .filter(|e| e.config().failure_policy == FailurePolicy::Fail)
        .cloned()
        .collect();
    let stop_endpoints = crate::remote::StopOnDrop(endpoints);

    let cluster = Arc::new(KubernetesCluster::new(
        client.clone(),
        runtime.handle().clone(),
        KubernetesOptions {
            qps: config.client_qps,
            burst: config.client_burst.max(1) as u32,
            instance: identity.clone(),
        },
    ));
    let sched = Scheduler::new(
        &config,
        &registry,
        cluster.clone(),
        runtime.handle().clone(),
        Options::default(),
    )?;
    let elect = config.leader_election.leader_elect;
    sched.set_leading(!elect);

    let s = sched.clone();
    let ready: crate::telemetry::http::ReadyCheck = Arc::new(move || {
        if !s.is_synced() {
            return Err("the cache has not synced with the API server yet".into());
        }
        if let Some(e) = required.iter().find(|e| e.handshake().is_none()) {
            return Err(format!(
                "sidecar {} (failurePolicy Fail) has not completed its handshake",
                e.config().endpoint
            ));
        }
        Ok(())
    });
    let s = sched.clone();
    let eps = stop_endpoints.0.clone();
    let metrics: crate::telemetry::http::MetricsPage =
        Arc::new(move || metrics_page::render_all(&s, &eps));
    let serving = match tls {
        None => crate::telemetry::http::Serving::Plain,
        Some(tls) => crate::telemetry::http::Serving::Secure {
            tls,
            auth: Arc::new(crate::telemetry::http::DelegatedAuth::kubernetes(
                client.clone(),
            )),
        },
    };
    let scheme = if opts.plain_http { "http" } else { "https" };
    let bound = runtime
        .block_on(crate::telemetry::http::serve(
            opts.health_address,
            serving,
            ready,
            metrics,
        ))
        .map_err(|e| RunError::Health(opts.health_address, e))?;
    tracing::info!(address = %bound, scheme, authentication = !opts.plain_http, "serving /healthz, /livez, /readyz, /metrics");

    let (sink, source) = event_channel();
    cluster.start(sink);
    let running = sched.start(source);
    tracing::info!(identity = %identity, leader_election = elect, profiles = config.profiles.len(), "switchyard running");

    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    runtime.spawn(async move {
        switchyard_proto::shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });

    let mut elector =
        elect.then(|| LeaderElector::new(client, identity, config.leader_election.clone()));
    let ended = runtime.block_on(async {
        let Some(elector) = elector.as_mut() else {
            while !*stop_rx.borrow() {
                if stop_rx.changed().await.is_err() {
                    break;
                }
            }
            return LeadingEnded::Stopped;
        };
        if !elector.acquire(&mut stop_rx).await {
            return LeadingEnded::Stopped;
        }
        sched.set_leading(true);
        elector.renew_until_lost(&mut stop_rx).await
    });

    // No new cycle from here; bindings in flight may finish.
    running.stop();
    // The timeout is made inside the runtime: its timer needs the runtime's driver.
    runtime.block_on(async {
        let _ = tokio::time::timeout(opts.shutdown_grace, sched.operations_done()).await;
    });
    let left = sched.in_flight_operations();
    if left > 0 {
        tracing::warn!(
            operations = left,
            "shutdown grace period over with bindings in flight"
        );
    }
    cluster.stop();
    match ended {
        LeadingEnded::Stopped => {
            if let Some(e) = elector.as_mut().filter(|_| sched.is_leading()) {
                runtime.block_on(async {
                    let _ = tokio::time::timeout(Duration::from_secs(5), e.release()).await;
                });
            }
            Ok(())
        }
        LeadingEnded::Lost(why) => Err(RunError::LostLease(why)),
    }
}
