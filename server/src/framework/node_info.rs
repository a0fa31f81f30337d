//! `NodeInfo`: a node with the pods on it and what they use, as plugins read it.
//!
//! The cache owns one per node and updates it in place; snapshots share it by `Arc`
//! and the cache copies it on write (`Arc::make_mut`), so a cycle's snapshot never
//! changes under the plugins and only changed nodes are ever copied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use super::pod_list::PodList;
use crate::model::pod::{HostPort, Protocol};
use crate::model::{Node, Pod, Resource};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static NODE_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Process-wide monotonically increasing generation, bumped on every NodeInfo change
/// (upstream `nextGeneration`).
pub fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed) + 1
}

/// The wildcard host IP: a port bound on it conflicts with the same port on any IP.
pub const DEFAULT_BIND_ALL_HOST_IP: &str = "0.0.0.0";

/// Host ports in use on a node, as (ip, protocol, port) triples. Nodes use few host
/// ports, so a vector beats nested maps.
#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct HostPortInfo(Vec<(Box<str>, Protocol, i32)>);

impl HostPortInfo {
    pub fn add(&mut self, p: &HostPort) {
        if p.port <= 0 {
            return;
        }
        if !self
            .0
            .iter()
            .any(|(ip, proto, port)| **ip == *p.ip && *proto == p.protocol && *port == p.port)
        {
            self.0.push((p.ip.clone(), p.protocol, p.port));
        }
    }

    /// Removes one use of the port. Upstream keeps a set per IP, so two pods binding
    /// the same triple (only possible through a race) share one entry, as here.
    pub fn remove(&mut self, p: &HostPort) {
        if let Some(i) = self
            .0
            .iter()
            .position(|(ip, proto, port)| **ip == *p.ip && *proto == p.protocol && *port == p.port)
        {
            self.0.swap_remove(i);
        }
    }

    /// Upstream `HostPortInfo.CheckConflict`: `0.0.0.0` on either side conflicts with
    /// any IP; otherwise only the same IP does.
    pub fn conflicts(&self, p: &HostPort) -> bool {
        if p.port <= 0 {
            return false;
        }
        let wildcard = *p.ip == *DEFAULT_BIND_ALL_HOST_IP;
        self.0.iter().any(|(ip, proto, port)| {
            *proto == p.protocol
                && *port == p.port
                && (wildcard || **ip == *DEFAULT_BIND_ALL_HOST_IP || **ip == *p.ip)
        })
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The pods last added by [`NodeInfo::with_added_pods`] and the resulting copy.
type AddedView = (SmallVec<[Arc<Pod>; 2]>, Arc<NodeInfo>);

/// A snapshot node's copy with its nominated pods added. Filter needs that copy on
/// every node holding a nomination, in every cycle; building it once per change of the
/// node or its nominations, instead of per cycle, keeps preemption-heavy workloads
/// from going quadratic in copies. Never cloned: a copied NodeInfo starts empty.
#[derive(Default)]
struct AddedPodsView(Mutex<Option<Arc<AddedView>>>);

impl Clone for AddedPodsView {
    fn clone(&self) -> Self {
        AddedPodsView::default()
    }
}

impl std::fmt::Debug for AddedPodsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AddedPodsView")
    }
}

/// CPU and memory with upstream's defaults for containers that request none.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct NonZeroResource {
    pub milli_cpu: i64,
    pub memory: i64,
}

