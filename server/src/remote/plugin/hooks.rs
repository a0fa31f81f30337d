//! Attempt boundaries over the wire for one endpoint: replicate the snapshot, then
//! start (or adopt a lookahead's) and end the sidecar's cycle; the cycles an attempt
//! holds, one per endpoint; and the Filter calls sent ahead for the queue's next pods.

use super::*;
use crate::framework::interface::uid_fingerprint;

/// A sidecar cycle this attempt started (or adopted from a lookahead).
#[derive(Clone, Copy)]
pub(super) struct RemoteCycle {
    pub(super) endpoint: usize,
    /// The generation its calls name.
    pub(super) generation: u64,
    /// The connection it lives on.
    pub(super) epoch: u64,
    /// `Snapshot::update_seq` of the attempt's snapshot, which the sidecar holds.
    pub(super) snapshot: u64,
    /// The pod's uid fingerprint (see `Endpoint::is_suspect`).
    pub(super) pod: u64,
}

/// The sidecar cycles of an attempt, one per endpoint.
#[derive(Clone, Default)]
pub(super) struct RemoteCycles(pub(super) SmallVec<[RemoteCycle; 2]>);

impl RemoteCycles {
    pub(super) fn of(state: &CycleState, endpoint: usize) -> Option<RemoteCycle> {
        state
            .read::<RemoteCycles>()
            .and_then(|rc| rc.0.iter().find(|c| c.endpoint == endpoint).copied())
    }

    pub(super) fn set(state: &mut CycleState, c: RemoteCycle) {
        let mut rc = state.read::<RemoteCycles>().cloned().unwrap_or_default();
        rc.0.retain(|x| x.endpoint != c.endpoint);
        rc.0.push(c);
        state.write(rc);
    }
}

/// A Filter sent ahead of its pod's attempt (see `Framework::lookahead`), kept in the
/// state that attempt begins with until its first Filter round.
pub(super) struct LookaheadCall {
    pub(super) plugin: Arc<str>,
    pub(super) epoch: u64,
    /// The batch: node ids, and each node's generation when it was sent.
    pub(super) nodes: Vec<(u32, u64)>,
    pub(super) ahead: Option<ScoreAhead>,
    pub(super) call: RemoteFilterCall,
    /// Sent in the attempt's own cycle, right behind its PreFilter, not ahead of it.
    pub(super) behind_pre_filter: bool,
    /// A lookahead for the nodes of the round without an answer kept for alike
    /// pods: asked for after those are taken.
    pub(super) partial: bool,
}

/// The lookahead calls of an attempt (shared by clones of its state: whichever Filter
/// comes first takes them).
#[derive(Clone, Default)]
pub(super) struct LookaheadCalls(pub(super) Arc<Mutex<SmallVec<[LookaheadCall; 1]>>>);

/// Attempt boundaries for one endpoint: replicate, then start or end the cycle.
pub struct EndpointHooks {
    ep: Endpoint,
    /// The attempt running is a suspect's (see `Endpoint::is_suspect`): nothing is
    /// sent ahead for the next pods meanwhile, so that if the sidecar drops the
    /// connection over this pod, no other pod's call is lost with it.
    suspect_running: std::sync::atomic::AtomicBool,
}

impl EndpointHooks {
    pub fn new(ep: Endpoint) -> Self {
        EndpointHooks {
            ep,
            suspect_running: Default::default(),
        }
    }

    /// Records this endpoint's cycle of the attempt: its calls name `generation`.
    pub(super) fn record(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        generation: u64,
        epoch: u64,
        snapshot: &Snapshot,
    ) {
        RemoteCycles::set(
            state,
            RemoteCycle {
                endpoint: self.ep.config().index,
                generation,
                epoch,
                snapshot: snapshot.update_seq(),
                pod: uid_fingerprint(&pod.uid),
            },
        );
    }
}

