//! Serving: listen on a Unix socket (the default for sidecars) or TCP, answer until
//! SIGTERM or Ctrl-C, then finish the calls in flight and remove the socket.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use switchyard_proto::LISTEN_ENV;

use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use crate::pb;
use crate::plugin::Plugin;
use crate::service::{Handle, PluginService};

/// Where a sidecar listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listen address {0:?}: expected unix:///path/to.sock, tcp://host:port or host:port")]
    Address(String),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
    #[error("serving: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("plugin {0:?} is registered twice")]
    Duplicate(String),
}

/// Parses `unix:///path.sock`, `unix:path.sock`, `tcp://host:port`, `http://host:port`
/// or `host:port`.
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
    let hostport = s
        .strip_prefix("tcp://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    hostport
        .parse()
        .map(Listen::Tcp)
        .map_err(|_| Error::Address(s.into()))
}

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
}

impl ServeOptions {
    pub fn new(listen: Listen) -> Self {
        ServeOptions {
            listen,
            generation_wait: Duration::from_secs(5),
            parallel_threshold: 2048,
            max_batch_nodes: 0,
        }
    }
}

/// Serves `plugins` until `shutdown` completes. `on_handle` receives the handle for
/// Permit decisions before the first call.
pub async fn serve(
    plugins: Vec<Arc<dyn Plugin>>,
    options: ServeOptions,
    on_handle: impl FnOnce(Handle),
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let mut seen = std::collections::HashSet::new();
    for p in &plugins {
        if !seen.insert(p.name().to_string()) {
            return Err(Error::Duplicate(p.name().to_string()));
        }
    }
    let svc = PluginService::new(
        plugins,
        options.generation_wait,
        options.parallel_threshold,
        options.max_batch_nodes,
    );
    on_handle(svc.handle());
    let server = tonic::transport::Server::builder()
        .tcp_nodelay(true)
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
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::Listen(path.display().to_string(), e))?;
            }
            let listener = tokio::net::UnixListener::bind(path)
                .map_err(|e| Error::Listen(path.display().to_string(), e))?;
            tracing::info!(socket = %path.display(), "serving plugins");
            let r = server
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                .await;
            let _ = std::fs::remove_file(path);
            r?;
        }
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| Error::Listen(addr.to_string(), e))?;
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

/// A sidecar's `main`: reads `--listen ADDRESS` (or `SWITCHYARD_PLUGIN_LISTEN`;
/// default `unix:///tmp/switchyard/<first plugin>.sock`), serves on a single-threaded
/// runtime (the fastest for request/reply over a socket) until SIGTERM or Ctrl-C.
pub fn run(plugins: Vec<Arc<dyn Plugin>>) -> Result<(), Error> {
    run_with(plugins, |_| {})
}

/// [`run`], handing the Permit handle to `on_handle` first.
pub fn run_with(
    plugins: Vec<Arc<dyn Plugin>>,
    on_handle: impl FnOnce(Handle),
) -> Result<(), Error> {
    let mut listen = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => {
                listen = Some(args.next().ok_or_else(|| {
                    Error::Usage("--listen needs an address, e.g. unix:///tmp/p.sock".into())
                })?)
            }
            s if s.starts_with("--listen=") => listen = Some(s["--listen=".len()..].to_string()),
            "-h" | "--help" => {
                println!(
                    "usage: {} [--listen unix:///path.sock | --listen 127.0.0.1:PORT]\n\n\
                     Serves the Switchyard plugin(s) {} over gRPC until SIGTERM.\n\
                     SWITCHYARD_PLUGIN_LISTEN sets the address when --listen is absent.",
                    std::env::args().next().unwrap_or_default(),
                    plugins
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                return Ok(());
            }
            other => {
                return Err(Error::Usage(format!(
                    "unknown argument {other:?}; try --help"
                )))
            }
        }
    }
    let name = plugins.first().map_or("plugin", |p| p.name()).to_string();
    let listen = resolve_listen(listen.as_deref(), std::env::var(LISTEN_ENV).ok(), &name)?;
    serve_until_signal(plugins, listen, on_handle)
}

/// Where a sidecar listens: `flag` (its `--listen`), else `env` (the value of
/// [`LISTEN_ENV`]), else `unix:///tmp/switchyard/<plugin name, lowercase>.sock`. For
/// sidecars that parse their own command line.
pub fn resolve_listen(
    flag: Option<&str>,
    env: Option<String>,
    name: &str,
) -> Result<Listen, Error> {
    match flag.map(str::to_string).or(env) {
        Some(l) => parse_listen_address(&l),
        None => Ok(Listen::Unix(PathBuf::from(format!(
            "/tmp/switchyard/{}.sock",
            name.to_lowercase()
        )))),
    }
}

/// Serves on a single-threaded runtime (the fastest for request/reply over a socket)
/// until SIGTERM or Ctrl-C, handing the Permit handle to `on_handle` first.
pub fn serve_until_signal(
    plugins: Vec<Arc<dyn Plugin>>,
    listen: Listen,
    on_handle: impl FnOnce(Handle),
) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    rt.block_on(serve(
        plugins,
        ServeOptions::new(listen),
        on_handle,
        shutdown_signal(),
    ))
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn environment_listen_is_overridden_by_the_flag() {
        let env = Some("unix:///tmp/env.sock".to_string());
        assert_eq!(
            resolve_listen(None, env.clone(), "X").unwrap(),
            Listen::Unix("/tmp/env.sock".into())
        );
        assert_eq!(
            resolve_listen(Some("unix:/tmp/f.sock"), env, "X").unwrap(),
            Listen::Unix("/tmp/f.sock".into())
        );
        assert_eq!(
            resolve_listen(None, None, "Coscheduling").unwrap(),
            Listen::Unix("/tmp/switchyard/coscheduling.sock".into())
        );
    }
}
