//! `NodeInfo`: a node with the pods on it and what they use, as plugins read it.
//!
//! The cache owns one per node and updates it in place; snapshots share it by `Arc`
//! and the cache copies it on write (`Arc::make_mut`), so a cycle's snapshot never
//! changes under the plugins and only changed nodes are ever copied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::model::pod::{HostPort, Protocol};
use crate::model::{Node, Pod, Resource};

static GENERATION: AtomicU64 = AtomicU64::new(0);

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
    pub pods: Vec<Arc<Pod>>,
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
}

impl Default for NodeInfo {
    fn default() -> Self {
        NodeInfo {
            node: None,
            unschedulable: false,
            has_hard_taints: false,
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            used_ports: HostPortInfo::default(),
            requested: Resource::default(),
            non_zero_requested: NonZeroResource::default(),
            allocatable: Resource::default(),
            generation: next_generation(),
        }
    }
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let mut ni = NodeInfo::default();
        ni.set_node(node);
        ni
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
        self.node = Some(node);
        self.generation = next_generation();
    }

    pub fn remove_node(&mut self) {
        self.node = None;
        self.generation = next_generation();
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
        let i = self.pods.iter().position(|p| *p.uid == *uid)?;
        let pod = self.pods.swap_remove(i);
        for list in [
            &mut self.pods_with_affinity,
            &mut self.pods_with_required_anti_affinity,
        ] {
            if let Some(j) = list.iter().position(|p| *p.uid == *uid) {
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
        self.generation = next_generation();
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
});

#[cfg(test)]
mod tests {
    use super::*;

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
