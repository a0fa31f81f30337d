//! The incremental counts against a plain recount, over random cluster changes.

use super::*;
use crate::framework::{Code, CycleState};
use crate::model::labels::{Operator, Requirement};
use crate::model::node::WorkloadSelector;
use crate::model::pod::TopologySpreadConstraint;
use crate::rand::SplitMix64;
use crate::testing::{node, pod};
use rustc_hash::FxHashSet;

fn constraint(
    key: &str,
    app: &str,
    action: UnsatisfiableConstraintAction,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: action,
        selector: LabelSelector::Requirements(
            vec![Requirement::new("app", Operator::In, vec![app.to_string()]).unwrap()].into(),
        ),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
    }
}

/// PreFilter's (or PreScore's) counts, recounted over every node. With
/// `require_all`, nodes missing a topology key are left out; without it (PreScore of
/// system defaults) a missing key reads as "".
fn brute(
    pl: &PodTopologySpread,
    p: &Pod,
    snap: &Snapshot,
    action: UnsatisfiableConstraintAction,
    require_all: bool,
) -> Vec<FxHashMap<Box<str>, i64>> {
    let cs = pl.constraints(p, action, snap);
    let mut out = vec![FxHashMap::default(); cs.len()];
    for ni in snap.node_infos() {
        let node = ni.node();
        if require_all && !node_has_all_keys(&node.labels, &cs) {
            continue;
        }
        for (i, c) in cs.iter().enumerate() {
            if !c.includes_node(p, node) {
                continue;
            }
            let v = node.labels.get(&c.topology_key).unwrap_or_default();
            *out[i].entry(v.into()).or_insert(0) +=
                count_matching(&ni.pods, &c.selector, &p.namespace);
        }
    }
    out
}

#[test]
fn filter_reads_labels_when_node_ids_repeat() {
    use UnsatisfiableConstraintAction::*;
    // Two node infos share id 7 (not numbered by one cache), in different zones.
    let mk = |name: &str, zone: &str, pods: usize| {
        let mut ni = NodeInfo::with_id(7);
        ni.set_node(
            node(name)
                .label(LABEL_HOSTNAME, name)
                .label(LABEL_ZONE, zone)
                .build(),
        );
        for k in 0..pods {
            ni.add_pod(
                pod(&format!("{name}-{k}"))
                    .label("app", "a")
                    .node(name)
                    .build(),
            );
        }
        ni
    };
    let snap = Snapshot::from_node_infos(vec![mk("a", "z1", 3), mk("b", "z2", 0)]);
    let pl = build(None).unwrap();
    let p = pod("in")
        .label("app", "a")
        .spec(|s| {
            s.topology_spread_constraints = vec![constraint(LABEL_ZONE, "a", DoNotSchedule)].into()
        })
        .build();
    let mut state = CycleState::new();
    let (_, st) = PreFilterPlugin::pre_filter(&pl, &mut state, &p, &snap);
    assert!(st.is_success(), "{st:?}");
    // maxSkew 1 with z1 at 3 and z2 at 0: a (z1) is rejected, b (z2) fits.
    let codes: Vec<Code> = snap
        .node_infos()
        .iter()
        .map(|n| FilterPlugin::filter(&pl, &state, &p, n).code())
        .collect();
    assert_eq!(codes, [Code::Unschedulable, Code::Success]);
}

