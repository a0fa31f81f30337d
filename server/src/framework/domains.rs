//! Topology domains, numbered. PodTopologySpread's and InterPodAffinity's Filter ask,
//! per node and per pod, "how many matching pods are in this node's domain"; reading
//! the node's label and hashing its value for that costs more than the rest of the
//! check. With the domains numbered and each node's number kept by node id, the answer
//! is a lookup by an integer and a vector index.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::derived::{Change, NodeDerived};
use super::node_info::NodeInfo;

/// One topology key's domains, numbered, and each node's domain by node id. Numbers
/// are not reused until the node list changes (which starts over). Cycle states share
/// it (`Arc`); it is copied only when a node's domain changes while one holds it.
#[derive(Clone, Default, Debug)]
pub struct DomainNumbers {
    /// By node id: the number of its domain, [`NONE`] for nodes without the key. The
    /// cache hands out ids from 1 up, so this is dense; a vector read is a fraction of
    /// a hash look-up in the filter loop.
    by_node: Vec<u32>,
    /// Two nodes were seen with one id (node infos not numbered by one cache, as in
    /// hand-built snapshots), or an id past [`MAX_DENSE_ID`]: then `by_node` is not
    /// used and readers go by label.
    pub ambiguous: bool,
    pub names: Vec<Arc<str>>,
    pub by_name: FxHashMap<Arc<str>, u32>,
    /// By number: the domain's place in name order, worked out when first asked after
    /// a name was added. Ties broken by name then compare integers, not text (4,000
    /// hostname domains with equal counts made that comparison a PreFilter's largest
    /// cost).
    rank: std::sync::OnceLock<Vec<u32>>,
}

/// A node's domain for one topology key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain<'a> {
    /// The node lacks the key.
    Missing,
    Numbered(u32),
    /// A value no numbered node has (a node the numbers never saw).
    Unnumbered(&'a str),
}

/// No domain (the node lacks the key, or was never numbered).
const NONE: u32 = u32::MAX;

/// Node ids are numbered in a vector up to this (4 MiB of it); a cluster that has
/// seen more nodes come and go than this is read by label.
const MAX_DENSE_ID: u32 = 1 << 20;

impl DomainNumbers {
    /// The domain's number, given one if it has none.
    pub fn number(&mut self, d: &Arc<str>) -> u32 {
        if let Some(&n) = self.by_name.get(&**d) {
            return n;
        }
        let n = self.names.len() as u32;
        self.names.push(d.clone());
        self.by_name.insert(d.clone(), n);
        self.rank = std::sync::OnceLock::new();
        n
    }

    /// By domain number: its place among the names in sorted order.
    pub fn name_ranks(&self) -> &[u32] {
        self.rank.get_or_init(|| {
            let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
            order.sort_unstable_by(|&a, &b| self.names[a as usize].cmp(&self.names[b as usize]));
            let mut rank = vec![0; order.len()];
            for (r, &n) in order.iter().enumerate() {
                rank[n as usize] = r as u32;
            }
            rank
        })
    }

    /// Notes that node `id` (formerly `old_id`) is now in `domain` (`None`: it lacks
    /// the key).
    pub fn set_node(&mut self, old_id: Option<u32>, id: u32, domain: Option<&Arc<str>>) {
        if let Some(slot) = old_id.and_then(|o| self.by_node.get_mut(o as usize)) {
            *slot = NONE;
        }
        let Some(d) = domain else { return };
        let n = self.number(d);
        if id >= MAX_DENSE_ID {
            self.ambiguous = true;
            return;
        }
        let i = id as usize;
        if self.by_node.len() <= i {
            self.by_node.resize(i + 1, NONE);
        }
        self.ambiguous |= self.by_node[i] != NONE;
        self.by_node[i] = n;
    }

    /// The domain number of the node with this id, when ids tell nodes apart and the
    /// node has one.
    pub fn by_id(&self, id: u32) -> Option<u32> {
        if self.ambiguous {
            return None;
        }
        self.by_node
            .get(id as usize)
            .copied()
            .filter(|&n| n != NONE)
    }

    /// The node's domain number: by id when ids tell nodes apart, else (or for a node
    /// not numbered) by its `key` label. `None` when it lacks the key or its domain
    /// has no number.
    pub fn of_node(&self, node: &NodeInfo, key: &str) -> Option<u32> {
        if let Some(n) = self.by_id(node.id) {
            return Some(n);
        }
        let v = node.node().labels.get(key)?;
        self.by_name.get(v).copied()
    }

