//! Node names grouped by zone, listed round-robin across zones (upstream `nodeTree`),
//! so that the filter loop, which stops after enough feasible nodes, spreads its
//! choices over zones instead of exhausting one first.

use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::model::Node;

/// Upstream `GetZoneKey`: region and zone from the beta labels first, then the GA ones;
/// `region:\0:zone`, or empty when the node has neither.
pub fn zone_key(node: &Node) -> String {
    let l = &node.labels;
    let zone = l
        .get("failure-domain.beta.kubernetes.io/zone")
        .or_else(|| l.get("topology.kubernetes.io/zone"))
        .unwrap_or("");
    let region = l
        .get("failure-domain.beta.kubernetes.io/region")
        .or_else(|| l.get("topology.kubernetes.io/region"))
        .unwrap_or("");
    if zone.is_empty() && region.is_empty() {
        String::new()
    } else {
        format!("{region}:\x00:{zone}")
    }
}

#[derive(Default, Debug)]
pub struct NodeTree {
    /// Zones in insertion order, each with its nodes in insertion order.
    zones: Vec<(String, Vec<Arc<str>>)>,
    /// (zone, node) pairs listed: upstream scans the zone's list for a repeat, which is
    /// quadratic when thousands of nodes join one zone.
    members: FxHashSet<(String, Arc<str>)>,
    num_nodes: usize,
}

impl NodeTree {
    pub fn add_node(&mut self, node: &Node) {
        let key = zone_key(node);
        if !self.members.insert((key.clone(), node.name.clone())) {
            return;
        }
        let zone = match self.zones.iter_mut().position(|(z, _)| *z == key) {
            Some(i) => &mut self.zones[i].1,
            None => {
                self.zones.push((key, Vec::new()));
                let last = self.zones.len() - 1;
                &mut self.zones[last].1
            }
        };
        zone.push(node.name.clone());
        self.num_nodes += 1;
    }

    pub fn remove_node(&mut self, node: &Node) -> bool {
        let key = zone_key(node);
        let Some(zi) = self.zones.iter().position(|(z, _)| *z == key) else {
            return false;
        };
        let zone = &mut self.zones[zi].1;
        let Some(ni) = zone.iter().position(|n| *n == node.name) else {
            return false;
        };
        zone.remove(ni);
        self.members.remove(&(key, node.name.clone()));
        if zone.is_empty() {
            self.zones.remove(zi);
        }
        self.num_nodes -= 1;
        true
    }

    /// Moves a node whose zone changed.
    pub fn update_node(&mut self, old: &Node, new: &Node) {
        if zone_key(old) == zone_key(new) {
            return;
        }
        self.remove_node(old);
        self.add_node(new);
    }

    pub fn len(&self) -> usize {
        self.num_nodes
    }

    pub fn is_empty(&self) -> bool {
        self.num_nodes == 0
    }

    /// All node names, one from each zone in turn.
    pub fn list(&self) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(self.num_nodes);
        let mut i = 0;
        while out.len() < self.num_nodes {
            for (_, nodes) in &self.zones {
                if let Some(n) = nodes.get(i) {
                    out.push(n.clone());
                }
            }
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Labels;

    fn node(name: &str, zone: Option<&str>) -> Node {
        Node {
            name: name.into(),
            uid: name.into(),
            labels: Labels::new(zone.map(|z| ("topology.kubernetes.io/zone", z))),
            allocatable: Default::default(),
            taints: Box::new([]),
            unschedulable: false,
            images: Box::new([]),
            declared_features: Default::default(),
        }
    }

    #[test]
    fn lists_round_robin_over_zones() {
        let mut t = NodeTree::default();
        for (n, z) in [("a1", "A"), ("a2", "A"), ("b1", "B"), ("a3", "A")] {
            t.add_node(&node(n, Some(z)));
        }
        let names: Vec<String> = t.list().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["a1", "b1", "a2", "a3"]);
        // A repeat is listed once; removed, it can come back.
        t.add_node(&node("a2", Some("A")));
        assert_eq!(t.len(), 4);
        assert!(t.remove_node(&node("a3", Some("A"))));
        assert!(!t.remove_node(&node("a3", Some("A"))));
        t.add_node(&node("a3", Some("A")));
        assert_eq!(t.len(), 4);
        assert!(t.remove_node(&node("b1", Some("B"))));
        assert_eq!(t.len(), 3);
        t.update_node(&node("a2", Some("A")), &node("a2", Some("C")));
        let names: Vec<String> = t.list().iter().map(|s| s.to_string()).collect();
        assert_eq!(names, ["a1", "a2", "a3"]);
    }
}
