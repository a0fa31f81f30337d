//! The connection's life on its own thread: connect (Unix socket, TCP or TLS),
//! handshake, one stream per extension point, serve until the connection ends or
//! the endpoint stops, then reconnect with backoff.

use std::future::Future;

use tonic::transport::Channel;

use super::call::handle_reply;
use super::wire::{Router, Tx, HOLD};
use super::*;
use crate::config::remote::TlsFiles;

/// Whether the sidecar's handshake accepted capability `cap`.
pub(super) fn serves(hs: &pb::HandshakeResponse, cap: &str) -> bool {
    hs.capabilities.iter().any(|c| c == cap)
}

pub(super) fn connection_thread(inner: Arc<Inner>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            inner.set_error(format!("cannot start the connection runtime: {e}"));
            return;
        }
    };
    rt.block_on(async {
        let mut backoff = Duration::from_millis(50);
        let mut stop = inner.stop.subscribe();
        // The first failed attempt of an outage is logged at WARN, the rest at DEBUG
        // (the reconnect is logged when it comes).
        let mut failed_attempts = 0u64;
        let mut epoch_seen = inner.epoch.load(Ordering::Relaxed);
        // Connections lost: the first after a stable spell logged, a flapping
        // sidecar's repeats counted and summed up.
        let outages = faillog::FailureLog::default();
        let mut counted = false;
        while !*stop.borrow() {
            let up = Instant::now();
            let e = connect_once(&inner).await;
            let epoch = inner.epoch.load(Ordering::Relaxed);
            let had_connected = epoch != epoch_seen;
            if had_connected {
                // Before callers see no streams: they wait for the reconnect.
                inner.connection_lost();
            }
            inner.set_error(e.clone());
            inner.stats.set_last_error(&format!("connection lost: {e}"));
            if had_connected {
                if let Ok(mut d) = inner.stats.last_disconnect.lock() {
                    e.clone_into(&mut d);
                }
            }
            inner.fail_all(&format!(
                "sidecar {} connection lost: {e}",
                inner.config.endpoint
            ));
            if *stop.borrow() {
                break;
            }
            if had_connected {
                // It had connected since the last failure: a new outage, whose first
                // reconnect comes soon (as gRPC resets its backoff once connected).
                epoch_seen = epoch;
                failed_attempts = 0;
                backoff = Duration::from_millis(50);
                if up.elapsed() >= faillog::SUMMARY_EVERY {
                    outages.recovered();
                }
                match outages.failure("connection lost", Instant::now()) {
                    faillog::Line::Repeats(n) => {
                        tracing::warn!(endpoint = %inner.config.endpoint, error = %e, "sidecar connection lost {n} more times, reconnected each time (it drops connections it had made); last: {e}");
                        counted = true;
                    }
                    faillog::Line::None => counted = true,
                    faillog::Line::First => counted = false,
                }
                inner.flapping.store(counted, Ordering::Relaxed);
            }
            failed_attempts += 1;
            // A counted loss is logged only if the reconnect fails too.
            if failed_attempts == 1 + u64::from(counted) {
                tracing::warn!(endpoint = %inner.config.endpoint, error = %e, "sidecar unavailable; reconnecting (further attempts are logged at debug level)");
            } else {
                tracing::debug!(endpoint = %inner.config.endpoint, error = %e, attempt = failed_attempts, "sidecar still unavailable");
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
}

pub(crate) async fn channel(
    endpoint: &str,
    tls: Option<&TlsFiles>,
) -> Result<tonic::transport::Channel, String> {
    use tonic::transport::Endpoint as TEndpoint;
    if let Some(path) = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
    {
        let ep = TEndpoint::from_static("http://sidecar.local")
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        switchyard_proto::connect_unix(ep, path.into())
            .await
            .map_err(|e| format!("cannot connect: {}", switchyard_proto::error_chain(&e)))
    } else {
        let ep = TEndpoint::from_shared(endpoint.to_string())
            .map_err(|e| format!("bad endpoint: {e}"))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        let connected = match tls {
            Some(t) => {
                ep.tls_config(client_tls(t)?)
                    .map_err(|e| format!("TLS configuration: {e}"))?
                    .connect()
                    .await
            }
            None => switchyard_proto::connect_tcp(ep).await,
        };
        connected.map_err(|e| format!("cannot connect: {}", switchyard_proto::error_chain(&e)))
    }
}

/// The TLS client settings, read from the PEM files at every connect so that rotated
/// certificates apply on reconnect.
pub(super) fn client_tls(t: &TlsFiles) -> Result<tonic::transport::ClientTlsConfig, String> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&t.ca)?));
    if let Some((cert, key)) = &t.identity {
        c = c.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &t.server_name {
        c = c.domain_name(name.clone());
    }
    Ok(c)
}

