//! The `/metrics` page of `switchyard run`: what the layers recorded in
//! [`crate::telemetry::metrics`], plus what is read at scrape time from the queue and
//! the sidecar connections. It lives in the composition root because it reads the
//! layers that write the metrics; telemetry itself stays a leaf.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use crate::queue::Placement;
use crate::remote::client::EndpointStats;
use crate::remote::Endpoint;
use crate::scheduler::Scheduler;
use crate::telemetry::metrics::{
    labels, sample, API_ERRORS, REMOTE_CALL_DURATION, REMOTE_ERRORS, SCHEDULER,
};

/// The whole `/metrics` page: what was recorded, plus what is read at scrape time
/// from the queue and the sidecar connections.
pub fn render_all(sched: &Scheduler, endpoints: &[Endpoint]) -> String {
    let mut out = String::with_capacity(16 << 10);
    SCHEDULER.render(&mut out);

    let p = sched.queue.pending();
    let q = |name: &str, n: usize| (format!("queue=\"{name}\""), n as f64);
    sample(
        &mut out,
        "scheduler_pending_pods",
        "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
        "gauge",
        &[
            q("active", p.active),
            q("backoff", p.backoff),
            q("unschedulable", p.unschedulable),
            q("gated", p.gated),
        ],
    );

    let mut incoming: Vec<(String, f64)> = sched
        .queue
        .incoming_counts()
        .0
        .into_iter()
        .map(|((placement, event), n)| {
            let queue = match placement {
                Placement::Active => "active",
                Placement::Backoff => "backoff",
                Placement::Unschedulable => "unschedulable",
            };
            (
                labels(&["queue", "event"], &[queue.to_string(), event]),
                n as f64,
            )
        })
        .collect();
    incoming.sort_by(|a, b| a.0.cmp(&b.0));
    sample(
        &mut out,
        "scheduler_queue_incoming_pods_total",
        "Number of pods added to scheduling queues by event and queue type.",
        "counter",
        &incoming,
    );

    let mut by_plugin: BTreeMap<(String, String), usize> = BTreeMap::new();
    for p in sched.queue.unschedulable_pods() {
        for plugin in &p.unschedulable_plugins {
            *by_plugin
                .entry((plugin.to_string(), p.pod.spec.scheduler_name.to_string()))
                .or_default() += 1;
        }
    }
    let rows: Vec<(String, f64)> = by_plugin
        .into_iter()
        .map(|((plugin, profile), n)| {
            (labels(&["plugin", "profile"], &[plugin, profile]), n as f64)
        })
        .collect();
    sample(
        &mut out,
        "scheduler_unschedulable_pods",
        "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
        "gauge",
        &rows,
    );

    // Switchyard's own: the sidecar path.
    let per = |f: &dyn Fn(&EndpointStats) -> u64| -> Vec<(String, f64)> {
        endpoints
            .iter()
            .map(|e| {
                (
                    labels(&["endpoint"], &[e.config().endpoint.clone()]),
                    f(e.stats()) as f64,
                )
            })
            .collect()
    };
    sample(
        &mut out,
        "switchyard_remote_calls_total",
        "Calls made to plugin sidecars.",
        "counter",
        &per(&|s| s.calls.load(Relaxed)),
    );
    REMOTE_ERRORS.render(&mut out);
    API_ERRORS.render(&mut out);
    REMOTE_CALL_DURATION.render(&mut out);
    sample(
        &mut out,
        "switchyard_remote_replication_lag_generations",
        "How many snapshot generations a sidecar was behind the scheduler when it last acknowledged one (sampled about once a second).",
        "gauge",
        &per(&|s| s.replication_lag.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_lookahead_hits_total",
        "Filter answers sent ahead for the queue's next pod (node-local plugins) and used.",
        "counter",
        &per(&|s| s.lookahead_hits.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_alike_reused_total",
        "Filter rounds and Score calls answered, without a call, with a plugin's answers for an alike pod (same signature) on unchanged nodes.",
        "counter",
        &per(&|s| s.alike_reused.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_lookahead_misses_total",
        "Filter answers sent ahead and dropped: the next attempt was another pod, or its first round named other or changed nodes.",
        "counter",
        &per(&|s| s.lookahead_misses.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_reconnects_total",
        "Times a sidecar connection was re-established.",
        "counter",
        &per(&|s| s.reconnects.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_sent_bytes_total",
        "gRPC message bytes sent to sidecars, replication included.",
        "counter",
        &per(&|s| s.bytes_sent.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_received_bytes_total",
        "gRPC message bytes received from sidecars.",
        "counter",
        &per(&|s| s.bytes_received.load(Relaxed)),
    );
    sample(
        &mut out,
        "switchyard_remote_connected",
        "1 while the sidecar's connection is up and its handshake done.",
        "gauge",
        &endpoints
            .iter()
            .map(|e| {
                (
                    labels(&["endpoint"], &[e.config().endpoint.clone()]),
                    if e.streams().is_ok() { 1.0 } else { 0.0 },
                )
            })
            .collect::<Vec<_>>(),
    );
    out
}
