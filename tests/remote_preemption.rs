//! Preemption through a stateful sidecar, at scale: `switchyard simulate` (a real
//! process) with the real `switchyard-quota` sidecar (TenantQuota, whose Filter depends
//! on the pods on a node only through PreFilter state and AddPod/RemovePod). Every node
//! is at its tenant quota, so the preemptor's dry run must go through the sidecar on
//! every node. The dry run advances all candidate nodes in lockstep, so each reprieve
//! step is one batched Filter exchange for the whole round, not one call per node.

use std::process::Command;
use std::time::Duration;

use switchyard_e2e::{binary, run_with_deadline};

const NODES: usize = 40;

#[test]
fn quota_preemption_dry_run_is_batched_across_nodes() {
    let dir = std::env::temp_dir().join(format!("switchyard-quota-preempt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut m = String::new();
    for i in 0..NODES {
        // Victim priorities differ per node, so the choice is unique: node-7 holds the
        // least important acme pod.
        let priority = if i == 7 { 5 } else { 10 + i };
        m.push_str(&format!(
            "---\n{{apiVersion: v1, kind: Node, metadata: {{name: node-{i}, labels: {{quota.switchyard.dev/pods-per-tenant: \"1\"}}}}, status: {{allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"10\"}}}}}}\n\
             ---\n{{apiVersion: v1, kind: Pod, metadata: {{name: acme-{i}, labels: {{quota.switchyard.dev/tenant: acme}}}}, spec: {{nodeName: node-{i}, priority: {priority}, containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]}}, status: {{phase: Running, startTime: \"2026-01-01T00:00:00Z\"}}}}\n"
        ));
    }
    m.push_str("---\n{apiVersion: v1, kind: Pod, metadata: {name: preemptor, labels: {quota.switchyard.dev/tenant: acme}}, spec: {priority: 500, containers: [{name: c, resources: {requests: {cpu: \"1\"}}}]}}\n");
    std::fs::write(dir.join("cluster.yaml"), m).expect("write cluster");

    let quota = binary("switchyard-quota");
    let mut cmd = Command::new(binary("switchyard"));
    cmd.args(["simulate", "--no-progress", "-o", "json", "--timeout", "60"])
        .arg("--cluster")
        .arg(dir.join("cluster.yaml"))
        .arg("--sidecar")
        .arg(quota.display().to_string());
    let out = run_with_deadline(&mut cmd, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&dir);
    let v = switchyard_e2e::json_output(&out);
    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    let pods = v["pods"].as_array().expect("pods");
    let preemptor = pods
        .iter()
        .find(|p| p["name"] == "preemptor")
        .expect("preemptor in report");
    assert_eq!(preemptor["node"], "node-7", "{preemptor}");
    let evicted = v["evicted"].as_array().expect("evicted");
    assert_eq!(evicted.len(), 1, "{evicted:?}");
    assert_eq!(evicted[0]["name"], "acme-7");
    assert_eq!(evicted[0]["preemptor"], "default/preemptor");

    let remote = &v["remote"][0];
    assert_eq!(remote["plugins"][0], "TenantQuota", "{remote}");
    assert_eq!(remote["errors"], 0, "{remote}");
    // Two attempts (rejected, then bound on the nominated node): PreFilter and Filter
    // each, plus the dry run's two steps (all victims removed; the victim reprieved).
    // Node by node, the dry run alone would take 2 x 40 calls.
    let calls = remote["calls"].as_u64().expect("calls");
    assert!(
        (4..=8).contains(&calls),
        "calls to the sidecar: {calls} (expected the dry run batched across {NODES} nodes): {remote}"
    );
}
