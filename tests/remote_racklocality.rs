//! The topology example end to end: RackLocality (the pods of a job packed by rack)
//! written with the Go SDK (plugin-sdk/go/examples/racklocality) and with the Python
//! SDK (plugin-sdk/python/examples/racklocality.py), each as a sidecar, places every
//! pod of tests/fixtures/racklocality/cluster.yaml where the same plugin written
//! against the framework's traits places it in process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use switchyard::cluster::manifest;
use switchyard::config::SchedulerConfig;
use switchyard::framework::interface::{Plugin, PreScorePlugin, ScorePlugin};
use switchyard::framework::{CycleState, Handle, NodeInfo, Snapshot, Status};
use switchyard::model::Pod;
use switchyard::plugins::helper::default_normalize_score;
use switchyard::plugins::in_tree_registry;
use switchyard::remote::sidecar::{exec_command, Listen, SidecarProcess};
use switchyard::simulate::{self, SimulateOptions};
use switchyard_e2e::{assert_same_placements, Placements};

const NAME: &str = "RackLocality";
const JOB: &str = "switchyard.dev/job";
const RACK: &str = "switchyard.dev/rack";

/// The in-process twin: the job's placed pods (same namespace, other than the pod)
/// counted per rack at PreScore, a node scored by its rack's count, upstream's
/// default normalisation; a pod in no job skipped.
struct RackLocality;

#[derive(Clone)]
struct PerRack(HashMap<String, i64>);

fn rack_of(ni: &NodeInfo) -> Option<&str> {
    ni.node().labels.get(RACK).filter(|r| !r.is_empty())
}

impl Plugin for RackLocality {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for RackLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let Some(job) = pod.labels().get(JOB).filter(|j| !j.is_empty()) else {
            return Status::skip();
        };
        let mut per_rack = HashMap::new();
        for ni in snapshot.node_infos() {
            let Some(rack) = rack_of(ni) else { continue };
            let n = ni
                .pods
                .iter()
                .filter(|p| {
                    p.uid != pod.uid
                        && p.namespace == pod.namespace
                        && p.labels().get(JOB) == Some(job)
                })
                .count() as i64;
            if n > 0 {
                *per_rack.entry(rack.to_string()).or_default() += n;
            }
        }
        state.write(PerRack(per_rack));
        Status::success()
    }
}

impl ScorePlugin for RackLocality {
    fn score(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let per_rack = state
            .read::<PerRack>()
            .ok_or_else(|| Status::error("RackLocality: no PreScore state"))?;
        Ok(rack_of(node)
            .and_then(|r| per_rack.0.get(r))
            .copied()
            .unwrap_or(0))
    }
    fn has_normalize_score(&self) -> bool {
        true
    }
    fn normalize_score(
        &self,
        _state: &CycleState,
        _pod: &Pod,
        _nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        default_normalize_score(100, false, scores);
        Status::success()
    }
}

fn cluster() -> Vec<manifest::ManifestObject> {
    let path = switchyard_e2e::workspace_root().join("tests/fixtures/racklocality/cluster.yaml");
    let text = std::fs::read_to_string(&path).expect("read the fixture");
    let mut objects = Vec::new();
    manifest::parse_str(&text, "cluster.yaml", &mut objects, &mut Default::default())
        .expect("parse the fixture");
    objects
}

fn options(config: SchedulerConfig) -> SimulateOptions {
    SimulateOptions {
        objects: cluster(),
        scheduler_config: Some(config),
        seed: 3,
        timeout: Duration::from_secs(120),
        ..Default::default()
    }
}

fn placements(r: &simulate::Report) -> Placements {
    assert!(r.invariants.ok, "{:?}", r.invariants);
    assert_eq!(r.summary.bound, 64, "{:?}", r.summary);
    switchyard_e2e::placements(r)
}

fn in_process() -> Placements {
    let mut registry = in_tree_registry();
    registry.register(
        NAME,
        Arc::new(|_args, _h: &Arc<Handle>| Ok(Arc::new(RackLocality) as Arc<dyn Plugin>)),
    );
    let mut config = SchedulerConfig::default_config();
    config.enable_everywhere(NAME);
    placements(&simulate::run(&options(config), &registry).expect("simulate"))
}

fn through_sidecar(command: &str, socket: &str) -> Placements {
    let listen = Listen::Unix(switchyard_e2e::sidecar_socket(socket));
    let sidecar = SidecarProcess::start(command, listen, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = SchedulerConfig::default_config();
    config.remote_plugins.push(switchyard_e2e::added_sidecar(
        &sidecar.endpoint,
        NAME,
        Duration::from_secs(10),
    ));
    let r = simulate::run(&options(config), &in_tree_registry()).expect("simulate");
    let [ep] = &r.remote[..] else {
        panic!("one sidecar: {:?}", r.remote);
    };
    assert_eq!((ep.errors, ep.stray_replies), (0, 0), "{ep:?}");
    assert!(ep.calls > 0, "{ep:?}");
    // The plugin scores by a node label: the scheduler scored every round from its
    // PreScore's table, sent as the cycle started, and made no Score call.
    assert!(
        ep.label_scored > 0,
        "no round scored from label scores: {ep:?}"
    );
    drop(sidecar);
    placements(&r)
}

#[test]
fn go_and_python_sidecars_place_pods_as_the_plugin_in_process() {
    let want = in_process();
    // The plugin decides: most of a job's pods share a rack with another of the job.
    let rack = |node: &Option<String>| {
        node.as_deref()
            .and_then(|n| n.split('-').next())
            .map(str::to_string)
    };
    let mut per_job: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for (pod, node) in &want {
        if let (Some(job), Some(rack)) = (pod.rsplit_once('-').map(|(j, _)| j), rack(node)) {
            if !job.contains("solo") {
                *per_job
                    .entry(job.to_string())
                    .or_default()
                    .entry(rack)
                    .or_default() += 1;
            }
        }
    }
    for (job, racks) in &per_job {
        assert!(racks.len() <= 3, "{job} spread over {racks:?}");
    }
    let go = exec_command(
        &switchyard_e2e::go_example("racklocality")
            .display()
            .to_string(),
        &[],
    );
    assert_same_placements("Go", &want, &through_sidecar(&go, "rack-go"));
    let script =
        switchyard_e2e::workspace_root().join("plugin-sdk/python/examples/racklocality.py");
    let python = format!("{} {}", switchyard_e2e::python(), script.display());
    assert_same_placements("Python", &want, &through_sidecar(&python, "rack-python"));
}