#[test]
fn index_matches_a_recount_as_the_cluster_changes() {
    use UnsatisfiableConstraintAction::*;
    let mut rng = SplitMix64(11);
    let mut infos = Vec::new();
    let mut n = 0;
    let new_pod = |rng: &mut SplitMix64, n: usize, node: &str| {
        pod(&format!("p{n}"))
            .namespace(["default", "other"][rng.below(2)])
            .label("app", ["a", "b"][rng.below(2)])
            .node(node)
            .build()
    };
    for i in 0..30 {
        let name = format!("n{i}");
        let mut b = node(&name)
            .label(LABEL_HOSTNAME, &name)
            .label("disk", ["ssd", "hdd"][i % 2]);
        if i % 7 != 0 {
            b = b.label(LABEL_ZONE, ["z1", "z2", "z3"][i % 3]);
        }
        if i % 5 == 0 {
            b = b.taint("dedicated", "x", crate::model::TaintEffect::NoSchedule);
        }
        let mut ni = NodeInfo::new(b.build());
        for _ in 0..rng.below(5) {
            n += 1;
            ni.add_pod(new_pod(&mut rng, n, &name));
        }
        infos.push(ni);
    }
    let mut snap = Snapshot::from_node_infos(infos);
    snap.workload_selectors = Arc::new(vec![Arc::new(WorkloadSelector {
        kind: WorkloadKind::Service,
        namespace: "default".into(),
        name: "svc".into(),
        match_labels: Some(Labels::new([("app", "a")])),
        selector: LabelSelector::Nothing,
    })]);
    let pl = build(None).unwrap();
    let mut honor_taints = constraint(LABEL_ZONE, "a", DoNotSchedule);
    honor_taints.node_taints_policy = NodeInclusionPolicy::Honor;
    let incoming = [
        pod("i1").label("app", "a").spec(|s| {
            s.topology_spread_constraints = vec![
                constraint(LABEL_ZONE, "a", DoNotSchedule),
                constraint(LABEL_HOSTNAME, "b", ScheduleAnyway),
                constraint(LABEL_ZONE, "b", ScheduleAnyway),
            ]
            .into()
        }),
        // Node inclusion depends on the pod: the per-node path.
        pod("i2")
            .label("app", "a")
            .node_selector("disk", "ssd")
            .spec(|s| {
                s.topology_spread_constraints = vec![
                    constraint(LABEL_ZONE, "a", DoNotSchedule),
                    constraint(LABEL_ZONE, "a", ScheduleAnyway),
                ]
                .into()
            }),
        pod("i3")
            .label("app", "a")
            .spec(|s| s.topology_spread_constraints = vec![honor_taints.clone()].into()),
        // No constraints of its own: the system defaults (hostname and zone, soft),
        // with the Service's selector; nodes without a zone still score.
        pod("i4").label("app", "a"),
    ]
    .map(|b| b.build());
    let (mut nonzero, mut scored, mut filtered) = (0, 0, 0);
    for round in 0..40 {
        for p in &incoming {
            let mut state = CycleState::new();
            let (_, s) = PreFilterPlugin::pre_filter(&pl, &mut state, p, &snap);
            // i4 has no hard constraint (the system defaults are soft).
            assert_eq!(s.is_skip(), p.name.as_ref() == "i4", "{s:?}");
            if !s.is_skip() {
                assert!(s.is_success(), "{s:?}");
                let want = brute(&pl, p, &snap, DoNotSchedule, true);
                let got: Vec<FxHashMap<Box<str>, i64>> = filtering::match_num(&state)
                    .unwrap()
                    .iter()
                    .map(|m| m.iter().map(|(k, v)| (Box::from(&**k), *v)).collect())
                    .collect();
                assert_eq!(got, want, "round {round}, {}", p.name);
                // Filter's verdicts, by the index's domain numbers and (on a copy
                // with an id the index never saw) by labels, against the recount.
                let cs = pl.constraints(p, DoNotSchedule, &snap);
                for ni in snap.node_infos() {
                    let node = ni.node();
                    let mut expect = Code::Success;
                    for (i, c) in cs.iter().enumerate() {
                        let Some(v) = node.labels.get(&c.topology_key) else {
                            expect = Code::UnschedulableAndUnresolvable;
                            break;
                        };
                        let min = if (want[i].len() as i64) < c.min_domains {
                            0
                        } else {
                            want[i]
                                .values()
                                .copied()
                                .min()
                                .unwrap_or(i64::from(i32::MAX))
                        };
                        let self_match = i64::from(c.selector.matches(p.labels()));
                        if want[i].get(v).copied().unwrap_or(0) + self_match - min > c.max_skew {
                            expect = Code::Unschedulable;
                            break;
                        }
                    }
                    let copy = NodeInfo::new(ni.node_arc().unwrap().clone());
                    for n in [&**ni, &copy] {
                        let got = FilterPlugin::filter(&pl, &state, p, n).code();
                        assert_eq!(got, expect, "round {round}, {}, {}", p.name, node.name);
                    }
                    filtered += 1;
                }
                nonzero += want
                    .iter()
                    .flat_map(|m| m.values())
                    .filter(|v| **v > 0)
                    .count();
            }

            let mut state = CycleState::new();
            let s = PreScorePlugin::pre_score(&pl, &mut state, p, snap.node_infos(), &snap);
            if s.is_skip() {
                continue;
            }
            let require_all = !p.spec.topology_spread_constraints.is_empty();
            let mut want = brute(&pl, p, &snap, ScheduleAnyway, require_all);
            let cs = pl.constraints(p, ScheduleAnyway, &snap);
            for (i, c) in cs.iter().enumerate() {
                if *c.topology_key == *LABEL_HOSTNAME {
                    want[i].clear();
                }
            }
            // Scoring counts domains of the filtered nodes (here: every node).
            let got = scoring::counts(&state).unwrap();
            for (i, m) in got.iter().enumerate() {
                for (d, c) in m {
                    assert_eq!(
                        Some(c),
                        want[i].get(&**d).or(Some(&0)),
                        "round {round}, {}, {d:?}",
                        p.name
                    );
                }
            }
            // Score, from the index's per-node values, against labels and pods read
            // directly: the same sum.
            let weights = scoring::weights(&state).unwrap();
            // Weights: ln(domains + 2), domains of the nodes not ignored (a node
            // without the key is in "" when not every key is required).
            for (i, c) in cs.iter().enumerate() {
                let scored = snap
                    .node_infos()
                    .iter()
                    .map(|ni| &ni.node().labels)
                    .filter(|l| !require_all || node_has_all_keys(l, &cs));
                let domains = if *c.topology_key == *LABEL_HOSTNAME {
                    scored.count()
                } else {
                    let values: FxHashSet<&str> = scored
                        .map(|l| l.get(&c.topology_key).unwrap_or_default())
                        .collect();
                    values.len()
                };
                let want = ((domains + 2) as f64).ln();
                assert_eq!(weights[i], want, "round {round}, {}, {i}", p.name);
            }
            for ni in snap.node_infos() {
                let node = ni.node();
                if require_all && !node_has_all_keys(&node.labels, &cs) {
                    continue;
                }
                let mut expect = 0f64;
                for (i, c) in cs.iter().enumerate() {
                    let Some(v) = node.labels.get(&c.topology_key) else {
                        continue;
                    };
                    let cnt = if *c.topology_key == *LABEL_HOSTNAME {
                        count_matching(&ni.pods, &c.selector, &p.namespace)
                    } else {
                        want[i].get(v).copied().unwrap_or(0)
                    };
                    expect += cnt as f64 * weights[i] + (c.max_skew - 1) as f64;
                }
                let got = ScorePlugin::score(&pl, &state, p, ni).unwrap();
                assert_eq!(got, expect.round() as i64, "round {round}, {}", p.name);
                scored += 1;
            }
        }
        let i = rng.below(snap.node_infos.len());
        let mut ni = (*snap.node_infos[i]).clone();
        if rng.below(6) == 0 {
            // The node moves to another zone, a new one, or out of every zone.
            let name = ni.node().name.to_string();
            let mut b = node(&name)
                .label(LABEL_HOSTNAME, &name)
                .label("disk", ["ssd", "hdd"][i % 2]);
            // A zone labelled "" is a domain of its own where every key is
            // required, and shares "" with nodes without one where not.
            let zone = rng.below(6);
            if zone < 5 {
                b = b.label(LABEL_ZONE, ["z1", "z2", "z3", "z4", ""][zone]);
            }
            ni.set_node(b.build());
        } else if ni.pods.is_empty() || rng.below(2) == 0 {
            n += 1;
            let name = ni.node().name.to_string();
            ni.add_pod(new_pod(&mut rng, n, &name));
        } else {
            let uid = ni.pods[rng.below(ni.pods.len())].uid.clone();
            ni.remove_pod(&uid);
        }
        snap.node_infos[i] = Arc::new(ni);
    }
    assert!(nonzero > 100, "the cluster has matching pods to count");
    assert!(filtered > 1000, "nodes were filtered");
    assert!(scored > 1000, "nodes were scored");
}