/// Fields are laid out hot-first (`repr(C)`): a filter pass over hundreds of nodes then
/// touches the first cache lines of each node info and rarely the `Node` itself.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct NodeInfo {
    /// `None` for a "ghost": the node was deleted while pods on it still await their
    /// delete events. Ghosts never appear in snapshots.
    node: Option<Arc<Node>>,
    /// Copied from the node: cordoned.
    pub unschedulable: bool,
    /// Copied from the node: it has a NoSchedule or NoExecute taint.
    pub has_hard_taints: bool,
    /// Copied from the node: it has a PreferNoSchedule taint (TaintToleration's Score
    /// reads the node's taints only then).
    pub has_soft_taints: bool,
    /// A number for this node, stable while the cache holds it (copies keep it): remote
    /// plugins name nodes by it instead of by name. In the first cache line, as the
    /// flags, for plugins that look per-node values up by it.
    pub id: u32,
    pub pods: PodList,
    /// Sum of the pods' effective requests.
    pub requested: Resource,
    pub allocatable: Resource,
    /// Sum of the pods' non-zero CPU and memory (spreading only).
    pub non_zero_requested: NonZeroResource,
    pub used_ports: HostPortInfo,
    pub generation: u64,
    /// Pods with any inter-pod (anti-)affinity term.
    pub pods_with_affinity: Vec<Arc<Pod>>,
    /// Pods with a required anti-affinity term.
    pub pods_with_required_anti_affinity: Vec<Arc<Pod>>,
    added_view: AddedPodsView,
}

impl Default for NodeInfo {
    fn default() -> Self {
        NodeInfo {
            node: None,
            unschedulable: false,
            has_hard_taints: false,
            has_soft_taints: false,
            pods: PodList::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            used_ports: HostPortInfo::default(),
            requested: Resource::default(),
            non_zero_requested: NonZeroResource::default(),
            allocatable: Resource::default(),
            generation: next_generation(),
            id: 0,
            added_view: AddedPodsView::default(),
        }
    }
}

/// How many nodes ahead a loop over node infos asks for the next one's first cache
/// lines (see [`prefetch`]).
pub const PREFETCH_AHEAD: usize = 4;

/// Asks the CPU to start loading the first cache lines of a node info (its hot fields:
/// flags, pods, requested and allocatable) that a loop will reach a few nodes later.
/// A pass over hundreds of node infos is bound by these misses, not by the checks.
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch(ni: &NodeInfo) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (ni as *const NodeInfo).cast::<i8>();
        for line in 0..4 {
            // SAFETY: a prefetch is a hint that never faults and changes no memory; SSE,
            // which it needs, is part of every x86_64 target.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line * 64)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ni;
}

/// [`prefetch`] for the node info a loop over `nodes` reaches [`PREFETCH_AHEAD`] steps
/// after `i` (nothing past the end).
#[inline(always)]
pub fn prefetch_ahead(nodes: &[&NodeInfo], i: usize) {
    if let Some(ni) = nodes.get(i + PREFETCH_AHEAD) {
        prefetch(ni);
    }
}

impl NodeInfo {
    /// A node info with an id unique in this process (tests and standalone use; the
    /// cache numbers its own with [`with_id`](Self::with_id)).
    pub fn new(node: Arc<Node>) -> Self {
        let mut ni = NodeInfo::with_id(NODE_ID.fetch_add(1, Ordering::Relaxed).wrapping_add(1));
        ni.set_node(node);
        ni
    }

    /// An empty node info numbered `id`.
    pub fn with_id(id: u32) -> Self {
        NodeInfo {
            id,
            ..NodeInfo::default()
        }
    }

    /// The node. Only ghosts lack one, and ghosts never reach plugins; the empty node
    /// fallback keeps plugin code free of unwraps.
    pub fn node(&self) -> &Node {
        match &self.node {
            Some(n) => n,
            None => &EMPTY_NODE,
        }
    }

