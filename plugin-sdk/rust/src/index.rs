//! Indexes the replica keeps current as deltas arrive, so a plugin that looks at the
//! whole cluster (a quota, a gang, rack locality) reads a count in its PreFilter or
//! PreScore instead of scanning every pod of the cluster in every cycle. A plugin
//! declares the indexes it reads ([`Plugin::indexes`](crate::Plugin::indexes)); the
//! SDK builds them when the full snapshot arrives and updates them with each pod and
//! node that a delta adds, moves or removes.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::{Node, Pod};

/// What an index counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Index {
    /// Placed pods by the value of this pod label, per node
    /// ([`Snapshot::pods_by_label`](crate::Snapshot::pods_by_label)). Pods without
    /// the label are not counted.
    PodsByLabel(String),
    /// Placed pods by namespace, per node
    /// ([`Snapshot::pods_by_namespace`](crate::Snapshot::pods_by_namespace)).
    PodsByNamespace,
    /// Nodes by the value of this node label
    /// ([`Snapshot::nodes_by_label`](crate::Snapshot::nodes_by_label)): which nodes
    /// carry it, e.g. a quota's limit or a topology key such as a rack.
    NodesByLabel(String),
    /// The placed pods themselves by namespace and the value of this pod label
    /// ([`Snapshot::pod_lists_by_label`](crate::Snapshot::pod_lists_by_label)): the
    /// members of a gang or a job, to tell which of them are placed and where. Pods
    /// without the label are not listed.
    PodListsByLabel(String),
}

/// Placed pods per node for each value of one key (a label's value, a namespace).
#[derive(Clone, Debug, Default)]
pub struct PodCounts {
    by_value: HashMap<String, ValueCounts>,
}

#[derive(Clone, Debug, Default)]
struct ValueCounts {
    total: u64,
    /// Pods by node id; nodes without any are absent.
    by_node: FxHashMap<u32, u32>,
}

impl PodCounts {
    /// Pods with `value` in the whole replica.
    pub fn total(&self, value: &str) -> u64 {
        self.by_value.get(value).map_or(0, |v| v.total)
    }

    /// Pods with `value` on node `node_id`.
    pub fn on_node(&self, value: &str, node_id: u32) -> u32 {
        self.by_value
            .get(value)
            .and_then(|v| v.by_node.get(&node_id))
            .copied()
            .unwrap_or(0)
    }

    /// The nodes holding pods with `value`, with how many each (in no order): as
    /// long as the nodes that hold them, however large the cluster.
    pub fn nodes(&self, value: &str) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.by_value
            .get(value)
            .into_iter()
            .flat_map(|v| v.by_node.iter().map(|(n, c)| (*n, *c)))
    }

    /// The values counted, each with its total.
    pub fn values(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_value.iter().map(|(k, v)| (k.as_str(), v.total))
    }

    fn add(&mut self, value: &str, node: u32) {
        let v = match self.by_value.get_mut(value) {
            Some(v) => v,
            None => self.by_value.entry(value.to_string()).or_default(),
        };
        v.total += 1;
        *v.by_node.entry(node).or_default() += 1;
    }

    fn remove(&mut self, value: &str, node: u32) {
        let Some(v) = self.by_value.get_mut(value) else {
            return;
        };
        v.total = v.total.saturating_sub(1);
        if let Some(c) = v.by_node.get_mut(&node) {
            *c -= 1;
            if *c == 0 {
                v.by_node.remove(&node);
            }
        }
        if v.total == 0 {
            self.by_value.remove(value);
        }
    }
}

/// Nodes by the value of one node label.
#[derive(Clone, Debug, Default)]
pub struct NodeSets {
    by_value: HashMap<String, Vec<u32>>,
    /// Nodes carrying the label, any value.
    count: usize,
}

impl NodeSets {
    /// How many nodes carry the label (any value).
    pub fn count(&self) -> usize {
        self.count
    }

    /// The ids of the nodes whose label has `value`.
    pub fn nodes(&self, value: &str) -> &[u32] {
        self.by_value.get(value).map_or(&[], Vec::as_slice)
    }

