//! The Coscheduling sidecar end to end, with each Permit sent right behind its
//! Reserve (`permit-after-reserve`: one round trip for both) and without: gangs of 8
//! on small nodes, in two namespaces under the same names, and a gang too short to
//! start (tests/fixtures/coscheduling/cluster.yaml). Every placement is the one the same
//! sidecar gives when each call waits for the last; every complete gang is placed,
//! the short one not at all. The same holds with the verdicts awaited in the
//! binding cycle (`permitInBindingCycle`).

use std::time::Duration;

use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

fn run(capabilities: bool) -> simulate::Report {
    run_with(capabilities, false)
}

fn run_with(capabilities: bool, permit_in_binding_cycle: bool) -> simulate::Report {
    let env: &[(&str, &str)] = if capabilities {
        &[]
    } else {
        &[("SWITCHYARD_PLUGIN_CAPABILITIES", "off")]
    };
    let sidecar = switchyard_e2e::start_sidecar(
        "switchyard-coscheduling",
        &format!("cosched-{capabilities}-{permit_in_binding_cycle}"),
        env,
    );
    let mut config = switchyard::config::SchedulerConfig::default_config();
    let mut ep =
        switchyard_e2e::added_sidecar(&sidecar.endpoint, "Coscheduling", Duration::from_secs(5));
    ep.permit_in_binding_cycle = permit_in_binding_cycle;
    config.remote_plugins.push(ep);
    let opts = SimulateOptions {
        cluster: vec![
            switchyard_e2e::workspace_root().join("tests/fixtures/coscheduling/cluster.yaml")
        ],
        scheduler_config: Some(config),
        seed: 5,
        timeout: Duration::from_secs(120),
        ..SimulateOptions::default()
    };
    let r = simulate::run(&opts, &in_tree_registry()).expect("simulate");
    drop(sidecar);
    r
}

#[test]
fn permits_behind_their_reserve_change_no_placement() {
    let ahead = run(true);
    let plain = run(false);
    for r in [&ahead, &plain] {
        assert!(r.invariants.ok, "{:?}", r.invariants);
        assert_eq!(r.summary.bound, 224, "{:?}", r.summary);
        assert_eq!(r.summary.unschedulable, 6, "{:?}", r.summary);
        let [ep] = &r.remote[..] else {
            panic!("one sidecar: {:?}", r.remote);
        };
        assert_eq!(ep.errors, 0, "{ep:?}");
        assert_eq!(ep.stray_replies, 0, "{ep:?}");
    }
    // Every bound pod's Permit went out behind its Reserve; none without the
    // capability.
    assert!(
        ahead.remote[0].permit_behind_reserve >= 224,
        "{:?}",
        ahead.remote[0]
    );
    assert_eq!(
        plain.remote[0].permit_behind_reserve, 0,
        "{:?}",
        plain.remote[0]
    );
    let x = switchyard_e2e::placements(&ahead);
    switchyard_e2e::assert_same_placements(
        "capabilities off",
        &x,
        &switchyard_e2e::placements(&plain),
    );
    // Every member of a complete gang is placed (224 bound); the short gang's
    // members none.
    let short: Vec<_> = x
        .iter()
        .filter(|(k, _)| k.starts_with("team-a/short-"))
        .collect();
    assert_eq!(short.len(), 6, "{short:?}");
    assert!(short.iter().all(|(_, n)| n.is_none()), "{short:?}");
}

/// The same gangs with each Reserve and Permit verdict awaited in the binding cycle
/// (`permitInBindingCycle`): the same placements as when each cycle waits for it.
#[test]
fn permits_awaited_in_the_binding_cycle_change_no_placement() {
    let later = run_with(true, true);
    let plain = run(false);
    assert!(later.invariants.ok, "{:?}", later.invariants);
    assert_eq!(later.summary.bound, 224, "{:?}", later.summary);
    assert_eq!(later.summary.unschedulable, 6, "{:?}", later.summary);
    let [ep] = &later.remote[..] else {
        panic!("one sidecar: {:?}", later.remote);
    };
    assert_eq!(ep.errors, 0, "{ep:?}");
    assert_eq!(ep.stray_replies, 0, "{ep:?}");
    assert!(ep.permit_in_binding_cycle >= 224, "{ep:?}");
    switchyard_e2e::assert_same_placements(
        "verdicts awaited in the scheduling cycle",
        &switchyard_e2e::placements(&later),
        &switchyard_e2e::placements(&plain),
    );
}
