//! The scheduler's cluster cache: nodes and the pods placed on them, including pods the
//! scheduler has *assumed* onto a node before their binding is confirmed. It is the
//! single writer; each scheduling cycle reads an incrementally updated [`Snapshot`].
//!
//! Plugins never touch the cache. The owner (the scheduler) serialises access.

mod node_tree;

use std::collections::HashMap;

use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::framework::snapshot::Snapshot;
pub use crate::framework::volumes;
pub use node_tree::{zone_key, NodeTree};

use crate::framework::node_info::NodeInfo;
use crate::model::node::{WorkloadKind, WorkloadSelector};
use crate::model::{Labels, Namespace, Node, Pod, PodDisruptionBudget, Uid};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("pod {0} is in the cache, so can't be assumed")]
    AlreadyCached(String),
    #[error("pod {0} has no node, so can't be assumed")]
    NoNode(String),
    #[error("pod {pod} was assumed on {assumed} but assigned to {actual}")]
    NodeMismatch {
        pod: String,
        assumed: String,
        actual: String,
    },
    #[error("pod {0} is not assumed, so it cannot be removed or forgotten")]
    NotAssumed(String),
    #[error("pod {0} was already in added state")]
    AlreadyAdded(String),
    #[error("pod {0} is not added to scheduler cache, so cannot be updated")]
    NotAdded(String),
    #[error("assumed pod {0} should not be updated")]
    AssumedUpdate(String),
    #[error("pod {0} is not found in scheduler cache, so cannot be removed from it")]
    NotFound(String),
    #[error("node {0} is not found")]
    NodeNotFound(String),
}

type Result<T, E = CacheError> = std::result::Result<T, E>;

struct PodState {
    pod: Arc<Pod>,
    /// Set when an assumed pod's binding finished; the pod expires after it unless an
    /// informer event confirms it first.
    deadline: Option<Instant>,
    binding_finished: bool,
    /// Where the pod is in its node info's pod list, so removing it needs no search
    /// (a node may hold tens of thousands of pods).
    slot: usize,
}

pub struct Cache {
    /// Every node info, including ghosts (node deleted, pods not yet).
    nodes: FxHashMap<Arc<str>, Arc<NodeInfo>>,
    /// The last `NodeInfo::id` given out. Ids are this cache's: small (a protobuf
    /// varint of two bytes below 16384 nodes on every call to a sidecar) and not used
    /// up by node infos built for other purposes.
    last_node_id: u32,
    pod_states: FxHashMap<Uid, PodState>,
    assumed: FxHashSet<Uid>,
    node_tree: NodeTree,
    /// Nodes changed since the last snapshot.
    dirty: FxHashSet<Arc<str>>,
    /// A node was added or removed: the snapshot's node list must be rebuilt.
    structure_changed: bool,
    image_nodes: HashMap<Box<str>, usize>,
    images_changed: bool,
    namespaces: HashMap<Arc<str>, Labels>,
    namespaces_changed: bool,
    pdbs: HashMap<(Arc<str>, Arc<str>), Arc<PodDisruptionBudget>>,
    pdbs_changed: bool,
    selectors: Vec<Arc<WorkloadSelector>>,
    selectors_changed: bool,
    /// How long an assumed pod whose binding finished may stay unconfirmed; zero means
    /// forever (upstream's choice since 1.25: informers always deliver the bind).
    assumed_pod_ttl: Duration,
}

fn pod_key(pod: &Pod) -> String {
    format!("{}/{}({})", pod.namespace, pod.name, pod.uid)
}

impl Cache {
    pub fn new(assumed_pod_ttl: Duration) -> Self {
        Cache {
            nodes: FxHashMap::default(),
            last_node_id: 0,
            pod_states: FxHashMap::default(),
            assumed: FxHashSet::default(),
            node_tree: NodeTree::default(),
            dirty: FxHashSet::default(),
            structure_changed: true,
            image_nodes: HashMap::new(),
            images_changed: true,
            namespaces: HashMap::new(),
            namespaces_changed: true,
            pdbs: HashMap::new(),
            pdbs_changed: true,
            selectors: Vec::new(),
            selectors_changed: true,
            assumed_pod_ttl,
        }
    }

