//! The kit: one connection after another, every clause in order (`run_all`), each
//! family of clauses in its own file.

mod binding;
mod connection;
mod filter;
mod replication;
mod score;
mod trace;

use super::*;
use filter::PodAnswers;

/// How long the kit waits for a Permit decision after a WAIT (X2).
pub(super) const PERMIT_DECISION_WAIT: Duration = Duration::from_secs(1);

pub(super) struct Kit {
    /// The OTLP receiver the sidecar exports its spans to (T1).
    pub(super) otlp: Option<(
        std::net::SocketAddr,
        crate::telemetry::otlp_receiver::Collector,
    )>,
    /// Calls sent with a `traceparent`: plugin, extension point, trace id, span id.
    pub(super) traced: Vec<(String, &'static str, String, String)>,
    /// Waits for a Permit decision the kit still spends before it stops waiting.
    pub(super) permit_waits_left: u32,
    pub(super) checks: Checks,
    /// The first connection failed: nothing else could be checked.
    pub(super) unreachable: bool,
    pub(super) fixture: Fixture,
    pub(super) target: Target,
    pub(super) timeout: Duration,
}

impl Kit {
    /// Every check in order; returns the handshake when the sidecar could be reached.
    pub(super) async fn run_all(&mut self) -> Option<pb::HandshakeResponse> {
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
        if let Some(after) = &after_change {
            self.pre_filter_pod_only(&hs, &base, &baseline, after);
        }
        let broken = a.broken_streams();
        self.checks
            .check("S1", broken.is_empty(), || broken.join("; "));
        // Every call above was answered or given up on; a moment for extra replies.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let strays = a.stray_replies();
        self.checks
            .check("S2", strays.is_empty(), || strays.join("; "));
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

    fn filter_plugins(c: &Conn) -> Vec<pb::PluginInfo> {
        c.hs.plugins
            .iter()
            .filter(|p| has(p, Ep::Filter))
            .cloned()
            .collect()
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
