//! A PreFilter started without waiting (`PreFilterPlugin::start_pre_filter`, what
//! remote plugins do so their call travels while the scheduler's own plugins and
//! Filter run) must decide exactly as one waited for in order: the same placements
//! and the same messages for every outcome it can have (Success, Skip, Unschedulable,
//! UnschedulableAndUnresolvable, Error, a narrowing of the nodes), and when a plugin
//! after it in the order fails its own PreFilter. The plugin here starts its
//! PreFilter in process; tests/remote_quota.rs and tests/remote_coscheduling.rs run
//! the remote one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use switchyard::cluster::manifest;
use switchyard::config::SchedulerConfig;
use switchyard::framework::interface::{FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult};
use switchyard::framework::{CycleState, Handle, NodeInfo, Snapshot, Status};
use switchyard::model::Pod;
use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

const NAME: &str = "Gate";

/// PreFilter by the pod's label `pf`: skip, reject, unresolvable, error, narrow (to
/// n0 and n3) or nothing (Success). Filter rejects nodes labelled gate=closed.
struct Gate {
    /// Start PreFilter early and answer it at `finish_pre_filter`.
    started: bool,
}

/// The outcome a started PreFilter will give, kept in the attempt's state.
#[derive(Clone)]
struct Outcome(Option<PreFilterResult>, Status);

fn decide(pod: &Pod) -> (Option<PreFilterResult>, Status) {
    match pod.labels().get("pf") {
        Some("skip") => (None, Status::skip()),
        Some("reject") => (None, Status::unschedulable("gate: not now")),
        Some("unresolvable") => (None, Status::unresolvable("gate: never")),
        Some("error") => (None, Status::error("gate: broken")),
        Some("narrow") => (
            Some(PreFilterResult::nodes(["n0", "n3"].map(Arc::from))),
            Status::success(),
        ),
        _ => (None, Status::success()),
    }
}

impl Plugin for Gate {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for Gate {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        match state.read::<Outcome>() {
            Some(o) => (o.0.clone(), o.1.clone()),
            None => decide(pod),
        }
    }

    fn start_pre_filter(&self, state: &mut CycleState, pod: &Pod, _snapshot: &Snapshot) -> bool {
        if !self.started {
            return false;
        }
        let (r, s) = decide(pod);
        state.write(Outcome(r, s));
        true
    }

    fn finish_pre_filter(&self, state: &CycleState) -> Option<(Option<PreFilterResult>, Status)> {
        let o = state.read::<Outcome>()?;
        Some((o.0.clone(), o.1.clone()))
    }
}

impl FilterPlugin for Gate {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        // The contract of a started PreFilter: a Filter behind one that did not
        // succeed passes every node.
        if self
            .finish_pre_filter(state)
            .is_some_and(|(_, s)| !s.is_success())
        {
            return Status::success();
        }
        if node.node().labels.get("gate") == Some("closed") {
            Status::unschedulable("gate closed")
        } else {
            Status::success()
        }
    }
}

const CONFIG: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: Gate
    preFilter:
      enabled:
      - name: Gate
      - name: NodeAffinity
      - name: NodePorts
      - name: VolumeRestrictions
      - name: NodeVolumeLimits
      - name: VolumeBinding
      - name: VolumeZone
      - name: PodTopologySpread
      - name: InterPodAffinity
      disabled:
      - name: "*"
"#;

