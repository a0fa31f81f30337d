//! The per-cycle snapshot: the only truth plugins see during a scheduling cycle.
//! Node infos are shared with the cache by `Arc`; the cache replaces only those that
//! changed since the previous snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::node_info::NodeInfo;
use crate::model::node::WorkloadSelector;
use crate::model::{Labels, PodDisruptionBudget};

#[derive(Clone, Default)]
pub struct Snapshot {
    /// Nodes in node-tree order (zones interleaved).
    pub(crate) node_infos: Vec<Arc<NodeInfo>>,
    pub(crate) index: rustc_hash::FxHashMap<Arc<str>, usize>,
    /// Positions of nodes that have pods with (anti-)affinity, in list order.
    pub(crate) have_pods_with_affinity: Vec<usize>,
    /// Positions of nodes that have pods with required anti-affinity, in list order.
    pub(crate) have_pods_with_required_anti_affinity: Vec<usize>,
    /// How many nodes have each image (by name as nodes report it).
    pub(crate) image_nodes: Arc<HashMap<Box<str>, usize>>,
    /// Namespace labels, for namespaceSelector in affinity terms.
    pub(crate) namespaces: Arc<HashMap<Arc<str>, Labels>>,
    pub(crate) pdbs: Arc<Vec<Arc<PodDisruptionBudget>>>,
    /// Services and controllers' selectors (default topology spreading).
    pub(crate) workload_selectors: Arc<Vec<Arc<WorkloadSelector>>>,
    pub(crate) generation: u64,
    /// Bumped by every cache update of this snapshot.
    pub(crate) update_seq: u64,
    /// Positions replaced by the last update (when it did not rebuild the list).
    pub(crate) last_changed: Vec<usize>,
    /// The last update rebuilt the node list (nodes added or removed).
    pub(crate) last_rebuilt: bool,
}

impl Snapshot {
    /// Builds a snapshot directly from node infos (tests and tools).
    pub fn from_node_infos(infos: Vec<NodeInfo>) -> Self {
        let mut s = Snapshot::default();
        let mut images: HashMap<Box<str>, usize> = HashMap::new();
        for ni in infos {
            for img in ni.node().images.iter() {
                *images.entry(img.name.clone()).or_default() += 1;
            }
            s.generation = s.generation.max(ni.generation);
            s.index.insert(ni.node().name.clone(), s.node_infos.len());
            s.node_infos.push(Arc::new(ni));
        }
        s.image_nodes = Arc::new(images);
        s.rebuild_affinity_lists();
        s.update_seq = 1;
        s.last_rebuilt = true;
        s
    }

    pub(crate) fn rebuild_affinity_lists(&mut self) {
        self.have_pods_with_affinity.clear();
        self.have_pods_with_required_anti_affinity.clear();
        for (i, ni) in self.node_infos.iter().enumerate() {
            if !ni.pods_with_affinity.is_empty() {
                self.have_pods_with_affinity.push(i);
            }
            if !ni.pods_with_required_anti_affinity.is_empty() {
                self.have_pods_with_required_anti_affinity.push(i);
            }
        }
    }

    pub fn node_infos(&self) -> &[Arc<NodeInfo>] {
        &self.node_infos
    }

    pub fn num_nodes(&self) -> usize {
        self.node_infos.len()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.node_infos[i])
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn have_pods_with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_affinity
            .iter()
            .map(|&i| &self.node_infos[i])
    }

    pub fn have_pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_required_anti_affinity
            .iter()
            .map(|&i| &self.node_infos[i])
    }

    /// Number of nodes reporting an image name.
    pub fn image_num_nodes(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&Labels> {
        self.namespaces.get(namespace)
    }

    pub fn pdbs(&self) -> &[Arc<PodDisruptionBudget>] {
        &self.pdbs
    }

    pub fn workload_selectors(&self) -> &[Arc<WorkloadSelector>] {
        &self.workload_selectors
    }

    /// Test and tool helper: replaces the namespace labels.
    pub fn set_namespaces(&mut self, ns: impl IntoIterator<Item = (Arc<str>, Labels)>) {
        self.namespaces = Arc::new(ns.into_iter().collect());
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Counts the cache updates applied to this snapshot.
    pub fn update_seq(&self) -> u64 {
        self.update_seq
    }

    /// What the last update changed: `None` when it rebuilt the whole list, else the
    /// positions of the node infos it replaced.
    pub fn last_changes(&self) -> Option<&[usize]> {
        (!self.last_rebuilt).then_some(&self.last_changed[..])
    }
}