    fn node_info_mut(&mut self, name: &Arc<str>) -> &mut NodeInfo {
        self.dirty.insert(name.clone());
        let last = &mut self.last_node_id;
        Arc::make_mut(self.nodes.entry(name.clone()).or_insert_with(|| {
            *last = last.wrapping_add(1).max(1);
            Arc::new(NodeInfo::with_id(*last))
        }))
    }

    fn add_images(&mut self, node: &Node, sign: isize) {
        if node.images.is_empty() {
            return;
        }
        for img in node.images.iter() {
            let e = self.image_nodes.entry(img.name.clone()).or_default();
            *e = e.saturating_add_signed(sign);
            if *e == 0 {
                self.image_nodes.remove(&img.name);
            }
        }
        self.images_changed = true;
    }

    pub fn add_node(&mut self, node: Arc<Node>) {
        let name = node.name.clone();
        if let Some(old) = self.nodes.get(&name).and_then(|ni| ni.node_arc().cloned()) {
            self.update_node(&old, node);
            return;
        }
        self.node_tree.add_node(&node);
        self.add_images(&node, 1);
        self.node_info_mut(&name).set_node(node);
        self.structure_changed = true;
    }

    pub fn update_node(&mut self, old: &Node, new: Arc<Node>) {
        let name = new.name.clone();
        let existing = self.nodes.get(&name).and_then(|ni| ni.node_arc().cloned());
        match existing {
            Some(cached) => {
                self.add_images(&cached, -1);
                self.node_tree.update_node(&cached, &new);
                if *zone_key(&cached) != *zone_key(&new) {
                    self.structure_changed = true;
                }
            }
            None => {
                let _ = old;
                self.node_tree.add_node(&new);
                self.structure_changed = true;
            }
        }
        self.add_images(&new, 1);
        self.node_info_mut(&name).set_node(new);
    }

    /// Removes a node. Pods still on it keep a ghost node info until they are removed.
    pub fn remove_node(&mut self, name: &str) -> Result<()> {
        let Some(ni) = self.nodes.get(name) else {
            return Err(CacheError::NodeNotFound(name.to_string()));
        };
        let Some(node) = ni.node_arc().cloned() else {
            return Err(CacheError::NodeNotFound(name.to_string()));
        };
        let has_pods = !ni.pods.is_empty();
        let key = node.name.clone();
        self.node_tree.remove_node(&node);
        self.add_images(&node, -1);
        if !has_pods {
            self.nodes.remove(name);
            self.dirty.insert(key);
        } else {
            self.node_info_mut(&key).remove_node();
        }
        self.structure_changed = true;
        Ok(())
    }

    fn add_pod_to_node(&mut self, pod: Arc<Pod>, assumed: bool) {
        let Some(node) = pod.node_name.clone() else {
            return;
        };
        let uid = pod.uid.clone();
        let ni = self.node_info_mut(&node);
        let slot = ni.pods.len();
        ni.add_pod(pod.clone());
        self.pod_states.insert(
            uid.clone(),
            PodState {
                pod,
                deadline: None,
                binding_finished: false,
                slot,
            },
        );
        if assumed {
            self.assumed.insert(uid);
        }
    }

    /// Removes `cached` (the pod object this cache holds) from its node.
    fn remove_pod_from_node(&mut self, cached: &Arc<Pod>) {
        if let Some(node) = cached.node_name.clone() {
            if self.nodes.contains_key(&node) {
                let slot = self.pod_states.get(&cached.uid).map_or(0, |ps| ps.slot);
                let ni = self.node_info_mut(&node);
                let (_, moved) = ni.remove_pod_at(slot, cached);
                let moved = moved.map(|p| p.uid.clone());
                let gone = ni.pods.is_empty() && !ni.has_node();
                if gone {
                    self.nodes.remove(&node);
                }
                if let Some(ps) = moved.and_then(|uid| self.pod_states.get_mut(&uid)) {
                    ps.slot = slot;
                }
            }
        }
        self.pod_states.remove(&cached.uid);
        self.assumed.remove(&cached.uid);
    }

