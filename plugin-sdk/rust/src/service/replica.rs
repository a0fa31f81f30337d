//! Replication: applying the scheduler's Replicate stream (snapshot deltas, cycle
//! starts and ends) to the replica, and finding the cycle and replica a call names
//! once the replica has reached its generation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Streaming;

use super::{lock, read, write, CycleEntry, ReplyStream, Shared};
use crate::pb;
use crate::snapshot::{NodeInfo, Snapshot};
use crate::status::Status;

/// The replica's nodes for the ids of a call; an unknown id fails the call.
pub(super) fn nodes_by_id<'a>(
    replica: &'a Snapshot,
    ids: &[u32],
) -> Result<Vec<&'a NodeInfo>, Status> {
    ids.iter()
        .map(|id| {
            replica
                .node(*id)
                .ok_or_else(|| Status::error(format!("unknown node id {id}")))
        })
        .collect()
}

impl Shared {
    /// The Replicate stream: applies each message (and those in its `more`) in order,
    /// acknowledging those that ask; the first failure closes the stream.
    pub(super) fn replicate(
        shared: Arc<Shared>,
        mut inbound: Streaming<pb::ReplicateRequest>,
    ) -> ReplyStream<pb::ReplicateResponse> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut expect = None;
            loop {
                match inbound.message().await {
                    Ok(Some(mut first)) => {
                        let more = std::mem::take(&mut first.more);
                        let mut failed = None;
                        for msg in std::iter::once(first).chain(more) {
                            let (g, ack) = (msg.generation, msg.ack);
                            let r = if msg.more.is_empty() {
                                shared.apply(msg, &mut expect)
                            } else {
                                Err(format!(
                                    "generation {g}: a message inside `more` has `more`"
                                ))
                            };
                            if let Err(e) = r {
                                failed = Some(e);
                                break;
                            }
                            if ack {
                                let _ = tx.send(Ok(pb::ReplicateResponse {
                                    applied_generation: g,
                                }));
                            }
                        }
                        if let Some(e) = failed {
                            tracing::warn!(error = %e, "replication failed; closing the stream");
                            let _ = tx.send(Err(tonic::Status::failed_precondition(e)));
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "replication stream closed");
                        break;
                    }
                }
            }
        });
        Box::pin(UnboundedReceiverStream::new(rx))
    }

    /// The cycle a call names, once the replica has reached its generation. A call to
    /// a node-local plugin may name a generation after the cycle's start (`relaxed`):
    /// its answers depend only on the nodes it names, which the scheduler checks.
    pub(super) async fn cycle(
        &self,
        cycle: u64,
        generation: u64,
        relaxed: bool,
    ) -> Result<Arc<CycleEntry>, Status> {
        self.reached(generation).await?;
        let entry = lock(&self.cycles).get(&cycle).cloned();
        match entry {
            Some(e) if e.generation == generation || (relaxed && e.generation <= generation) => {
                Ok(e)
            }
            Some(e) => Err(Status::error(format!(
                "cycle {cycle} started at generation {}, not {generation}",
                e.generation
            ))),
            None => Err(Status::error(format!(
                "cycle {cycle} is unknown (never started, or already ended)"
            ))),
        }
    }

    /// Waits (bounded) until the replica has applied `generation`.
    pub(super) async fn reached(&self, generation: u64) -> Result<(), Status> {
        let mut rx = self.applied.subscribe();
        let ok = matches!(
            tokio::time::timeout(self.generation_wait, rx.wait_for(|&g| g >= generation)).await,
            Ok(Ok(_))
        );
        match ok {
            true => Ok(()),
            false => Err(Status::error(format!(
                "generation {generation} not reached within {:?} (replica at {})",
                self.generation_wait,
                *self.applied.borrow()
            ))),
        }
    }

    /// The replica for a scheduling-cycle call: it must still be at the cycle's
    /// generation, never a later one, unless the plugin is node-local (`relaxed`).
    pub(super) fn replica_at(
        &self,
        entry: &CycleEntry,
        relaxed: bool,
    ) -> Result<std::sync::RwLockReadGuard<'_, Snapshot>, Status> {
        let r = read(&self.replica);
        if !relaxed && r.generation() != entry.snapshot_generation {
            return Err(Status::error(format!(
                "the replica moved on to generation {} since cycle {} (at {}) started",
                r.generation(),
                entry.id,
                entry.snapshot_generation
            )));
        }
        Ok(r)
    }

    fn apply(&self, msg: pb::ReplicateRequest, expect: &mut Option<u64>) -> Result<(), String> {
        let g = msg.generation;
        let full = matches!(&msg.kind, Some(pb::replicate_request::Kind::Delta(d)) if d.full);
        match expect {
            None if !full => {
                return Err(format!(
                    "the first message of a Replicate stream must be a full snapshot (got generation {g})"
                ))
            }
            Some(e) if !full && *e != g => {
                return Err(format!("generation gap: expected {e}, got {g}"));
            }
            _ => {}
        }
        match msg.kind {
            Some(pb::replicate_request::Kind::Delta(d)) => {
                if full {
                    lock(&self.cycles).clear();
                    self.waiting.clear();
                }
                write(&self.replica).apply(g, d)?;
            }
            Some(pb::replicate_request::Kind::CycleStart(c)) => {
                let pod = Arc::new(c.pod.unwrap_or_default());
                write(&self.replica).note_cycle_pod(&pod);
                let entry = CycleEntry {
                    id: c.cycle,
                    pod,
                    profile: c.profile,
                    generation: g,
                    snapshot_generation: read(&self.replica).generation(),
                    states: self.plugins.iter().map(|_| RwLock::default()).collect(),
                    pre_scores: Mutex::new(HashMap::new()),
                    pre_score_done: Notify::new(),
                    pre_filters: Mutex::new(HashMap::new()),
                    pre_filter_done: Notify::new(),
                    reserves: Mutex::new(HashMap::new()),
                    reserve_done: Notify::new(),
                };
                lock(&self.cycles).insert(c.cycle, Arc::new(entry));
            }
            Some(pb::replicate_request::Kind::CycleEnd(c)) => {
                if let Some(e) = lock(&self.cycles).remove(&c.cycle) {
                    self.waiting.remove(&e.pod.uid);
                }
            }
            None => return Err(format!("generation {g}: empty Replicate message")),
        }
        *expect = Some(g + 1);
        self.applied.send_replace(g);
        Ok(())
    }
}