/// One connection's life: returns why it ended.
pub(super) async fn connect_once(inner: &Arc<Inner>) -> String {
    let ch = match channel(&inner.config.endpoint, inner.config.tls.as_ref()).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut client = PluginClient::new(ch)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let hs = match handshake(inner, &mut client).await {
        Ok(hs) => hs,
        Err(why) => return why,
    };
    let epoch = inner.epoch.fetch_add(1, Ordering::AcqRel) + 1;
    if epoch > 1 {
        inner.stats.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    let (closed_tx, mut closed_rx) = mpsc::unbounded_channel::<String>();
    inner.strays.store(0, Ordering::Relaxed);
    inner
        .calls_at_connect
        .store(inner.stats.calls.load(Ordering::Relaxed), Ordering::Relaxed);

    let router = open_streams(inner, &client, &hs, &closed_tx);
    let (tx, rx) = mpsc::unbounded_channel::<Wire>();
    let routing = tokio::spawn(router.run(rx));
    let streams = Streams {
        epoch,
        stats: inner.stats.clone(),
        tx,
        held: Arc::new(Mutex::new(Vec::new())),
        coalesce: serves(&hs, switchyard_proto::CAPABILITY_REPLICATE_BATCH),
    };
    // Held-back Replicate messages go out within HOLD even when no call follows.
    let holding = {
        let s = streams.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HOLD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !s.flush() {
                    break;
                }
            }
        })
    };
    publish(inner, streams, hs, closed_tx, epoch);
    let mut stop = inner.stop.subscribe();
    let stopped = stop.wait_for(|s| *s);
    let why = tokio::select! {
        why = closed_rx.recv() => why.unwrap_or_else(|| "connection closed".into()),
        _ = stopped => "endpoint stopped".into(),
    };
    if let Ok(mut k) = inner.kick.lock() {
        *k = None;
    }
    // Callers still holding these streams find them closed.
    routing.abort();
    holding.abort();
    why
}

/// The handshake, bounded by the endpoint's timeout (at least a second), and the
/// protocol version the sidecar chose.
pub(super) async fn handshake(
    inner: &Arc<Inner>,
    client: &mut PluginClient<Channel>,
) -> Result<pb::HandshakeResponse, String> {
    let hs = tokio::time::timeout(
        inner.config.timeout.max(Duration::from_secs(1)),
        client.handshake(pb::HandshakeRequest {
            protocol_versions: vec![switchyard_proto::PROTOCOL_VERSION.to_string()],
            scheduler: format!("switchyard {}", env!("CARGO_PKG_VERSION")),
            capabilities: vec![
                switchyard_proto::CAPABILITY_FILTER_BATCH.to_string(),
                switchyard_proto::CAPABILITY_REPLICATE_BATCH.to_string(),
                switchyard_proto::CAPABILITY_FILTER_AFTER_PRE_FILTER.to_string(),
                switchyard_proto::CAPABILITY_PERMIT_AFTER_RESERVE.to_string(),
            ],
        }),
    )
    .await;
    let hs = match hs {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            let text = switchyard_proto::status_text(&s);
            // TLS 1.3: a server that wants a client certificate refuses it after the
            // client's side of the handshake is done, so its alert
            // (CertificateRequired) may lose the race with the closed connection.
            let no_identity = inner
                .config
                .tls
                .as_ref()
                .is_some_and(|t| t.identity.is_none());
            let hint = if no_identity && !text.contains("CertificateRequired") {
                "; if the sidecar requires a client certificate (mutual TLS), set tls.certFile and tls.keyFile"
            } else {
                ""
            };
            return Err(format!("handshake failed: {text}{hint}"));
        }
        Err(_) => return Err("handshake timed out".into()),
    };
    if hs.protocol_version != switchyard_proto::PROTOCOL_VERSION {
        return Err(format!(
            "sidecar chose protocol {:?}; this scheduler speaks {}",
            hs.protocol_version,
            switchyard_proto::PROTOCOL_VERSION
        ));
    }
    Ok(hs)
}

