//! The cluster the conformance kit replicates to a sidecar: nodes, placed pods and
//! the pods it asks about. Built from manifests (the user's own with `--cluster`, or
//! the demo cluster), converted exactly as the scheduler converts them, so a sidecar
//! sees what it would see in a run.

use std::collections::HashMap;
use std::path::PathBuf;

use switchyard_proto::v1 as pb;

use crate::cluster::manifest::{self, ManifestObject, Object};
use crate::model::convert::{self, PriorityResolver};
use crate::model::PriorityClass;
use crate::remote::convert as wire;

/// The demo cluster, built in so `switchyard conformance ENDPOINT` needs no files.
const DEMO: &str = include_str!("../../../examples/demo/cluster.yaml");

/// At most this many pods are asked about: each costs a few calls per plugin.
const MAX_PROBES: usize = 12;

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    #[error("{origin}: {field}: {message}")]
    Field {
        origin: manifest::Source,
        field: String,
        message: String,
    },
    #[error("{0}: the cluster needs at least two Nodes and one Pod to check a sidecar with")]
    TooSmall(String),
}

#[derive(Clone, Debug)]
pub struct Fixture {
    /// Nodes with their ids (1, 2, ...), in manifest order.
    pub nodes: Vec<pb::Node>,
    /// Pods placed on nodes (`node_name` set).
    pub placed: Vec<pb::Pod>,
    /// Pending pods the kit schedules, one cycle each.
    pub probes: Vec<pb::Pod>,
}

struct Classes(HashMap<String, PriorityClass>);

impl PriorityResolver for Classes {
    fn priority_class(&self, name: &str) -> Option<PriorityClass> {
        self.0
            .get(name)
            .cloned()
            .or_else(|| convert::system_priority_class(name))
    }
    fn global_default(&self) -> Option<PriorityClass> {
        self.0.values().find(|c| c.global_default).cloned()
    }
}

impl Fixture {
    /// Loads `paths`, or the demo cluster when there are none. Pods with
    /// `spec.nodeName` are placed; the others are asked about. When no pod is
    /// placed, every third pending pod is put on a node (round robin) so the
    /// replica holds pods too.
    pub fn load(paths: &[PathBuf]) -> Result<Fixture, FixtureError> {
        let (objects, origin) = if paths.is_empty() {
            let mut out = Vec::new();
            let mut skipped = manifest::Skipped::default();
            manifest::parse_str(DEMO, "examples/demo/cluster.yaml", &mut out, &mut skipped)?;
            (out, "examples/demo/cluster.yaml".to_string())
        } else {
            let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            (
                manifest::load_paths(paths, manifest::DEFAULT_MAX_INPUT_BYTES)?.0,
                names.join(", "),
            )
        };
        Self::from_objects(&objects, &origin)
    }

    fn from_objects(objects: &[ManifestObject], origin: &str) -> Result<Fixture, FixtureError> {
        let (nodes, pods) = Self::convert(objects)?;
        if nodes.len() < 2 || pods.is_empty() {
            return Err(FixtureError::TooSmall(origin.to_string()));
        }
        let (mut placed, mut probes): (Vec<pb::Pod>, Vec<pb::Pod>) =
            pods.into_iter().partition(|p| !p.node_name.is_empty());
        if placed.is_empty() && probes.len() > 1 {
            let mut keep = Vec::new();
            for (i, mut p) in probes.into_iter().enumerate() {
                if i % 3 == 2 {
                    p.node_name = nodes[(i / 3) % nodes.len()].name.clone();
                    p.phase = "Running".into();
                    placed.push(p);
                } else {
                    keep.push(p);
                }
            }
            probes = keep;
        }
        if probes.is_empty() {
            return Err(FixtureError::TooSmall(origin.to_string()));
        }
        probes.truncate(MAX_PROBES);
        Ok(Fixture {
            nodes,
            placed,
            probes,
        })
    }

    /// The Nodes (ids 1, 2, ... in manifest order) and Pods of `objects`, as the
    /// scheduler converts them for the wire.
    fn convert(objects: &[ManifestObject]) -> Result<(Vec<pb::Node>, Vec<pb::Pod>), FixtureError> {
        let field = |o: &ManifestObject, e: convert::FieldError| FixtureError::Field {
            origin: o.source.clone(),
            field: e.field,
            message: e.message,
        };
        let mut classes = HashMap::new();
        for o in objects {
            if let Object::PriorityClass(pc) = &o.object {
                let c = convert::priority_class_from_k8s(pc).map_err(|e| field(o, e))?;
                classes.insert(c.name.to_string(), c);
            }
        }
        let classes = Classes(classes);
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for o in objects {
            match &o.object {
                Object::Node(n) => {
                    let id = nodes.len() as u32 + 1;
                    let node = convert::node_from_k8s(n, || format!("conformance-node-{id}"))
                        .map_err(|e| field(o, e))?;
                    nodes.push(wire::node(id, &node));
                }
                Object::Pod(p) => {
                    let i = pods.len();
                    let pod = convert::pod_from_k8s(p, &classes, || format!("conformance-pod-{i}"))
                        .map_err(|e| field(o, e))?;
                    pods.push(wire::pod(&pod));
                }
                _ => {}
            }
        }
        Ok((nodes, pods))
    }

