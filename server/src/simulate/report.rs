//! The simulation report: where every pod went (or why not), what was evicted, a
//! summary, and the invariants checked on the final state. Printed as a table or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::Measured;
use crate::cluster::embedded::EmbeddedCluster;
use crate::config::SchedulerConfig;
use crate::scheduler::Scheduler;

#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    /// The FailedScheduling message, when the pod is not bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_node: Option<String>,
    /// Remote plugin calls that failed and were skipped under `failurePolicy: Ignore`
    /// in the attempt that decided this outcome: the placement (or refusal) was made
    /// without those plugins' say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_plugins: Option<String>,
    /// The pod's latest events as `Reason: message` (with `--events`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
}

/// A PersistentVolumeClaim at the end of the run.
#[derive(Serialize, Clone, Debug)]
pub struct ClaimReport {
    /// `namespace/name`.
    pub claim: String,
    /// `Bound`, `Pending` or `Lost`.
    pub phase: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// The node the volume is pinned to, when its affinity names one hostname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The volume was provisioned for the claim (not a static PV).
    pub provisioned: bool,
}

#[derive(Serialize, Clone, Debug)]
pub struct EvictedReport {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    pub preemptor: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct Summary {
    pub bound: usize,
    pub unschedulable: usize,
    pub evicted: usize,
    pub attempts: u64,
    pub pods_per_second: f64,
    pub attempt_latency_ms: Latency,
    /// Pods left pending because their last attempt failed with an error (a plugin
    /// that failed under `failurePolicy: Fail`, an unreachable sidecar), not because
    /// they do not fit: PodScheduled=False with reason `SchedulerError`.
    pub scheduler_errors: usize,
    /// Pods for a schedulerName no profile serves: left alone.
    pub ignored: usize,
    /// Pods whose outcome was decided with a remote plugin's call skipped under
    /// `failurePolicy: Ignore` (see each pod's `skippedPlugins`).
    pub skipped_plugin_pods: usize,
    pub nodes: usize,
    pub seconds: f64,
    /// The process's peak resident memory so far (Linux; 0 elsewhere), in MiB.
    pub peak_rss_mib: f64,
}

#[derive(Serialize, Clone, Debug)]
pub struct MeasuredReport {
    pub workload: String,
    pub pods: usize,
    /// From the start of the measured op to its end.
    pub seconds: f64,
    /// From the first measured pod bound to the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding_seconds: Option<f64>,
    /// As upstream's throughput collector has it: from the first measured pod bound to
    /// the last (pods queued ahead of the measured ones are not the measured pods'
    /// time), else over the whole stretch.
    pub pods_per_second: f64,
    /// Upstream scheduler_perf's floor for this workload (pods/s), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_threshold: Option<f64>,
    /// CPU time over the measured stretch: the scheduler (of which its sidecar
    /// connection threads) and the sidecars it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<super::cpu::CpuSeconds>,
}

/// Upstream's throughput collector starts at its first sample with a measured pod
/// scheduled and skips that sample: the pods bound after the first, over the time from
/// the first to the last. Too few pods or too short a span for that: over the stretch.
fn measured_rate(m: &super::Measured) -> f64 {
    match m.binding_seconds {
        Some(span) if m.pods >= 2 && span >= 0.01 => (m.pods - 1) as f64 / span,
        _ => m.pods as f64 / m.seconds.max(1e-9),
    }
}

/// Properties that must hold after every run.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Invariants {
    /// Nodes whose allocatable is exceeded by the pods on them (must be empty).
    pub overcommitted_nodes: Vec<String>,
    /// Bind calls that hit a pod already bound (must be 0).
    pub double_binds: u64,
    /// Every pod handed to the scheduler is bound, evicted, or pending with a recorded
    /// reason (bound + pending + evicted = submitted).
    pub accounted: bool,
    /// Evictions of a victim whose priority is not below its preemptor's (must be empty).
    pub bad_victims: Vec<String>,
    /// Pods still assumed in the scheduler's cache once the run settled: a failed
    /// attempt that was not rolled back (must be 0).
    pub assumed_pods: usize,
    /// Every rule the scheduler broke, recomputed from the input objects (see
    /// `switchyard::invariants`): lost pods, over-committed nodes, host port conflicts,
    /// bound pods failing an ordering-independent Filter of their profile.
    pub violations: Vec<crate::invariants::Violation>,
    /// The input's own faults (nodes over-committed by pods pinned with spec.nodeName):
    /// not the scheduler's, reported as bad input.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub input_errors: Vec<crate::invariants::Violation>,
    pub ok: bool,
}