/// Opens every stream; each one's reader routes replies until the stream ends, then
/// says why on `closed`.
pub(super) fn open_streams(
    inner: &Arc<Inner>,
    client: &PluginClient<Channel>,
    hs: &pb::HandshakeResponse,
    closed: &mpsc::UnboundedSender<String>,
) -> Router {
    macro_rules! open {
        ($method:ident, $reply:ident) => {{
            let mut c = client.clone();
            reply_stream(
                inner,
                closed,
                stringify!($method),
                Reply::$reply,
                move |rx| async move { c.$method(rx).await },
            )
        }};
    }
    Router {
        replicate: replication_stream(inner, client, closed),
        pre_enqueue: open!(pre_enqueue, Status),
        queue_sort: open!(queue_sort, QueueSort),
        pre_filter: open!(pre_filter, PreFilter),
        filter: open!(filter, Filter),
        filter_batch: serves(hs, switchyard_proto::CAPABILITY_FILTER_BATCH)
            .then(|| open!(filter_batch, FilterBatch)),
        post_filter: open!(post_filter, PostFilter),
        pre_score: open!(pre_score, PreScore),
        score: open!(score, Score),
        normalize_score: open!(normalize_score, Score),
        reserve: open!(reserve, Status),
        unreserve: open!(unreserve, Status),
        permit: open!(permit, Permit),
        pre_bind: open!(pre_bind, Status),
        bind: open!(bind, Status),
        post_bind: open!(post_bind, Status),
    }
}

/// A reply message that names the call it answers.
pub(super) trait Answer: prost::Message + Default + Send + 'static {
    fn request_id(&self) -> u64;
}

macro_rules! answers {
    ($($t:ty),*) => {$(
        impl Answer for $t {
            fn request_id(&self) -> u64 {
                self.request_id
            }
        }
    )*};
}
answers!(
    pb::StatusResponse,
    pb::QueueSortResponse,
    pb::PreFilterResponse,
    pb::FilterResponse,
    pb::FilterBatchResponse,
    pb::PostFilterResponse,
    pb::PreScoreResponse,
    pb::ScoreResponse,
    pb::PermitResponse
);