    /// Places a pod on its (chosen) node before the binding is confirmed.
    pub fn assume_pod(&mut self, pod: Arc<Pod>) -> Result<()> {
        if pod.node_name.is_none() {
            return Err(CacheError::NoNode(pod_key(&pod)));
        }
        if self.pod_states.contains_key(&pod.uid) {
            return Err(CacheError::AlreadyCached(pod_key(&pod)));
        }
        self.add_pod_to_node(pod, true);
        Ok(())
    }

    /// The binding call for an assumed pod returned; start its expiry clock.
    pub fn finish_binding(&mut self, uid: &str, now: Instant) {
        if !self.assumed.contains(uid) {
            return;
        }
        if let Some(ps) = self.pod_states.get_mut(uid) {
            ps.binding_finished = true;
            ps.deadline = (!self.assumed_pod_ttl.is_zero()).then(|| now + self.assumed_pod_ttl);
        }
    }

    /// Undoes an assume (the binding cycle failed). A pod no longer cached is fine.
    pub fn forget_pod(&mut self, pod: &Pod) -> Result<()> {
        let Some(ps) = self.pod_states.get(&pod.uid) else {
            return Ok(());
        };
        if ps.pod.node_name != pod.node_name {
            return Err(CacheError::NodeMismatch {
                pod: pod_key(pod),
                assumed: ps.pod.node_name.as_deref().unwrap_or("").to_string(),
                actual: pod.node_name.as_deref().unwrap_or("").to_string(),
            });
        }
        if !self.assumed.contains(&pod.uid) {
            return Err(CacheError::NotAssumed(pod_key(pod)));
        }
        let cached = ps.pod.clone();
        self.remove_pod_from_node(&cached);
        Ok(())
    }

    /// An assigned pod observed in the cluster: confirms an assumed pod (moving it if it
    /// landed elsewhere) or adds a pod bound by someone else.
    pub fn add_pod(&mut self, pod: Arc<Pod>) -> Result<()> {
        match self.pod_states.get(&pod.uid) {
            Some(ps) if self.assumed.contains(&pod.uid) => {
                let cached = ps.pod.clone();
                self.remove_pod_from_node(&cached);
                self.add_pod_to_node(pod, false);
                Ok(())
            }
            Some(_) => Err(CacheError::AlreadyAdded(pod_key(&pod))),
            None => {
                self.add_pod_to_node(pod, false);
                Ok(())
            }
        }
    }

    pub fn update_pod(&mut self, old: &Pod, new: Arc<Pod>) -> Result<()> {
        let Some(ps) = self.pod_states.get(&old.uid) else {
            return Err(CacheError::NotAdded(pod_key(old)));
        };
        if self.assumed.contains(&old.uid) {
            return Err(CacheError::AssumedUpdate(pod_key(old)));
        }
        let cached = ps.pod.clone();
        self.remove_pod_from_node(&cached);
        self.add_pod_to_node(new, false);
        Ok(())
    }

    pub fn remove_pod(&mut self, pod: &Pod) -> Result<()> {
        let Some(ps) = self.pod_states.get(&pod.uid) else {
            return Err(CacheError::NotFound(pod_key(pod)));
        };
        let cached = ps.pod.clone();
        self.remove_pod_from_node(&cached);
        Ok(())
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.assumed.contains(uid)
    }

    pub fn get_pod(&self, uid: &str) -> Option<&Arc<Pod>> {
        self.pod_states.get(uid).map(|ps| &ps.pod)
    }