    /// The label's values, each with its nodes.
    pub fn values(&self) -> impl Iterator<Item = (&str, &[u32])> {
        self.by_value
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    fn add(&mut self, value: &str, node: u32) {
        self.by_value
            .entry(value.to_string())
            .or_default()
            .push(node);
        self.count += 1;
    }

    fn remove(&mut self, value: &str, node: u32) {
        if let Some(v) = self.by_value.get_mut(value) {
            if let Some(i) = v.iter().position(|n| *n == node) {
                v.swap_remove(i);
                self.count -= 1;
            }
            if v.is_empty() {
                self.by_value.remove(value);
            }
        }
    }
}

/// Placed pods by namespace and the value of one pod label.
#[derive(Clone, Debug, Default)]
pub struct PodLists {
    /// Namespace → value → pods by UID.
    by_namespace: HashMap<String, HashMap<String, FxHashMap<String, Arc<Pod>>>>,
}

/// A pod without a namespace is in `default`, as the API server defaults it.
fn namespace_or_default(namespace: &str) -> &str {
    if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

impl PodLists {
    fn list(&self, namespace: &str, value: &str) -> Option<&FxHashMap<String, Arc<Pod>>> {
        self.by_namespace
            .get(namespace_or_default(namespace))?
            .get(value)
    }

    /// The placed pods in `namespace` whose label has `value` (in no order). An empty
    /// namespace means `default`.
    pub fn pods(&self, namespace: &str, value: &str) -> impl Iterator<Item = &Arc<Pod>> {
        self.list(namespace, value)
            .into_iter()
            .flat_map(|m| m.values())
    }

    /// How many placed pods in `namespace` have `value`.
    pub fn count(&self, namespace: &str, value: &str) -> usize {
        self.list(namespace, value).map_or(0, |m| m.len())
    }

    /// Every `(namespace, value)` listed, with how many pods.
    pub fn values(&self) -> impl Iterator<Item = (&str, &str, usize)> {
        self.by_namespace.iter().flat_map(|(ns, values)| {
            values
                .iter()
                .map(move |(v, m)| (ns.as_str(), v.as_str(), m.len()))
        })
    }

    fn add(&mut self, value: &str, pod: &Arc<Pod>) {
        self.by_namespace
            .entry(namespace_or_default(&pod.namespace).to_string())
            .or_default()
            .entry(value.to_string())
            .or_default()
            .insert(pod.uid.clone(), pod.clone());
    }

    fn remove(&mut self, value: &str, pod: &Pod) {
        let ns = namespace_or_default(&pod.namespace);
        let Some(values) = self.by_namespace.get_mut(ns) else {
            return;
        };
        if let Some(m) = values.get_mut(value) {
            m.remove(&pod.uid);
            if m.is_empty() {
                values.remove(value);
            }
        }
        if values.is_empty() {
            self.by_namespace.remove(ns);
        }
    }
}

/// The indexes of one replica.
#[derive(Clone, Debug, Default)]
pub(crate) struct Indexes {
    pods_by_label: Vec<(String, PodCounts)>,
    pods_by_namespace: Option<PodCounts>,
    nodes_by_label: Vec<(String, NodeSets)>,
    pod_lists_by_label: Vec<(String, PodLists)>,
}

impl Indexes {
    /// Adds `index` (empty: the caller fills it from the replica).
    pub(crate) fn declare(&mut self, index: &Index) -> bool {
        match index {
            Index::PodsByLabel(k) if !self.pods_by_label.iter().any(|(x, _)| x == k) => {
                self.pods_by_label.push((k.clone(), PodCounts::default()))
            }
            Index::PodsByNamespace if self.pods_by_namespace.is_none() => {
                self.pods_by_namespace = Some(PodCounts::default())
            }
            Index::NodesByLabel(k) if !self.nodes_by_label.iter().any(|(x, _)| x == k) => {
                self.nodes_by_label.push((k.clone(), NodeSets::default()))
            }
            Index::PodListsByLabel(k) if !self.pod_lists_by_label.iter().any(|(x, _)| x == k) => {
                self.pod_lists_by_label
                    .push((k.clone(), PodLists::default()))
            }
            _ => return false,
        }
        true
    }

    /// Empties every index, keeping the declarations.
    pub(crate) fn clear(&mut self) {
        for (_, c) in &mut self.pods_by_label {
            *c = PodCounts::default();
        }
        if let Some(c) = &mut self.pods_by_namespace {
            *c = PodCounts::default();
        }
        for (_, s) in &mut self.nodes_by_label {
            *s = NodeSets::default();
        }
        for (_, l) in &mut self.pod_lists_by_label {
            *l = PodLists::default();
        }
    }

    pub(crate) fn pod_lists_by_label(&self, key: &str) -> Option<&PodLists> {
        self.pod_lists_by_label
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, l)| l)
    }

