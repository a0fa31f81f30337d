//! Filter: a pod against a batch of nodes (in parallel for big batches), with the
//! what-if deltas of preemption dry runs and nominated pods applied on a fork of the
//! node and the plugin's state, and FilterBatch, several pods' Filter calls in one
//! message (the lookahead rounds for node-local plugins). A Filter call may ask for
//! the passing nodes' scores too (score-ahead, in `score`).

use std::sync::Arc;

use rayon::prelude::*;

use super::replica::nodes_by_id;
use super::{call_span, read, CycleEntry, Shared};
use crate::pb;
use crate::plugin::{Cycle, FilterPlugin, PreFilterPlugin};
use crate::snapshot::NodeInfo;
use crate::state::CycleState;
use crate::status::Status;

impl Shared {
    pub(super) async fn filter(&self, req: pb::FilterRequest) -> pb::FilterResponse {
        let mut out = pb::FilterResponse {
            request_id: req.request_id,
            generation: req.generation,
            ..Default::default()
        };
        match self.filter_batch(&req).await {
            Ok((failures, ahead)) => {
                out.evaluated = req.nodes.len() as u32;
                if req.group_failures {
                    out.failure_groups = switchyard_proto::group_failures(failures);
                } else {
                    out.failures = failures;
                }
                out.score = ahead;
            }
            Err(s) => out.error = Some(s.to_pb()),
        }
        out
    }

    /// The calls of a `FilterBatch` message, each answered as it would be alone on
    /// the Filter stream (with its own span), in order.
    pub(super) async fn filter_many(&self, req: pb::FilterBatchRequest) -> pb::FilterBatchResponse {
        use tracing::Instrument;
        // One bounded wait for the latest generation the calls name: a replica that
        // never gets there fails them all at once, not one wait after another.
        let latest = req.calls.iter().map(|c| c.generation).max().unwrap_or(0);
        let missed = self.reached(latest).await.err();
        let mut replies = Vec::with_capacity(req.calls.len());
        for call in req.calls {
            replies.push(match &missed {
                Some(s) => pb::FilterResponse {
                    request_id: call.request_id,
                    generation: call.generation,
                    error: Some(s.to_pb()),
                    ..Default::default()
                },
                None => {
                    let span = call_span("Filter", &call);
                    self.filter(call).instrument(span).await
                }
            });
        }
        pb::FilterBatchResponse {
            request_id: req.request_id,
            replies,
        }
    }

    /// Waits for this cycle's PreFilter of plugin `idx` (sent just before the Filter).
    async fn pre_filter_outcome(&self, entry: &CycleEntry, idx: usize) -> Result<Status, Status> {
        self.outcome(
            entry,
            &entry.pre_filters,
            &entry.pre_filter_done,
            idx,
            "Filter named a PreFilter",
        )
        .await
    }

    async fn filter_batch(
        &self,
        req: &pb::FilterRequest,
    ) -> Result<(Vec<pb::NodeStatus>, Option<pb::ScoreAhead>), Status> {
        let (idx, plugin) = self.plugin(&req.plugin)?;
        let entry = self
            .cycle(
                req.cycle,
                req.generation,
                plugin.answers_at_named_generation(),
            )
            .await?;
        let f = plugin
            .as_filter()
            .ok_or_else(|| Status::error(format!("plugin {:?} has no Filter", req.plugin)))?;
        if req.after_pre_filter {
            let s = self.pre_filter_outcome(&entry, idx).await?;
            if !s.is_success() {
                return Err(Status::error(format!(
                    "Filter sent behind a PreFilter that returned {:?}",
                    s.code
                )));
            }
        }
        let pf = plugin.as_pre_filter().filter(|p| p.has_extensions());
        let replica = self.replica_at(&entry, plugin.answers_at_named_generation())?;
        let state = read(&entry.states[idx]);
        let cycle = entry.view(&replica);
        let nodes = nodes_by_id(&replica, &req.nodes)?;
        let mut deltas: Vec<Option<&pb::NodeDelta>> = vec![None; nodes.len()];
        for d in &req.deltas {
            let slot = deltas.get_mut(d.index as usize).ok_or_else(|| {
                Status::error(format!(
                    "delta for item {} of a batch of {}",
                    d.index,
                    nodes.len()
                ))
            })?;
            *slot = Some(d);
        }
        let eval = |i: usize| -> Status {
            match deltas[i] {
                None => f.filter(&cycle, &state, nodes[i]),
                Some(d) => filter_with_delta(f, pf, &cycle, &state, nodes[i], d),
            }
        };
        let failures: Vec<pb::NodeStatus> =
            if nodes.len() >= self.parallel_threshold && self.parallel_threshold > 0 {
                (0..nodes.len())
                    .into_par_iter()
                    .with_min_len(self.parallel_threshold / 2)
                    .filter_map(|i| failure(i, eval(i)))
                    .collect()
            } else {
                (0..nodes.len())
                    .filter_map(|i| failure(i, eval(i)))
                    .collect()
            };
        let ahead = if req.score_first > 0 {
            self.score_ahead(req, &**plugin, &cycle, &state, &nodes, &deltas, &failures)
        } else {
            None
        };
        Ok((failures, ahead))
    }
}

fn failure(i: usize, s: Status) -> Option<pb::NodeStatus> {
    (!s.is_success()).then(|| pb::NodeStatus {
        index: i as u32,
        status: Some(s.to_pb()),
    })
}

/// Filter on a what-if copy of the node: pods removed and added, the plugin's state
/// forked and updated by its RemovePod/AddPod (in that order, as upstream's dry run).
fn filter_with_delta(
    f: &dyn FilterPlugin,
    pf: Option<&dyn PreFilterPlugin>,
    cycle: &Cycle,
    base: &CycleState,
    node: &NodeInfo,
    d: &pb::NodeDelta,
) -> Status {
    let mut ni = node.clone();
    let mut state = base.clone();
    for uid in &d.remove_pods {
        let Some(p) = ni.remove_pod(uid) else {
            return Status::error(format!(
                "delta removes pod {uid}, which is not on node {}",
                node.name()
            ));
        };
        if let Some(pf) = pf {
            let s = pf.remove_pod(cycle, &mut state, &p, &ni);
            if !s.is_success() {
                return Status::error(format!("RemovePod: {}", s.message()));
            }
        }
    }
    let adds = d
        .add_pods
        .iter()
        .map(|uid| {
            cycle
                .snapshot
                .pod(uid)
                .map(|p| (**p).clone())
                .ok_or_else(|| {
                    Status::error(format!(
                        "delta adds pod {uid}, which the replica does not hold"
                    ))
                })
        })
        .chain(d.add_pod_objects.iter().map(|p| Ok(p.clone())));
    for p in adds {
        let mut p = match p {
            Ok(p) => p,
            Err(s) => return s,
        };
        p.node_name = ni.node.name.clone();
        let p = Arc::new(p);
        ni.pods.push(p.clone());
        if let Some(pf) = pf {
            let s = pf.add_pod(cycle, &mut state, &p, &ni);
            if !s.is_success() {
                return Status::error(format!("AddPod: {}", s.message()));
            }
        }
    }
    f.filter(cycle, &state, &ni)
}
