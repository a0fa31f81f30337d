//! `switchyard conformance ENDPOINT`: plays the scheduler against a sidecar and checks
//! the clauses of the plugin contract (`proto/README.md`, "Clauses"), one verdict per
//! clause. It checks that a plugin is consistent — it answers every call in the
//! contract's shape, at the right generation, the same way for the same input, and
//! the same after deltas as on a fresh snapshot — never what its policy decides.
//!
//! The kit opens its own connections, so run it against a sidecar no scheduler is
//! using.

mod fixture;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchyard_proto::v1 as pb;
use switchyard_proto::v1::plugin_client::PluginClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;

pub use fixture::{Fixture, FixtureError};

use pb::ExtensionPoint as Ep;

/// One clause of the contract: its id in `proto/README.md`, what it says, and what a
/// sidecar that breaks it should change.
pub struct Clause {
    pub id: &'static str,
    pub title: &'static str,
    pub fix: &'static str,
    /// Why it was not checked, when nothing exercised it.
    pub unexercised: &'static str,
}

/// Every clause the kit checks, in the order it reports them.
pub const CLAUSES: &[Clause] = &[
    Clause { id: "H1", title: "Handshake answers protocol v1 and only capabilities the scheduler offered",
        fix: "answer protocol_version \"v1\" and a subset of HandshakeRequest.capabilities", unexercised: "" },
    Clause { id: "H2", title: "Handshake refuses a scheduler that offers no version it speaks",
        fix: "fail Handshake (FAILED_PRECONDITION) when protocol_versions lacks \"v1\"", unexercised: "" },
    Clause { id: "H3", title: "Plugins are well declared: unique names, known extension points and events, node-local plugins without PreFilter, NormalizeScore only with Score, AddPod/RemovePod only with PreFilter",
        fix: "fix HandshakeResponse.plugins", unexercised: "" },
    Clause { id: "S1", title: "Every stream the scheduler opens is served (Replicate, each extension point, FilterBatch when negotiated)",
        fix: "implement every rpc of service Plugin; answer a call to an extension point you do not implement with an ERROR status", unexercised: "" },
    Clause { id: "R1", title: "A full snapshot from empty is applied and acknowledged at its generation",
        fix: "apply ReplicateRequest in order and, when `ack` is set, answer ReplicateResponse{applied_generation}", unexercised: "" },
    Clause { id: "R2", title: "A generation gap closes the Replicate stream",
        fix: "when a message's generation is not one more than the last, end the Replicate stream with an error and answer nothing from that replica", unexercised: "" },
    Clause { id: "R3", title: "A Replicate stream whose first message is not a full snapshot is closed",
        fix: "require `delta.full` on the first message of every Replicate stream", unexercised: "" },
    Clause { id: "R4", title: "Incremental deltas (nodes and pods upserted and removed, PodUpdate) answer as one full snapshot of the same state",
        fix: "apply every field of SnapshotDelta: upsert_nodes replace a node (labels, taints, allocatable), remove_nodes drop it and its pods, update_pods change only the placement fields", unexercised: "" },
    Clause { id: "R5", title: "replicate-batch: messages in `more` are applied as if each came alone",
        fix: "apply the request, then each of `more` in order, checking their generations", unexercised: "replicate-batch was not negotiated" },
    Clause { id: "R6", title: "A new connection starts over: its full snapshot (generations from 1) replaces the old replica and its cycles",
        fix: "on a new Replicate stream, drop the old replica and its cycles when the full snapshot arrives; never answer from the old one", unexercised: "" },
    Clause { id: "P1", title: "PreFilter answers at the cycle's generation, naming only nodes that exist",
        fix: "echo the call's generation; PreFilterResponse.node_names must be node names of the replica", unexercised: "no plugin declares PreFilter" },
    Clause { id: "F1", title: "Filter gives one answer per node: `evaluated` equals the nodes sent, failures by distinct valid index with a non-success code, request_id and generation echoed",
        fix: "set evaluated to len(nodes); list only failing items, by index, each with a non-SUCCESS code", unexercised: "no plugin declares Filter" },
    Clause { id: "F2", title: "The same input gets the same answer (Filter, Score, QueueSort keys)",
        fix: "make answers a function of the pod, the nodes and the replica only (no clocks, randomness or call counts)", unexercised: "" },
    Clause { id: "F3", title: "A call naming a generation not yet applied waits for it instead of answering from an older replica",
        fix: "before answering, wait (bounded) until the replica has applied the call's generation", unexercised: "no Filter plugin without PreFilter (the kit checks this with those)" },
    Clause { id: "F4", title: "Calls of a cycle that ended are refused with an ERROR, and its state is gone",
        fix: "drop a cycle's state at CycleEnd and answer later calls naming it with an ERROR status", unexercised: "no plugin declares Filter" },
    Clause { id: "F5", title: "What-if deltas: a Filter item with a NodeDelta answers as a fresh snapshot with those pods removed and added",
        fix: "for an item with a delta, fork the cycle state, run RemovePod/AddPod on the fork, and filter a copy of the node with the pods changed", unexercised: "no Filter plugin is node-local or has AddPod/RemovePod" },
    Clause { id: "F6", title: "Concurrent cycles: calls of two cycles in flight together get the answers each gets alone",
        fix: "keep cycle state per cycle id; never share it between cycles", unexercised: "no Filter plugin without PreFilter (the kit checks this with those)" },
    Clause { id: "F7", title: "FilterBatch: one reply per call, in order, each with its call's request_id and the answer the call gets alone",
        fix: "answer FilterBatchRequest.calls in order, each exactly as the Filter stream would", unexercised: "filter-batch was not negotiated" },
    Clause { id: "F8", title: "Failures grouped: with `group_failures`, each distinct status (code and reasons) is sent once with the indices it rejects, and the answer equals the one listed node by node",
        fix: "when FilterRequest.group_failures is set, answer in FilterResponse.failure_groups: one FailureGroup per distinct status, with the indices of its items, and leave `failures` empty", unexercised: "no Filter answer rejected a node" },
    Clause { id: "SC1", title: "Score gives one score per node sent, within 0..100 once normalized (raw scores too without NormalizeScore), generation echoed",
        fix: "return len(nodes) scores; keep final scores within 0..100", unexercised: "no plugin declares Score" },
    Clause { id: "SC2", title: "NormalizeScore: Score then NormalizeScore equals Score with `normalize`, within 0..100",
        fix: "run the same normalization in both paths", unexercised: "no plugin declares NormalizeScore" },
    Clause { id: "SC3", title: "Score ahead: scores sent with a Filter reply equal a Score call over the same nodes",
        fix: "score exactly the first `score_first` passing items, after PreScore when `pre_score`, normalized", unexercised: "the sidecar does not score ahead, or no plugin has Filter and Score" },
    Clause { id: "Q1", title: "QueueSort gives every pod a key, the same key for the same pod",
        fix: "derive the key from the pod only", unexercised: "no plugin declares QueueSort" },
    Clause { id: "E1", title: "PreEnqueue answers every pod with a valid status",
        fix: "answer SUCCESS, UNSCHEDULABLE_AND_UNRESOLVABLE or ERROR", unexercised: "no plugin declares PreEnqueue" },
    Clause { id: "X1", title: "Reserve, Permit, PreBind, PostBind and Unreserve answer with a valid status, request_id echoed; a Permit WAIT carries a timeout",
        fix: "answer each call of a started cycle; set timeout_millis with WAIT", unexercised: "no plugin declares Reserve, Permit, PreBind or PostBind" },
    Clause { id: "X2", title: "A Permit WAIT is ended by a later decision on the Permit stream (request_id 0) naming the waiting pod and the plugin that made it wait, or by its timeout",
        fix: "send PermitResponse{request_id: 0, decision: {pod_uid, plugin, allow, message}} only for a pod that is waiting on that plugin", unexercised: "no Permit answered WAIT, or no decision came before its timeout" },
    Clause { id: "T1", title: "A call's span in the sidecar starts under the call's `traceparent`, so the sidecar's work shows inside the scheduler's trace",
        fix: "extract the W3C `traceparent` of each call and start the call's span as its child; export over OTLP to OTEL_EXPORTER_OTLP_ENDPOINT", unexercised: "run the kit with --otlp-listen HOST:PORT and the sidecar with OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT (and OTEL_BSP_SCHEDULE_DELAY=200 to export quickly)" },
    Clause { id: "L2", title: "The scheduler going away with calls in flight costs nothing: a new connection is served and answers as a fresh one",
        fix: "when a connection drops, end its streams, drop its cycles, and discard answers to its calls; keep serving new connections", unexercised: "" },
    Clause { id: "HL1", title: "grpc.health.v1 Check answers SERVING",
        fix: "serve grpc.health.v1.Health and report SERVING for \"\"", unexercised: "" },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// Nothing the sidecar declares exercises the clause.
    Skip,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub clause: &'static str,
    pub title: &'static str,
    pub verdict: Verdict,
    /// For a failure: what was seen (the first violations) and what to change; for a
    /// skip: why.
    pub detail: String,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub endpoint: String,
    pub plugins: Vec<String>,
    pub capabilities: Vec<String>,
    pub outcomes: Vec<Outcome>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Fail)
            .count()
    }

    pub fn table(&self) -> String {
        let mut out = format!(
            "conformance of {} (plugins: {}; capabilities: {})\n",
            self.endpoint,
            if self.plugins.is_empty() {
                "none".into()
            } else {
                self.plugins.join(", ")
            },
            if self.capabilities.is_empty() {
                "none".into()
            } else {
                self.capabilities.join(", ")
            },
        );
        for o in &self.outcomes {
            let tag = match o.verdict {
                Verdict::Pass => "PASS",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "SKIP",
            };
            out.push_str(&format!("{tag} {:<4} {}\n", o.clause, o.title));
            if !o.detail.is_empty() {
                for line in o.detail.lines() {
                    out.push_str(&format!("          {line}\n"));
                }
            }
        }
        let pass = self
            .outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Pass)
            .count();
        let skip = self
            .outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Skip)
            .count();
        out.push_str(&format!(
            "{pass} passed, {} failed, {skip} not exercised\n",
            self.failed()
        ));
        out
    }
}