    /// Removes assumed pods whose binding finished more than the TTL ago without an
    /// informer confirming it; returns them.
    pub fn cleanup_expired_assumed_pods(&mut self, now: Instant) -> Vec<Arc<Pod>> {
        let expired: Vec<Arc<Pod>> = self
            .assumed
            .iter()
            .filter_map(|uid| self.pod_states.get(uid))
            .filter(|ps| ps.binding_finished && ps.deadline.is_some_and(|d| now > d))
            .map(|ps| ps.pod.clone())
            .collect();
        for p in &expired {
            self.remove_pod_from_node(p);
        }
        expired
    }

    pub fn set_namespace(&mut self, ns: &Namespace) {
        self.namespaces.insert(ns.name.clone(), ns.labels.clone());
        self.namespaces_changed = true;
    }

    pub fn remove_namespace(&mut self, name: &str) {
        self.namespaces.remove(name);
        self.namespaces_changed = true;
    }

    pub fn set_pdb(&mut self, pdb: Arc<PodDisruptionBudget>) {
        self.pdbs
            .insert((pdb.namespace.clone(), pdb.name.clone()), pdb);
        self.pdbs_changed = true;
    }

    pub fn remove_pdb(&mut self, namespace: &str, name: &str) {
        self.pdbs
            .retain(|(ns, n), _| !(**ns == *namespace && **n == *name));
        self.pdbs_changed = true;
    }

    pub fn set_workload_selector(&mut self, sel: Arc<WorkloadSelector>) {
        self.selectors.retain(|s| {
            !(s.kind == sel.kind && s.namespace == sel.namespace && s.name == sel.name)
        });
        self.selectors.push(sel);
        self.selectors_changed = true;
    }

    pub fn remove_workload_selector(&mut self, kind: WorkloadKind, namespace: &str, name: &str) {
        self.selectors
            .retain(|s| !(s.kind == kind && *s.namespace == *namespace && *s.name == *name));
        self.selectors_changed = true;
    }

    pub fn node_count(&self) -> usize {
        self.node_tree.len()
    }

    pub fn pod_count(&self) -> usize {
        self.pod_states.len()
    }

    pub fn assumed_count(&self) -> usize {
        self.assumed.len()
    }

    /// Brings `snapshot` up to date, copying only node infos that changed.
    pub fn update_snapshot(&mut self, snapshot: &mut Snapshot) {
        let mut lists_changed = self.structure_changed;
        snapshot.update_seq += 1;
        snapshot.last_changed.clear();
        snapshot.last_rebuilt = self.structure_changed;
        if !self.structure_changed {
            for name in self.dirty.drain() {
                let Some(ni) = self.nodes.get(&name) else {
                    continue;
                };
                if let Some(&i) = snapshot.index.get(&name) {
                    let old = &snapshot.node_infos[i];
                    if old.pods_with_affinity.is_empty() != ni.pods_with_affinity.is_empty()
                        || old.pods_with_required_anti_affinity.is_empty()
                            != ni.pods_with_required_anti_affinity.is_empty()
                    {
                        lists_changed = true;
                    }
                    snapshot.generation = snapshot.generation.max(ni.generation);
                    snapshot.node_infos[i] = ni.clone();
                    snapshot.last_changed.push(i);
                }
            }
        } else {
            self.dirty.clear();
            snapshot.node_infos.clear();
            snapshot.index.clear();
            for name in self.node_tree.list() {
                if let Some(ni) = self.nodes.get(&name).filter(|ni| ni.has_node()) {
                    snapshot.generation = snapshot.generation.max(ni.generation);
                    snapshot.index.insert(name, snapshot.node_infos.len());
                    snapshot.node_infos.push(ni.clone());
                }
            }
            self.structure_changed = false;
        }
        if lists_changed {
            snapshot.rebuild_affinity_lists();
        }
        if self.images_changed {
            snapshot.image_nodes = Arc::new(self.image_nodes.clone());
            self.images_changed = false;
        }
        if self.namespaces_changed {
            snapshot.namespaces = Arc::new(self.namespaces.clone());
            self.namespaces_changed = false;
        }
        if self.selectors_changed {
            snapshot.workload_selectors = Arc::new(self.selectors.clone());
            self.selectors_changed = false;
        }
        if self.pdbs_changed {
            let mut v: Vec<_> = self.pdbs.values().cloned().collect();
            v.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            snapshot.pdbs = Arc::new(v);
            self.pdbs_changed = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: i64) -> Arc<Node> {
        crate::testing::node(name).cpu(cpu).build()
    }

    fn pod(name: &str, node: Option<&str>, cpu: i64) -> Arc<Pod> {
        let b = crate::testing::pod(name).cpu(cpu);
        match node {
            Some(n) => b.node(n).build(),
            None => b.build(),
        }
    }

    #[test]
    fn assume_confirm_forget_and_snapshot_sharing() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", 1000));
        c.add_node(node("n2", 1000));
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 2);
        let n2_before = snap.get("n2").unwrap().clone();

