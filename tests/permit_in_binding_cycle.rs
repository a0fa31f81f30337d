//! `permitInBindingCycle` end to end: a sidecar plugin (`FaultyGate` of
//! `switchyard-faulty-sidecar`) whose Reserve fails for one pod, whose Permit rejects
//! another and makes a third wait until its timeout. With the verdicts awaited in the
//! binding cycle, the pods scheduled meanwhile may see a failed pod on its node, but
//! once it fails the node is free again: every run ends with the same pods bound and
//! the same reasons for the others as when each cycle waits for the verdict.

use std::collections::BTreeMap;
use std::time::Duration;

use switchyard::cluster::manifest;
use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

/// Four nodes of one CPU, each room for one 600m pod; the three gated pods first
/// (higher priority), then three that take three of the nodes, so the fourth is the
/// gated pods' to fail on.
fn cluster() -> String {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..4 {
        s += &format!("- {{kind: Node, apiVersion: v1, metadata: {{name: node-{i}}}, status: {{allocatable: {{cpu: '1', memory: 8Gi, pods: '20'}}}}}}\n");
    }
    let pod = |name: &str, gate: &str, priority: i32| {
        let labels = if gate.is_empty() {
            String::new()
        } else {
            format!(", labels: {{faults.switchyard.dev/gate: {gate}}}")
        };
        format!("- {{kind: Pod, apiVersion: v1, metadata: {{name: {name}{labels}}}, spec: {{priority: {priority}, containers: [{{name: c, resources: {{requests: {{cpu: 600m}}}}}}]}}}}\n")
    };
    s += &pod("refused", "reserve", 30);
    s += &pod("rejected", "permit", 20);
    s += &pod("waiter", "wait", 10);
    for i in 0..3 {
        s += &pod(&format!("taker-{i}"), "", 0);
    }
    s
}

struct Outcome {
    /// Pod → bound (true) and its reason when pending.
    pods: BTreeMap<String, (bool, Option<String>)>,
    remote: simulate::report::RemoteReport,
}

fn run(in_binding_cycle: bool) -> Outcome {
    let sidecar = switchyard_e2e::start_sidecar(
        "switchyard-faulty-sidecar",
        &format!("gate-{in_binding_cycle}"),
        &[("FAULTY_MODE", "gate")],
    );
    let mut ep =
        switchyard_e2e::added_sidecar(&sidecar.endpoint, "FaultyGate", Duration::from_secs(5));
    ep.permit_in_binding_cycle = in_binding_cycle;
    let mut config = switchyard::config::SchedulerConfig::default_config();
    config.remote_plugins.push(ep);
    let mut objects = Vec::new();
    manifest::parse_str(
        &cluster(),
        "gate.yaml",
        &mut objects,
        &mut Default::default(),
    )
    .expect("cluster");
    let r = simulate::run(
        &SimulateOptions {
            objects,
            scheduler_config: Some(config),
            seed: 3,
            timeout: Duration::from_secs(60),
            ..SimulateOptions::default()
        },
        &in_tree_registry(),
    )
    .expect("simulate");
    drop(sidecar);
    assert!(r.invariants.ok, "{:?}", r.invariants);
    let [remote] = &r.remote[..] else {
        panic!("one sidecar: {:?}", r.remote);
    };
    assert_eq!(remote.errors, 0, "{remote:?}");
    assert_eq!(remote.stray_replies, 0, "{remote:?}");
    Outcome {
        pods: r
            .pods
            .iter()
            .map(|p| (p.name.clone(), (p.node.is_some(), p.reason.clone())))
            .collect(),
        remote: remote.clone(),
    }
}

#[test]
fn verdicts_awaited_in_the_binding_cycle_end_as_awaited_in_the_scheduling_cycle() {
    let later = run(true);
    let now = run(false);
    assert!(
        later.remote.permit_in_binding_cycle >= 6,
        "every attempt's verdict is left to the binding cycle: {:?}",
        later.remote
    );
    assert_eq!(now.remote.permit_in_binding_cycle, 0, "{:?}", now.remote);
    assert_eq!(later.pods, now.pods);
    let reason = |pod: &str| {
        let (bound, reason) = &later.pods[pod];
        assert!(!bound, "{pod} bound: {:?}", later.pods);
        reason.clone().unwrap_or_default()
    };
    assert_eq!(
        reason("refused"),
        "0/1 nodes are available: 1 reserve refused by FaultyGate."
    );
    assert_eq!(
        reason("rejected"),
        "0/1 nodes are available: 1 permit refused by FaultyGate."
    );
    assert_eq!(
        reason("waiter"),
        "0/1 nodes are available: 1 rejected due to timeout after waiting 300ms at plugin FaultyGate."
    );
    for i in 0..3 {
        let name = format!("taker-{i}");
        assert!(later.pods[&name].0, "{name} pending: {:?}", later.pods);
    }
}
