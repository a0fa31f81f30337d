//! The Switchyard plugin contract, version 1: the messages and the `Plugin` service
//! (client for the scheduler, server for sidecars). The design is in `proto/README.md`.

#![allow(clippy::all, missing_docs)]

pub mod coalesce;
pub mod otel;

pub mod v1 {
    tonic::include_proto!("switchyard.plugin.v1");
}

/// The standard gRPC health service (`grpc.health.v1`) that SDK sidecars serve.
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// The service name sidecars report health for, besides the whole server ("").
pub const PLUGIN_SERVICE: &str = "switchyard.plugin.v1.Plugin";

/// Environment variables of a sidecar serving TLS on an `https://` listen address:
/// its certificate and key (PEM), and optionally the CA that client certificates must
/// chain to (mutual TLS).
pub const TLS_CERT_ENV: &str = "SWITCHYARD_PLUGIN_TLS_CERT";
pub const TLS_KEY_ENV: &str = "SWITCHYARD_PLUGIN_TLS_KEY";
pub const TLS_CLIENT_CA_ENV: &str = "SWITCHYARD_PLUGIN_TLS_CLIENT_CA";

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: &str = "v1";

/// Handshake capability: the sidecar serves the `FilterBatch` stream (several pods'
/// Filter calls per message, for node-local plugins).
pub const CAPABILITY_FILTER_BATCH: &str = "filter-batch";

/// Handshake capability: the sidecar applies `ReplicateRequest.more` (several
/// Replicate messages in one gRPC message).
pub const CAPABILITY_REPLICATE_BATCH: &str = "replicate-batch";

/// The environment variable a sidecar reads its listen address from when it has no
/// `--listen` flag; the scheduler sets it for sidecars it starts itself.
pub const LISTEN_ENV: &str = "SWITCHYARD_PLUGIN_LISTEN";

/// How many CycleStart pods a sidecar keeps for `PodUpdate`s before it forgets them
/// all; the scheduler applies the same rule (see `PodUpdate` in the proto).
pub const MAX_PENDING_PODS: usize = 1024;

/// The items a score-ahead answer covers (`FilterRequest.score_first`): the first
/// `first` items of a batch of `len` that are not in `failed` (ascending), in batch
/// order. Both ends compute it, so the answer carries scores only.
pub fn score_ahead_items(
    len: usize,
    failed: impl IntoIterator<Item = usize>,
    first: usize,
) -> Vec<usize> {
    let mut failed = failed.into_iter().peekable();
    let mut items = Vec::with_capacity(first.min(len));
    for i in 0..len {
        if items.len() == first {
            break;
        }
        if failed.peek() == Some(&i) {
            failed.next();
        } else {
            items.push(i);
        }
    }
    items
}

/// Moves the failure reasons of a Filter reply into a table of distinct texts
/// (`FilterRequest.reason_table`): each status keeps its code, and its reasons become
/// indices into the returned table, so a text rejecting a thousand nodes travels once.
pub fn tabulate_reasons(failures: &mut [v1::NodeStatus]) -> Vec<String> {
    let mut table: Vec<String> = Vec::new();
    let mut index: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for f in failures {
        let Some(status) = f.status.as_mut() else {
            continue;
        };
        for r in std::mem::take(&mut status.reasons) {
            let i = match index.get(&r) {
                Some(&i) => i,
                None => {
                    let i = table.len() as u32;
                    table.push(r.clone());
                    index.insert(r, i);
                    i
                }
            };
            f.reasons.push(i);
        }
    }
    table
}

