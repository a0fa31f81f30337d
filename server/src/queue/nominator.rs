//! Nominated pods: pods that preemption made room for, by node. Scheduling cycles read
//! a copy-on-write view, so Filter can consult it from many threads without locks;
//! per-node lists are shared slices, so the copy made on a change is shallow.

use rustc_hash::FxHashMap;
use std::sync::Arc;

use crate::framework::interface::NominatedPod;
use crate::model::{Pod, Uid};

pub use crate::framework::NominatedPods;

#[derive(Default)]
pub struct Nominator {
    by_node: NominatedPods,
    node_of: FxHashMap<Uid, Arc<str>>,
}

impl Nominator {
    /// Nominates `pod` to `node` (replacing any earlier nomination); `None` clears it.
    pub fn add(&mut self, pod: Arc<Pod>, node: Option<Arc<str>>) {
        self.delete(&pod.uid);
        let Some(node) = node.filter(|n| !n.is_empty()) else {
            return;
        };
        self.node_of.insert(pod.uid.clone(), node.clone());
        let map = Arc::make_mut(&mut self.by_node);
        let list = match map.get(&node) {
            Some(old) => old
                .iter()
                .cloned()
                .chain(std::iter::once(NominatedPod::new(pod)))
                .collect(),
            None => Arc::from([NominatedPod::new(pod)]),
        };
        map.insert(node, list);
    }

    pub fn delete(&mut self, uid: &str) {
        let Some(node) = self.node_of.remove(uid) else {
            return;
        };
        let map = Arc::make_mut(&mut self.by_node);
        if let Some(v) = map.get(&node) {
            let rest: Arc<[NominatedPod]> =
                v.iter().filter(|p| *p.pod.uid != *uid).cloned().collect();
            if rest.is_empty() {
                map.remove(&node);
            } else {
                map.insert(node, rest);
            }
        }
    }

    /// Refreshes the stored pod object, keeping an in-memory nomination when the new
    /// object carries none (the status update may not have landed yet).
    pub fn update(&mut self, new: Arc<Pod>) {
        let node = new
            .nominated_node_name
            .clone()
            .or_else(|| self.node_of.get(&new.uid).cloned());
        self.add(new, node);
    }

    pub fn node_of(&self, uid: &str) -> Option<&Arc<str>> {
        self.node_of.get(uid)
    }

    pub fn view(&self) -> NominatedPods {
        self.by_node.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.node_of.is_empty()
    }

    pub fn len(&self) -> usize {
        self.node_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn nominate_renominate_clear() {
        let mut n = Nominator::default();
        let p = pod("p").build();
        n.add(p.clone(), Some("a".into()));
        let view = n.view();
        n.add(p.clone(), Some("b".into()));
        assert_eq!(
            view.get("a").map(|v| v.len()),
            Some(1),
            "views are snapshots"
        );
        assert!(n.view().get("a").is_none());
        assert_eq!(n.node_of(&p.uid).map(|s| &**s), Some("b"));
        n.update(p.clone());
        assert_eq!(n.node_of(&p.uid).map(|s| &**s), Some("b"));
        n.add(p.clone(), None);
        assert!(n.is_empty());
    }
}