const CLUSTER: &str = r#"
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n0}, status: {allocatable: {cpu: "1", memory: 4Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {gate: closed}}, status: {allocatable: {cpu: "4", memory: 4Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2}, status: {allocatable: {cpu: "2", memory: 4Gi, pods: "110"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n3}, status: {allocatable: {cpu: 500m, memory: 4Gi, pods: "110"}}}
- {apiVersion: v1, kind: Pod, metadata: {name: plain-0}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 400m}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: plain-1}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 400m}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: skip, labels: {pf: skip}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: "3"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: reject, labels: {pf: reject}}, spec: {containers: [{name: c, image: i}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: unresolvable, labels: {pf: unresolvable}}, spec: {containers: [{name: c, image: i}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: error, labels: {pf: error}}, spec: {containers: [{name: c, image: i}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: narrow-0, labels: {pf: narrow}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 300m}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: narrow-1, labels: {pf: narrow}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: 300m}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: narrow-big, labels: {pf: narrow}}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: "2"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: too-big}, spec: {containers: [{name: c, image: i, resources: {requests: {cpu: "8"}}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: missing-claim}, spec: {containers: [{name: c, image: i}], volumes: [{name: v, persistentVolumeClaim: {claimName: nowhere}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: skip-missing-claim, labels: {pf: skip}}, spec: {containers: [{name: c, image: i}], volumes: [{name: v, persistentVolumeClaim: {claimName: nowhere}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: reject-missing-claim, labels: {pf: reject}}, spec: {containers: [{name: c, image: i}], volumes: [{name: v, persistentVolumeClaim: {claimName: nowhere}}]}}
- {apiVersion: v1, kind: Pod, metadata: {name: unresolvable-missing-claim, labels: {pf: unresolvable}}, spec: {containers: [{name: c, image: i}], volumes: [{name: v, persistentVolumeClaim: {claimName: nowhere}}]}}
"#;

/// Each pod's node, or its FailedScheduling message.
fn run(started: bool) -> BTreeMap<String, String> {
    let mut objects = Vec::new();
    manifest::parse_str(
        CLUSTER,
        "cluster.yaml",
        &mut objects,
        &mut Default::default(),
    )
    .expect("parse the cluster");
    let config = SchedulerConfig::from_yaml(CONFIG, "config.yaml").expect("parse the config");
    let mut registry = in_tree_registry();
    registry.register(
        NAME,
        Arc::new(move |_args, _h: &Arc<Handle>| Ok(Arc::new(Gate { started }) as Arc<dyn Plugin>)),
    );
    let options = SimulateOptions {
        objects,
        scheduler_config: Some(config),
        seed: 7,
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let r = simulate::run(&options, &registry).expect("simulate");
    assert!(r.invariants.ok, "{:?}", r.invariants);
    r.pods
        .iter()
        .map(|p| {
            let outcome = match (&p.node, &p.reason) {
                (Some(n), _) => format!("on {n}"),
                (None, Some(m)) => format!("pending: {m}"),
                (None, None) => "pending".to_string(),
            };
            (p.name.clone(), outcome)
        })
        .collect()
}

#[test]
fn a_started_pre_filter_decides_as_one_waited_for() {
    let waited = run(false);
    let started = run(true);
    assert_eq!(waited, started);
    // The cases are what they claim to be.
    let at = |pod: &str| waited.get(pod).map(String::as_str).unwrap_or("?");
    assert!(
        at("plain-0").starts_with("on ") && at("plain-0") != "on n1",
        "{waited:?}"
    );
    assert_eq!(
        at("skip"),
        "on n1",
        "Skip lets the closed node take it: {waited:?}"
    );
    assert!(at("reject").contains("gate: not now"), "{waited:?}");
    assert!(at("unresolvable").contains("gate: never"), "{waited:?}");
    assert!(at("error").contains("gate: broken"), "{waited:?}");
    for p in ["narrow-0", "narrow-1"] {
        assert!(at(p) == "on n0" || at(p) == "on n3", "{p}: {waited:?}");
    }
    assert!(at("narrow-big").starts_with("pending"), "{waited:?}");
    assert!(at("too-big").contains("Insufficient cpu"), "{waited:?}");
    assert!(at("missing-claim").contains("nowhere"), "{waited:?}");
    // In order: Gate's Unschedulable lets the later plugins run, and VolumeBinding's
    // UnschedulableAndUnresolvable ends the phase; Gate's own ends it first.
    assert!(at("reject-missing-claim").contains("nowhere"), "{waited:?}");
    assert!(
        at("unresolvable-missing-claim").contains("gate: never"),
        "{waited:?}"
    );
}
