//! Trace context: calls carrying a traceparent, and the spans the sidecar exports over OTLP (T1).

use super::*;

/// How long the kit waits for the sidecar to export the spans of its traced calls
/// (T1); batching exporters send every 5 s by default.
pub(super) const OTLP_WAIT: Duration = Duration::from_secs(10);

/// A W3C trace id and span id (hex) for the kit's `n`th traced call: random enough
/// to tell runs apart, never all zero.
pub(super) fn trace_ids(n: usize) -> (String, String) {
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

impl Kit {
    /// T1: one call per plugin carrying a `traceparent` of the kit's own; the spans
    /// they should parent are looked for at the end ([`Kit::trace_spans`]).
    pub(super) async fn traced_calls(&mut self, c: &mut Conn, f: &Fixture) {
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
    pub(super) async fn trace_spans(&mut self) {
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
}