/// What one sidecar endpoint cost over the run.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct RemoteReport {
    pub endpoint: String,
    pub plugins: Vec<String>,
    pub calls: u64,
    pub errors: u64,
    pub reconnects: u64,
    /// gRPC message bytes, replication included.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Filter answers sent ahead for the next pod and used, or dropped and asked again.
    pub lookahead_hits: u64,
    pub lookahead_misses: u64,
    /// Filter rounds and Score calls answered with answers reused for alike pods
    /// (plugins that declare pod signatures), without a call.
    pub alike_reused: u64,
    /// Filter rounds answered partly from alike pods' answers, a call asking for the
    /// round's changed nodes only (plugins whose answers read the node's pods).
    #[serde(default)]
    pub alike_partly: u64,
    /// First Filter rounds sent right behind their PreFilter (one round trip for
    /// both) and used.
    #[serde(default)]
    pub filter_behind_pre_filter: u64,
    /// Permit calls sent right behind their Reserve (one round trip for both) and
    /// used.
    #[serde(default)]
    pub permit_behind_reserve: u64,
    /// Of those, the ones awaited in the binding cycle (`permitInBindingCycle`).
    #[serde(default)]
    pub permit_in_binding_cycle: u64,
    /// Score rounds scored by the scheduler from a PreScore's scores by node label
    /// (no Score call).
    #[serde(default)]
    pub label_scored: u64,
    /// Calls of a `FilterBatch` message that failed as a whole, asked again alone.
    #[serde(default)]
    pub batch_retried_apart: u64,
    /// Replies to no outstanding call (late after a timeout, or a flooding sidecar).
    pub stray_replies: u64,
    /// The last call error or connection loss (plugin, extension point, why).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// Why the connection was last lost, if it was.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_disconnect: String,
}

