//! Alike pods for a plugin whose answers read the node's pods (`signature_node_pods`):
//! the TenantQuota sidecar signs its tenant label, so a Filter answer holds for every
//! pod of the tenant until the node's pods change, and a round asks only for the
//! nodes that did. Checked end to end against the real `switchyard-quota` sidecar on
//! a cluster where the quota rejects (nodes that take one or two pods per tenant fill
//! up, two tenants interleave): every placement is the one the same sidecar gives
//! when no answer is reused. The pod's first Filter round goes out right behind its
//! PreFilter (`filter-after-pre-filter`), one round trip for both, and changes no
//! placement either: a sidecar without the capability places every pod alike.

use std::collections::BTreeMap;
use std::time::Duration;

use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

fn run(reuse: bool, capabilities: bool) -> simulate::Report {
    run_workload("Quota/600Nodes", reuse, capabilities)
}

fn run_workload(workload: &str, reuse: bool, capabilities: bool) -> simulate::Report {
    let env: &[(&str, &str)] = if capabilities {
        &[]
    } else {
        &[("SWITCHYARD_PLUGIN_CAPABILITIES", "off")]
    };
    let sidecar = switchyard_e2e::start_sidecar(
        "switchyard-quota",
        &format!("quota-{}-reuse-{reuse}-{capabilities}", workload.len()),
        env,
    );
    let mut config = switchyard::config::SchedulerConfig::default_config();
    let mut ep =
        switchyard_e2e::added_sidecar(&sidecar.endpoint, "TenantQuota", Duration::from_secs(5));
    ep.reuse_alike_pods = reuse;
    config.remote_plugins.push(ep);
    let opts = SimulateOptions {
        workload: Some(switchyard_e2e::workspace_root().join("tests/fixtures/quota/workload.yaml")),
        workload_name: Some(workload.into()),
        scheduler_config: Some(config),
        seed: 11,
        timeout: Duration::from_secs(120),
        ..SimulateOptions::default()
    };
    let r = simulate::run(&opts, &in_tree_registry()).expect("simulate");
    drop(sidecar);
    r
}

#[test]
fn quota_answers_reused_for_the_tenants_pods_change_no_placement() {
    let asked = run(false, true);
    let reused = run(true, true);
    let plain = run(true, false);
    for r in [&asked, &reused, &plain] {
        assert!(r.invariants.ok, "{:?}", r.invariants);
        assert_eq!(r.summary.bound, 1600, "{:?}", r.summary);
        let [ep] = &r.remote[..] else {
            panic!("one sidecar: {:?}", r.remote);
        };
        assert_eq!(ep.errors, 0, "{ep:?}");
        assert_eq!(ep.stray_replies, 0, "{ep:?}");
    }
    let (a, b, c) = (&asked.remote[0], &reused.remote[0], &plain.remote[0]);
    assert_eq!(a.alike_reused + a.alike_partly, 0, "{a:?}");
    // Most first rounds went out behind their PreFilter, and were used; none
    // without the capability.
    assert!(a.filter_behind_pre_filter >= 1000, "{a:?}");
    assert!(b.filter_behind_pre_filter >= 500, "{b:?}");
    assert_eq!(c.filter_behind_pre_filter, 0, "{c:?}");
    // After the first pods of each tenant, rounds ask for the nodes whose pods
    // changed only (or for none).
    assert!(
        b.alike_reused + b.alike_partly >= 1000,
        "reused {} whole rounds and {} partly ({b:?})",
        b.alike_reused,
        b.alike_partly
    );
    assert!(
        b.bytes_sent * 2 < a.bytes_sent,
        "{} bytes sent with reuse, {} without",
        b.bytes_sent,
        a.bytes_sent
    );
    let x = switchyard_e2e::placements(&asked);
    for (what, other) in [("answers reused", &reused), ("capabilities off", &plain)] {
        switchyard_e2e::assert_same_placements(what, &x, &switchyard_e2e::placements(other));
    }
    // Limited nodes hold at most their limit of each tenant, and the quota did
    // reject: the nodes taking one pod per tenant are full.
    let per = check_limits(&x);
    let one_full = per
        .iter()
        .filter(|((node, tenant), _)| node.starts_with("limit1-") && *tenant == "acme")
        .count();
    assert_eq!(one_full, 200, "every node taking one acme pod holds one");
}

/// TenantQuota declares `pre_filter_pod_only`: on a cluster large enough for the
/// lookahead, the queued pods' PreFilter and first Filter round (the nodes without a
/// kept answer) go ahead of their attempts, the attempts use them, and every pod is
/// placed as by the same sidecar without the capability the lookahead needs.
#[test]
fn quota_pre_filter_sent_ahead_changes_no_placement() {
    let ahead = run_workload("Quota/6000Nodes", true, true);
    let plain = run_workload("Quota/6000Nodes", true, false);
    for r in [&ahead, &plain] {
        assert!(r.invariants.ok, "{:?}", r.invariants);
        assert_eq!(r.summary.bound, 6700, "{:?}", r.summary);
        assert_eq!(r.remote[0].errors, 0, "{:?}", r.remote[0]);
        assert_eq!(r.remote[0].stray_replies, 0, "{:?}", r.remote[0]);
    }
    let (a, p) = (&ahead.remote[0], &plain.remote[0]);
    assert!(
        a.lookahead_hits >= 600,
        "{} lookahead answers used, {} dropped ({a:?})",
        a.lookahead_hits,
        a.lookahead_misses
    );
    assert_eq!(p.lookahead_hits + p.lookahead_misses, 0, "{p:?}");
    switchyard_e2e::assert_same_placements(
        "PreFilter and Filter sent ahead",
        &switchyard_e2e::placements(&plain),
        &switchyard_e2e::placements(&ahead),
    );
    // No node holds more than its limit of a tenant, and the quota steered: acme
    // pods doubled up on nodes that allow it, never on those taking one per tenant.
    let per = check_limits(&switchyard_e2e::placements(&ahead));
    let doubled = |kind: &str| {
        per.iter()
            .filter(|((node, tenant), n)| node.starts_with(kind) && *tenant == "acme" && **n >= 2)
            .count()
    };
    assert!(
        doubled("free-") + doubled("limit2-") >= 20,
        "acme doubled up on {} free and {} limit2 nodes",
        doubled("free-"),
        doubled("limit2-")
    );
}

/// Pods per (node, tenant) of `placements`, checking that no node named `limitN-...`
/// holds more than N pods of a tenant.
fn check_limits(placements: &switchyard_e2e::Placements) -> BTreeMap<(String, String), usize> {
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (pod, node) in placements {
        let (Some(node), Some(tenant)) = (node, pod.split('/').nth(1)) else {
            continue;
        };
        let tenant = tenant.split('-').next().unwrap_or_default();
        *per.entry((node.clone(), tenant.to_string())).or_default() += 1;
    }
    for ((node, tenant), n) in &per {
        let limit = match node.split('-').next() {
            Some("limit1") => 1,
            Some("limit2") => 2,
            _ => continue,
        };
        assert!(
            tenant == "untenanted" || *n <= limit,
            "{n} pods of {tenant} on {node}"
        );
    }
    per
}