/// Opens one call stream with `open` and spawns its reader: every reply goes to its
/// waiter (`wrap` tags it with its stream); too many stray replies, or the stream's
/// end, close the connection.
pub(super) fn reply_stream<Req, M, F, Fut>(
    inner: &Arc<Inner>,
    closed: &mpsc::UnboundedSender<String>,
    name: &'static str,
    wrap: fn(M) -> Reply,
    open: F,
) -> Tx<Req>
where
    Req: Send + 'static,
    M: Answer,
    F: FnOnce(UnboundedReceiverStream<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<tonic::Response<tonic::Streaming<M>>, tonic::Status>> + Send,
{
    let (tx, rx) = mpsc::unbounded_channel::<Req>();
    let inner = inner.clone();
    let closed = closed.clone();
    tokio::spawn(async move {
        let why = match open(UnboundedReceiverStream::new(rx)).await {
            Ok(resp) => read_replies(&inner, name, resp.into_inner(), wrap).await,
            Err(e) => format!("cannot open the {name} stream: {}", e.message()),
        };
        let _ = closed.send(why);
    });
    tx
}

/// Routes replies from `s` until it ends or floods; returns why it stopped.
pub(super) async fn read_replies<M: Answer>(
    inner: &Arc<Inner>,
    name: &'static str,
    mut s: tonic::Streaming<M>,
    wrap: fn(M) -> Reply,
) -> String {
    loop {
        match s.message().await {
            Ok(Some(m)) => {
                inner.stats.received(prost::Message::encoded_len(&m));
                if !handle_reply(inner, m.request_id(), wrap(m)) {
                    if let Some(why) = inner.stray(name) {
                        return why;
                    }
                }
            }
            Ok(None) => return format!("{name} stream ended"),
            Err(e) => return format!("{name} stream failed: {}", e.message()),
        }
    }
}

/// The replication stream: deltas out, acknowledgements (the replication lag) in.
pub(super) fn replication_stream(
    inner: &Arc<Inner>,
    client: &PluginClient<Channel>,
    closed: &mpsc::UnboundedSender<String>,
) -> Tx<pb::ReplicateRequest> {
    let (tx, rx) = mpsc::unbounded_channel::<pb::ReplicateRequest>();
    let mut c = client.clone();
    let closed = closed.clone();
    let stats = inner.stats.clone();
    tokio::spawn(async move {
        let why = match c.replicate(UnboundedReceiverStream::new(rx)).await {
            Ok(resp) => {
                let mut s = resp.into_inner();
                loop {
                    match s.message().await {
                        Ok(Some(ack)) => {
                            stats.received(prost::Message::encoded_len(&ack));
                            let sent = stats.sent_generation.load(Ordering::Relaxed);
                            stats.replication_lag.store(
                                sent.saturating_sub(ack.applied_generation),
                                Ordering::Relaxed,
                            );
                        }
                        Ok(None) => break "replication stream ended".to_string(),
                        Err(e) => break format!("replication failed: {}", e.message()),
                    }
                }
            }
            Err(e) => format!("cannot open the replication stream: {}", e.message()),
        };
        let _ = closed.send(why);
    });
    tx
}

/// Makes the connection usable: the streams for callers, the handshake for whoever
/// waits on it (announced once the streams are up, so a caller that waited can call
/// at once), and the queue told that the sidecar's plugins are back.
pub(super) fn publish(
    inner: &Arc<Inner>,
    streams: Streams,
    hs: pb::HandshakeResponse,
    closed: mpsc::UnboundedSender<String>,
    epoch: u64,
) {
    inner.timeouts_in_a_row.store(0, Ordering::Relaxed);
    if let Ok(mut k) = inner.kick.lock() {
        *k = Some(closed);
    }
    if let Ok(mut c) = inner.conn.lock() {
        c.streams = Some(streams);
        c.lost_at = None;
    }
    inner.conn_cv.notify_all();
    let plugins: Vec<String> = hs.plugins.iter().map(|p| p.name.clone()).collect();
    if let Ok(mut h) = inner.handshake.lock() {
        *h = Some(hs);
    }
    inner.handshake_cv.notify_all();
    // A flapping sidecar's reconnects are summed up with its losses, and the calls
    // failing meanwhile keep being counted, not logged anew after each reconnect.
    if inner.flapping.swap(false, Ordering::Relaxed) {
        tracing::debug!(endpoint = %inner.config.endpoint, epoch, "sidecar connected again");
    } else {
        match inner.failures.recovered() {
            Some(n) if n > 0 => tracing::warn!(
                endpoint = %inner.config.endpoint,
                epoch,
                "sidecar connected again ({n} more calls had failed since the last report)"
            ),
            Some(_) => {
                tracing::warn!(endpoint = %inner.config.endpoint, epoch, "sidecar connected again")
            }
            None => tracing::info!(endpoint = %inner.config.endpoint, epoch, "sidecar connected"),
        }
    }
    if let Some(services) = inner.handle.get().and_then(|h| h.services()) {
        // Requeueing calls plugins (PreEnqueue, QueueSort keys), some of them on this
        // very sidecar: never on this thread, which must stay free to read the replies.
        tokio::task::spawn_blocking(move || services.plugins_recovered(&plugins));
    }
}
