//! The sidecar's replica of the scheduler's snapshot, kept current by the Replicate
//! stream. Calls are evaluated against it at the generation they name.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use switchyard_proto::v1 as pb;
use switchyard_proto::MAX_PENDING_PODS;

use crate::index::{Index, Indexes, NodeSets, PodCounts, PodLists};
use crate::{Node, Pod};

/// A node with the pods placed on it (bound or assumed by the scheduler).
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Node,
    pub pods: Vec<Arc<Pod>>,
}

impl NodeInfo {
    pub fn name(&self) -> &str {
        &self.node.name
    }
    /// Sum of one resource requested by the pods on the node (cpu in millicores).
    pub fn requested(&self, resource: &str) -> i64 {
        self.pods
            .iter()
            .filter_map(|p| p.requests.get(resource))
            .sum()
    }
    /// Allocatable amount of one resource (0 when the node does not report it).
    pub fn allocatable(&self, resource: &str) -> i64 {
        self.node.allocatable.get(resource).copied().unwrap_or(0)
    }
    pub(crate) fn remove_pod(&mut self, uid: &str) -> Option<Arc<Pod>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        Some(self.pods.swap_remove(i))
    }
}

/// The replicated snapshot: nodes by the scheduler's node id, pods by UID.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Generation of the last delta applied.
    generation: u64,
    /// The nodes, densely: a batch names nodes in the scheduler's order, which is
    /// mostly the order they arrived in, so its look-ups walk this memory forwards
    /// instead of probing a map of large entries (a cache miss per node).
    nodes: Vec<NodeInfo>,
    /// Where each node id is in `nodes`.
    slots: Slots,
    by_name: HashMap<String, u32>,
    /// Where each replicated pod is (`None`: its node is not in the replica).
    pods: HashMap<String, (Arc<Pod>, Option<u32>)>,
    /// Pods of CycleStart messages not yet placed, for `PodUpdate`s that name them.
    pending: HashMap<String, Arc<Pod>>,
    /// The plugins' declared indexes, kept current by every delta.
    indexes: Indexes,
}

/// Node id → position in `Snapshot::nodes`. The scheduler numbers nodes densely
/// from 1, so ids index a vector (a probe of a hashed map per node was a tenth of a
/// sidecar's time in the benchmark); ids too large for that go to a map.
#[derive(Debug, Default)]
struct Slots {
    dense: Vec<u32>,
    sparse: FxHashMap<u32, u32>,
}

/// Ids below this are indexed directly (at most 16 MiB of index).
const DENSE_IDS: u32 = 1 << 22;
const NO_SLOT: u32 = u32::MAX;

impl Slots {
    fn get(&self, id: u32) -> Option<u32> {
        if id < DENSE_IDS {
            self.dense
                .get(id as usize)
                .copied()
                .filter(|&s| s != NO_SLOT)
        } else {
            self.sparse.get(&id).copied()
        }
    }

    fn insert(&mut self, id: u32, slot: u32) {
        if id < DENSE_IDS {
            let i = id as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, NO_SLOT);
            }
            self.dense[i] = slot;
        } else {
            self.sparse.insert(id, slot);
        }
    }

    fn remove(&mut self, id: u32) -> Option<u32> {
        if id < DENSE_IDS {
            let s = self.dense.get_mut(id as usize)?;
            Some(std::mem::replace(s, NO_SLOT)).filter(|&s| s != NO_SLOT)
        } else {
            self.sparse.remove(&id)
        }
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.sparse.clear();
    }
}

impl Snapshot {
    /// A replica holding these nodes and pods, as a full snapshot from the scheduler
    /// would build it: for plugin unit tests (`Cycle::snapshot`). Nodes with id 0
    /// are numbered after the largest id given; a pod goes on the node its
    /// `node_name` names (nowhere when none does). Errors name a duplicate node.
    pub fn from_objects(
        nodes: impl IntoIterator<Item = Node>,
        pods: impl IntoIterator<Item = Pod>,
    ) -> Result<Snapshot, String> {
        let mut nodes: Vec<Node> = nodes.into_iter().collect();
        let mut next = nodes.iter().map(|n| n.id).max().unwrap_or(0);
        let mut names = std::collections::HashSet::new();
        for n in &mut nodes {
            if !names.insert(n.name.clone()) {
                return Err(format!("node {:?} is given twice", n.name));
            }
            if n.id == 0 {
                next += 1;
                n.id = next;
            }
        }
        let mut s = Snapshot::default();
        s.apply(
            1,
            pb::SnapshotDelta {
                full: true,
                upsert_nodes: nodes,
                upsert_pods: pods.into_iter().collect(),
                ..Default::default()
            },
        )?;
        Ok(s)
    }

