//! A binary heap of queued pods keyed by UID, supporting update and delete by key
//! (upstream `heap.Heap`). The order is a caller-supplied "less" function so activeQ can
//! follow the QueueSort plugin.

use rustc_hash::FxHashMap;

use crate::framework::QueuedPodInfo;
use crate::model::Uid;

pub type LessFn = Box<dyn Fn(&QueuedPodInfo, &QueuedPodInfo) -> bool + Send + Sync>;

pub struct PodHeap {
    items: Vec<QueuedPodInfo>,
    index: FxHashMap<Uid, usize>,
    less: LessFn,
}

impl PodHeap {
    pub fn new(less: LessFn) -> Self {
        PodHeap {
            items: Vec::new(),
            index: FxHashMap::default(),
            less,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.index.contains_key(uid)
    }

    pub fn get(&self, uid: &str) -> Option<&QueuedPodInfo> {
        self.index.get(uid).map(|&i| &self.items[i])
    }

    pub fn peek(&self) -> Option<&QueuedPodInfo> {
        self.items.first()
    }

    /// The first `n` items in pop order, without popping: a best-first walk of the
    /// heap (each popped item's children join the frontier), O(n²) for the small `n`
    /// of a lookahead.
    pub fn top(&self, n: usize) -> Vec<&QueuedPodInfo> {
        let mut out = Vec::with_capacity(n.min(self.items.len()));
        let mut frontier: Vec<usize> = Vec::with_capacity(2 * n + 1);
        if !self.items.is_empty() {
            frontier.push(0);
        }
        while out.len() < n && !frontier.is_empty() {
            let mut best = 0;
            for k in 1..frontier.len() {
                if (self.less)(&self.items[frontier[k]], &self.items[frontier[best]]) {
                    best = k;
                }
            }
            let i = frontier.swap_remove(best);
            out.push(&self.items[i]);
            for c in [2 * i + 1, 2 * i + 2] {
                if c < self.items.len() {
                    frontier.push(c);
                }
            }
        }
        out
    }

    /// Adds a pod, or replaces the entry with the same UID and restores the order.
    pub fn add_or_update(&mut self, p: QueuedPodInfo) {
        if let Some(&i) = self.index.get(&p.pod.uid) {
            self.items[i] = p;
            self.fix(i);
        } else {
            let i = self.items.len();
            self.index.insert(p.pod.uid.clone(), i);
            self.items.push(p);
            self.up(i);
        }
    }

    pub fn pop(&mut self) -> Option<QueuedPodInfo> {
        if self.items.is_empty() {
            return None;
        }
        let last = self.items.len() - 1;
        self.swap(0, last);
        let p = self.items.pop()?;
        self.index.remove(&p.pod.uid);
        if !self.items.is_empty() {
            self.down(0);
        }
        Some(p)
    }

    pub fn delete(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        let i = self.index.remove(uid)?;
        let last = self.items.len() - 1;
        if i != last {
            self.items.swap(i, last);
            let moved = self.items[i].pod.uid.clone();
            self.index.insert(moved, i);
        }
        let p = self.items.pop();
        if i < self.items.len() {
            self.fix(i);
        }
        p
    }

    pub fn iter(&self) -> impl Iterator<Item = &QueuedPodInfo> {
        self.items.iter()
    }

    fn fix(&mut self, i: usize) {
        if !self.down(i) {
            self.up(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.set_index(a);
        self.set_index(b);
    }

    /// Records that the item at `i` is there. A known UID is updated in place, without
    /// cloning it (an atomic increment and decrement per heap level otherwise).
    fn set_index(&mut self, i: usize) {
        let uid = &self.items[i].pod.uid;
        match self.index.get_mut(&**uid) {
            Some(at) => *at = i,
            None => {
                self.index.insert(uid.clone(), i);
            }
        }
    }

    /// Sifts up. The items passed over move one level each and are re-indexed; the
    /// sifted item only once, where it stops (its index is stale meanwhile).
    fn up(&mut self, i0: usize) {
        let mut i = i0;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !(self.less)(&self.items[i], &self.items[parent]) {
                break;
            }
            self.items.swap(i, parent);
            self.set_index(i);
            i = parent;
        }
        if i != i0 {
            self.set_index(i);
        }
    }

    /// Sifts down; returns whether the item moved. Re-indexes as [`PodHeap::up`] does.
    fn down(&mut self, i0: usize) -> bool {
        let n = self.items.len();
        let mut i = i0;
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let mut j = l;
            if l + 1 < n && (self.less)(&self.items[l + 1], &self.items[l]) {
                j = l + 1;
            }
            if !(self.less)(&self.items[j], &self.items[i]) {
                break;
            }
            self.items.swap(i, j);
            self.set_index(i);
            i = j;
        }
        if i != i0 {
            self.set_index(i);
        }
        i > i0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use std::time::Instant;

    #[test]
    fn ordered_pop_update_delete() {
        let mut h = PodHeap::new(Box::new(|a, b| a.pod.priority() > b.pod.priority()));
        let now = Instant::now();
        for (n, p) in [("a", 1), ("b", 5), ("c", 3), ("d", 4), ("e", 2)] {
            h.add_or_update(QueuedPodInfo::new(pod(n).priority(p).build(), now));
        }
        h.delete("uid-d");
        h.add_or_update(QueuedPodInfo::new(pod("a").priority(10).build(), now));
        let order: Vec<String> = std::iter::from_fn(|| h.pop())
            .map(|p| p.pod.name.to_string())
            .collect();
        assert_eq!(order, ["a", "b", "c", "e"]);
        assert!(h.is_empty());
    }

    #[test]
    fn top_is_pop_order_without_popping() {
        let mut h = PodHeap::new(Box::new(|a, b| a.pod.priority() > b.pod.priority()));
        let now = Instant::now();
        for i in 0..40 {
            // A scrambled but distinct priority per pod.
            let p = (i * 17) % 40;
            h.add_or_update(QueuedPodInfo::new(
                pod(&format!("p{p}")).priority(p).build(),
                now,
            ));
        }
        for n in [0, 1, 5, 40, 50] {
            let top: Vec<String> = h.top(n).iter().map(|p| p.pod.name.to_string()).collect();
            let want: Vec<String> = (0..n.min(40)).map(|k| format!("p{}", 39 - k)).collect();
            assert_eq!(top, want, "top({n})");
        }
        assert_eq!(h.len(), 40);
        assert_eq!(
            h.pop().map(|p| p.pod.name.to_string()).as_deref(),
            Some("p39")
        );
    }

    #[test]
    fn index_follows_every_move_under_random_operations() {
        use crate::rand::SplitMix64;
        let mut rng = SplitMix64(5);
        let mut h = PodHeap::new(Box::new(|a, b| a.pod.priority() > b.pod.priority()));
        // Reference: uid -> priority.
        let mut want: std::collections::BTreeMap<String, i32> = Default::default();
        let now = Instant::now();
        for step in 0..3000 {
            let name = format!("p{}", rng.below(60));
            let uid = format!("uid-{name}");
            match rng.below(4) {
                0 | 1 => {
                    let prio = rng.below(1000) as i32;
                    h.add_or_update(QueuedPodInfo::new(pod(&name).priority(prio).build(), now));
                    want.insert(uid, prio);
                }
                2 => {
                    assert_eq!(h.delete(&uid).is_some(), want.remove(&uid).is_some());
                }
                _ => {
                    let top = want.values().copied().max();
                    let got = h.pop();
                    assert_eq!(got.as_ref().map(|p| p.pod.priority()), top, "step {step}");
                    if let Some(p) = got {
                        want.remove(&*p.pod.uid);
                    }
                }
            }
            assert_eq!(h.len(), want.len());
            for (uid, prio) in &want {
                let at = h
                    .get(uid)
                    .map(|p| (p.pod.uid.to_string(), p.pod.priority()));
                assert_eq!(at, Some((uid.clone(), *prio)), "step {step}");
            }
        }
    }
}