pub struct Options {
    pub endpoint: String,
    /// For an `https://` endpoint: the CA to trust, and a client certificate and key
    /// when the sidecar requires one (mutual TLS).
    pub tls: Option<crate::remote::TlsFiles>,
    pub cluster: Vec<PathBuf>,
    /// How long one call may take.
    pub timeout: Duration,
    /// Where to receive the sidecar's spans over OTLP/gRPC (T1).
    pub otlp_listen: Option<std::net::SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error(transparent)]
    Fixture(#[from] FixtureError),
    #[error("endpoint {0:?}: {1}")]
    Endpoint(String, String),
    #[error("--otlp-listen {0}: cannot listen: {1}; pick a free port")]
    OtlpListen(std::net::SocketAddr, String),
}

/// What the checks found, per clause.
#[derive(Default)]
struct Checks {
    exercised: HashMap<&'static str, usize>,
    failures: HashMap<&'static str, Vec<String>>,
}

impl Checks {
    fn ok(&mut self, id: &'static str) {
        *self.exercised.entry(id).or_default() += 1;
    }
    fn fail(&mut self, id: &'static str, what: impl Into<String>) {
        self.ok(id);
        self.failures.entry(id).or_default().push(what.into());
    }
    /// Records `cond` for `id`, failing with `what()` when it does not hold.
    fn check(&mut self, id: &'static str, cond: bool, what: impl FnOnce() -> String) -> bool {
        if cond {
            self.ok(id);
        } else {
            self.fail(id, what());
        }
        cond
    }
    fn outcomes(&self) -> Vec<Outcome> {
        CLAUSES
            .iter()
            .map(|c| {
                let (verdict, detail) = match self.failures.get(c.id) {
                    Some(f) => {
                        let mut d: Vec<String> = f.iter().take(3).cloned().collect();
                        if f.len() > 3 {
                            d.push(format!("... and {} more", f.len() - 3));
                        }
                        d.push(format!("fix: {}", c.fix));
                        (Verdict::Fail, d.join("\n"))
                    }
                    None if self.exercised.contains_key(c.id) => (Verdict::Pass, String::new()),
                    None => (Verdict::Skip, c.unexercised.to_string()),
                };
                Outcome {
                    clause: c.id,
                    title: c.title,
                    verdict,
                    detail,
                }
            })
            .collect()
    }
}

/// Replies carry the request id they answer.
trait Reply {
    fn id(&self) -> u64;
}

macro_rules! reply {
    ($($t:ty),*) => {$(impl Reply for $t { fn id(&self) -> u64 { self.request_id } })*};
}
reply!(
    pb::StatusResponse,
    pb::QueueSortResponse,
    pb::PreFilterResponse,
    pb::FilterResponse,
    pb::FilterBatchResponse,
    pb::ScoreResponse,
    pb::PermitResponse
);

/// One extension-point stream: requests out, replies (or the stream's end) in, replies
/// to other requests parked until asked for.
struct Lane<Q, R> {
    tx: mpsc::UnboundedSender<Q>,
    rx: mpsc::UnboundedReceiver<Result<R, String>>,
    parked: HashMap<u64, R>,
}

impl<Q, R: Reply> Lane<Q, R> {
    fn send(&self, q: Q) -> Result<(), String> {
        self.tx
            .send(q)
            .map_err(|_| "the stream is closed".to_string())
    }

    async fn recv(&mut self, id: u64, timeout: Duration) -> Result<R, String> {
        if let Some(r) = self.parked.remove(&id) {
            return Ok(r);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Err(_) => return Err(format!("no reply within {timeout:?}")),
                Ok(None) => return Err("the stream is closed".into()),
                Ok(Some(Err(why))) => return Err(why),
                Ok(Some(Ok(r))) if r.id() == id => return Ok(r),
                Ok(Some(Ok(r))) => {
                    self.parked.insert(r.id(), r);
                }
            }
        }
    }

    async fn call(&mut self, id: u64, q: Q, timeout: Duration) -> Result<R, String> {
        self.send(q)?;
        self.recv(id, timeout).await
    }
}

/// Streams that failed, with why (S1).
type Broken = Arc<Mutex<Vec<String>>>;

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
        }
    }};
}

/// One connection as the scheduler holds it: the handshake's answer and every stream.
struct Conn {
    hs: pb::HandshakeResponse,
    replicate: mpsc::UnboundedSender<pb::ReplicateRequest>,
    /// Acknowledged generations, or why the stream ended.
    acks: mpsc::UnboundedReceiver<Result<u64, String>>,
    generation: u64,
    next_cycle: u64,
    next_id: u64,
    timeout: Duration,
    broken: Broken,
    pre_enqueue: Lane<pb::PreEnqueueRequest, pb::StatusResponse>,
    queue_sort: Lane<pb::QueueSortRequest, pb::QueueSortResponse>,
    pre_filter: Lane<pb::PreFilterRequest, pb::PreFilterResponse>,
    filter: Lane<pb::FilterRequest, pb::FilterResponse>,
    filter_batch: Option<Lane<pb::FilterBatchRequest, pb::FilterBatchResponse>>,
    pre_score: Lane<pb::PreScoreRequest, pb::StatusResponse>,
    score: Lane<pb::ScoreRequest, pb::ScoreResponse>,
    normalize: Lane<pb::NormalizeScoreRequest, pb::ScoreResponse>,
    reserve: Lane<pb::CycleRequest, pb::StatusResponse>,
    unreserve: Lane<pb::CycleRequest, pb::StatusResponse>,
    permit: Lane<pb::CycleRequest, pb::PermitResponse>,
    pre_bind: Lane<pb::CycleRequest, pb::StatusResponse>,
    post_bind: Lane<pb::CycleRequest, pb::StatusResponse>,
    // Held open as the scheduler holds them; the kit does not call them (PostFilter
    // needs a failed cycle's statuses, Bind would bind).
    _post_filter: Lane<pb::PostFilterRequest, pb::PostFilterResponse>,
    _bind: Lane<pb::CycleRequest, pb::StatusResponse>,
}

fn offered() -> Vec<String> {
    vec![
        switchyard_proto::CAPABILITY_FILTER_BATCH.to_string(),
        switchyard_proto::CAPABILITY_REPLICATE_BATCH.to_string(),
    ]
}

/// Where the sidecar is: its normalized endpoint and, for `https://`, the TLS files.
struct Target {
    endpoint: String,
    tls: Option<crate::remote::TlsFiles>,
}