    pub fn node_arc(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    pub fn has_node(&self) -> bool {
        self.node.is_some()
    }

    pub fn name(&self) -> &str {
        &self.node().name
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = node.allocatable.clone();
        self.unschedulable = node.unschedulable;
        self.has_hard_taints = node.taints.iter().any(|t| {
            matches!(
                t.effect,
                crate::model::TaintEffect::NoSchedule | crate::model::TaintEffect::NoExecute
            )
        });
        self.has_soft_taints = node
            .taints
            .iter()
            .any(|t| t.effect == crate::model::TaintEffect::PreferNoSchedule);
        self.node = Some(node);
        self.changed();
    }

    pub fn remove_node(&mut self) {
        self.node = None;
        self.changed();
    }

    /// A new generation; a view built from the old contents is stale.
    fn changed(&mut self) {
        self.generation = next_generation();
        if let Ok(v) = self.added_view.0.get_mut() {
            *v = None;
        }
    }

    /// This node with `pods` added in order, as Filter sees it with nominated pods.
    /// The copy is kept and returned again while the node and the list (compared by
    /// identity) stay the same.
    pub fn with_added_pods(&self, pods: &[&Arc<Pod>]) -> Arc<NodeInfo> {
        let same = |v: &AddedView| {
            v.0.len() == pods.len() && v.0.iter().zip(pods).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        let mut guard = match self.added_view.0.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(v) = guard.as_ref().filter(|v| same(v)) {
            return v.1.clone();
        }
        let mut out = self.clone();
        for p in pods {
            out.add_pod((*p).clone());
        }
        let out = Arc::new(out);
        *guard = Some(Arc::new((
            pods.iter().map(|p| (*p).clone()).collect(),
            out.clone(),
        )));
        out
    }

    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        self.update(&pod, 1);
        if pod.spec.has_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if pod.spec.has_required_anti_affinity() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with this UID; returns it, or `None` if it is not on this node.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<Pod>> {
        let i = self.pods.position(|p| *p.uid == *uid)?;
        self.remove_at(i)
    }

    /// Removes this very pod object (found by identity, searching from the most
    /// recently added). Dry runs use it: it needs no UID comparisons, and removing pods
    /// in reverse order of adding restores the original pod order.
    pub fn remove_pod_object(&mut self, pod: &Arc<Pod>) -> Option<Arc<Pod>> {
        let i = self.pods.rposition(|p| Arc::ptr_eq(p, pod))?;
        self.remove_at(i)
    }

    /// Removes `pod` (this very object), which the caller knows to be at index `i`
    /// (the cache keeps each pod's index, so a node with many pods needs no search);
    /// searches when it is not there. Returns the pod moved into `i`, whose index
    /// changed, if any.
    pub fn remove_pod_at(
        &mut self,
        i: usize,
        pod: &Arc<Pod>,
    ) -> (Option<Arc<Pod>>, Option<&Arc<Pod>>) {
        let i = match self.pods.get(i) {
            Some(p) if Arc::ptr_eq(p, pod) => i,
            _ => match self.pods.rposition(|p| Arc::ptr_eq(p, pod)) {
                Some(i) => i,
                None => return (None, None),
            },
        };
        let removed = self.remove_at(i);
        (removed, self.pods.get(i))
    }

    fn remove_at(&mut self, i: usize) -> Option<Arc<Pod>> {
        let pod = self.pods.swap_remove(i)?;
        for list in [
            &mut self.pods_with_affinity,
            &mut self.pods_with_required_anti_affinity,
        ] {
            if let Some(j) = list.iter().rposition(|p| Arc::ptr_eq(p, &pod)) {
                list.swap_remove(j);
            }
        }
        self.update(&pod, -1);
        Some(pod)
    }

    fn update(&mut self, pod: &Pod, sign: i64) {
        let r = &pod.spec.requests;
        if sign > 0 {
            self.requested.add(r);
        } else {
            self.requested.sub(r);
        }
        // Pods count against `pods` through len(pods), not through `requested`.
        self.requested.allowed_pod_number = 0;
        self.non_zero_requested.milli_cpu += sign * pod.spec.non_zero_milli_cpu;
        self.non_zero_requested.memory += sign * pod.spec.non_zero_memory;
        for p in pod.spec.host_ports.iter() {
            if sign > 0 {
                self.used_ports.add(p);
            } else {
                self.used_ports.remove(p);
            }
        }
        self.changed();
    }
}

static EMPTY_NODE: std::sync::LazyLock<Node> = std::sync::LazyLock::new(|| Node {
    name: "".into(),
    uid: "".into(),
    labels: Default::default(),
    allocatable: Resource::default(),
    taints: Box::new([]),
    unschedulable: false,
    images: Box::new([]),
    declared_features: Default::default(),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    #[test]
    fn added_pods_view_is_shared_until_node_or_pods_change() {
        let mut ni = NodeInfo::new(node("n").cpu(4000).build());
        ni.add_pod(pod("a").cpu(1000).node("n").build());
        let (x, y) = (pod("x").cpu(500).build(), pod("y").cpu(700).build());
        let v1 = ni.with_added_pods(&[&x]);
        assert_eq!(v1.requested.milli_cpu, 1500);
        assert!(
            Arc::ptr_eq(&v1, &ni.with_added_pods(&[&x])),
            "same list: reused"
        );
        let v2 = ni.with_added_pods(&[&x, &y]);
        assert_eq!(v2.requested.milli_cpu, 2200);
        // An equal-looking but different pod object is a different list.
        let x2 = pod("x").cpu(500).build();
        assert!(!Arc::ptr_eq(&v2, &ni.with_added_pods(&[&x2, &y])));
        // A change to the node itself drops the view.
        let v3 = ni.with_added_pods(&[&x]);
        ni.add_pod(pod("b").cpu(1000).node("n").build());
        let v4 = ni.with_added_pods(&[&x]);
        assert!(!Arc::ptr_eq(&v3, &v4));
        assert_eq!(v4.requested.milli_cpu, 2500);
        // Copies never carry a view.
        assert_eq!(ni.clone().with_added_pods(&[&x]).requested.milli_cpu, 2500);
    }

    #[test]
    fn removing_added_objects_in_reverse_restores_the_node() {
        let mut ni = NodeInfo::new(node("n").cpu(4000).build());
        for n in ["a", "b", "c"] {
            ni.add_pod(pod(n).cpu(100).node("n").build());
        }
        let before: Vec<_> = ni.pods.iter().map(|p| p.name.clone()).collect();
        let (x, y) = (pod("x").cpu(500).build(), pod("y").host_port(80).build());
        ni.add_pod(x.clone());
        ni.add_pod(y.clone());
        ni.remove_pod_object(&y);
        ni.remove_pod_object(&x);
        let after: Vec<_> = ni.pods.iter().map(|p| p.name.clone()).collect();
        assert_eq!(before, after);
        assert_eq!(ni.requested.milli_cpu, 300);
        assert!(ni.used_ports.is_empty());
        assert!(ni.remove_pod_object(&x).is_none());
    }

    fn hp(ip: &str, port: i32) -> HostPort {
        HostPort {
            ip: ip.into(),
            protocol: Protocol::Tcp,
            port,
        }
    }

    #[test]
    fn host_port_conflicts_follow_upstream() {
        let mut used = HostPortInfo::default();
        used.add(&hp("127.0.0.1", 8080));
        assert!(used.conflicts(&hp("127.0.0.1", 8080)));
        assert!(used.conflicts(&hp("0.0.0.0", 8080)));
        assert!(!used.conflicts(&hp("127.0.0.2", 8080)));
        assert!(!used.conflicts(&HostPort {
            ip: "127.0.0.1".into(),
            protocol: Protocol::Udp,
            port: 8080
        }));
        used.add(&hp("0.0.0.0", 9090));
        assert!(used.conflicts(&hp("10.0.0.1", 9090)));
        used.remove(&hp("0.0.0.0", 9090));
        assert!(!used.conflicts(&hp("10.0.0.1", 9090)));
        assert!(!used.conflicts(&hp("0.0.0.0", 0)));
    }
}
