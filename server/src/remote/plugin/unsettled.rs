//! `permitInBindingCycle`: the Reserve and the Permit behind it go out together and
//! the scheduling cycle goes on without their reply; the binding cycle awaits it
//! ([`crate::framework::unsettled_permit`]). The verdict is judged as the
//! synchronous calls judge theirs, under the same failure policy.

use std::time::Duration;

use super::*;
use crate::framework::unsettled_permit::{UnsettledPermit, Verdict};
use crate::remote::client::AsyncPending;

impl RemotePlugin {
    /// Whether this attempt's Reserve and Permit may be left to the binding cycle:
    /// the endpoint asks for it, the sidecar evaluates a Permit sent behind its
    /// Reserve, and the framework says nothing else depends on the verdict.
    pub(super) fn may_leave_permit(&self, state: &CycleState) -> bool {
        state.permit_may_settle_later
            && self.ep().config().permit_in_binding_cycle
            && !self.absent(pb::ExtensionPoint::Permit)
            && self.ep().permits_after_reserve()
    }

    /// Sends Reserve and the Permit behind it, and leaves their verdict in the
    /// attempt's state; Success at once. A call that cannot go out fails here as
    /// [`Self::status_call`] would.
    pub(super) fn leave_reserve_and_permit(&self, state: &mut CycleState, node: &str) -> Status {
        let sent = (|| {
            let (cycle, g, streams) = self.cycle(state)?;
            let (reserve_span, tp) = self.call_trace(state, "Reserve", 1);
            let reserve = self.send_async(&streams, |id| {
                Outbound::Reserve(cycle_request(id, &self.meta.name, cycle, g, node, tp))
            })?;
            let (permit_span, tp) = self.call_trace(state, "Permit", 1);
            let permit = self.send_async(&streams, |id| {
                Outbound::Permit(pb::CycleRequest {
                    after_reserve: true,
                    ..cycle_request(id, &self.meta.name, cycle, g, node, tp)
                })
            })?;
            Ok(Sent {
                reserve,
                reserve_span,
                permit,
                permit_span,
                generation: g,
            })
        })();
        match sent {
            Ok(sent) => {
                let stats = &self.ep().inner.stats;
                stats.permit_behind_reserve.fetch_add(1, Ordering::Relaxed);
                stats
                    .permit_in_binding_cycle
                    .fetch_add(1, Ordering::Relaxed);
                let verdict = sent.verdict(self.meta.clone(), state.ignored.clone());
                state.write(UnsettledPermit::new(Box::pin(verdict)));
                Status::success()
            }
            Err(s) => match self.policy(Some(state), "Reserve", Err(s), Status::success) {
                Ok(s) | Err(s) => s,
            },
        }
    }

    /// Whether this attempt's Permit verdict was left to the binding cycle (then
    /// Permit here has nothing to do).
    pub(super) fn permit_left(&self, state: &CycleState) -> bool {
        state.read::<UnsettledPermit>().is_some()
    }

    fn send_async(
        &self,
        streams: &Streams,
        build: impl FnOnce(u64) -> Outbound,
    ) -> Result<AsyncPending, Status> {
        let id = self.ep().next_request_id();
        self.ep()
            .start_async_call(streams, id, build(id))
            .map_err(|e| self.meta.call_failed("send", e))
    }
}

/// The two calls on their way, with their spans (ended when judged).
struct Sent {
    reserve: AsyncPending,
    reserve_span: tracing::Span,
    permit: AsyncPending,
    permit_span: tracing::Span,
    generation: u64,
}

impl Sent {
    /// Reserve's outcome first: when it did not succeed the sidecar skips the Permit
    /// behind it, whose reply is then owed and dropped on arrival.
    async fn verdict(self, meta: Arc<policy::Meta>, ignored: IgnoredCalls) -> Verdict {
        let Sent {
            reserve,
            reserve_span,
            permit,
            permit_span,
            generation: g,
        } = self;
        let r = match reserve.wait().await {
            Ok(reply) => meta.status_reply(reply, g),
            Err(e) => Err(meta.call_failed("call", e)),
        };
        let s = match meta.apply_policy(Some(&ignored), "Reserve", r, Status::success) {
            Ok(s) | Err(s) => s,
        };
        record(&reserve_span, &s);
        if !s.is_success() {
            return Verdict::ReserveFailed(s);
        }
        let r = match permit.wait().await {
            Ok(reply) => meta.permit_reply(reply, g),
            Err(e) => Err(meta.call_failed("Permit", e)),
        };
        let (s, timeout) = match meta.apply_policy(Some(&ignored), "Permit", r, || {
            (Status::success(), Duration::ZERO)
        }) {
            Ok(x) => x,
            Err(s) => (s, Duration::ZERO),
        };
        record(&permit_span, &s);
        Verdict::Permit(s, timeout)
    }
}

fn record(span: &tracing::Span, s: &Status) {
    if !span.is_disabled() {
        span.record("status", tracing::field::debug(s.code()));
    }
}