/// The reasons of one failure of a Filter reply, whichever way they travelled: the
/// texts in its status, then those its indices name in the reply's table. An index
/// outside the table is returned as the error.
pub fn node_reasons<'a>(
    f: &'a v1::NodeStatus,
    table: &'a [String],
) -> Result<impl Iterator<Item = &'a str> + 'a, u32> {
    if let Some(&bad) = f.reasons.iter().find(|&&i| i as usize >= table.len()) {
        return Err(bad);
    }
    let inline = f.status.iter().flat_map(|s| s.reasons.iter());
    Ok(inline
        .chain(f.reasons.iter().map(move |&i| &table[i as usize]))
        .map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::v1;

    #[test]
    fn reasons_tabulate_once_and_resolve_back() {
        let status = |code, reasons: &[&str]| v1::NodeStatus {
            index: 0,
            status: Some(v1::Status {
                code,
                reasons: reasons.iter().map(|r| r.to_string()).collect(),
            }),
            reasons: vec![],
        };
        let original = vec![
            status(2, &["node(s) lack gpu"]),
            status(3, &["node(s) lack gpu", "tainted"]),
            status(2, &["node(s) lack gpu"]),
        ];
        let mut failures = original.clone();
        let table = super::tabulate_reasons(&mut failures);
        assert_eq!(table, vec!["node(s) lack gpu", "tainted"]);
        assert_eq!(failures[1].reasons, vec![0, 1]);
        for (f, o) in failures.iter().zip(&original) {
            assert!(f.status.as_ref().is_some_and(|s| s.reasons.is_empty()));
            assert_eq!(f.status.as_ref().map(|s| s.code), o.status.as_ref().map(|s| s.code));
            let back: Vec<&str> = super::node_reasons(f, &table).unwrap().collect();
            let want: Vec<&str> = o.status.as_ref().unwrap().reasons.iter().map(String::as_str).collect();
            assert_eq!(back, want);
        }
        // Untabulated replies resolve to their inline texts; a bad index is named.
        let inline: Vec<&str> = super::node_reasons(&original[1], &[]).unwrap().collect();
        assert_eq!(inline, vec!["node(s) lack gpu", "tainted"]);
        assert_eq!(super::node_reasons(&failures[1], &table[..1]).err(), Some(1));
    }

    #[test]
    fn score_ahead_items_skip_failures_and_stop_at_first() {
        assert_eq!(super::score_ahead_items(6, [1, 2], 3), vec![0, 3, 4]);
        assert_eq!(super::score_ahead_items(3, [0], 5), vec![1, 2]);
        assert_eq!(super::score_ahead_items(3, [], 0), Vec::<usize>::new());
    }
}

/// What to do when listening on `addr` failed with `e`: the missing piece and the
/// one change that fixes it. `unix` tells a socket path from a TCP address; `how`
/// names the setting that chose the address (an option or an environment variable).
pub fn listen_hint(addr: &str, unix: bool, e: &std::io::Error, how: &str) -> String {
    use std::io::ErrorKind as K;
    let dir = || {
        std::path::Path::new(addr)
            .parent()
            .map_or_else(|| ".".to_string(), |d| d.display().to_string())
    };
    let port = addr.rsplit(':').next().unwrap_or(addr);
    match (unix, e.kind(), e.raw_os_error()) {
        (false, K::AddrInUse, _) => format!(
            "port {port} is already in use by another process (`ss -ltnp 'sport = :{port}'` shows which): stop it, or choose a free port with {how}"
        ),
        (false, K::AddrNotAvailable, _) => format!(
            "{addr} is not an address of this machine: use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface) with {how}"
        ),
        (false, K::PermissionDenied, _) => format!(
            "ports below 1024 need privileges (CAP_NET_BIND_SERVICE): choose a port of 1024 or above with {how}"
        ),
        (true, K::AddrInUse, _) => format!(
            "{addr} is in use by a running process: stop it, or give this one another path with {how}"
        ),
        // EACCES, EPERM (a filesystem that takes no sockets), EROFS.
        (true, K::PermissionDenied | K::ReadOnlyFilesystem, _) | (true, _, Some(1 | 13 | 30)) => {
            format!(
                "cannot create a socket in {}: it is not writable here; choose a writable folder with {how}, e.g. unix:///tmp/switchyard/plugin.sock",
                dir()
            )
        }
        (true, K::NotFound, _) => format!(
            "the folder {} does not exist and cannot be created: create it (mkdir -p {}) or choose another path with {how}",
            dir(),
            dir()
        ),
        _ => format!("choose another address with {how}"),
    }
}

/// An error and its causes, `: `-separated: tonic's transport errors say only
/// "transport error" at the top, and the cause (refused, bad certificate) is below.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.ends_with(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A gRPC status as a reader wants it: its message, then the causes below it
/// (without repeating the message when the cause starts with it).
pub fn status_text(s: &tonic::Status) -> String {
    match std::error::Error::source(s).map(error_chain) {
        Some(c) if c.starts_with(s.message()) => c,
        Some(c) => format!("{}: {c}", s.message()),
        None => s.message().to_string(),
    }
}

/// Opens a gRPC channel over the Unix socket at `path` (the URI tonic needs is a
/// placeholder: the connector dials the socket). `endpoint` carries the caller's
/// timeouts.
pub async fn connect_unix(
    endpoint: tonic::transport::Endpoint,
    path: std::path::PathBuf,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(coalesce::Coalesce::new(s)))
            }
        }))
        .await
}

/// Dials a plain `http://host:port` endpoint over TCP (no delay), writes gathered
/// as on Unix sockets ([`coalesce`]).
pub async fn connect_tcp(
    endpoint: tonic::transport::Endpoint,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    endpoint
        .connect_with_connector(tower::service_fn(
            |uri: tonic::codegen::http::Uri| async move {
                let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
                let port = uri.port_u16().unwrap_or(80);
                let s = tokio::net::TcpStream::connect((host, port)).await?;
                s.set_nodelay(true)?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(coalesce::Coalesce::new(s)))
            },
        ))
        .await
}

/// Completes on SIGTERM or Ctrl-C: how the scheduler (`switchyard run`) and SDK
/// sidecars know to shut down gracefully.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
