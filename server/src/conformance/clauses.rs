//! The contract's clauses as the kit checks them, and the verdicts it records.

use super::*;

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
    Clause { id: "S2", title: "Every reply answers a call: the request_id of a call sent on that stream and not answered yet (request_id 0 only for Permit decisions)",
        fix: "send exactly one reply per request, echoing its request_id; never repeat or invent replies", unexercised: "" },
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
    Clause { id: "P2", title: "pre_filter_pod_only: a plugin declaring it gives each pod the same PreFilter verdict after the snapshot changes (a node relabelled, one added, one removed with its pods, a pod placed)",
        fix: "declare pre_filter_pod_only only when PreFilter's verdict and state read nothing but the pod's signed fields (not nodes, not other pods)", unexercised: "no plugin declares pre_filter_pod_only with PreFilter" },
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
    Clause { id: "SC4", title: "Scores by node label: a plugin declaring score_node_label answers a PreScore sent with no nodes with its table (values unique, one score each), and its Score is that table looked up by each node's label, normalized as declared",
        fix: "return label_scores from PreScore without reading its nodes; score a node table[node.labels[score_node_label]], 0 when absent", unexercised: "no plugin declares score_node_label" },
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

/// What the checks found, per clause.
#[derive(Default)]
pub(super) struct Checks {
    pub(super) exercised: HashMap<&'static str, usize>,
    pub(super) failures: HashMap<&'static str, Vec<String>>,
}

impl Checks {
    pub(super) fn ok(&mut self, id: &'static str) {
        *self.exercised.entry(id).or_default() += 1;
    }
    pub(super) fn fail(&mut self, id: &'static str, what: impl Into<String>) {
        self.ok(id);
        self.failures.entry(id).or_default().push(what.into());
    }
    /// Records `cond` for `id`, failing with `what()` when it does not hold.
    pub(super) fn check(
        &mut self,
        id: &'static str,
        cond: bool,
        what: impl FnOnce() -> String,
    ) -> bool {
        if cond {
            self.ok(id);
        } else {
            self.fail(id, what());
        }
        cond
    }
    pub(super) fn outcomes(&self) -> Vec<Outcome> {
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
