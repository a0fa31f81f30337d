//! `switchyard conformance`: a sidecar checked against the plugin contract's clauses.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::OutputFormat;

#[derive(clap::Args, Debug)]
pub struct ConformanceArgs {
    /// The sidecar: a Unix socket (unix:///path/to.sock, or a path), plain TCP
    /// (tcp://host:port, http://host:port or host:port) or TLS (https://host:port,
    /// with --tls-ca).
    #[arg(value_name = "ENDPOINT")]
    endpoint: String,
    /// For an https:// endpoint: the CA certificate (PEM) the sidecar's certificate
    /// must chain to.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// For a sidecar that requires client certificates (mutual TLS): the kit's
    /// certificate (PEM), with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name to verify the sidecar's certificate against, when it is not the
    /// endpoint's host.
    #[arg(long, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// Cluster manifests (files or directories) to replicate to the sidecar: Nodes,
    /// Pods (those with spec.nodeName are placed, the others are scheduled one cycle
    /// each, at most 12) and PriorityClasses. Default: the demo cluster
    /// (examples/demo/cluster.yaml). Use objects your plugin cares about.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    cluster: Vec<PathBuf>,
    /// How long one call may take before it counts as unanswered.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    timeout: f64,
    /// Receive the sidecar's spans over OTLP/gRPC on this address (for example
    /// 127.0.0.1:4319) and check that each call's span starts under the call's
    /// traceparent (clause T1). Start the sidecar with
    /// OTEL_EXPORTER_OTLP_ENDPOINT=http://ADDRESS (and OTEL_BSP_SCHEDULE_DELAY=200 so
    /// it exports within the kit's 10 s wait).
    #[arg(long, value_name = "ADDRESS")]
    otlp_listen: Option<std::net::SocketAddr>,
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Table)]
    output_format: OutputFormat,
}

pub fn conformance(args: ConformanceArgs) -> anyhow::Result<ExitCode> {
    use switchyard::conformance;
    if !(args.timeout > 0.0 && args.timeout <= 600.0) {
        anyhow::bail!(
            "--timeout {}: must be more than 0 and at most 600 seconds",
            args.timeout
        );
    }
    let tls = match args.tls_ca {
        Some(ca) => {
            for f in [Some(&ca), args.tls_cert.as_ref(), args.tls_key.as_ref()]
                .into_iter()
                .flatten()
            {
                std::fs::metadata(f).with_context(|| format!("cannot read {}", f.display()))?;
            }
            Some(switchyard::remote::TlsFiles {
                ca,
                identity: args.tls_cert.zip(args.tls_key),
                server_name: args.tls_server_name,
            })
        }
        None if args.tls_cert.is_some() || args.tls_server_name.is_some() => {
            anyhow::bail!("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
        }
        None => None,
    };
    let opts = conformance::Options {
        endpoint: args.endpoint,
        tls,
        cluster: args.cluster,
        timeout: Duration::from_secs_f64(args.timeout),
        otlp_listen: args.otlp_listen,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(conformance::run(&opts))?;
    match args.output_format {
        OutputFormat::Table => print!("{}", report.table()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