impl RemoteReport {
    pub fn of(e: &crate::remote::Endpoint) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        let s = e.stats();
        RemoteReport {
            endpoint: e.config().endpoint.clone(),
            plugins: e
                .handshake()
                .map(|h| h.plugins.into_iter().map(|p| p.name).collect())
                .unwrap_or_else(|| e.config().plugins.clone()),
            calls: s.calls.load(Relaxed),
            errors: s.errors.load(Relaxed),
            reconnects: s.reconnects.load(Relaxed),
            bytes_sent: s.bytes_sent.load(Relaxed),
            bytes_received: s.bytes_received.load(Relaxed),
            lookahead_hits: s.lookahead_hits.load(Relaxed),
            lookahead_misses: s.lookahead_misses.load(Relaxed),
            alike_reused: s.alike_reused.load(Relaxed),
            alike_partly: s.alike_partly.load(Relaxed),
            filter_behind_pre_filter: s.filter_behind_pre_filter.load(Relaxed),
            permit_behind_reserve: s.permit_behind_reserve.load(Relaxed),
            permit_in_binding_cycle: s.permit_in_binding_cycle.load(Relaxed),
            label_scored: s.label_scored.load(Relaxed),
            batch_retried_apart: s.batch_retried_apart.load(Relaxed),
            stray_replies: s.stray_replies.load(Relaxed),
            last_error: s.last_error.lock().map(|e| e.clone()).unwrap_or_default(),
            last_disconnect: s
                .last_disconnect
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default(),
        }
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct Report {
    pub pods: Vec<PodReport>,
    pub evicted: Vec<EvictedReport>,
    /// Every PersistentVolumeClaim and what became of it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimReport>,
    /// Every ResourceClaim (DRA) and the devices allocated to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_claims: Vec<crate::cluster::embedded_dra::ResourceClaimOutcome>,
    pub summary: Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<MeasuredReport>,
    pub invariants: Invariants,
    /// Sidecar endpoints, when any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remote: Vec<RemoteReport>,
    /// Why the run stopped before it settled (the time-out), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<String>,
}

/// Up to five pods' names, and how many more.
fn few(ps: &[&PodReport]) -> String {
    let names: Vec<String> = ps
        .iter()
        .take(5)
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    match ps.len() {
        n if n > 5 => format!("{} and {} more", names.join(", "), n - 5),
        _ => names.join(", "),
    }
}

/// The reason shown for a pod no attempt has finished for (an invariant violation
/// once the run settled).
const NO_ATTEMPT: &str = "no scheduling attempt finished";

pub fn build(
    cluster: &EmbeddedCluster,
    sched: &Arc<Scheduler>,
    config: &SchedulerConfig,
    elapsed: Duration,
    measured: Option<Measured>,
    workload: Option<(String, Option<f64>)>,
    with_events: bool,
) -> Report {
    let records = cluster.pods();
    let nodes = cluster.nodes();
    let profiles: Vec<&str> = config
        .profiles
        .iter()
        .map(|p| p.scheduler_name.as_str())
        .collect();
    // Pods a PreEnqueue plugin holds back carry no condition (upstream writes none):
    // their reason is the plugin's.
    let gated: rustc_hash::FxHashMap<crate::model::Uid, String> = sched
        .queue
        .unschedulable_pods()
        .into_iter()
        .filter_map(|q| {
            let plugin = q.gating_plugin?;
            let msg = q.gating_message.clone().unwrap_or_default();
            Some((
                q.pod.uid.clone(),
                format!("waiting at PreEnqueue ({plugin}): {msg}"),
            ))
        })
        .collect();
    let mut pods = Vec::with_capacity(records.len());
    let (mut bound, mut unschedulable, mut ignored) = (0usize, 0usize, 0usize);
    let mut scheduler_errors = 0usize;
    for r in &records {
        let p = &r.pod;
        let ours = profiles.contains(&&*p.spec.scheduler_name);
        let reason = if p.node_name.is_some() {
            None
        } else if !ours {
            ignored += 1;
            None
        } else {
            unschedulable += 1;
            if r.condition.as_ref().map(|c| c.reason) == Some("SchedulerError") {
                scheduler_errors += 1;
            }
            Some(
                r.condition
                    .as_ref()
                    .map(|c| c.message.clone())
                    .or_else(|| gated.get(&p.uid).cloned())
                    .unwrap_or_else(|| NO_ATTEMPT.into()),
            )
        };
        if p.node_name.is_some() && ours {
            bound += 1;
        }
        pods.push(PodReport {
            namespace: p.namespace.to_string(),
            name: p.name.to_string(),
            node: p.node_name.as_deref().map(str::to_string),
            reason,
            nominated_node: p.nominated_node_name.as_deref().map(str::to_string),
            skipped_plugins: r.ignored.clone().filter(|_| ours),
            events: if with_events {
                r.events
                    .iter()
                    .map(|e| format!("{}: {}", e.reason, e.message))
                    .collect()
            } else {
                Vec::new()
            },
        });
    }
    let evicted: Vec<EvictedReport> = cluster
        .evictions()
        .into_iter()
        .map(|e| EvictedReport {
            namespace: e.namespace.to_string(),
            name: e.name.to_string(),
            node: e.node.as_deref().map(str::to_string),
            preemptor: e.preemptor,
        })
        .collect();
    let double_binds = cluster.bind_conflicts();
    let assumed_pods = sched.cache.lock().map(|c| c.assumed_count()).unwrap_or(0);
    let accounted = pods
        .iter()
        .all(|p| p.node.is_some() || p.reason.as_deref() != Some(NO_ATTEMPT));
    let (violations, input_errors) = {
        let ledger = cluster.ledger();
        let end: Vec<crate::invariants::EndPod> = records
            .iter()
            .map(|r| crate::invariants::EndPod {
                key: r.pod.key(),
                node: r.pod.node_name.as_deref(),
                has_reason: r.condition.is_some() || gated.contains_key(&r.pod.uid),
                terminating: r.pod.deletion_timestamp.is_some()
                    || cluster.is_terminating(&r.pod.uid),
                dra_resources: r
                    .pod
                    .spec
                    .extended_resource_claim_status
                    .iter()
                    .flat_map(|e| e.mappings.iter().map(|m| m.resource.to_string()))
                    .collect(),
            })
            .collect();
        let filters_of = |name: &str| {
            sched.profile(name).map(|fw| {
                crate::invariants::CHECKED_FILTERS
                    .iter()
                    .copied()
                    .filter(|f| fw.filter_names().any(|n| n == *f))
                    .collect::<Vec<&'static str>>()
            })
        };
        crate::invariants::check(
            &ledger.pods,
            &ledger.nodes,
            &end,
            &ledger.preemptions,
            &filters_of,
        )
    };
    let mut violations = violations;
    for (pod, node, detail) in cluster.unreachable_volumes() {
        violations.push(crate::invariants::Violation {
            rule: "volume not reachable".into(),
            pod: Some(pod),
            node: Some(node),
            detail,
        });
    }
    for (pod, node, rule, detail) in cluster.dra_violations() {
        violations.push(crate::invariants::Violation {
            rule: rule.into(),
            pod,
            node,
            detail,
        });
    }
    let resource_claims = cluster.resource_claim_outcomes();
    let claims: Vec<ClaimReport> = cluster
        .claim_outcomes()
        .into_iter()
        .map(|c| ClaimReport {
            claim: c.claim,
            phase: c.phase,
            volume: c.volume,
            node: c.node,
            provisioned: c.provisioned,
        })
        .collect();
    let bad_victims: Vec<String> = violations
        .iter()
        .filter(|v| v.rule == "victim priority not lower")
        .map(|v| format!("{} ({})", v.pod.as_deref().unwrap_or(""), v.detail))
        .collect();
    let mut overcommitted_nodes: Vec<String> = violations
        .iter()
        .filter(|v| v.rule == "node over-committed")
        .filter_map(|v| v.node.clone())
        .collect();
    overcommitted_nodes.dedup();
    let seconds = elapsed.as_secs_f64();
    let scheduled_by_us = sched.stats.bound.load(Ordering::Relaxed) as f64;
    let summary = Summary {
        bound,
        unschedulable,
        evicted: evicted.len(),
        attempts: sched.stats.attempts(),
        pods_per_second: round2(scheduled_by_us / seconds.max(1e-9)),
        attempt_latency_ms: Latency {
            p50: round3(sched.stats.latency_percentile_ms(50.0)),
            p99: round3(sched.stats.latency_percentile_ms(99.0)),
        },
        scheduler_errors,
        ignored,
        skipped_plugin_pods: pods.iter().filter(|p| p.skipped_plugins.is_some()).count(),
        nodes: nodes.len(),
        seconds: round3(seconds),
        peak_rss_mib: (crate::remote::procfs::peak_rss_mib() * 10.0).round() / 10.0,
    };
    let measured = match (measured, workload) {
        (Some(m), Some((name, threshold))) => Some(MeasuredReport {
            workload: name,
            pods: m.pods,
            seconds: round3(m.seconds),
            binding_seconds: m.binding_seconds.map(round3),
            pods_per_second: round2(measured_rate(&m)),
            upstream_threshold: threshold,
            cpu_seconds: m.cpu,
        }),
        _ => None,
    };
    Report {
        pods,
        evicted,
        claims,
        resource_claims,
        summary,
        measured,
        invariants: Invariants {
            ok: double_binds == 0
                && accounted
                && bad_victims.is_empty()
                && assumed_pods == 0
                && violations.is_empty(),
            violations,
            input_errors,
            overcommitted_nodes,
            double_binds,
            accounted,
            bad_victims,
            assumed_pods,
        },
        remote: Vec::new(),
        unsettled: None,
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// A readable table: every pod when there are few, otherwise placements per node and
    /// the unscheduled pods grouped by reason; then the summary.
    pub fn to_table(&self, all_pods: bool) -> String {
        let mut s = String::new();
        let show_all = all_pods || self.pods.len() <= 60;
        if show_all {
            let w_pod = self
                .pods
                .iter()
                .map(|p| p.namespace.len() + p.name.len() + 1)
                .max()
                .unwrap_or(3)
                .max(3);
            let w_node = self
                .pods
                .iter()
                .filter_map(|p| p.node.as_ref().map(|n| n.len()))
                .max()
                .unwrap_or(4)
                .max(9);
            let _ = writeln!(s, "{:<w_pod$}  {:<w_node$}  REASON", "POD", "NODE");
            for p in &self.pods {
                let node = p.node.clone().unwrap_or_else(|| match &p.nominated_node {
                    Some(n) => format!("<none> (nominated {n})"),
                    None => "<none>".into(),
                });
                let mut reason = p.reason.clone().unwrap_or_default();
                if let Some(skipped) = &p.skipped_plugins {
                    if !reason.is_empty() {
                        reason.push_str(" | ");
                    }
                    reason.push_str(skipped);
                }
                let _ = writeln!(
                    s,
                    "{:<w_pod$}  {:<w_node$}  {}",
                    format!("{}/{}", p.namespace, p.name),
                    node,
                    reason
                );
            }
        } else {
            let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
            for p in &self.pods {
                if let Some(n) = &p.node {
                    *per_node.entry(n).or_default() += 1;
                }
            }
            let mut counts: Vec<usize> = per_node.values().copied().collect();
            counts.sort_unstable();
            if !counts.is_empty() {
                let _ = writeln!(
                    s,
                    "{} pods on {} nodes (per node: min {}, median {}, max {}); use --all-pods for every pod",
                    counts.iter().sum::<usize>(),
                    counts.len(),
                    counts[0],
                    counts[counts.len() / 2],
                    counts[counts.len() - 1]
                );
            }
            let mut reasons: BTreeMap<&str, Vec<&PodReport>> = BTreeMap::new();
            for p in &self.pods {
                if let Some(r) = &p.reason {
                    reasons.entry(r).or_default().push(p);
                }
            }
            for (r, ps) in reasons {
                let _ = writeln!(s, "unschedulable ({}): {}\n  {}", ps.len(), few(&ps), r);
            }
            let mut skipped: BTreeMap<&str, Vec<&PodReport>> = BTreeMap::new();
            for p in &self.pods {
                if let Some(r) = &p.skipped_plugins {
                    skipped.entry(r).or_default().push(p);
                }
            }
            for (r, ps) in skipped {
                let _ = writeln!(
                    s,
                    "decided with plugin calls skipped ({}): {}\n  {}",
                    ps.len(),
                    few(&ps),
                    r
                );
            }
        }
        if !self.evicted.is_empty() {
            let _ = writeln!(s, "\nPREEMPTED POD{:<30}  NODE        BY", "");
            for e in &self.evicted {
                let _ = writeln!(
                    s,
                    "{:<43}  {:<10}  {}",
                    format!("{}/{}", e.namespace, e.name),
                    e.node.as_deref().unwrap_or("<none>"),
                    e.preemptor
                );
            }
        }
        if !self.claims.is_empty() {
            let _ = writeln!(s, "\nCLAIM{:<38}  PHASE    VOLUME", "");
            for c in &self.claims {
                let _ = writeln!(
                    s,
                    "{:<43}  {:<7}  {}{}",
                    c.claim,
                    c.phase,
                    c.volume.as_deref().unwrap_or("<none>"),
                    match (&c.node, c.provisioned) {
                        (Some(n), true) => format!(" (provisioned on {n})"),
                        (None, true) => " (provisioned)".to_string(),
                        (Some(n), false) => format!(" (on {n})"),
                        (None, false) => String::new(),
                    }
                );
            }
        }
        if !self.resource_claims.is_empty() {
            let _ = writeln!(s, "\nRESOURCECLAIM{:<30}  RESERVED FOR  DEVICES", "");
            for c in &self.resource_claims {
                let _ = writeln!(
                    s,
                    "{:<43}  {:<12}  {}",
                    c.claim,
                    c.reserved_for.len(),
                    if c.devices.is_empty() {
                        "<not allocated>".to_string()
                    } else {
                        c.devices.join(", ")
                    }
                );
            }
        }
        let m = &self.summary;
        let _ = writeln!(
            s,
            "\nSummary: {} bound, {} unschedulable, {} evicted, {} ignored (other schedulers) on {} nodes",
            m.bound, m.unschedulable, m.evicted, m.ignored, m.nodes
        );
        let _ = writeln!(
            s,
            "         {} attempts in {:.3}s: {:.0} pods/s; attempt latency p50 {:.3} ms, p99 {:.3} ms; peak memory {:.0} MiB",
            m.attempts, m.seconds, m.pods_per_second, m.attempt_latency_ms.p50, m.attempt_latency_ms.p99, m.peak_rss_mib
        );
        if m.scheduler_errors > 0 {
            let _ = writeln!(
                s,
                "         {} of the unschedulable pods ended pending after an error (a failing plugin or an unreachable sidecar), not because they do not fit",
                m.scheduler_errors
            );
        }
        if m.skipped_plugin_pods > 0 {
            let _ = writeln!(
                s,
                "         {} pods decided with a remote plugin's failed call skipped (failurePolicy Ignore): not that plugin's decision",
                m.skipped_plugin_pods
            );
        }
        if let Some(ms) = &self.measured {
            let _ = writeln!(
                s,
                "Measured ({}): {} pods in {:.3}s{} = {:.0} pods/s{}",
                ms.workload,
                ms.pods,
                ms.seconds,
                ms.binding_seconds
                    .map(|b| format!(", {b:.3}s from the first bound to the last"))
                    .unwrap_or_default(),
                ms.pods_per_second,
                ms.upstream_threshold
                    .map(|t| format!(" (upstream scheduler_perf floor: {t} pods/s)"))
                    .unwrap_or_default()
            );
            if let Some(c) = ms.cpu_seconds.filter(|_| ms.pods > 0) {
                let c = c.micros_per(ms.pods);
                let mut line = format!("         CPU per pod: scheduler {:.0} µs", c.scheduler);
                if !self.remote.is_empty() {
                    line += &format!(" (sidecar connections {:.0} µs)", c.connection_threads);
                }
                if let Some(sc) = c.sidecars {
                    line += &format!(", sidecars {sc:.0} µs");
                }
                let _ = writeln!(s, "{line}");
            }
        }
        for r in &self.remote {
            let _ = writeln!(
                s,
                "Sidecar {} ({}): {} calls, {} errors, {} reconnects, {} KiB sent, {} KiB received, lookahead {} used / {} dropped, {} answered from alike pods' answers ({} partly), {} Filter rounds sent behind their PreFilter, {} Permits behind their Reserve, {} Score rounds from label scores",
                r.endpoint,
                r.plugins.join(", "),
                r.calls,
                r.errors,
                r.reconnects,
                r.bytes_sent / 1024,
                r.bytes_received / 1024,
                r.lookahead_hits,
                r.lookahead_misses,
                r.alike_reused,
                r.alike_partly,
                r.filter_behind_pre_filter,
                r.permit_behind_reserve,
                r.label_scored
            );
            if r.stray_replies > 0 {
                let _ = writeln!(s, "  {} replies to no outstanding call", r.stray_replies);
            }
            if r.permit_in_binding_cycle > 0 {
                let _ = writeln!(
                    s,
                    "  {} Reserve and Permit verdicts awaited in the binding cycle",
                    r.permit_in_binding_cycle
                );
            }
            if r.batch_retried_apart > 0 {
                let _ = writeln!(
                    s,
                    "  {} calls of failed FilterBatch messages asked again alone",
                    r.batch_retried_apart
                );
            }
            if !r.last_error.is_empty() {
                let _ = writeln!(s, "  last error: {}", r.last_error);
            }
            if !r.last_disconnect.is_empty() && !r.last_error.contains(&r.last_disconnect) {
                let _ = writeln!(s, "  last connection loss: {}", r.last_disconnect);
            }
        }
        let inv = &self.invariants;
        for v in inv.input_errors.iter().take(20) {
            let _ = writeln!(
                s,
                "INPUT ERROR: {}: node {}: {}",
                v.rule,
                v.node.as_deref().unwrap_or("?"),
                v.detail
            );
        }
        for v in inv.violations.iter().take(20) {
            let _ = writeln!(
                s,
                "VIOLATION: {}: pod {} node {}: {}",
                v.rule,
                v.pod.as_deref().unwrap_or("-"),
                v.node.as_deref().unwrap_or("-"),
                v.detail
            );
        }
        if inv.ok {
            let _ = writeln!(s, "Invariants: ok (recomputed from the input: no node over-committed or host port used twice, every bound pod passes its profile's taint, affinity and unschedulable checks and reaches its claims' volumes and devices, no device allocated twice, no pod lost or bound twice, none left assumed, no victim of priority >= its preemptor's)");
        } else {
            let _ = writeln!(
                s,
                "Invariants: VIOLATED: over-committed nodes {:?}, double binds {}, accounted {}, left assumed {}, bad victims {:?}",
                inv.overcommitted_nodes, inv.double_binds, inv.accounted, inv.assumed_pods, inv.bad_victims
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(pods: usize, seconds: f64, binding_seconds: Option<f64>) -> super::super::Measured {
        super::super::Measured {
            pods,
            seconds,
            binding_seconds,
            cpu: None,
        }
    }

    #[test]
    fn throughput_counts_from_the_first_measured_pod_bound() {
        // 5,000 pods bound over the last second of a 3-second op (pods created before
        // them were scheduled first): upstream's collector skips the first sample.
        assert_eq!(measured_rate(&measured(5000, 3.0, Some(1.0))), 4999.0);
        // No span (pods created bound, or one pod): over the whole op.
        assert_eq!(measured_rate(&measured(5000, 2.0, None)), 2500.0);
        assert_eq!(measured_rate(&measured(1, 0.5, Some(0.0))), 2.0);
        // A span too short to time: over the whole op.
        assert_eq!(measured_rate(&measured(10, 0.5, Some(0.001))), 20.0);
    }
}