    /// Keeps `index` from now on (built at once from what the replica holds); the
    /// SDK declares every plugin's [`Plugin::indexes`](crate::Plugin::indexes).
    pub fn declare_index(&mut self, index: &Index) {
        if !self.indexes.declare(index) {
            return;
        }
        self.indexes.clear();
        for ni in &self.nodes {
            self.indexes.node(&ni.node, true);
            for p in &ni.pods {
                self.indexes.pod(p, ni.node.id, true);
            }
        }
    }

    /// This replica with `indexes` declared (for plugin unit tests).
    pub fn with_indexes(mut self, indexes: impl IntoIterator<Item = Index>) -> Snapshot {
        for i in indexes {
            self.declare_index(&i);
        }
        self
    }

    /// Placed pods per node by the value of pod label `key`, when a plugin declared
    /// [`Index::PodsByLabel`] for it.
    pub fn pods_by_label(&self, key: &str) -> Option<&PodCounts> {
        self.indexes.pods_by_label(key)
    }

    /// Placed pods per node by namespace, when a plugin declared
    /// [`Index::PodsByNamespace`].
    pub fn pods_by_namespace(&self) -> Option<&PodCounts> {
        self.indexes.pods_by_namespace()
    }

    /// Placed pods by namespace and the value of pod label `key`, when a plugin
    /// declared [`Index::PodListsByLabel`] for it.
    pub fn pod_lists_by_label(&self, key: &str) -> Option<&PodLists> {
        self.indexes.pod_lists_by_label(key)
    }

    /// Nodes by the value of node label `key`, when a plugin declared
    /// [`Index::NodesByLabel`] for it.
    pub fn nodes_by_label(&self, key: &str) -> Option<&NodeSets> {
        self.indexes.nodes_by_label(key)
    }