        let p = pod("p", Some("n1"), 300);
        c.assume_pod(p.clone()).unwrap();
        assert!(c.is_assumed(&p.uid));
        assert_eq!(
            c.assume_pod(p.clone()),
            Err(CacheError::AlreadyCached("default/p(uid-p)".into()))
        );
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 300);
        // Untouched nodes are shared, not copied.
        assert!(Arc::ptr_eq(&n2_before, snap.get("n2").unwrap()));

        // Informer confirms the binding.
        c.add_pod(p.clone()).unwrap();
        assert!(!c.is_assumed(&p.uid));
        assert_eq!(
            c.forget_pod(&p),
            Err(CacheError::NotAssumed("default/p(uid-p)".into()))
        );

        let q = pod("q", Some("n2"), 200);
        c.assume_pod(q.clone()).unwrap();
        c.forget_pod(&q).unwrap();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 0);
        assert_eq!(snap.get("n2").unwrap().pods.len(), 0);
    }

    #[test]
    fn confirmed_on_another_node_moves_the_pod() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", 1000));
        c.add_node(node("n2", 1000));
        c.assume_pod(pod("p", Some("n1"), 300)).unwrap();
        c.add_pod(pod("p", Some("n2"), 300)).unwrap();
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n1").unwrap().requested.milli_cpu, 0);
        assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 300);
    }

    #[test]
    fn assumed_pods_expire_only_with_a_ttl_after_binding() {
        let t0 = Instant::now();
        let mut c = Cache::new(Duration::from_secs(30));
        c.add_node(node("n1", 1000));
        let p = pod("p", Some("n1"), 300);
        c.assume_pod(p.clone()).unwrap();
        assert!(c
            .cleanup_expired_assumed_pods(t0 + Duration::from_secs(3600))
            .is_empty());
        c.finish_binding(&p.uid, t0);
        assert!(c
            .cleanup_expired_assumed_pods(t0 + Duration::from_secs(10))
            .is_empty());
        assert_eq!(
            c.cleanup_expired_assumed_pods(t0 + Duration::from_secs(31))
                .len(),
            1
        );
        assert_eq!(c.pod_count(), 0);

        let mut never = Cache::new(Duration::ZERO);
        never.add_node(node("n1", 1000));
        never.assume_pod(p.clone()).unwrap();
        never.finish_binding(&p.uid, t0);
        assert!(never
            .cleanup_expired_assumed_pods(t0 + Duration::from_secs(1 << 30))
            .is_empty());
    }

    #[test]
    fn node_removed_with_pods_leaves_a_ghost_until_they_go() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("n1", 1000));
        let p = pod("p", Some("n1"), 300);
        c.add_pod(p.clone()).unwrap();
        c.remove_node("n1").unwrap();
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        assert_eq!(snap.num_nodes(), 0);
        assert_eq!(c.pod_count(), 1);
        c.remove_pod(&p).unwrap();
        assert!(c.nodes.is_empty());
        // A pod seen before its node: the node info waits for the node.
        c.add_pod(pod("early", Some("n3"), 100)).unwrap();
        c.add_node(node("n3", 1000));
        c.update_snapshot(&mut snap);
        assert_eq!(snap.get("n3").unwrap().pods.len(), 1);
    }
}
