//! A PreFilter sent without waiting for its outcome (`start_pre_filter`): the call
//! travels while the scheduler's own PreFilter and Filter plugins run, and its
//! outcome is taken when the plugin's Filter reply is read, or when the framework
//! confirms the PreFilter phase after Filter (and redoes the phase, without
//! starting anything early, if the outcome is not a plain Success).

use super::*;

/// One started PreFilter: shared by the attempt's state and the plugin's Filter
/// calls, which read its outcome before their own reply.
#[derive(Clone)]
pub(super) struct StartedPreFilter {
    slot: Arc<Mutex<Started>>,
    meta: Arc<Meta>,
    /// Where the policy notes a failure skipped under `Ignore` (the attempt's).
    ignored: IgnoredCalls,
}

enum Started {
    Sent {
        pending: Pending,
        g: u64,
    },
    Done((Option<PreFilterResult>, Status)),
    /// Only while the reply is awaited.
    Waiting,
}

/// A PreFilter reply as the plugin's outcome; an error status is a plugin failure.
pub(super) fn pre_filter_reply(
    meta: &Meta,
    reply: Reply,
    g: u64,
) -> Result<(Option<PreFilterResult>, Status), Status> {
    match reply {
        Reply::PreFilter(r) => {
            meta.check_generation(r.generation, g)?;
            let s = convert::status_from_pb(r.status.as_ref());
            if s.code() == Code::Error {
                return Err(meta.plugin_failed("PreFilter failed", s.message()));
            }
            let res = r.has_node_names.then(|| {
                PreFilterResult::nodes(r.node_names.iter().map(|n| Arc::from(n.as_str())))
            });
            Ok((res, s))
        }
        other => Err(meta.unexpected(other)),
    }
}

/// The failure policy on a PreFilter outcome: ignoring a failed PreFilter skips the
/// plugin's Filter too.
pub(super) fn pre_filter_policy(
    meta: &Meta,
    ignored: &IgnoredCalls,
    r: Result<(Option<PreFilterResult>, Status), Status>,
) -> (Option<PreFilterResult>, Status) {
    match r {
        Ok(x) => x,
        Err(s) if s.code() == Code::Error && meta.policy() == FailurePolicy::Ignore => {
            meta.ignored(ignored, "PreFilter", &s);
            (None, Status::skip())
        }
        Err(s) => (None, s),
    }
}

impl StartedPreFilter {
    /// The outcome, waiting for the reply the first time it is asked for.
    pub(super) fn outcome(&self) -> (Option<PreFilterResult>, Status) {
        let Ok(mut slot) = self.slot.lock() else {
            return (
                None,
                Status::error("a started PreFilter's outcome was lost"),
            );
        };
        let done = match std::mem::replace(&mut *slot, Started::Waiting) {
            Started::Done(d) => d,
            Started::Sent { pending, g } => {
                let r = pending
                    .wait()
                    .map_err(|e| self.meta.call_failed("PreFilter", e))
                    .and_then(|reply| pre_filter_reply(&self.meta, reply, g));
                pre_filter_policy(&self.meta, &self.ignored, r)
            }
            Started::Waiting => (
                None,
                Status::error("a started PreFilter's outcome was lost"),
            ),
        };
        *slot = Started::Done(done.clone());
        done
    }

    /// Whether the outcome is in (asking for it does not wait).
    pub(super) fn is_done(&self) -> bool {
        self.slot
            .lock()
            .map_or(true, |s| matches!(*s, Started::Done(_)))
    }

    /// Whether the PreFilter succeeded (waiting for it): a Filter evaluated behind
    /// one that did not is not the plugin's verdict.
    pub(super) fn succeeded(&self) -> bool {
        self.outcome().1.is_success()
    }
}

impl RemotePlugin {
    /// This attempt's started PreFilter of this plugin, if any.
    pub(super) fn started(&self, state: &CycleState) -> Option<StartedPreFilter> {
        ByPlugin::<StartedPreFilter>::get(state, &self.meta.name)
    }

    /// Sends this attempt's PreFilter (`traceparent`: its span's); the call and the
    /// generation it names.
    pub(super) fn send_pre_filter(
        &self,
        state: &CycleState,
        traceparent: String,
    ) -> Result<(Pending, u64), Status> {
        let (cycle, g, streams) = self.cycle(state)?;
        let req = |id| {
            Outbound::PreFilter(pb::PreFilterRequest {
                request_id: id,
                plugin: self.meta.name.to_string(),
                cycle,
                generation: g,
                traceparent,
            })
        };
        self.send(&streams, req).map(|p| (p, g))
    }

    /// Sends the PreFilter (and the first Filter round behind it, as `pre_filter`
    /// does) and keeps the call in the attempt's state. A PreFilter the lookahead
    /// already sent for this attempt (a plugin whose PreFilter reads only the pod)
    /// is the attempt's: nothing more goes out.
    pub(super) fn start_remote_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> bool {
        if self.started(state).is_some() {
            return true;
        }
        if self.keep_pre_filter_sent(state) {
            self.filter_behind_pre_filter(state, pod, snapshot);
        }
        true
    }

    /// Sends this attempt's PreFilter and keeps it in the state (its outcome, an
    /// error under the failure policy, if it could not be sent); whether it went out.
    pub(super) fn keep_pre_filter_sent(&self, state: &mut CycleState) -> bool {
        let (_span, traceparent) = self.call_trace(state, "PreFilter", 0);
        let sent = self.send_pre_filter(state, traceparent);
        let sent_ok = sent.is_ok();
        let slot = match sent {
            Ok((pending, g)) => Started::Sent { pending, g },
            Err(s) => Started::Done(pre_filter_policy(&self.meta, &state.ignored, Err(s))),
        };
        let started = StartedPreFilter {
            slot: Arc::new(Mutex::new(slot)),
            meta: self.meta.clone(),
            ignored: state.ignored.clone(),
        };
        // Kept before a Filter round behind it is sent, which reads it.
        ByPlugin::set(state, &self.meta.name, started);
        sent_ok
    }
}