impl CycleHooks for EndpointHooks {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.ep.inner) as usize
    }

    fn cycle_start(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        profile: &str,
    ) {
        self.suspect_running.store(
            self.ep.is_suspect(uid_fingerprint(&pod.uid)),
            Ordering::Relaxed,
        );
        // Without a connection the calls of this attempt fail and the policy decides.
        let Ok(streams) = self.ep.streams_or_wait() else {
            return;
        };
        let idx = self.ep.config().index;
        // A cycle started by a lookahead on this connection is the attempt's cycle.
        let adopted = RemoteCycles::of(state, idx).is_some_and(|c| c.epoch == streams.epoch);
        let g = {
            let Ok(mut rep) = self.ep.inner.replicator.lock() else {
                return;
            };
            if rep.epoch != streams.epoch {
                rep.reset(streams.epoch);
            }
            if let Some(d) = rep.delta(snapshot) {
                let g = rep.next_generation();
                if !streams.replicate(pb::ReplicateRequest {
                    generation: g,
                    kind: Some(pb::replicate_request::Kind::Delta(d)),
                    ack: false,
                    more: Vec::new(),
                }) {
                    return;
                }
            }
            if adopted {
                // The sidecar has the pod since the lookahead; calls name the latest
                // generation, which node-local plugins accept and wait for.
                rep.generation
            } else {
                let Some(g) = send_cycle_start(&mut rep, &streams, state.cycle_id, pod, profile)
                else {
                    return;
                };
                g
            }
        };
        self.record(state, pod, g, streams.epoch, snapshot);
    }

    fn lookahead_start(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        profile: &str,
    ) -> bool {
        // A pod whose last Filter call here failed is asked alone in its attempt,
        // not batched with others (blast radius of a sidecar choking on one pod).
        if !self.ep.all_node_local()
            || self.suspect_running.load(Ordering::Relaxed)
            || self.ep.is_suspect(uid_fingerprint(&pod.uid))
        {
            return false;
        }
        let Ok(streams) = self.ep.streams() else {
            return false;
        };
        let g = {
            let Ok(mut rep) = self.ep.inner.replicator.lock() else {
                return false;
            };
            // Only a CycleStart goes out: the replica must hold this snapshot already,
            // so the current attempt's calls see no change.
            if rep.epoch != streams.epoch || !rep.is_synced(snapshot) {
                return false;
            }
            let Some(g) = send_cycle_start(&mut rep, &streams, state.cycle_id, pod, profile) else {
                return false;
            };
            g
        };
        self.record(state, pod, g, streams.epoch, snapshot);
        true
    }

    fn lookahead_pods(&self) -> usize {
        if self.ep.all_node_local() {
            self.ep.lookahead_pods()
        } else {
            0
        }
    }

    fn begin_lookahead_batch(&self) {
        if let Ok(streams) = self.ep.streams() {
            self.ep.begin_batch(&streams);
        }
    }

    fn end_lookahead_batch(&self) {
        self.ep.send_batch();
    }

    fn cycle_end(&self, state: &CycleState) {
        let Some(RemoteCycle { epoch, .. }) = RemoteCycles::of(state, self.ep.config().index)
        else {
            return;
        };
        let Ok(streams) = self.ep.streams() else {
            return;
        };
        if streams.epoch != epoch {
            return;
        }
        if let Ok(mut rep) = self.ep.inner.replicator.lock() {
            if rep.epoch != epoch {
                return;
            }
            let g = rep.next_generation();
            streams.replicate(pb::ReplicateRequest {
                generation: g,
                kind: Some(pb::replicate_request::Kind::CycleEnd(pb::CycleEnd {
                    cycle: state.cycle_id,
                })),
                ack: false,
                more: Vec::new(),
            });
        }
    }
}

/// Sends a `CycleStart` for `pod`; its generation, or None when the stream is closed.
pub(super) fn send_cycle_start(
    rep: &mut Replicator,
    streams: &Streams,
    cycle: u64,
    pod: &Arc<Pod>,
    profile: &str,
) -> Option<u64> {
    let g = rep.next_generation();
    rep.note_cycle_pod(pod);
    streams
        .replicate(pb::ReplicateRequest {
            generation: g,
            kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle,
                pod: Some(convert::pod(pod)),
                profile: profile.to_string(),
            })),
            ack: false,
            more: Vec::new(),
        })
        .then_some(g)
}