    pub(crate) fn pods_by_label(&self, key: &str) -> Option<&PodCounts> {
        self.pods_by_label
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, c)| c)
    }

    pub(crate) fn pods_by_namespace(&self) -> Option<&PodCounts> {
        self.pods_by_namespace.as_ref()
    }

    pub(crate) fn nodes_by_label(&self, key: &str) -> Option<&NodeSets> {
        self.nodes_by_label
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s)
    }

    /// A pod placed on node `node` (`add`) or taken off it.
    pub(crate) fn pod(&mut self, pod: &Arc<Pod>, node: u32, add: bool) {
        for (key, counts) in &mut self.pods_by_label {
            if let Some(v) = pod.labels.get(key.as_str()) {
                if add {
                    counts.add(v, node)
                } else {
                    counts.remove(v, node)
                }
            }
        }
        if let Some(counts) = &mut self.pods_by_namespace {
            if add {
                counts.add(&pod.namespace, node)
            } else {
                counts.remove(&pod.namespace, node)
            }
        }
        for (key, lists) in &mut self.pod_lists_by_label {
            if let Some(v) = pod.labels.get(key.as_str()) {
                if add {
                    lists.add(v, pod)
                } else {
                    lists.remove(v, pod)
                }
            }
        }
    }

    /// A node added (`add`) or removed, with the labels it has then.
    pub(crate) fn node(&mut self, node: &Node, add: bool) {
        for (key, sets) in &mut self.nodes_by_label {
            if let Some(v) = node.labels.get(key.as_str()) {
                if add {
                    sets.add(v, node.id)
                } else {
                    sets.remove(v, node.id)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_adds_and_removes_and_forget_empty_values() {
        let mut c = PodCounts::default();
        c.add("red", 1);
        c.add("red", 1);
        c.add("red", 2);
        c.add("blue", 2);
        assert_eq!(
            (c.total("red"), c.on_node("red", 1), c.on_node("red", 3)),
            (3, 2, 0)
        );
        let mut nodes: Vec<_> = c.nodes("red").collect();
        nodes.sort();
        assert_eq!(nodes, vec![(1, 2), (2, 1)]);
        c.remove("red", 1);
        c.remove("red", 1);
        assert_eq!(c.nodes("red").collect::<Vec<_>>(), vec![(2, 1)]);
        c.remove("red", 2);
        c.remove("red", 2); // more removes than adds: no underflow
        assert_eq!(c.total("red"), 0);
        assert_eq!(c.values().count(), 1);
    }

    #[test]
    fn pod_lists_follow_adds_and_removes_by_namespace() {
        let pod = |uid: &str, ns: &str| {
            Arc::new(Pod {
                uid: uid.into(),
                namespace: ns.into(),
                ..Default::default()
            })
        };
        let mut l = PodLists::default();
        let (a, b, c) = (pod("a", ""), pod("b", "default"), pod("c", "other"));
        l.add("g", &a);
        l.add("g", &b);
        l.add("g", &c);
        l.add("g", &a); // the same pod again: listed once
        assert_eq!((l.count("default", "g"), l.count("", "g")), (2, 2));
        assert_eq!(l.count("other", "g"), 1);
        l.remove("g", &a);
        let left: Vec<_> = l.pods("default", "g").map(|p| p.uid.as_str()).collect();
        assert_eq!(left, vec!["b"]);
        l.remove("g", &b);
        l.remove("g", &b);
        assert_eq!(l.values().count(), 1);
    }

    #[test]
    fn node_sets_follow_nodes() {
        let mut s = NodeSets::default();
        s.add("r1", 1);
        s.add("r1", 2);
        s.add("r2", 3);
        assert_eq!((s.count(), s.nodes("r1").len()), (3, 2));
        s.remove("r1", 1);
        s.remove("r1", 9);
        assert_eq!((s.count(), s.nodes("r1")), (2, &[2][..]));
    }
}
