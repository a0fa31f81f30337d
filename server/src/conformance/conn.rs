//! The kit's own connection to the sidecar: one lane per stream with calls matched
//! to replies by request id, the handshake, and the requests every clause sends.

use super::*;

/// Replies carry the request id they answer.
pub(super) trait Reply {
    fn id(&self) -> u64;
}

macro_rules! reply {
    ($($t:ty),*) => {$(impl Reply for $t { fn id(&self) -> u64 { self.request_id } })*};
}

/// Requests carry the id their reply must echo.
pub(super) trait Request {
    fn id(&self) -> u64;
}

macro_rules! request {
    ($($t:ty),*) => {$(impl Request for $t { fn id(&self) -> u64 { self.request_id } })*};
}
request!(
    pb::PreEnqueueRequest,
    pb::QueueSortRequest,
    pb::PreFilterRequest,
    pb::FilterRequest,
    pb::FilterBatchRequest,
    pb::PostFilterRequest,
    pb::PreScoreRequest,
    pb::ScoreRequest,
    pb::NormalizeScoreRequest,
    pb::CycleRequest
);
reply!(
    pb::StatusResponse,
    pb::PreScoreResponse,
    pb::QueueSortResponse,
    pb::PreFilterResponse,
    pb::FilterResponse,
    pb::FilterBatchResponse,
    pb::ScoreResponse,
    pb::PermitResponse,
    pb::PostFilterResponse
);

/// One extension-point stream: requests out, replies (or the stream's end) in, replies
/// to other requests parked until asked for. Every reply must answer a request sent
/// on the lane and not answered yet (request_id 0 too, except where `unsolicited`
/// allows it: Permit decisions); any other is a stray (S2).
pub(super) struct Lane<Q, R> {
    pub(super) tx: mpsc::UnboundedSender<Q>,
    pub(super) rx: mpsc::UnboundedReceiver<Result<R, String>>,
    pub(super) parked: HashMap<u64, R>,
    /// Requests sent and not answered yet, by id.
    pub(super) outstanding: HashSet<u64>,
    /// Request ids of replies that answered nothing outstanding.
    pub(super) strays: Vec<u64>,
    /// Whether request_id 0 is an unsolicited message of the stream (Permit).
    pub(super) unsolicited: bool,
}

impl<Q: Request, R: Reply> Lane<Q, R> {
    pub(super) fn send(&mut self, q: Q) -> Result<(), String> {
        let id = q.id();
        self.tx
            .send(q)
            .map_err(|_| "the stream is closed".to_string())?;
        self.outstanding.insert(id);
        Ok(())
    }

    /// Notes a reply's arrival: it answers an outstanding request, or it is a stray.
    fn arrived(&mut self, id: u64) {
        if !(self.outstanding.remove(&id) || id == 0 && self.unsolicited) {
            self.strays.push(id);
        }
    }

    /// The stray replies so far, reading whatever has arrived and not been read.
    pub(super) fn strays(&mut self) -> Vec<u64> {
        while let Ok(Ok(r)) = self.rx.try_recv() {
            self.arrived(r.id());
            self.parked.insert(r.id(), r);
        }
        self.strays.clone()
    }

    pub(super) async fn recv(&mut self, id: u64, timeout: Duration) -> Result<R, String> {
        if let Some(r) = self.parked.remove(&id) {
            return Ok(r);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Err(_) => return Err(format!("no reply within {timeout:?}")),
                Ok(None) => return Err("the stream is closed".into()),
                Ok(Some(Err(why))) => return Err(why),
                Ok(Some(Ok(r))) => {
                    self.arrived(r.id());
                    if r.id() == id {
                        return Ok(r);
                    }
                    self.parked.insert(r.id(), r);
                }
            }
        }
    }

    pub(super) async fn call(&mut self, id: u64, q: Q, timeout: Duration) -> Result<R, String> {
        self.send(q)?;
        self.recv(id, timeout).await
    }
}

/// Streams that failed, with why (S1).
pub(super) type Broken = Arc<Mutex<Vec<String>>>;

