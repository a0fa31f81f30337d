//! Per-node values derived from the snapshot, kept across scheduling cycles.
//!
//! Some plugins (PodTopologySpread, InterPodAffinity) must look at every pod in the
//! cluster in every cycle: "how many pods matching this selector are in each zone".
//! Recounting costs O(pods) per cycle, which dominates at thousands of nodes. Snapshot
//! node infos are immutable and replaced when they change, so a value derived from one
//! stays valid for as long as the snapshot hands out the same `Arc`: [`NodeDerived`]
//! keeps the node infos it derived from and recomputes only the ones that were
//! replaced, reporting each change so callers can keep cluster-wide totals up to date.

use std::sync::{Arc, Mutex, MutexGuard};

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::node_info::NodeInfo;

/// Nodes per rayon task when a full rebuild runs in parallel.
const REBUILD_CHUNK: usize = 128;

/// One value per snapshot node, by position.
pub struct NodeDerived<T> {
    /// The node infos the values came from. Holding them keeps identity meaningful:
    /// an `Arc` we hold cannot be freed and reused, nor mutated in place.
    nodes: Vec<Arc<NodeInfo>>,
    values: Vec<T>,
    /// Node id -> position, so a plugin handed a node info (Score, Filter) finds its
    /// value without hashing the node's name.
    positions: FxHashMap<u32, u32>,
}

impl<T> Default for NodeDerived<T> {
    fn default() -> Self {
        NodeDerived {
            nodes: Vec::new(),
            values: Vec::new(),
            positions: FxHashMap::default(),
        }
    }
}

/// What [`NodeDerived::refresh`] reports.
pub enum Change<'a, T> {
    /// The node list changed: forget everything; every node follows as `Replaced`
    /// with no old value.
    Reset,
    /// A node's value was recomputed.
    Replaced { old: Option<&'a T>, new: &'a T },
}

impl<T: Send + Sync> NodeDerived<T> {
    /// Brings the values up to date with `all` (the snapshot's node list), reporting
    /// every recomputed value to `on`.
    pub fn refresh(
        &mut self,
        all: &[Arc<NodeInfo>],
        compute: impl Fn(&NodeInfo) -> T + Sync + Send,
        mut on: impl FnMut(Change<'_, T>),
    ) {
        if let Some(changed) = self.replaced(all) {
            for i in changed {
                let new = compute(&all[i]);
                on(Change::Replaced {
                    old: Some(&self.values[i]),
                    new: &new,
                });
                self.values[i] = new;
                self.nodes[i] = all[i].clone();
            }
            return;
        }
        on(Change::Reset);
        self.values = all
            .par_iter()
            .with_min_len(REBUILD_CHUNK)
            .map(|ni| compute(ni))
            .collect();
        self.nodes = all.to_vec();
        self.positions = all
            .iter()
            .enumerate()
            .map(|(i, ni)| (ni.id, i as u32))
            .collect();
        for v in &self.values {
            on(Change::Replaced { old: None, new: v });
        }
    }

    /// The positions whose node info was replaced since the last refresh, or `None`
    /// when the node list itself changed (a node added, removed or reordered). One
    /// pass, eight pointers compared at a time without a branch: it runs several times
    /// per cycle over every node, and almost every node info is unchanged.
    fn replaced(&self, all: &[Arc<NodeInfo>]) -> Option<SmallVec<[usize; 16]>> {
        if self.nodes.len() != all.len() {
            return None;
        }
        let mut changed = SmallVec::new();
        let (mut a, mut b) = (self.nodes.chunks(8), all.chunks(8));
        let mut base = 0;
        while let (Some(x), Some(y)) = (a.next(), b.next()) {
            let same = x
                .iter()
                .zip(y)
                .fold(true, |acc, (p, q)| acc & Arc::ptr_eq(p, q));
            if !same {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    if Arc::ptr_eq(p, q) {
                        continue;
                    }
                    if p.name() != q.name() {
                        return None;
                    }
                    changed.push(base + i);
                }
            }
            base += x.len();
        }
        Some(changed)
    }