async fn client(t: &Target) -> Result<PluginClient<Channel>, String> {
    let ch = crate::remote::client::channel(&t.endpoint, t.tls.as_ref()).await?;
    Ok(PluginClient::new(ch)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

async fn handshake(
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
    async fn open(target: &Target, timeout: Duration) -> Result<Conn, String> {
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
            permit: lane!(c, broken, permit),
            pre_bind: lane!(c, broken, pre_bind),
            _bind: lane!(c, broken, bind),
            post_bind: lane!(c, broken, post_bind),
            broken,
            hs,
        })
    }

    fn negotiated(&self, cap: &str) -> bool {
        self.hs.capabilities.iter().any(|c| c == cap)
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends one Replicate message at the next generation; returns it.
    fn send(&mut self, kind: pb::replicate_request::Kind, ack: bool) -> Result<u64, String> {
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
    async fn acked(&mut self, g: u64) -> Result<(), String> {
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

    fn start_cycle(&mut self, pod: &pb::Pod) -> Result<(u64, u64), String> {
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
    fn end_cycle(&mut self, cycle: u64, ack: bool) -> Result<u64, String> {
        self.send(
            pb::replicate_request::Kind::CycleEnd(pb::CycleEnd { cycle }),
            ack,
        )
    }

    fn filter_request(
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

    async fn pre_filter_call(
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

    async fn filter(&mut self, req: pb::FilterRequest) -> Result<pb::FilterResponse, String> {
        let id = req.request_id;
        let t = self.timeout;
        self.filter.call(id, req, t).await
    }

    fn broken_streams(&self) -> Vec<String> {
        self.broken.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

/// A Filter answer as compared: the failing items with their codes and reasons, or
/// the call's error.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FilterAnswer {
    Failures(Vec<(u32, i32, Vec<String>)>),
    Error(String),
}

impl FilterAnswer {
    fn of(r: &pb::FilterResponse) -> FilterAnswer {
        if let Some(e) = &r.error {
            return FilterAnswer::Error(e.reasons.join("; "));
        }
        let mut f: Vec<(u32, i32, Vec<String>)> = switchyard_proto::failures(r)
            .map(|(i, s)| {
                let s = s.cloned().unwrap_or_default();
                (i, s.code, s.reasons)
            })
            .collect();
        f.sort();
        FilterAnswer::Failures(f)
    }

    fn passing(&self, nodes: &[u32]) -> Vec<u32> {
        match self {
            FilterAnswer::Error(_) => vec![],
            FilterAnswer::Failures(f) => nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| !f.iter().any(|(j, ..)| *j as usize == *i))
                .map(|(_, n)| *n)
                .collect(),
        }
    }
}

/// Everything one pod's cycle answered, per plugin, for comparisons between runs.
#[derive(Clone, Debug, Default, PartialEq)]
struct PodAnswers {
    pre_filter: BTreeMap<String, (i32, Vec<String>)>,
    filter: BTreeMap<String, FilterAnswer>,
    score: BTreeMap<String, (i32, Vec<i64>)>,
}

fn code_name(c: i32) -> String {
    pb::Code::try_from(c)
        .map(|c| format!("{c:?}"))
        .unwrap_or_else(|_| format!("unknown code {c}"))
}

fn valid_code(c: i32) -> bool {
    pb::Code::try_from(c).is_ok()
}

/// Runs `switchyard conformance`: every clause against the sidecar at
/// `opts.endpoint`.
pub async fn run(opts: &Options) -> Result<Report, ConformanceError> {
    let fixture = Fixture::load(&opts.cluster)?;
    let endpoint = normalize_endpoint(&opts.endpoint)
        .map_err(|e| ConformanceError::Endpoint(opts.endpoint.clone(), e))?;
    match (endpoint.starts_with("https://"), opts.tls.is_some()) {
        (true, false) => {
            return Err(ConformanceError::Endpoint(
                opts.endpoint.clone(),
                "an https:// endpoint needs --tls-ca (and --tls-cert/--tls-key for mutual TLS)"
                    .into(),
            ))
        }
        (false, true) => {
            return Err(ConformanceError::Endpoint(
                opts.endpoint.clone(),
                "--tls-* options need an https:// endpoint".into(),
            ))
        }
        _ => {}
    }
    let target = Target {
        endpoint,
        tls: opts.tls.clone(),
    };
    let otlp = match opts.otlp_listen {
        None => None,
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| ConformanceError::OtlpListen(addr, e.to_string()))?;
            let collector = crate::telemetry::otlp_receiver::Collector::default();
            tokio::spawn(collector.clone().serve(listener));
            Some((addr, collector))
        }
    };
    let mut k = Kit {
        otlp,
        traced: Vec::new(),
        permit_waits_left: 2,
        checks: Checks::default(),
        unreachable: false,
        fixture,
        target,
        timeout: opts.timeout,
    };
    let mut report = Report {
        endpoint: opts.endpoint.clone(),
        plugins: vec![],
        capabilities: vec![],
        outcomes: vec![],
    };
    if let Some(hs) = k.run_all().await {
        report.plugins = hs.plugins.iter().map(|p| p.name.clone()).collect();
        report.capabilities = hs.capabilities.clone();
    }
    report.outcomes = k.checks.outcomes();
    if k.unreachable {
        for o in report
            .outcomes
            .iter_mut()
            .filter(|o| o.verdict == Verdict::Skip)
        {
            o.detail = "not checked: the sidecar could not be reached".into();
        }
    }
    Ok(report)
}

/// `unix:///path`, `unix:path`, a bare path (a Unix socket), `http://host:port`,
/// `https://host:port` (TLS).
fn normalize_endpoint(e: &str) -> Result<String, String> {
    if e.starts_with("unix:") || e.starts_with("http://") || e.starts_with("https://") {
        Ok(e.to_string())
    } else if let Some(rest) = e.strip_prefix("tcp://") {
        Ok(format!("http://{rest}"))
    } else if e.starts_with('/') || e.starts_with('.') {
        Ok(format!("unix://{e}"))
    } else if e.contains(':') && !e.contains('/') {
        Ok(format!("http://{e}"))
    } else {
        Err("expected unix:///path/to.sock, a socket path, tcp://host:port, http://host:port, https://host:port or host:port".into())
    }
}

/// How long the kit waits for the sidecar to export the spans of its traced calls
/// (T1); batching exporters send every 5 s by default.
const OTLP_WAIT: Duration = Duration::from_secs(10);

/// A W3C trace id and span id (hex) for the kit's `n`th traced call: random enough
/// to tell runs apart, never all zero.
fn trace_ids(n: usize) -> (String, String) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let pid = u64::from(std::process::id());
    (
        format!("{nanos:016x}{:016x}", (pid << 32) | n as u64 | 1 << 63),
        format!("{:016x}", nanos.rotate_left(17) ^ (n as u64 + 1)),
    )
}

/// How long the kit waits for a Permit decision after a WAIT (X2).
const PERMIT_DECISION_WAIT: Duration = Duration::from_secs(1);

struct Kit {
    /// The OTLP receiver the sidecar exports its spans to (T1).
    otlp: Option<(
        std::net::SocketAddr,
        crate::telemetry::otlp_receiver::Collector,
    )>,
    /// Calls sent with a `traceparent`: plugin, extension point, trace id, span id.
    traced: Vec<(String, &'static str, String, String)>,
    /// Waits for a Permit decision the kit still spends before it stops waiting.
    permit_waits_left: u32,
    checks: Checks,
    /// The first connection failed: nothing else could be checked.
    unreachable: bool,
    fixture: Fixture,
    target: Target,
    timeout: Duration,
}

impl Kit {
    /// Every check in order; returns the handshake when the sidecar could be reached.
    async fn run_all(&mut self) -> Option<pb::HandshakeResponse> {
        let mut a = match Conn::open(&self.target, self.timeout).await {
            Ok(c) => c,
            Err(e) => {
                self.checks.fail("H1", e);
                self.unreachable = true;
                return None;
            }
        };
        let hs = a.hs.clone();
        self.check_handshake(&hs);
        self.refuses_unknown_version().await;
        self.health().await;
        // Connection A: the fixture, every pod's cycle, then the change.
        let base = self.fixture.clone();
        if let Err(e) = self.full_snapshot(&mut a, &base).await {
            self.checks.fail("R1", e);
            return Some(hs);
        }
        let baseline = self.all_pods(&mut a, &base, "connection 1").await;
        self.traced_calls(&mut a, &base).await;
        self.queue_keys(&mut a).await;
        self.waits_for_generation(&mut a, &base, &baseline).await;
        self.concurrent_cycles(&mut a, &base, &baseline).await;
        self.filter_batch(&mut a, &base, &baseline).await;
        let (deltas, changed) = base.changed();
        let after_change = match self.apply_change(&mut a, &deltas).await {
            Ok(()) => Some(self.all_pods(&mut a, &changed, "after the change").await),
            Err(e) => {
                self.checks.fail("R4", e);
                None
            }
        };
        let broken = a.broken_streams();
        self.checks
            .check("S1", broken.is_empty(), || broken.join("; "));
        drop(a);
        // Connection B: the original fixture again: answers as on connection 1 (R6).
        if let Some(mut b) = self.reconnect().await {
            if self.full_snapshot(&mut b, &base).await.is_ok() {
                let again = self.all_pods(&mut b, &base, "connection 2").await;
                self.compare(
                    "R6",
                    &baseline,
                    &again,
                    "connection 1",
                    "a new connection with the same snapshot",
                );
            }
            self.what_if(&mut b, &base).await;
            self.stale_replicate(&mut b).await;
        }
        // Connection C: the changed fixture in one full snapshot: answers as after the
        // deltas on connection 1 (R4).
        if let (Some(incremental), Some(mut c)) = (after_change, self.reconnect().await) {
            if self.full_snapshot(&mut c, &changed).await.is_ok() {
                let fresh = self.all_pods(&mut c, &changed, "a fresh snapshot").await;
                self.compare(
                    "R4",
                    &incremental,
                    &fresh,
                    "after the deltas",
                    "a full snapshot of the same state",
                );
            }
        }
        self.first_message_not_full().await;
        self.dropped_mid_call(&base, &baseline).await;
        self.trace_spans().await;
        Some(hs)
    }

    /// T1: one call per plugin carrying a `traceparent` of the kit's own; the spans
    /// they should parent are looked for at the end ([`Kit::trace_spans`]).
    async fn traced_calls(&mut self, c: &mut Conn, f: &Fixture) {
        let Some(pod) = f.probes.first() else {
            return;
        };
        if self.otlp.is_none() {
            return;
        }
        let Ok((cycle, g)) = c.start_cycle(pod) else {
            return;
        };
        let nodes = capped(f, c);
        let t = self.timeout;
        for p in c.hs.plugins.clone() {
            let (trace_id, span_id) = trace_ids(self.traced.len());
            let traceparent = format!("00-{trace_id}-{span_id}-01");
            let id = c.id();
            let (point, answered) = if has(&p, Ep::PreFilter) {
                let req = pb::PreFilterRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    traceparent,
                };
                ("PreFilter", c.pre_filter.call(id, req, t).await.is_ok())
            } else if has(&p, Ep::Filter) {
                let mut req = c.filter_request(&p.name, cycle, g, &nodes);
                req.traceparent = traceparent;
                ("Filter", c.filter(req).await.is_ok())
            } else if has(&p, Ep::Score) {
                let req = pb::ScoreRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    nodes: nodes.clone(),
                    normalize: true,
                    after_pre_score: false,
                    traceparent,
                };
                ("Score", c.score.call(id, req, t).await.is_ok())
            } else {
                continue;
            };
            if answered {
                self.traced.push((p.name.clone(), point, trace_id, span_id));
            }
        }
        let _ = c.end_cycle(cycle, false);
    }

    /// T1: waits (at most [`OTLP_WAIT`]) for a span under each traced call.
    async fn trace_spans(&mut self) {
        let Some((addr, collector)) = &self.otlp else {
            return;
        };
        if self.traced.is_empty() {
            return;
        }
        let deadline = tokio::time::Instant::now() + OTLP_WAIT;
        loop {
            let spans = collector.spans();
            let missing: Vec<String> = self
                .traced
                .iter()
                .filter(|(_, _, trace, span)| {
                    !spans
                        .iter()
                        .any(|s| s.trace_id == *trace && s.parent_span_id == *span)
                })
                .map(|(plugin, point, trace, span)| {
                    format!("plugin {plugin}: {point} call with traceparent 00-{trace}-{span}-01")
                })
                .collect();
            if missing.is_empty() {
                self.checks.ok("T1");
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                self.checks.fail(
                    "T1",
                    format!(
                        "no span under {} within {OTLP_WAIT:?} at the OTLP receiver on {addr} ({} spans received in all)",
                        missing.join("; "),
                        spans.len()
                    ),
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn reconnect(&mut self) -> Option<Conn> {
        match Conn::open(&self.target, self.timeout).await {
            Ok(c) => Some(c),
            Err(e) => {
                self.checks
                    .fail("R6", format!("a second connection failed: {e}"));
                None
            }
        }
    }

    async fn refuses_unknown_version(&mut self) {
        let mut c = match client(&self.target).await {
            Ok(c) => c,
            Err(e) => {
                self.checks.fail("H2", e);
                return;
            }
        };
        let r = handshake(&mut c, vec!["v0-conformance".into()], self.timeout).await;
        self.checks.check("H2", r.is_err(), || {
            format!(
                "offered only \"v0-conformance\", the sidecar answered {:?}",
                r.as_ref()
                    .map(|h| h.protocol_version.clone())
                    .unwrap_or_default()
            )
        });
    }

    fn check_handshake(&mut self, hs: &pb::HandshakeResponse) {
        let offered = offered();
        self.checks.check(
            "H1",
            hs.protocol_version == switchyard_proto::PROTOCOL_VERSION,
            || format!("chose protocol {:?}", hs.protocol_version),
        );
        for c in &hs.capabilities {
            self.checks.check("H1", offered.contains(c), || {
                format!("answered capability {c:?}, which was not offered")
            });
        }
        self.checks.check("H3", !hs.plugins.is_empty(), || {
            "declares no plugin".to_string()
        });
        let mut names = std::collections::HashSet::new();
        for p in &hs.plugins {
            let n = &p.name;
            self.checks
                .check("H3", !n.is_empty(), || "a plugin has no name".into());
            self.checks.check("H3", names.insert(n.clone()), || {
                format!("plugin {n:?} is declared twice")
            });
            for &e in &p.extension_points {
                self.checks.check(
                    "H3",
                    matches!(Ep::try_from(e), Ok(x) if x != Ep::Unspecified),
                    || format!("plugin {n:?}: unknown extension point {e}"),
                );
            }
            let has = |x: Ep| p.extension_points.contains(&(x as i32));
            self.checks
                .check("H3", !(p.node_local && has(Ep::PreFilter)), || {
                    format!("plugin {n:?} is node-local but declares PreFilter")
                });
            self.checks
                .check("H3", !p.normalize_score || has(Ep::Score), || {
                    format!("plugin {n:?} declares NormalizeScore without Score")
                });
            self.checks
                .check("H3", !p.pre_filter_extensions || has(Ep::PreFilter), || {
                    format!("plugin {n:?} declares AddPod/RemovePod without PreFilter")
                });
            if let Err(e) = crate::remote::convert::events(&p.events) {
                self.checks.fail("H3", format!("plugin {n:?}: {e}"));
            }
        }
    }

    async fn health(&mut self) {
        use switchyard_proto::health::health_check_response::ServingStatus;
        use switchyard_proto::health::{health_client::HealthClient, HealthCheckRequest};
        let ch =
            match crate::remote::client::channel(&self.target.endpoint, self.target.tls.as_ref())
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    self.checks.fail("HL1", e);
                    return;
                }
            };
        let mut h = HealthClient::new(ch);
        let r = tokio::time::timeout(
            self.timeout,
            h.check(HealthCheckRequest {
                service: String::new(),
            }),
        )
        .await;
        match r {
            Ok(Ok(r)) => {
                let s = r.into_inner().status;
                self.checks
                    .check("HL1", s == ServingStatus::Serving as i32, || {
                        format!("status {s}, not SERVING")
                    });
            }
            Ok(Err(s)) => self.checks.fail("HL1", switchyard_proto::status_text(&s)),
            Err(_) => self.checks.fail("HL1", "no answer".to_string()),
        }
    }

    async fn full_snapshot(&mut self, c: &mut Conn, f: &Fixture) -> Result<(), String> {
        let g = c.send(pb::replicate_request::Kind::Delta(f.full_snapshot()), true)?;
        let r = c.acked(g).await;
        match &r {
            Ok(()) => self.checks.ok("R1"),
            Err(e) => self.checks.fail("R1", e.clone()),
        }
        r
    }

    /// Sends the change's deltas: as one message with `more` when replicate-batch was
    /// negotiated (R5), else one by one.
    async fn apply_change(
        &mut self,
        c: &mut Conn,
        deltas: &[pb::SnapshotDelta],
    ) -> Result<(), String> {
        let batch = c.negotiated(switchyard_proto::CAPABILITY_REPLICATE_BATCH);
        let mut msgs: Vec<pb::ReplicateRequest> = deltas
            .iter()
            .map(|d| {
                c.generation += 1;
                pb::ReplicateRequest {
                    generation: c.generation,
                    kind: Some(pb::replicate_request::Kind::Delta(d.clone())),
                    ack: false,
                    more: vec![],
                }
            })
            .collect();
        let last = c.generation;
        if batch && msgs.len() > 1 {
            let rest = msgs.split_off(1);
            msgs[0].more = rest;
            if let Some(m) = msgs[0].more.last_mut() {
                m.ack = true;
            }
            self.checks.ok("R5");
        } else if let Some(m) = msgs.last_mut() {
            m.ack = true;
        }
        for m in msgs {
            c.replicate
                .send(m)
                .map_err(|_| "the Replicate stream is closed".to_string())?;
        }
        c.acked(last).await.inspect_err(|e| {
            if batch {
                self.checks.fail("R5", e.clone());
            }
        })
    }

    /// One cycle per probe pod, every declared extension point in the scheduler's
    /// order; validates each answer (P1, F1, F2, F4, SC1-SC3, X1, E1).
    async fn all_pods(&mut self, c: &mut Conn, f: &Fixture, run: &str) -> Vec<PodAnswers> {
        let mut out = Vec::new();
        for pod in &f.probes {
            match self.one_pod(c, f, pod).await {
                Ok(a) => out.push(a),
                Err(e) => {
                    self.checks
                        .fail("F1", format!("{run}: pod {}: {e}", pod.name));
                    out.push(PodAnswers::default());
                }
            }
        }
        out
    }

    async fn one_pod(
        &mut self,
        c: &mut Conn,
        f: &Fixture,
        pod: &pb::Pod,
    ) -> Result<PodAnswers, String> {
        let plugins = c.hs.plugins.clone();
        let t = self.timeout;
        let mut nodes = capped(f, c);
        for p in plugins.iter().filter(|p| has(p, Ep::PreEnqueue)) {
            let id = c.id();
            let r = c
                .pre_enqueue
                .call(
                    id,
                    pb::PreEnqueueRequest {
                        request_id: id,
                        plugin: p.name.clone(),
                        pod: Some(pod.clone()),
                    },
                    t,
                )
                .await;
            let ok = matches!(&r, Ok(r) if r.status.as_ref().is_none_or(|s| valid_code(s.code)));
            self.checks.check("E1", ok, || {
                format!("plugin {}: pod {}: {:?}", p.name, pod.name, r.err())
            });
        }
        let (cycle, g) = c.start_cycle(pod)?;
        let mut answers = PodAnswers::default();
        let mut skip_filter = std::collections::HashSet::new();
        let mut rejected = false;
        for p in plugins.iter().filter(|p| has(p, Ep::PreFilter)) {
            let r = c.pre_filter_call(&p.name, cycle, g).await?;
            let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
            let unknown: Vec<&String> = r
                .node_names
                .iter()
                .filter(|n| !f.nodes.iter().any(|x| &x.name == *n))
                .collect();
            self.checks.check("P1", r.generation == g && valid_code(code) && unknown.is_empty(), || {
                format!(
                    "plugin {} pod {}: generation {} (sent {g}), code {}, unknown nodes {unknown:?}",
                    p.name, pod.name, r.generation, code_name(code)
                )
            });
            let mut names = r.node_names.clone();
            names.sort();
            answers.pre_filter.insert(p.name.clone(), (code, names));
            // As the scheduler: Skip skips the plugin's Filter, a rejection ends the
            // cycle's filtering, node names narrow the nodes.
            if code == pb::Code::Skip as i32 {
                skip_filter.insert(p.name.clone());
            } else if code != pb::Code::Success as i32 {
                rejected = true;
            } else if r.has_node_names {
                nodes.retain(|id| {
                    f.nodes
                        .iter()
                        .any(|n| n.id == *id && r.node_names.contains(&n.name))
                });
            }
        }
        let filters: Vec<&pb::PluginInfo> = plugins
            .iter()
            .filter(|p| has(p, Ep::Filter) && !rejected && !skip_filter.contains(&p.name))
            .collect();
        for p in filters {
            let req = c.filter_request(&p.name, cycle, g, &nodes);
            let r = c.filter(req.clone()).await?;
            self.check_filter(p, pod, &req, &r);
            let a = FilterAnswer::of(&r);
            // Same input, same answer.
            let mut again = req.clone();
            again.request_id = c.id();
            let r2 = c.filter(again).await?;
            let a2 = FilterAnswer::of(&r2);
            self.checks.check("F2", a == a2, || {
                format!(
                    "plugin {} pod {}: Filter answered {a:?}, then {a2:?}",
                    p.name, pod.name
                )
            });
            // The same call answered node by node: the same answer.
            if !r.failure_groups.is_empty() {
                let mut listed = req.clone();
                listed.request_id = c.id();
                listed.group_failures = false;
                let r3 = c.filter(listed).await?;
                let a3 = FilterAnswer::of(&r3);
                self.checks.check("F8", a == a3, || {
                    format!(
                        "plugin {} pod {}: Filter answered {a:?} grouped, {a3:?} node by node",
                        p.name, pod.name
                    )
                });
            }
            answers.filter.insert(p.name.clone(), a);
        }
        let feasible: Vec<u32> = nodes
            .iter()
            .copied()
            .filter(|n| {
                answers
                    .filter
                    .values()
                    .all(|a| a.passing(&nodes).contains(n))
            })
            .collect();
        for p in plugins.iter().filter(|p| has(p, Ep::Score) && !rejected) {
            let passing = match answers.filter.get(&p.name) {
                Some(a) => a.passing(&nodes),
                None => nodes.clone(),
            };
            if passing.is_empty() {
                continue;
            }
            let s = self.score(c, p, pod, cycle, g, &passing).await?;
            if has(p, Ep::Filter) {
                self.score_ahead(c, p, pod, cycle, g, &nodes, &passing, &s)
                    .await?;
            }
            answers.score.insert(p.name.clone(), s);
        }
        self.binding_points(c, &plugins, pod, cycle, g, &f.nodes, &feasible)
            .await;
        // F4: once the CycleEnd is applied (acknowledged), the cycle's calls are refused.
        let end = c.end_cycle(cycle, true)?;
        c.acked(end).await?;
        if let Some(p) = plugins.iter().find(|p| has(p, Ep::Filter)) {
            let mut req = c.filter_request(&p.name, cycle, g, &nodes);
            if p.node_local {
                req.generation = end;
            }
            let r = c.filter(req).await?;
            self.checks.check("F4", r.error.is_some(), || {
                format!(
                    "plugin {} answered a Filter of cycle {cycle} after its CycleEnd: {:?}",
                    p.name,
                    FilterAnswer::of(&r)
                )
            });
        }
        Ok(answers)
    }

    fn check_filter(
        &mut self,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        req: &pb::FilterRequest,
        r: &pb::FilterResponse,
    ) {
        let who = format!("plugin {} pod {}", p.name, pod.name);
        if let Some(e) = &r.error {
            self.checks.fail(
                "F1",
                format!("{who}: the call failed: {}", e.reasons.join("; ")),
            );
            return;
        }
        let n = req.nodes.len();
        self.checks.check("F1", r.request_id == req.request_id, || {
            format!("{who}: request_id {} for {}", r.request_id, req.request_id)
        });
        self.checks.check("F1", r.generation == req.generation, || {
            format!(
                "{who}: answered at generation {} for a call at {}",
                r.generation, req.generation
            )
        });
        self.checks.check("F1", r.evaluated as usize == n, || {
            format!("{who}: evaluated {} of {n} nodes", r.evaluated)
        });
        self.check_grouping(&who, req, r);
        let mut seen = std::collections::HashSet::new();
        for (index, status) in switchyard_proto::failures(r) {
            let code = status.map(|s| s.code).unwrap_or(0);
            self.checks
                .check("F1", (index as usize) < n && seen.insert(index), || {
                    format!("{who}: failure index {index} (of {n} items, or repeated)")
                });
            self.checks.check(
                "F1",
                valid_code(code) && code != pb::Code::Success as i32,
                || {
                    format!(
                        "{who}: failure of item {index} with code {}",
                        code_name(code)
                    )
                },
            );
        }
    }

    /// F8: with `group_failures`, each distinct status travels once.
    fn check_grouping(&mut self, who: &str, req: &pb::FilterRequest, r: &pb::FilterResponse) {
        if !req.group_failures || (r.failures.is_empty() && r.failure_groups.is_empty()) {
            return;
        }
        self.checks.check("F8", r.failures.is_empty(), || {
            format!(
                "{who}: {} failures listed node by node although the call set group_failures",
                r.failures.len()
            )
        });
        let mut seen = Vec::new();
        let mut repeated = Vec::new();
        for g in &r.failure_groups {
            let s = g.status.clone().unwrap_or_default();
            if seen.contains(&s) {
                repeated.push(s);
            } else {
                seen.push(s);
            }
        }
        self.checks.check("F8", repeated.is_empty(), || {
            format!("{who}: several groups carry the same status {repeated:?}")
        });
    }

    async fn score(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[u32],
    ) -> Result<(i32, Vec<i64>), String> {
        let t = self.timeout;
        let who = format!("plugin {} pod {}", p.name, pod.name);
        let pre = has(p, Ep::PreScore);
        // Score with `normalize` twice (F2), then raw (for NormalizeScore), each after
        // its PreScore as the scheduler sends them.
        let mut results = Vec::new();
        for normalize in [true, true, false] {
            if pre {
                let id = c.id();
                let pr = pb::PreScoreRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    nodes: nodes.to_vec(),
                    traceparent: String::new(),
                };
                let r = c.pre_score.call(id, pr, t).await?;
                let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                self.checks
                    .check("SC1", valid_code(code) && r.generation == g, || {
                        format!(
                            "{who}: PreScore answered code {} at generation {}",
                            code_name(code),
                            r.generation
                        )
                    });
            }
            let id = c.id();
            let req = pb::ScoreRequest {
                request_id: id,
                plugin: p.name.clone(),
                cycle,
                generation: g,
                nodes: nodes.to_vec(),
                normalize,
                after_pre_score: pre,
                traceparent: String::new(),
            };
            results.push(c.score.call(id, req, t).await?);
        }
        let first = &results[0];
        let code = first.status.as_ref().map(|s| s.code).unwrap_or(0);
        let skipped = code == pb::Code::Skip as i32;
        let ok_code = code == pb::Code::Success as i32 || skipped;
        self.checks
            .check("SC1", ok_code && first.generation == g, || {
                format!(
                    "{who}: Score answered {} at generation {} (sent {g})",
                    code_name(code),
                    first.generation
                )
            });
        if ok_code && !skipped {
            self.checks
                .check("SC1", first.scores.len() == nodes.len(), || {
                    format!(
                        "{who}: {} scores for {} nodes",
                        first.scores.len(),
                        nodes.len()
                    )
                });
            let out: Vec<i64> = first
                .scores
                .iter()
                .copied()
                .filter(|s| !(0..=100).contains(s))
                .collect();
            self.checks.check("SC1", out.is_empty(), || {
                format!("{who}: normalized scores out of 0..100: {out:?}")
            });
        }
        let second = &results[1];
        self.checks.check(
            "F2",
            (second.status.clone(), &second.scores) == (first.status.clone(), &first.scores),
            || {
                format!(
                    "{who}: Score answered {:?}, then {:?}",
                    first.scores, second.scores
                )
            },
        );
        let raw = &results[2];
        if ok_code && !skipped {
            if p.normalize_score {
                let id = c.id();
                let nreq = pb::NormalizeScoreRequest {
                    request_id: id,
                    plugin: p.name.clone(),
                    cycle,
                    generation: g,
                    nodes: nodes.to_vec(),
                    scores: raw.scores.clone(),
                    traceparent: String::new(),
                };
                let n = c.normalize.call(id, nreq, t).await?;
                let got = if raw.normalized {
                    raw.scores.clone()
                } else {
                    n.scores.clone()
                };
                self.checks.check("SC2", got == first.scores, || {
                    format!(
                        "{who}: Score then NormalizeScore gave {got:?}, Score with normalize {:?}",
                        first.scores
                    )
                });
            } else {
                let out: Vec<i64> = raw
                    .scores
                    .iter()
                    .copied()
                    .filter(|s| !(0..=100).contains(s))
                    .collect();
                self.checks.check("SC1", out.is_empty(), || {
                    format!("{who}: raw scores out of 0..100 without NormalizeScore: {out:?}")
                });
            }
        }
        Ok((code, first.scores.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    async fn score_ahead(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[u32],
        passing: &[u32],
        score: &(i32, Vec<i64>),
    ) -> Result<(), String> {
        let mut req = c.filter_request(&p.name, cycle, g, nodes);
        req.score_first = passing.len() as u32;
        req.pre_score = has(p, Ep::PreScore);
        let r = c.filter(req).await?;
        let Some(ahead) = r.score else { return Ok(()) };
        let code = ahead.status.as_ref().map(|s| s.code).unwrap_or(0);
        let who = format!("plugin {} pod {}", p.name, pod.name);
        if code == pb::Code::Success as i32 {
            self.checks
                .check("SC3", ahead.scores == score.1 && ahead.normalized, || {
                    format!(
                        "{who}: scored ahead {:?} (normalized {}), Score gave {:?}",
                        ahead.scores, ahead.normalized, score.1
                    )
                });
        } else if code == pb::Code::Skip as i32 {
            self.checks
                .check("SC3", score.0 == pb::Code::Skip as i32, || {
                    format!("{who}: scoring ahead skipped, Score did not")
                });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn binding_points(
        &mut self,
        c: &mut Conn,
        plugins: &[pb::PluginInfo],
        pod: &pb::Pod,
        cycle: u64,
        g: u64,
        nodes: &[pb::Node],
        feasible: &[u32],
    ) {
        let Some(node) = feasible
            .first()
            .and_then(|id| nodes.iter().find(|n| n.id == *id))
            .or(nodes.first())
        else {
            return;
        };
        let t = self.timeout;
        for p in plugins {
            let who = format!("plugin {} pod {}", p.name, pod.name);
            let has = |x: Ep| p.extension_points.contains(&(x as i32));
            if has(Ep::Permit) {
                let r = cycle_request(c, p, cycle, g, &node.name);
                let id = r.request_id;
                match c.permit.call(id, r, t).await {
                    Ok(r) => {
                        let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                        let wait_ok = code != pb::Code::Wait as i32 || r.timeout_millis > 0;
                        self.checks.check("X1", valid_code(code) && wait_ok, || {
                            format!(
                                "{who}: Permit answered {} with timeout {} ms",
                                code_name(code),
                                r.timeout_millis
                            )
                        });
                        if code == pb::Code::Wait as i32 && wait_ok {
                            self.permit_decision(c, p, pod, r.timeout_millis).await;
                        }
                    }
                    Err(e) => self.checks.fail("X1", format!("{who}: Permit: {e}")),
                }
            }
            // In the scheduler's order: Reserve, PreBind, PostBind; Unreserve last (a
            // Reserve plugin must accept it whether or not the pod was bound).
            let points = [
                (Ep::Reserve, "Reserve"),
                (Ep::PreBind, "PreBind"),
                (Ep::PostBind, "PostBind"),
                (Ep::Reserve, "Unreserve"),
            ];
            for (point, name) in points {
                if !has(point) {
                    continue;
                }
                let r = cycle_request(c, p, cycle, g, &node.name);
                let id = r.request_id;
                let lane = match name {
                    "Reserve" => &mut c.reserve,
                    "PreBind" => &mut c.pre_bind,
                    "PostBind" => &mut c.post_bind,
                    _ => &mut c.unreserve,
                };
                match lane.call(id, r, t).await {
                    Ok(r) => {
                        let code = r.status.as_ref().map(|s| s.code).unwrap_or(0);
                        self.checks
                            .check("X1", valid_code(code) && r.request_id == id, || {
                                format!("{who}: {name} answered {}", code_name(code))
                            });
                    }
                    Err(e) => self.checks.fail("X1", format!("{who}: {name}: {e}")),
                }
            }
        }
    }

    /// X2: after a WAIT, a later decision on the Permit stream (request_id 0) names
    /// the waiting pod and the plugin that made it wait. None before the timeout is
    /// allowed (the timeout ends the wait); the kit waits for one at most
    /// [`PERMIT_DECISION_WAIT`].
    async fn permit_decision(
        &mut self,
        c: &mut Conn,
        p: &pb::PluginInfo,
        pod: &pb::Pod,
        timeout_millis: u32,
    ) {
        let who = format!("plugin {} pod {}", p.name, pod.name);
        // A plugin may wait for something the kit never brings (a whole gang): after
        // two waits with no decision, only decisions already in are looked at.
        let wait = match self.permit_waits_left {
            0 => Duration::from_millis(1),
            _ => Duration::from_millis(u64::from(timeout_millis)).min(PERMIT_DECISION_WAIT),
        };
        let Ok(r) = c.permit.recv(0, wait).await else {
            self.permit_waits_left = self.permit_waits_left.saturating_sub(1);
            return;
        };
        match &r.decision {
            None => self.checks.fail(
                "X2",
                format!("{who}: a Permit message with request_id 0 and no decision"),
            ),
            Some(d) => {
                self.checks
                    .check("X2", d.pod_uid == pod.uid && d.plugin == p.name, || {
                        format!(
                            "{who}: a decision for pod {:?} by plugin {:?}, while pod {:?} waits on {:?}",
                            d.pod_uid, d.plugin, pod.uid, p.name
                        )
                    });
            }
        }
    }

    async fn queue_keys(&mut self, c: &mut Conn) {
        let t = self.timeout;
        let plugins: Vec<pb::PluginInfo> =
            c.hs.plugins
                .iter()
                .filter(|p| has(p, Ep::QueueSort))
                .cloned()
                .collect();
        for p in plugins {
            for pod in self.fixture.probes.clone() {
                let mut keys = Vec::new();
                for _ in 0..2 {
                    let id = c.id();
                    let r = c
                        .queue_sort
                        .call(
                            id,
                            pb::QueueSortRequest {
                                request_id: id,
                                plugin: p.name.clone(),
                                pod: Some(pod.clone()),
                            },
                            t,
                        )
                        .await;
                    keys.push(r.map(|r| (r.sort_key, r.status.map(|s| s.code).unwrap_or(0))));
                }
                let who = format!("plugin {} pod {}", p.name, pod.name);
                match (&keys[0], &keys[1]) {
                    (Ok(a), Ok(b)) => {
                        self.checks.check("Q1", a.1 == 0, || {
                            format!("{who}: QueueSort answered {}", code_name(a.1))
                        });
                        self.checks.check("F2", a == b, || {
                            format!("{who}: QueueSort keys {:?} then {:?}", a.0, b.0)
                        });
                    }
                    (Err(e), _) | (_, Err(e)) => self.checks.fail("Q1", format!("{who}: {e}")),
                }
            }
        }
    }

    fn filter_plugins(c: &Conn) -> Vec<pb::PluginInfo> {
        c.hs.plugins
            .iter()
            .filter(|p| has(p, Ep::Filter))
            .cloned()
            .collect()
    }

    /// F3: the Filter goes out before the CycleStart it names; its answer must come
    /// after, at that generation, equal to the baseline.
    async fn waits_for_generation(&mut self, c: &mut Conn, f: &Fixture, baseline: &[PodAnswers]) {
        let nodes = capped(f, c);
        for p in Self::filter_plugins(c) {
            if has(&p, Ep::PreFilter) {
                // Its Filter needs the PreFilter's state: covered by the other plugins.
                continue;
            }
            let pod = &f.probes[0];
            let cycle = c.next_cycle;
            let g = c.generation + 1;
            let req = c.filter_request(&p.name, cycle, g, &nodes);
            let id = req.request_id;
            if let Err(e) = c.filter.send(req) {
                self.checks.fail("F3", e);
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Err(e) = c.start_cycle(pod) {
                self.checks.fail("F3", e);
                return;
            }
            match c.filter.recv(id, self.timeout).await {
                Ok(r) => {
                    let a = FilterAnswer::of(&r);
                    let want = baseline.first().and_then(|b| b.filter.get(&p.name));
                    self.checks.check("F3", r.generation == g && Some(&a) == want, || {
                        format!(
                            "plugin {}: a call sent before generation {g} was applied got {a:?} at generation {}, {want:?} expected",
                            p.name, r.generation
                        )
                    });
                }
                Err(e) => self.checks.fail("F3", format!("plugin {}: {e}", p.name)),
            }
            let _ = c.end_cycle(cycle, false);
        }
    }

    /// F6: two cycles started back to back, both Filters in flight at once.
    async fn concurrent_cycles(&mut self, c: &mut Conn, f: &Fixture, baseline: &[PodAnswers]) {
        if f.probes.len() < 2 {
            return;
        }
        let nodes = capped(f, c);
        for p in Self::filter_plugins(c) {
            if has(&p, Ep::PreFilter) {
                continue;
            }
            let started: Result<Vec<(u64, u64)>, String> =
                f.probes[..2].iter().map(|pod| c.start_cycle(pod)).collect();
            let Ok(started) = started else { return };
            let reqs: Vec<pb::FilterRequest> = started
                .iter()
                .map(|&(cy, g)| c.filter_request(&p.name, cy, g, &nodes))
                .collect();
            for r in &reqs {
                if c.filter.send(r.clone()).is_err() {
                    return;
                }
            }
            for (i, r) in reqs.iter().enumerate().rev() {
                match c.filter.recv(r.request_id, self.timeout).await {
                    Ok(reply) => {
                        let a = FilterAnswer::of(&reply);
                        let want = baseline.get(i).and_then(|b| b.filter.get(&p.name));
                        self.checks.check("F6", Some(&a) == want, || {
                            format!("plugin {} pod {}: {a:?} with another cycle in flight, {want:?} alone", p.name, f.probes[i].name)
                        });
                    }
                    Err(e) => self.checks.fail("F6", format!("plugin {}: {e}", p.name)),
                }
            }
            for (cy, _) in started {
                let _ = c.end_cycle(cy, false);
            }
        }
    }

    /// F7: every node-local Filter plugin's calls for several pods in one message.
    async fn filter_batch(&mut self, c: &mut Conn, f: &Fixture, baseline: &[PodAnswers]) {
        if c.filter_batch.is_none() {
            return;
        }
        let nodes = capped(f, c);
        let plugins: Vec<pb::PluginInfo> = Self::filter_plugins(c)
            .into_iter()
            .filter(|p| p.node_local)
            .collect();
        if plugins.is_empty() {
            return;
        }
        let pods: Vec<(usize, pb::Pod)> = f.probes.iter().cloned().enumerate().take(4).collect();
        let mut calls = Vec::new();
        let mut cycles = Vec::new();
        for (i, pod) in &pods {
            let Ok((cy, g)) = c.start_cycle(pod) else {
                return;
            };
            cycles.push(cy);
            for p in &plugins {
                calls.push((*i, p.name.clone(), c.filter_request(&p.name, cy, g, &nodes)));
            }
        }
        let id = c.id();
        let req = pb::FilterBatchRequest {
            request_id: id,
            calls: calls.iter().map(|(_, _, r)| r.clone()).collect(),
        };
        let t = self.timeout;
        let Some(lane) = c.filter_batch.as_mut() else {
            return;
        };
        match lane.call(id, req, t).await {
            Ok(r) => {
                self.checks.check("F7", r.replies.len() == calls.len(), || {
                    format!("{} replies for {} calls", r.replies.len(), calls.len())
                });
                for ((i, plugin, call), reply) in calls.iter().zip(&r.replies) {
                    let a = FilterAnswer::of(reply);
                    let want = baseline.get(*i).and_then(|b| b.filter.get(plugin));
                    self.checks.check(
                        "F7",
                        reply.request_id == call.request_id && Some(&a) == want,
                        || {
                            format!(
                            "plugin {plugin} pod {}: reply {} for call {}: {a:?}, alone {want:?}",
                            f.probes[*i].name, reply.request_id, call.request_id
                        )
                        },
                    );
                }
            }
            Err(e) => self.checks.fail("F7", e),
        }
        for cy in cycles {
            let _ = c.end_cycle(cy, false);
        }
    }

    /// F5: items with what-if deltas against a fresh snapshot holding the change.
    async fn what_if(&mut self, c: &mut Conn, f: &Fixture) {
        let plugins: Vec<pb::PluginInfo> = Self::filter_plugins(c)
            .into_iter()
            .filter(|p| p.node_local || p.pre_filter_extensions)
            .collect();
        if plugins.is_empty() || f.probes.len() < 2 {
            return;
        }
        // On the first node: its pods removed, and another probe pod added.
        let node = f.nodes[0].clone();
        let remove: Vec<String> = f
            .placed
            .iter()
            .filter(|p| p.node_name == node.name)
            .map(|p| p.uid.clone())
            .collect();
        let mut added = f.probes[f.probes.len() - 1].clone();
        added.node_name = node.name.clone();
        let delta = pb::NodeDelta {
            index: 0,
            remove_pods: remove.clone(),
            add_pods: vec![],
            add_pod_objects: vec![added.clone()],
        };
        let pod = f.probes[0].clone();
        let what_if = match self
            .filter_with(c, &plugins, &pod, &[node.id], Some(delta))
            .await
        {
            Ok(a) => a,
            Err(e) => {
                self.checks.fail("F5", e);
                return;
            }
        };
        let mut fresh = f.clone();
        fresh.placed.retain(|p| !remove.contains(&p.uid));
        fresh.placed.push(added);
        let Some(mut d) = self.reconnect().await else {
            return;
        };
        if self.full_snapshot(&mut d, &fresh).await.is_err() {
            return;
        }
        match self
            .filter_with(&mut d, &plugins, &pod, &[node.id], None)
            .await
        {
            Ok(want) => {
                for (name, a) in &what_if {
                    let w = want.get(name);
                    self.checks.check("F5", Some(a) == w, || {
                        format!("plugin {name} pod {} on {}: with a delta {a:?}, on a fresh snapshot {w:?}", pod.name, node.name)
                    });
                }
            }
            Err(e) => self.checks.fail("F5", e),
        }
    }

    /// One cycle for `pod`: PreFilter of every PreFilter plugin, then the Filter of
    /// `plugins` over `nodes` (one delta at most).
    async fn filter_with(
        &mut self,
        c: &mut Conn,
        plugins: &[pb::PluginInfo],
        pod: &pb::Pod,
        nodes: &[u32],
        delta: Option<pb::NodeDelta>,
    ) -> Result<BTreeMap<String, FilterAnswer>, String> {
        let (cycle, g) = c.start_cycle(pod)?;
        let mut skip = std::collections::HashSet::new();
        for p in
            c.hs.plugins
                .clone()
                .iter()
                .filter(|p| has(p, Ep::PreFilter))
        {
            let r = c.pre_filter_call(&p.name, cycle, g).await?;
            let code = r.status.map(|s| s.code).unwrap_or(0);
            if code != pb::Code::Success as i32 {
                skip.insert(p.name.clone());
            }
        }
        let mut out = BTreeMap::new();
        for p in plugins.iter().filter(|p| !skip.contains(&p.name)) {
            let mut req = c.filter_request(&p.name, cycle, g, nodes);
            req.deltas = delta.iter().cloned().collect();
            out.insert(p.name.clone(), FilterAnswer::of(&c.filter(req).await?));
        }
        c.end_cycle(cycle, false)?;
        Ok(out)
    }

    /// R2: a message two generations ahead must close the Replicate stream.
    async fn stale_replicate(&mut self, c: &mut Conn) {
        c.generation += 1; // skip one
        if c.send(
            pb::replicate_request::Kind::Delta(pb::SnapshotDelta::default()),
            true,
        )
        .is_err()
        {
            self.checks.fail(
                "R2",
                "the Replicate stream closed before the gap".to_string(),
            );
            return;
        }
        let closed = self.stream_closes(c).await;
        self.checks.check("R2", closed, || {
            format!(
                "generation {} followed {} and the stream stayed open",
                c.generation,
                c.generation - 2
            )
        });
    }

    /// Waits for the Replicate stream's end; false if it acknowledged instead or
    /// stayed open past the timeout.
    async fn stream_closes(&self, c: &mut Conn) -> bool {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            match tokio::time::timeout_at(deadline, c.acks.recv()).await {
                Err(_) => return false,
                Ok(None) | Ok(Some(Err(_))) => return true,
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    /// L2: the scheduler goes away with calls in flight (a cycle started, its Filter
    /// and every other call sent, nothing awaited): the sidecar must need no answer
    /// delivered, and a new connection must get the answers a fresh one got.
    async fn dropped_mid_call(&mut self, f: &Fixture, baseline: &[PodAnswers]) {
        let Some(pod) = f.probes.first() else {
            return;
        };
        if let Ok(mut c) = Conn::open(&self.target, self.timeout).await {
            let plugins = Self::filter_plugins(&c);
            if self.full_snapshot(&mut c, f).await.is_err() {
                return;
            }
            let Ok((cycle, g)) = c.start_cycle(pod) else {
                return;
            };
            let nodes = capped(f, &c);
            for p in &plugins {
                let req = c.filter_request(&p.name, cycle, g, &nodes);
                let _ = c.filter.send(req);
            }
            drop(c);
        }
        let Some(mut again) = (match Conn::open(&self.target, self.timeout).await {
            Ok(c) => Some(c),
            Err(e) => {
                self.checks.fail(
                    "L2",
                    format!(
                        "after a connection dropped with calls in flight, a new one failed: {e}"
                    ),
                );
                None
            }
        }) else {
            return;
        };
        if self.full_snapshot(&mut again, f).await.is_err() {
            return;
        }
        let answers = self
            .all_pods(&mut again, f, "after a dropped connection")
            .await;
        self.checks.ok("L2");
        self.compare(
            "L2",
            baseline,
            &answers,
            "connection 1",
            "a new connection after one dropped with calls in flight",
        );
    }

    /// R3: a fresh connection whose first Replicate message is a plain delta.
    async fn first_message_not_full(&mut self) {
        let Ok(mut c) = Conn::open(&self.target, self.timeout).await else {
            return;
        };
        if c.send(
            pb::replicate_request::Kind::Delta(pb::SnapshotDelta::default()),
            true,
        )
        .is_err()
        {
            return;
        }
        let closed = self.stream_closes(&mut c).await;
        self.checks.check("R3", closed, || {
            "a first message without `full` was accepted".into()
        });
    }

    fn compare(
        &mut self,
        id: &'static str,
        a: &[PodAnswers],
        b: &[PodAnswers],
        what_a: &str,
        what_b: &str,
    ) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            let pod = self
                .fixture
                .probes
                .get(i)
                .map(|p| p.name.clone())
                .unwrap_or_default();
            for (name, ax) in &x.filter {
                let by = y.filter.get(name);
                self.checks.check(id, Some(ax) == by, || {
                    format!("plugin {name} pod {pod}: Filter {ax:?} {what_a}, {by:?} on {what_b}")
                });
            }
            for (name, ax) in &x.score {
                let by = y.score.get(name);
                self.checks.check(id, Some(ax) == by, || {
                    format!("plugin {name} pod {pod}: Score {ax:?} {what_a}, {by:?} on {what_b}")
                });
            }
            for (name, ax) in &x.pre_filter {
                let by = y.pre_filter.get(name);
                self.checks.check(id, Some(ax) == by, || {
                    format!(
                        "plugin {name} pod {pod}: PreFilter {ax:?} {what_a}, {by:?} on {what_b}"
                    )
                });
            }
        }
    }
}

fn has(plugin: &pb::PluginInfo, p: Ep) -> bool {
    plugin.extension_points.contains(&(p as i32))
}

fn cycle_request(
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
        traceparent: String::new(),
    }
}

/// The fixture's node ids, at most the sidecar's batch limit.
fn capped(f: &Fixture, c: &Conn) -> Vec<u32> {
    let mut nodes = f.node_ids();
    if c.hs.max_batch_nodes > 0 {
        nodes.truncate(c.hs.max_batch_nodes as usize);
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_normalized_or_refused_with_the_forms() {
        assert_eq!(
            normalize_endpoint("/tmp/a.sock").unwrap(),
            "unix:///tmp/a.sock"
        );
        assert_eq!(
            normalize_endpoint("127.0.0.1:9000").unwrap(),
            "http://127.0.0.1:9000"
        );
        assert_eq!(normalize_endpoint("unix:///x").unwrap(), "unix:///x");
        assert_eq!(normalize_endpoint("https://x:1").unwrap(), "https://x:1");
        assert!(normalize_endpoint("nonsense")
            .unwrap_err()
            .contains("expected"));
    }

    #[test]
    fn clauses_are_unique_and_every_one_has_a_fix() {
        let mut ids = std::collections::HashSet::new();
        for c in CLAUSES {
            assert!(ids.insert(c.id), "{} twice", c.id);
            assert!(!c.fix.is_empty() && !c.title.is_empty());
        }
    }

    #[test]
    fn a_clause_fails_on_any_violation_and_is_skipped_when_never_exercised() {
        let mut k = Checks::default();
        k.ok("F1");
        k.check("F2", false, || "different".into());
        let o = k.outcomes();
        let get = |id: &str| o.iter().find(|x| x.clause == id).unwrap();
        assert_eq!(get("F1").verdict, Verdict::Pass);
        assert_eq!(get("F2").verdict, Verdict::Fail);
        assert!(get("F2").detail.contains("different") && get("F2").detail.contains("fix:"));
        assert_eq!(get("SC2").verdict, Verdict::Skip);
    }
}