macro_rules! lane {
    ($client:expr, $broken:expr, $method:ident) => {{
        let (tx, rx) = mpsc::unbounded_channel();
        let (otx, orx) = mpsc::unbounded_channel();
        let mut c = $client.clone();
        let broken = $broken.clone();
        tokio::spawn(async move {
            let why = match c.$method(UnboundedReceiverStream::new(rx)).await {
                Ok(resp) => {
                    let mut s = resp.into_inner();
                    loop {
                        match s.message().await {
                            Ok(Some(m)) => {
                                if otx.send(Ok(m)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break "ended".to_string(),
                            Err(e) => break switchyard_proto::status_text(&e),
                        }
                    }
                }
                Err(e) => format!("cannot be opened: {}", switchyard_proto::status_text(&e)),
            };
            if let Ok(mut b) = broken.lock() {
                b.push(format!("{}: {why}", stringify!($method)));
            }
            let _ = otx.send(Err(why));
        });
        Lane {
            tx,
            rx: orx,
            parked: HashMap::new(),
            outstanding: HashSet::new(),
            strays: Vec::new(),
            unsolicited: false,
        }
    }};
}

/// One connection as the scheduler holds it: the handshake's answer and every stream.
pub(super) struct Conn {
    pub(super) hs: pb::HandshakeResponse,
    pub(super) replicate: mpsc::UnboundedSender<pb::ReplicateRequest>,
    /// Acknowledged generations, or why the stream ended.
    pub(super) acks: mpsc::UnboundedReceiver<Result<u64, String>>,
    pub(super) generation: u64,
    pub(super) next_cycle: u64,
    pub(super) next_id: u64,
    pub(super) timeout: Duration,
    pub(super) broken: Broken,
    pub(super) pre_enqueue: Lane<pb::PreEnqueueRequest, pb::StatusResponse>,
    pub(super) queue_sort: Lane<pb::QueueSortRequest, pb::QueueSortResponse>,
    pub(super) pre_filter: Lane<pb::PreFilterRequest, pb::PreFilterResponse>,
    pub(super) filter: Lane<pb::FilterRequest, pb::FilterResponse>,
    pub(super) filter_batch: Option<Lane<pb::FilterBatchRequest, pb::FilterBatchResponse>>,
    pub(super) pre_score: Lane<pb::PreScoreRequest, pb::PreScoreResponse>,
    pub(super) score: Lane<pb::ScoreRequest, pb::ScoreResponse>,
    pub(super) normalize: Lane<pb::NormalizeScoreRequest, pb::ScoreResponse>,
    pub(super) reserve: Lane<pb::CycleRequest, pb::StatusResponse>,
    pub(super) unreserve: Lane<pb::CycleRequest, pb::StatusResponse>,
    pub(super) permit: Lane<pb::CycleRequest, pb::PermitResponse>,
    pub(super) pre_bind: Lane<pb::CycleRequest, pb::StatusResponse>,
    pub(super) post_bind: Lane<pb::CycleRequest, pb::StatusResponse>,
    // Held open as the scheduler holds them; the kit does not call them (PostFilter
    // needs a failed cycle's statuses, Bind would bind).
    pub(super) _post_filter: Lane<pb::PostFilterRequest, pb::PostFilterResponse>,
    pub(super) _bind: Lane<pb::CycleRequest, pb::StatusResponse>,
}

pub(super) fn offered() -> Vec<String> {
    vec![
        switchyard_proto::CAPABILITY_FILTER_BATCH.to_string(),
        switchyard_proto::CAPABILITY_REPLICATE_BATCH.to_string(),
    ]
}

/// Where the sidecar is: its normalized endpoint and, for `https://`, the TLS files.
pub(super) struct Target {
    pub(super) endpoint: String,
    pub(super) tls: Option<crate::remote::TlsFiles>,
}

pub(super) async fn client(t: &Target) -> Result<PluginClient<Channel>, String> {
    let ch = crate::remote::client::channel(&t.endpoint, t.tls.as_ref()).await?;
    Ok(PluginClient::new(ch)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

pub(super) async fn handshake(
    c: &mut PluginClient<Channel>,
    versions: Vec<String>,
    timeout: Duration,
) -> Result<pb::HandshakeResponse, String> {
    let req = pb::HandshakeRequest {
        protocol_versions: versions,
        scheduler: format!("switchyard-conformance {}", env!("CARGO_PKG_VERSION")),
        capabilities: offered(),
    };
    match tokio::time::timeout(timeout, c.handshake(req)).await {
        Err(_) => Err(format!("no answer within {timeout:?}")),
        Ok(Err(s)) => Err(switchyard_proto::status_text(&s)),
        Ok(Ok(r)) => Ok(r.into_inner()),
    }
}

impl Conn {
    pub(super) async fn open(target: &Target, timeout: Duration) -> Result<Conn, String> {
        let mut c = client(target).await?;
        let hs = handshake(
            &mut c,
            vec![switchyard_proto::PROTOCOL_VERSION.into()],
            timeout,
        )
        .await
        .map_err(|e| format!("handshake failed: {e}"))?;
        let broken: Broken = Default::default();
        let (rtx, rrx) = mpsc::unbounded_channel::<pb::ReplicateRequest>();
        let (atx, arx) = mpsc::unbounded_channel();
        {
            let mut c = c.clone();
            let broken = broken.clone();
            tokio::spawn(async move {
                let why = match c.replicate(UnboundedReceiverStream::new(rrx)).await {
                    Ok(resp) => {
                        let mut s = resp.into_inner();
                        loop {
                            match s.message().await {
                                Ok(Some(a)) => {
                                    if atx.send(Ok(a.applied_generation)).is_err() {
                                        return;
                                    }
                                }
                                Ok(None) => break "ended".to_string(),
                                Err(e) => break switchyard_proto::status_text(&e),
                            }
                        }
                    }
                    Err(e) => format!("cannot be opened: {}", switchyard_proto::status_text(&e)),
                };
                if let Ok(mut b) = broken.lock() {
                    b.push(format!("Replicate: {why}"));
                }
                let _ = atx.send(Err(why));
            });
        }
        let batch = hs
            .capabilities
            .iter()
            .any(|c| c == switchyard_proto::CAPABILITY_FILTER_BATCH);
        Ok(Conn {
            replicate: rtx,
            acks: arx,
            generation: 0,
            next_cycle: 1,
            next_id: 1,
            timeout,
            pre_enqueue: lane!(c, broken, pre_enqueue),
            queue_sort: lane!(c, broken, queue_sort),
            pre_filter: lane!(c, broken, pre_filter),
            filter: lane!(c, broken, filter),
            filter_batch: if batch {
                Some(lane!(c, broken, filter_batch))
            } else {
                None
            },
            _post_filter: lane!(c, broken, post_filter),
            pre_score: lane!(c, broken, pre_score),
            score: lane!(c, broken, score),
            normalize: lane!(c, broken, normalize_score),
            reserve: lane!(c, broken, reserve),
            unreserve: lane!(c, broken, unreserve),
            permit: Lane {
                unsolicited: true,
                ..lane!(c, broken, permit)
            },
            pre_bind: lane!(c, broken, pre_bind),
            _bind: lane!(c, broken, bind),
            post_bind: lane!(c, broken, post_bind),
            broken,
            hs,
        })
    }

    pub(super) fn negotiated(&self, cap: &str) -> bool {
        self.hs.capabilities.iter().any(|c| c == cap)
    }

    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends one Replicate message at the next generation; returns it.
    pub(super) fn send(
        &mut self,
        kind: pb::replicate_request::Kind,
        ack: bool,
    ) -> Result<u64, String> {
        self.generation += 1;
        let g = self.generation;
        self.replicate
            .send(pb::ReplicateRequest {
                generation: g,
                kind: Some(kind),
                ack,
                more: vec![],
            })
            .map_err(|_| "the Replicate stream is closed".to_string())?;
        Ok(g)
    }

    /// Waits for the acknowledgement of `g` (or later).
    pub(super) async fn acked(&mut self, g: u64) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.acks.recv()).await {
                Err(_) => {
                    return Err(format!(
                        "generation {g} not acknowledged within {:?}",
                        self.timeout
                    ))
                }
                Ok(None) => return Err("the Replicate stream is closed".into()),
                Ok(Some(Err(why))) => return Err(format!("the Replicate stream ended: {why}")),
                Ok(Some(Ok(a))) if a >= g => return Ok(()),
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    pub(super) fn start_cycle(&mut self, pod: &pb::Pod) -> Result<(u64, u64), String> {
        let cycle = self.next_cycle;
        self.next_cycle += 1;
        let g = self.send(
            pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle,
                pod: Some(pod.clone()),
                profile: pod.scheduler_name.clone(),
            }),
            false,
        )?;
        Ok((cycle, g))
    }

    /// Sends the cycle's CycleEnd (asking for an acknowledgement with `ack`).
    pub(super) fn end_cycle(&mut self, cycle: u64, ack: bool) -> Result<u64, String> {
        self.send(
            pb::replicate_request::Kind::CycleEnd(pb::CycleEnd { cycle }),
            ack,
        )
    }

    pub(super) fn filter_request(
        &mut self,
        plugin: &str,
        cycle: u64,
        g: u64,
        nodes: &[u32],
    ) -> pb::FilterRequest {
        pb::FilterRequest {
            request_id: self.id(),
            plugin: plugin.into(),
            cycle,
            generation: g,
            nodes: nodes.to_vec(),
            group_failures: true,
            ..Default::default()
        }
    }

    pub(super) async fn pre_filter_call(
        &mut self,
        plugin: &str,
        cycle: u64,
        generation: u64,
    ) -> Result<pb::PreFilterResponse, String> {
        let id = self.id();
        let req = pb::PreFilterRequest {
            request_id: id,
            plugin: plugin.into(),
            cycle,
            generation,
            traceparent: String::new(),
        };
        let t = self.timeout;
        self.pre_filter.call(id, req, t).await
    }

    pub(super) async fn filter(
        &mut self,
        req: pb::FilterRequest,
    ) -> Result<pb::FilterResponse, String> {
        let id = req.request_id;
        let t = self.timeout;
        self.filter.call(id, req, t).await
    }

    pub(super) fn broken_streams(&self) -> Vec<String> {
        self.broken.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Replies, on any stream, that answered no outstanding call (S2).
    pub(super) fn stray_replies(&mut self) -> Vec<String> {
        fn of<Q: Request, R: Reply>(name: &str, l: &mut Lane<Q, R>, out: &mut Vec<String>) {
            let s = l.strays();
            if !s.is_empty() {
                let ids: Vec<String> = s.iter().take(5).map(u64::to_string).collect();
                out.push(format!(
                    "{name}: {} replies to no outstanding call (request_id {}{})",
                    s.len(),
                    ids.join(", "),
                    if s.len() > 5 { ", ..." } else { "" }
                ));
            }
        }
        let mut out = Vec::new();
        of("PreEnqueue", &mut self.pre_enqueue, &mut out);
        of("QueueSort", &mut self.queue_sort, &mut out);
        of("PreFilter", &mut self.pre_filter, &mut out);
        of("Filter", &mut self.filter, &mut out);
        if let Some(l) = &mut self.filter_batch {
            of("FilterBatch", l, &mut out);
        }
        of("PreScore", &mut self.pre_score, &mut out);
        of("Score", &mut self.score, &mut out);
        of("NormalizeScore", &mut self.normalize, &mut out);
        of("Reserve", &mut self.reserve, &mut out);
        of("Unreserve", &mut self.unreserve, &mut out);
        of("Permit", &mut self.permit, &mut out);
        of("PreBind", &mut self.pre_bind, &mut out);
        of("PostBind", &mut self.post_bind, &mut out);
        of("PostFilter", &mut self._post_filter, &mut out);
        of("Bind", &mut self._bind, &mut out);
        out
    }
}

pub(super) fn code_name(c: i32) -> String {
    pb::Code::try_from(c)
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|_| format!("unknown code {c}"))
}

pub(super) fn valid_code(c: i32) -> bool {
    pb::Code::try_from(c).is_ok()
}

pub(super) fn has(plugin: &pb::PluginInfo, p: Ep) -> bool {
    plugin.extension_points.contains(&(p as i32))
}

pub(super) fn cycle_request(
    c: &mut Conn,
    p: &pb::PluginInfo,
    cycle: u64,
    g: u64,
    node: &str,
) -> pb::CycleRequest {
    pb::CycleRequest {
        request_id: c.id(),
        plugin: p.name.clone(),
        cycle,
        generation: g,
        node_name: node.to_string(),
        ..Default::default()
    }
}

/// The fixture's node ids, at most the sidecar's batch limit.
pub(super) fn capped(f: &Fixture, c: &Conn) -> Vec<u32> {
    let mut nodes = f.node_ids();
    if c.hs.max_batch_nodes > 0 {
        nodes.truncate(c.hs.max_batch_nodes as usize);
    }
    nodes
}