    /// The node's domain: by id when ids tell nodes apart, else (or for a node not
    /// numbered) by its `key` label, which may name a domain without a number.
    pub fn domain_of<'a>(&self, node: &'a NodeInfo, key: &str) -> Domain<'a> {
        if let Some(n) = self.by_id(node.id) {
            return Domain::Numbered(n);
        }
        match node.node().labels.get(key) {
            None => Domain::Missing,
            Some(v) => match self.by_name.get(v) {
                Some(&n) => Domain::Numbered(n),
                None => Domain::Unnumbered(v),
            },
        }
    }

    /// Nodes with a domain, by id (tests).
    #[cfg(test)]
    fn numbered(&self) -> usize {
        self.by_node.iter().filter(|&&n| n != NONE).count()
    }
}

/// A topology key's [`DomainNumbers`] over every snapshot node, recomputed only for
/// node infos that were replaced.
#[derive(Default)]
pub struct KeyDomains {
    /// Per node: its id and its value for the key.
    nodes: NodeDerived<(u32, Option<Arc<str>>)>,
    numbers: Arc<DomainNumbers>,
}

impl KeyDomains {
    /// Brings the numbers up to date with `all`. Returns `true` when the node list
    /// changed and the domains were numbered afresh: numbers taken before are void.
    pub fn refresh(&mut self, key: &str, all: &[Arc<NodeInfo>]) -> bool {
        let mut renumbered = false;
        let numbers = &mut self.numbers;
        let compute = |ni: &NodeInfo| (ni.id, ni.node().labels.get(key).map(Arc::from));
        self.nodes.refresh(all, compute, |c| match c {
            Change::Reset => {
                renumbered = true;
                *numbers = Arc::default();
            }
            Change::Replaced { old, new } => {
                if old == Some(new) {
                    return;
                }
                Arc::make_mut(numbers).set_node(old.map(|o| o.0), new.0, new.1.as_ref());
            }
        });
        renumbered
    }

    pub fn numbers(&self) -> &Arc<DomainNumbers> {
        &self.numbers
    }

    /// The domain's number, given one if it has none.
    pub fn number(&mut self, d: &Arc<str>) -> u32 {
        match self.numbers.by_name.get(&**d) {
            Some(&n) => n,
            None => Arc::make_mut(&mut self.numbers).number(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, name: &str, zone: Option<&str>) -> Arc<NodeInfo> {
        let mut b = crate::testing::node(name);
        if let Some(z) = zone {
            b = b.label("zone", z);
        }
        let mut ni = NodeInfo::new(b.build());
        ni.id = id;
        Arc::new(ni)
    }

    #[test]
    fn numbers_follow_label_changes_and_start_over_on_a_new_node_list() {
        let mut kd = KeyDomains::default();
        let mut all = vec![
            node(1, "a", Some("z1")),
            node(2, "b", Some("z2")),
            node(3, "c", None),
        ];
        assert!(kd.refresh("zone", &all));
        let n = kd.numbers().clone();
        assert_eq!(n.numbered(), 2);
        assert_eq!(n.names[n.by_id(1).unwrap() as usize].as_ref(), "z1");
        assert_eq!(n.by_id(3), None);

        // b moves to z1, c gains a zone; the snapshot taken before keeps its numbers.
        all[1] = node(2, "b", Some("z1"));
        all[2] = node(3, "c", Some("z3"));
        assert!(!kd.refresh("zone", &all));
        let m = kd.numbers();
        assert_eq!(m.by_id(2), m.by_id(1));
        assert_eq!(m.names[m.by_id(3).unwrap() as usize].as_ref(), "z3");
        assert_eq!(n.names[n.by_id(2).unwrap() as usize].as_ref(), "z2");
        assert_eq!(m.of_node(&all[2], "zone"), m.by_id(3));

        all.pop();
        assert!(kd.refresh("zone", &all));
        assert_eq!(kd.numbers().numbered(), 2);
    }

    #[test]
    fn repeated_ids_make_readers_go_by_label() {
        let mut kd = KeyDomains::default();
        let all = vec![node(0, "a", Some("z1")), node(0, "b", Some("z2"))];
        kd.refresh("zone", &all);
        let n = kd.numbers();
        assert!(n.ambiguous);
        assert_eq!(
            n.names[n.of_node(&all[1], "zone").unwrap() as usize].as_ref(),
            "z2"
        );
        assert_eq!(
            n.names[n.of_node(&all[0], "zone").unwrap() as usize].as_ref(),
            "z1"
        );
    }

    #[test]
    fn ids_past_the_dense_range_make_readers_go_by_label() {
        let mut kd = KeyDomains::default();
        let all = vec![
            node(1, "a", Some("z1")),
            node(MAX_DENSE_ID, "b", Some("z2")),
        ];
        kd.refresh("zone", &all);
        let n = kd.numbers();
        assert!(n.ambiguous);
        assert_eq!(n.by_id(1), None);
        let d = n.of_node(&all[1], "zone").unwrap();
        assert_eq!(n.names[d as usize].as_ref(), "z2");
    }
}