    /// Generation of the last snapshot change applied.
    pub fn generation(&self) -> u64 {
        self.generation
    }
    pub fn node(&self, id: u32) -> Option<&NodeInfo> {
        self.nodes.get(self.slots.get(id)? as usize)
    }
    pub fn node_by_name(&self, name: &str) -> Option<&NodeInfo> {
        self.node(*self.by_name.get(name)?)
    }
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.iter()
    }

    fn node_mut(&mut self, id: u32) -> Option<&mut NodeInfo> {
        self.nodes.get_mut(self.slots.get(id)? as usize)
    }

    /// Removes node `id`; the last node takes its slot.
    fn remove_node(&mut self, id: u32) -> Option<NodeInfo> {
        let slot = self.slots.remove(id)? as usize;
        let ni = self.nodes.swap_remove(slot);
        if let Some(moved) = self.nodes.get(slot) {
            self.slots.insert(moved.node.id, slot as u32);
        }
        Some(ni)
    }
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }
    /// A bound or assumed pod by UID.
    pub fn pod(&self, uid: &str) -> Option<&Arc<Pod>> {
        self.pods.get(uid).map(|(p, _)| p)
    }
    /// Every bound or assumed pod.
    pub fn pods(&self) -> impl Iterator<Item = &Arc<Pod>> {
        self.pods.values().map(|(p, _)| p)
    }

    /// The pod of a CycleStart: kept until a delta places it.
    pub(crate) fn note_cycle_pod(&mut self, pod: &Arc<Pod>) {
        if self.pending.len() >= MAX_PENDING_PODS {
            self.pending.clear();
        }
        self.pending.insert(pod.uid.clone(), pod.clone());
    }

    /// Applies one delta. Errors mean the replica cannot be trusted any more (the
    /// scheduler resends a full snapshot when the stream is reopened).
    pub(crate) fn apply(&mut self, generation: u64, d: pb::SnapshotDelta) -> Result<(), String> {
        if d.full {
            self.nodes.clear();
            self.slots.clear();
            self.by_name.clear();
            self.pods.clear();
            self.pending.clear();
            self.indexes.clear();
        }
        // Removals first: a node deleted and re-created arrives with a new id.
        for id in d.remove_nodes {
            if let Some(ni) = self.remove_node(id) {
                self.by_name.remove(&ni.node.name);
                self.indexes.node(&ni.node, false);
                for p in &ni.pods {
                    self.indexes.pod(p, id, false);
                    if let Some(e) = self.pods.get_mut(&p.uid) {
                        e.1 = None;
                    }
                }
            }
        }
        for uid in &d.remove_pods {
            self.remove_pod(uid);
        }
        for n in d.upsert_nodes {
            let id = n.id;
            if let Some(old) = self.by_name.get(&n.name) {
                if *old != id {
                    return Err(format!(
                        "node {:?} arrived with id {id} but the replica has it as {old}",
                        n.name
                    ));
                }
            }
            self.by_name.insert(n.name.clone(), id);
            match self.slots.get(id) {
                Some(slot) => {
                    let ni = &mut self.nodes[slot as usize];
                    if ni.node.name != n.name {
                        self.by_name.remove(&ni.node.name);
                    }
                    self.indexes.node(&ni.node, false);
                    self.indexes.node(&n, true);
                    ni.node = n;
                }
                None => {
                    self.indexes.node(&n, true);
                    self.slots.insert(id, self.nodes.len() as u32);
                    self.nodes.push(NodeInfo {
                        node: n,
                        pods: Vec::new(),
                    });
                }
            }
        }
        for p in d.upsert_pods {
            self.pending.remove(&p.uid);
            self.place(p);
        }
        for u in d.update_pods {
            let known = match self.pods.get(&u.uid) {
                Some((p, _)) => Some(p.clone()),
                None => self.pending.remove(&u.uid),
            };
            let Some(known) = known else {
                return Err(format!(
                    "an update for pod {} the replica does not hold",
                    u.uid
                ));
            };
            self.pending.remove(&u.uid);
            let mut p = (*known).clone();
            p.node_name = u.node_name;
            p.nominated_node_name = u.nominated_node_name;
            p.phase = u.phase;
            p.terminating = u.terminating;
            p.start_time_micros = u.start_time_micros;
            self.place(p);
        }
        self.generation = generation;
        Ok(())
    }

    /// Puts a pod in the replica, on its node, replacing any earlier copy.
    fn place(&mut self, p: Pod) {
        self.remove_pod(&p.uid);
        let pod = Arc::new(p);
        let node = self.by_name.get(&pod.node_name).copied();
        let node = match node.and_then(|id| self.node_mut(id)) {
            Some(ni) => {
                ni.pods.push(pod.clone());
                let id = ni.node.id;
                self.indexes.pod(&pod, id, true);
                Some(id)
            }
            None => None,
        };
        self.pods.insert(pod.uid.clone(), (pod, node));
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some((pod, Some(id))) = self.pods.remove(uid) {
            if let Some(ni) = self.node_mut(id) {
                ni.remove_pod(uid);
                self.indexes.pod(&pod, id, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, name: &str) -> pb::Node {
        pb::Node {
            id,
            name: name.into(),
            ..Default::default()
        }
    }
    fn pod(uid: &str, node: &str, cpu: i64) -> pb::Pod {
        pb::Pod {
            uid: uid.into(),
            name: uid.into(),
            node_name: node.into(),
            requests: [("cpu".to_string(), cpu)].into(),
            ..Default::default()
        }
    }

    /// Every index, as sorted lists, to compare a replica moved by deltas with one
    /// built from scratch.
    fn index_contents(s: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        let pods = |name: &str, c: &PodCounts, out: &mut Vec<String>| {
            for (v, total) in c.values() {
                let mut nodes: Vec<_> = c.nodes(v).collect();
                nodes.sort();
                out.push(format!("{name} {v}={total} {nodes:?}"));
            }
        };
        pods("team", s.pods_by_label("team").unwrap(), &mut out);
        pods("ns", s.pods_by_namespace().unwrap(), &mut out);
        let lists = s.pod_lists_by_label("team").unwrap();
        for (ns, v, n) in lists.values() {
            let mut uids: Vec<_> = lists
                .pods(ns, v)
                .map(|p| format!("{}@{}", p.uid, p.node_name))
                .collect();
            uids.sort();
            assert_eq!(uids.len(), n);
            out.push(format!("list {ns}/{v} {uids:?}"));
        }
        let racks = s.nodes_by_label("rack").unwrap();
        for (v, nodes) in racks.values() {
            let mut nodes = nodes.to_vec();
            nodes.sort();
            out.push(format!("rack {v} {nodes:?} of {}", racks.count()));
        }
        out.sort();
        out
    }

    #[test]
    fn indexes_follow_deltas_as_a_fresh_build_would() {
        let indexes = [
            Index::PodsByLabel("team".into()),
            Index::PodsByNamespace,
            Index::NodesByLabel("rack".into()),
            Index::PodListsByLabel("team".into()),
        ];
        let racked = |id, name: &str, rack: &str| pb::Node {
            labels: [("rack".to_string(), rack.to_string())].into(),
            ..node(id, name)
        };
        let teamed = |uid: &str, node: &str, team: &str, ns: &str| pb::Pod {
            labels: [("team".to_string(), team.to_string())].into(),
            namespace: ns.into(),
            ..pod(uid, node, 1)
        };
        let mut s = Snapshot::default().with_indexes(indexes.clone());
        s.apply(
            1,
            pb::SnapshotDelta {
                full: true,
                upsert_nodes: vec![racked(1, "a", "r1"), racked(2, "b", "r1"), node(3, "c")],
                upsert_pods: vec![
                    teamed("p1", "a", "red", "x"),
                    teamed("p2", "a", "blue", "x"),
                    teamed("p3", "b", "red", "y"),
                    pod("p4", "c", 1),
                ],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.pods_by_label("team").unwrap().on_node("red", 1), 1);
        assert_eq!(s.nodes_by_label("rack").unwrap().count(), 2);
        // p1 moves to c, p2 goes, node b is relabelled, node a removed (p3 stays on
        // b), a new node d arrives and p5 lands on it; p6 names no known node.
        s.apply(
            2,
            pb::SnapshotDelta {
                upsert_nodes: vec![racked(2, "b", "r2"), racked(4, "d", "r1")],
                upsert_pods: vec![
                    teamed("p1", "c", "red", "x"),
                    teamed("p5", "d", "blue", "y"),
                    teamed("p6", "nowhere", "red", "y"),
                ],
                remove_pods: vec!["p2".into()],
                remove_nodes: vec![1],
                ..Default::default()
            },
        )
        .unwrap();
        let fresh = Snapshot::from_objects(
            [racked(2, "b", "r2"), node(3, "c"), racked(4, "d", "r1")],
            [
                teamed("p1", "c", "red", "x"),
                teamed("p3", "b", "red", "y"),
                pod("p4", "c", 1),
                teamed("p5", "d", "blue", "y"),
            ],
        )
        .unwrap()
        .with_indexes(indexes);
        assert_eq!(index_contents(&s), index_contents(&fresh));
        assert_eq!(s.pods_by_label("team").unwrap().total("red"), 2);
        assert!(s.pods_by_label("other").is_none());
    }

    #[test]
    fn deltas_move_pods_and_nodes() {
        let mut s = Snapshot::default();
        s.apply(
            1,
            pb::SnapshotDelta {
                full: true,
                upsert_nodes: vec![node(1, "a"), node(2, "b")],
                upsert_pods: vec![pod("p1", "a", 100), pod("p2", "a", 200)],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.node_by_name("a").unwrap().requested("cpu"), 300);
        // p1 moves to b, p2 goes away, node a is removed.
        s.apply(
            2,
            pb::SnapshotDelta {
                upsert_pods: vec![pod("p1", "b", 100)],
                remove_pods: vec!["p2".into()],
                remove_nodes: vec![1],
                ..Default::default()
            },
        )
        .unwrap();
        assert!(s.node_by_name("a").is_none());
        assert_eq!(s.node(2).unwrap().requested("cpu"), 100);
        assert!(s.pod("p2").is_none());
        assert_eq!(s.generation(), 2);
        // A full snapshot replaces everything.
        s.apply(
            3,
            pb::SnapshotDelta {
                full: true,
                upsert_nodes: vec![node(7, "c")],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.num_nodes(), 1);
        assert!(s.pod("p1").is_none());
    }

    #[test]
    fn removing_a_node_keeps_the_others_reachable_by_id_and_name() {
        let mut s = Snapshot::default();
        let full = pb::SnapshotDelta {
            full: true,
            upsert_nodes: vec![
                node(1, "a"),
                node(2, "b"),
                node(3, "c"),
                node(DENSE_IDS + 7, "far"),
            ],
            upsert_pods: vec![pod("p3", "c", 100)],
            ..Default::default()
        };
        s.apply(1, full).unwrap();
        // The last node moves into the removed node's place.
        let gone = pb::SnapshotDelta {
            remove_nodes: vec![1],
            upsert_nodes: vec![node(4, "d")],
            upsert_pods: vec![pod("p4", "d", 50)],
            ..Default::default()
        };
        s.apply(2, gone).unwrap();
        assert!(s.node(1).is_none());
        assert_eq!(s.node(3).unwrap().name(), "c");
        assert_eq!(s.node_by_name("c").unwrap().requested("cpu"), 100);
        assert_eq!(s.node(4).unwrap().requested("cpu"), 50);
        assert_eq!(s.node(2).unwrap().name(), "b");
        assert_eq!(s.node(DENSE_IDS + 7).unwrap().name(), "far");
        assert!(s.node(DENSE_IDS + 8).is_none() && s.node(99).is_none());
        let mut names: Vec<&str> = s.nodes().map(|n| n.name()).collect();
        names.sort();
        assert_eq!(names, ["b", "c", "d", "far"]);
        let last = pb::SnapshotDelta {
            remove_nodes: vec![4, DENSE_IDS + 7],
            remove_pods: vec!["p3".into()],
            ..Default::default()
        };
        s.apply(3, last).unwrap();
        assert_eq!(s.num_nodes(), 2);
        assert_eq!(s.node(3).unwrap().requested("cpu"), 0);
    }

    #[test]
    fn from_objects_numbers_nodes_and_places_pods() {
        let named = |name: &str| pb::Node {
            name: name.into(),
            ..Default::default()
        };
        let s = Snapshot::from_objects(
            [named("a"), node(5, "b"), named("c")],
            [pod("p1", "c", 100), pod("p2", "gone", 50)],
        )
        .unwrap();
        assert_eq!(s.num_nodes(), 3);
        assert_eq!(s.node(5).unwrap().name(), "b");
        assert_eq!(s.node(6).unwrap().name(), "a");
        assert_eq!(s.node(7).unwrap().name(), "c");
        assert_eq!(s.node_by_name("c").unwrap().requested("cpu"), 100);
        assert_eq!(
            s.pods().count(),
            2,
            "a pod on an unknown node is still held"
        );
        let err = Snapshot::from_objects([named("a"), named("a")], []).unwrap_err();
        assert!(err.contains("\"a\" is given twice"), "{err}");
    }

    #[test]
    fn conflicting_node_id_is_an_error() {
        let mut s = Snapshot::default();
        s.apply(
            1,
            pb::SnapshotDelta {
                full: true,
                upsert_nodes: vec![node(1, "a")],
                ..Default::default()
            },
        )
        .unwrap();
        let err = s
            .apply(
                2,
                pb::SnapshotDelta {
                    upsert_nodes: vec![node(2, "a")],
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(err.contains("id 2"), "{err}");
    }

    #[test]
    fn pod_updates_place_cycle_pods_and_move_replica_pods() {
        let mut s = Snapshot::default();
        let full = pb::SnapshotDelta {
            full: true,
            upsert_nodes: vec![node(1, "a"), node(2, "b")],
            upsert_pods: vec![pod("p1", "a", 100)],
            ..Default::default()
        };
        s.apply(1, full).unwrap();
        s.note_cycle_pod(&Arc::new(pod("c1", "", 300)));
        let update = |uid: &str, node: &str| pb::PodUpdate {
            uid: uid.into(),
            node_name: node.into(),
            phase: "Running".into(),
            ..Default::default()
        };
        s.apply(
            2,
            pb::SnapshotDelta {
                update_pods: vec![update("c1", "b"), update("p1", "b")],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.node(2).unwrap().requested("cpu"), 400, "spec kept");
        assert_eq!(s.node(1).unwrap().pods.len(), 0);
        assert_eq!(s.pod("c1").unwrap().phase, "Running");
        // The CycleStart copy is consumed: a second placement updates the replica's.
        s.apply(
            3,
            pb::SnapshotDelta {
                update_pods: vec![update("c1", "a")],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.node(1).unwrap().requested("cpu"), 300);
        let err = s
            .apply(
                4,
                pb::SnapshotDelta {
                    update_pods: vec![update("nobody", "a")],
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(err.contains("nobody"), "{err}");
    }
}