    /// Manifests as a sidecar would receive them, for plugin test harnesses
    /// (`switchyard snapshot`): one `ReplicateRequest` (generation 1) whose full
    /// snapshot holds the Nodes and the placed Pods (`spec.nodeName` set), followed
    /// in `more` by a `CycleStart` per pending Pod (cycles 1, 2, ... in manifest
    /// order; the profile is its schedulerName).
    pub fn harness_snapshot(paths: &[PathBuf]) -> Result<pb::ReplicateRequest, FixtureError> {
        let objects = manifest::load_paths(paths, manifest::DEFAULT_MAX_INPUT_BYTES)?.0;
        let (nodes, pods) = Self::convert(&objects)?;
        let (placed, pending): (Vec<pb::Pod>, Vec<pb::Pod>) =
            pods.into_iter().partition(|p| !p.node_name.is_empty());
        let more = pending
            .into_iter()
            .enumerate()
            .map(|(i, pod)| pb::ReplicateRequest {
                generation: i as u64 + 2,
                kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                    cycle: i as u64 + 1,
                    profile: pod.scheduler_name.clone(),
                    pod: Some(pod),
                })),
                ..Default::default()
            })
            .collect();
        Ok(pb::ReplicateRequest {
            generation: 1,
            kind: Some(pb::replicate_request::Kind::Delta(pb::SnapshotDelta {
                full: true,
                upsert_nodes: nodes,
                upsert_pods: placed,
                ..Default::default()
            })),
            ack: false,
            more,
        })
    }

    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn full_snapshot(&self) -> pb::SnapshotDelta {
        pb::SnapshotDelta {
            full: true,
            upsert_nodes: self.nodes.clone(),
            upsert_pods: self.placed.clone(),
            ..Default::default()
        }
    }

    /// A change touching every kind of delta, and the fixture it leads to: a node's
    /// labels and taints replaced by another's, a node removed, a node added (a copy
    /// of the first under a new id and name), a probe pod placed, a placed pod
    /// removed, and a placed pod's phase updated.
    pub fn changed(&self) -> (Vec<pb::SnapshotDelta>, Fixture) {
        let mut next = self.clone();
        let mut deltas = Vec::new();
        let n = next.nodes.len();
        // Node 0 takes the labels and taints of the last node.
        let (labels, taints) = (
            next.nodes[n - 1].labels.clone(),
            next.nodes[n - 1].taints.clone(),
        );
        next.nodes[0].labels = labels;
        next.nodes[0].taints = taints;
        deltas.push(pb::SnapshotDelta {
            upsert_nodes: vec![next.nodes[0].clone()],
            ..Default::default()
        });
        // A new node, a copy of node 1 (second) under a new id and name.
        let mut added = next.nodes[1.min(n - 1)].clone();
        added.id = next.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1;
        added.name = format!("{}-copy", added.name);
        added.uid = format!("{}-copy", added.uid);
        next.nodes.push(added.clone());
        deltas.push(pb::SnapshotDelta {
            upsert_nodes: vec![added],
            ..Default::default()
        });
        // The last of the original nodes goes, with its pods.
        let gone = next.nodes.remove(n - 1);
        let mut removed_pods = Vec::new();
        next.placed.retain(|p| {
            let keep = p.node_name != gone.name;
            if !keep {
                removed_pods.push(p.uid.clone());
            }
            keep
        });
        deltas.push(pb::SnapshotDelta {
            remove_nodes: vec![gone.id],
            remove_pods: removed_pods,
            ..Default::default()
        });
        // The last probe is placed on the first node.
        if next.probes.len() > 1 {
            let mut p = next.probes.pop().unwrap_or_default();
            p.node_name = next.nodes[0].name.clone();
            p.phase = "Pending".into();
            next.placed.push(p.clone());
            deltas.push(pb::SnapshotDelta {
                upsert_pods: vec![p],
                ..Default::default()
            });
        }
        // A placed pod removed, another updated.
        if let Some(p) = next.placed.first().cloned() {
            next.placed.remove(0);
            deltas.push(pb::SnapshotDelta {
                remove_pods: vec![p.uid],
                ..Default::default()
            });
        }
        if let Some(p) = next.placed.first_mut() {
            p.phase = "Succeeded".into();
            p.start_time_micros = 1_700_000_000_000_000;
            deltas.push(pb::SnapshotDelta {
                update_pods: vec![pb::PodUpdate {
                    uid: p.uid.clone(),
                    node_name: p.node_name.clone(),
                    nominated_node_name: p.nominated_node_name.clone(),
                    phase: p.phase.clone(),
                    terminating: p.terminating,
                    start_time_micros: p.start_time_micros,
                }],
                ..Default::default()
            });
        }
        (deltas, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_cluster_makes_a_fixture_and_its_change_is_consistent() {
        let f = Fixture::load(&[]).expect("demo");
        assert!(f.nodes.len() >= 2 && !f.probes.is_empty() && !f.placed.is_empty());
        let ids: std::collections::HashSet<u32> = f.node_ids().into_iter().collect();
        assert_eq!(ids.len(), f.nodes.len(), "ids are distinct");
        let (deltas, next) = f.changed();
        assert!(deltas.len() >= 5);
        // Every placed pod of the changed fixture sits on one of its nodes.
        for p in &next.placed {
            assert!(
                next.nodes.iter().any(|n| n.name == p.node_name),
                "{}",
                p.name
            );
        }
        assert_eq!(next.nodes.len(), f.nodes.len());
    }

    #[test]
    fn a_cluster_without_pods_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("sy-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nodes.yaml");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: '1', memory: 1Gi, pods: '10'}}\n",
        )
        .unwrap();
        let e = Fixture::load(&[path]).unwrap_err().to_string();
        assert!(
            e.contains("nodes.yaml") && e.contains("at least two Nodes"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
