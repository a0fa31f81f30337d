//! `switchyard run`: the scheduler against a Kubernetes API server.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use switchyard::plugins::in_tree_registry;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): profiles,
    /// leaderElection, clientConnection (qps, burst), remotePlugins. Without it, one
    /// `default-scheduler` profile with the default plugins and leader election on
    /// the Lease kube-system/kube-scheduler.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// The kubeconfig to use. Without it: the --config file's
    /// clientConnection.kubeconfig, else $KUBECONFIG or ~/.kube/config if present,
    /// else the in-cluster service account (in a pod).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Where to serve /healthz, /livez, /readyz and /metrics. By default over HTTPS,
    /// as kube-scheduler's secure port: /metrics needs a bearer token that the API
    /// server accepts (TokenReview) and whose user may `get` the non-resource path
    /// /metrics (SubjectAccessReview; deploy/metrics-reader.yaml grants it);
    /// /healthz, /livez and /readyz are open to all. Default: 0.0.0.0:10259, or
    /// 127.0.0.1:10251 with --plain-http.
    #[arg(long, value_name = "ADDR")]
    health_address: Option<std::net::SocketAddr>,

    /// Serve the health address over plain HTTP with no authentication, for
    /// development and tests. Allowed only on a loopback address.
    #[arg(long, conflicts_with_all = ["tls_cert_file", "tls_private_key_file"])]
    plain_http: bool,

    /// The serving certificate (PEM, the chain with the leaf first). Without it and
    /// --tls-private-key-file, a self-signed certificate for localhost and
    /// 127.0.0.1 is made in memory at start.
    #[arg(long, value_name = "FILE", requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,

    /// The key of --tls-cert-file (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,

    /// This replica's identity in the leader Lease and in events. Default: $POD_NAME
    /// or the hostname, plus a random suffix.
    #[arg(long, value_name = "NAME")]
    identity: Option<String>,

    /// How long SIGTERM waits for bindings in flight.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    shutdown_grace_seconds: u64,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(path) => switchyard::config::SchedulerConfig::load(
            path,
            switchyard::model::input::DEFAULT_MAX_INPUT_BYTES,
        )?,
        None => switchyard::config::SchedulerConfig::default_config(),
    };
    switchyard::run::run(
        switchyard::run::RunOptions {
            config,
            kubeconfig: args.kubeconfig,
            health_address: args.health_address.unwrap_or(if args.plain_http {
                std::net::SocketAddr::from(([127, 0, 0, 1], 10251))
            } else {
                std::net::SocketAddr::from(([0, 0, 0, 0], 10259))
            }),
            plain_http: args.plain_http,
            tls_cert_and_key: args.tls_cert_file.zip(args.tls_private_key_file),
            identity: args.identity,
            shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
        },
        &in_tree_registry(),
    )?;
    Ok(ExitCode::SUCCESS)
}
