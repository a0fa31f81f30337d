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

/// Handshake capability: the sidecar honours `FilterRequest.after_pre_filter` (a
/// pod's first Filter round sent right behind its PreFilter, not after its reply).
pub const CAPABILITY_FILTER_AFTER_PRE_FILTER: &str = "filter-after-pre-filter";

/// Handshake capability: the sidecar honours `CycleRequest.after_reserve` (a pod's
/// Permit sent right behind its Reserve, not after its reply).
pub const CAPABILITY_PERMIT_AFTER_RESERVE: &str = "permit-after-reserve";

/// The environment variable a sidecar reads its listen address from when it has no
/// `--listen` flag; the scheduler sets it for sidecars it starts itself.
pub const LISTEN_ENV: &str = "SWITCHYARD_PLUGIN_LISTEN";

/// How many CycleStart pods a sidecar keeps for `PodUpdate`s before it forgets them
/// all; the scheduler applies the same rule (see `PodUpdate` in the proto).
pub const MAX_PENDING_PODS: usize = 1024;

/// Applies a standard `ScoreNormalization` to raw scores, as upstream's
/// `DefaultNormalizeScore(100, reverse, ...)` does; false (scores untouched) for
/// `Custom`, which only the plugin itself can apply. The SDKs normalise with it for
/// plugins that declare a standard kind, and the scheduler when it reuses raw scores,
/// so both ends compute the same numbers.
pub fn normalize_scores(kind: v1::ScoreNormalization, scores: &mut [i64]) -> bool {
    const MAX: i64 = 100;
    let reverse = match kind {
        v1::ScoreNormalization::Custom => return false,
        v1::ScoreNormalization::Default => false,
        v1::ScoreNormalization::DefaultReverse => true,
    };
    let max = scores.iter().copied().fold(0, i64::max);
    for s in scores.iter_mut() {
        // i128: raw scores come from a sidecar and may be anything.
        let scaled = || (MAX as i128 * *s as i128 / max as i128) as i64;
        *s = match (max == 0, reverse) {
            (true, true) => MAX,
            (true, false) => *s,
            (false, true) => MAX.saturating_sub(scaled()),
            (false, false) => scaled(),
        };
    }
    true
}

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

/// Groups the failures of a Filter reply by status (`FilterRequest.group_failures`):
/// each distinct status (code and reasons) once, with the indices it rejects, so a
/// reason rejecting a thousand nodes travels once and each node costs an index.
/// Groups come in the order of their first item.
pub fn group_failures(failures: Vec<v1::NodeStatus>) -> Vec<v1::FailureGroup> {
    let mut groups: Vec<v1::FailureGroup> = Vec::new();
    let mut index: std::collections::HashMap<(i32, Vec<String>), usize> =
        std::collections::HashMap::new();
    for f in failures {
        let status = f.status.unwrap_or_default();
        let key = (status.code, status.reasons);
        match index.get(&key) {
            Some(&g) => groups[g].indices.push(f.index),
            None => {
                groups.push(v1::FailureGroup {
                    status: Some(v1::Status {
                        code: key.0,
                        reasons: key.1.clone(),
                    }),
                    indices: vec![f.index],
                });
                index.insert(key, groups.len() - 1);
            }
        }
    }
    groups
}

/// Every failure of a Filter reply as (index, status), whichever way it travelled:
/// listed one by one in `failures`, then grouped in `failure_groups`.
pub fn failures(r: &v1::FilterResponse) -> impl Iterator<Item = (u32, Option<&v1::Status>)> {
    r.failures
        .iter()
        .map(|f| (f.index, f.status.as_ref()))
        .chain(
            r.failure_groups
                .iter()
                .flat_map(|g| g.indices.iter().map(move |&i| (i, g.status.as_ref()))),
        )
}

#[cfg(test)]
mod tests {
    use super::v1;

    #[test]
    fn failures_group_by_status_and_read_back() {
        let status = |code, reasons: &[&str]| v1::Status {
            code,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        };
        let failure = |index, s: &v1::Status| v1::NodeStatus {
            index,
            status: Some(s.clone()),
        };
        let gpu = status(2, &["node(s) lack gpu"]);
        let both = status(3, &["node(s) lack gpu", "tainted"]);
        let listed = vec![failure(0, &gpu), failure(2, &both), failure(5, &gpu)];
        let groups = super::group_failures(listed.clone());
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].indices, vec![0, 5]);
        assert_eq!(groups[1].indices, vec![2]);
        let grouped = v1::FilterResponse {
            failure_groups: groups,
            ..Default::default()
        };
        let mut back: Vec<(u32, Option<&v1::Status>)> = super::failures(&grouped).collect();
        back.sort_by_key(|(i, _)| *i);
        let inline = v1::FilterResponse {
            failures: listed,
            ..Default::default()
        };
        let want: Vec<(u32, Option<&v1::Status>)> = super::failures(&inline).collect();
        assert_eq!(back, want);
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