    /// The values, by snapshot position (as of the last refresh).
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// The value derived from `ni`, if `ni` is the node info of the last refresh at its
    /// position (a copy with pods added, as Filter sees with nominated pods, is not).
    pub fn get(&self, ni: &Arc<NodeInfo>) -> Option<&T> {
        let &i = self.positions.get(&ni.id)?;
        let i = i as usize;
        let same = self.nodes.get(i).is_some_and(|n| Arc::ptr_eq(n, ni));
        same.then(|| &self.values[i])
    }
}

/// A few derived tables keyed by the query that produced them, least recently used
/// first out. A plugin keeps one and asks it once per cycle.
pub struct DerivedCache<K, V> {
    entries: Mutex<Vec<(K, V)>>,
    capacity: usize,
}

impl<K: PartialEq, V: Default> DerivedCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        DerivedCache {
            entries: Mutex::new(Vec::new()),
            capacity: capacity.max(1),
        }
    }

    /// Runs `f` on the entry for `key`, creating it (and evicting the least recently
    /// used one) if needed.
    pub fn with<R>(&self, key: &K, make_key: impl FnOnce() -> K, f: impl FnOnce(&mut V) -> R) -> R {
        let mut entries = self.lock();
        let i = match entries.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                if entries.len() >= self.capacity {
                    entries.remove(0);
                }
                entries.push((make_key(), V::default()));
                entries.len() - 1
            }
        };
        // Most recently used last.
        let e = entries.remove(i);
        entries.push(e);
        let last = entries.len() - 1;
        f(&mut entries[last].1)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(K, V)>> {
        match self.entries.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, pod};

    fn infos(names: &[&str]) -> Vec<Arc<NodeInfo>> {
        names
            .iter()
            .map(|n| Arc::new(NodeInfo::new(node(n).cpu(1000).build())))
            .collect()
    }

    /// Refreshes `d`; returns (resets, reported (old, new) pairs).
    fn run(
        d: &mut NodeDerived<usize>,
        all: &[Arc<NodeInfo>],
    ) -> (usize, Vec<(Option<usize>, usize)>) {
        let (mut resets, mut reports) = (0, Vec::new());
        d.refresh(
            all,
            |ni| ni.pods.len(),
            |c| match c {
                Change::Reset => resets += 1,
                Change::Replaced { old, new } => reports.push((old.copied(), *new)),
            },
        );
        (resets, reports)
    }

    #[test]
    fn recomputes_only_replaced_nodes() {
        let mut all = infos(&["a", "b", "c"]);
        let mut d: NodeDerived<usize> = NodeDerived::default();
        assert_eq!(run(&mut d, &all).1.len(), 3);
        assert_eq!(run(&mut d, &all), (0, vec![]), "nothing changed");

        let mut b = (*all[1]).clone();
        b.add_pod(pod("p").node("b").build());
        all[1] = Arc::new(b);
        assert_eq!(run(&mut d, &all), (0, vec![(Some(0), 1)]));
        assert_eq!(d.values(), &[0, 1, 0]);
        assert_eq!(d.get(&all[1]), Some(&1));
        let copy = Arc::new((*all[1]).clone());
        assert_eq!(d.get(&copy), None, "a copy is not the node info counted");

        // A node added: the list changed, so everything is rebuilt.
        all.extend(infos(&["d"]));
        let (resets, reports) = run(&mut d, &all);
        assert_eq!((resets, reports.len()), (1, 4));
    }

    #[test]
    fn cache_keeps_recent_keys() {
        let c: DerivedCache<u32, u32> = DerivedCache::new(2);
        c.with(&1, || 1, |v| *v = 10);
        c.with(&2, || 2, |v| *v = 20);
        assert_eq!(c.with(&1, || 1, |v| *v), 10);
        // 2 is now least recently used: adding 3 evicts it.
        c.with(&3, || 3, |v| *v = 30);
        assert_eq!(c.with(&2, || 2, |v| *v), 0);
        assert_eq!(
            c.with(&1, || 1, |v| *v),
            0,
            "1 was evicted by 2's re-creation"
        );
    }
}
