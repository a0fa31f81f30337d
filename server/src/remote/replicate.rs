//! What one sidecar has been sent of the snapshot, and the delta that brings it up to
//! date. Objects travel once: a node or pod is sent again only when the scheduler's
//! copy of it changed (a new `Arc`).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use switchyard_proto::v1 as pb;
use switchyard_proto::MAX_PENDING_PODS;

use super::convert;
use crate::cache::Snapshot;
use crate::framework::NodeInfo;
use crate::model::{Node, Pod};

struct SentNode {
    generation: u64,
    node: Option<Arc<Node>>,
    pods: FxHashMap<Arc<str>, Arc<Pod>>,
}

/// Replication state for one connection.
#[derive(Default)]
pub struct Replicator {
    /// The connection this state belongs to; a new one starts with a full snapshot.
    pub epoch: u64,
    /// Generation of the last message sent on the Replicate stream.
    pub generation: u64,
    synced_update: Option<u64>,
    sent: FxHashMap<u32, SentNode>,
    /// Pods sent in CycleStart messages and not yet placed: what the sidecar holds to
    /// apply a `PodUpdate` to (the same rule on both sides, see `PodUpdate`).
    pending: FxHashMap<Arc<str>, Arc<Pod>>,
}

impl Replicator {
    /// Starts over for a new connection: the next delta is a full snapshot.
    pub fn reset(&mut self, epoch: u64) {
        *self = Replicator {
            epoch,
            ..Default::default()
        };
    }

    pub fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// The pod of a CycleStart about to be sent: the sidecar now holds it.
    pub fn note_cycle_pod(&mut self, pod: &Arc<Pod>) {
        if self.pending.len() >= MAX_PENDING_PODS {
            self.pending.clear();
        }
        self.pending.insert(pod.uid.clone(), pod.clone());
    }

    /// The replica's view of a node's pods, by UID (for what-if deltas).
    pub fn sent_pods(&self, id: u32) -> Option<&FxHashMap<Arc<str>, Arc<Pod>>> {
        self.sent.get(&id).map(|s| &s.pods)
    }

    /// The node generation the replica has for `id`.
    pub fn sent_generation(&self, id: u32) -> Option<u64> {
        self.sent.get(&id).map(|s| s.generation)
    }

    /// Whether the sidecar holds `snapshot` already (no delta to send).
    pub fn is_synced(&self, snapshot: &Snapshot) -> bool {
        self.synced_to(snapshot.update_seq())
    }

    /// Whether the last snapshot sent is the one with `update_seq` `seq`.
    pub fn synced_to(&self, seq: u64) -> bool {
        self.synced_update == Some(seq)
    }

    /// The changes since the last call, or `None` when there are none.
    pub fn delta(&mut self, snapshot: &Snapshot) -> Option<pb::SnapshotDelta> {
        let full = self.synced_update.is_none();
        if self.synced_update == Some(snapshot.update_seq()) {
            return None;
        }
        let mut d = pb::SnapshotDelta {
            full,
            ..Default::default()
        };
        let incremental = self
            .synced_update
            .is_some_and(|u| u + 1 == snapshot.update_seq())
            && snapshot.last_changes().is_some();
        if incremental {
            for &i in snapshot.last_changes().unwrap_or_default() {
                if let Some(ni) = snapshot.node_infos().get(i) {
                    self.node_delta(ni, &mut d);
                }
            }
        } else {
            if full {
                self.sent.clear();
                self.pending.clear();
            }
            let mut present = rustc_hash::FxHashSet::default();
            for ni in snapshot.node_infos() {
                present.insert(ni.id);
                self.node_delta(ni, &mut d);
            }
            let gone: Vec<u32> = self
                .sent
                .keys()
                .filter(|id| !present.contains(id))
                .copied()
                .collect();
            for id in gone {
                if let Some(s) = self.sent.remove(&id) {
                    d.remove_nodes.push(id);
                    d.remove_pods.extend(s.pods.keys().map(|u| u.to_string()));
                }
            }
        }
        self.synced_update = Some(snapshot.update_seq());
        let empty = !d.full
            && d.upsert_nodes.is_empty()
            && d.remove_nodes.is_empty()
            && d.upsert_pods.is_empty()
            && d.remove_pods.is_empty()
            && d.update_pods.is_empty();
        (!empty).then_some(d)
    }

    fn node_delta(&mut self, ni: &NodeInfo, d: &mut pb::SnapshotDelta) {
        let sent = self.sent.entry(ni.id).or_insert_with(|| SentNode {
            generation: 0,
            node: None,
            pods: FxHashMap::default(),
        });
        if sent.generation == ni.generation && sent.node.is_some() {
            return;
        }
        sent.generation = ni.generation;
        let node_changed = match (&sent.node, ni.node_arc()) {
            (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
            _ => true,
        };
        if node_changed {
            d.upsert_nodes.push(convert::node_info(ni));
            sent.node = ni.node_arc().cloned();
        }
        // Pods gone from the node, then pods new or changed.
        if sent.pods.len() > ni.pods.len()
            || ni.pods.iter().any(|p| !sent.pods.contains_key(&p.uid))
        {
            let now: rustc_hash::FxHashSet<&str> = ni.pods.iter().map(|p| &*p.uid).collect();
            let gone: Vec<Arc<str>> = sent
                .pods
                .keys()
                .filter(|u| !now.contains(&***u))
                .cloned()
                .collect();
            for u in gone {
                sent.pods.remove(&u);
                d.remove_pods.push(u.to_string());
            }
        }
        for p in &ni.pods {
            let known = match sent.pods.get(&p.uid) {
                Some(old) if Arc::ptr_eq(old, p) => continue,
                Some(old) => Some(old),
                None => self.pending.get(&p.uid),
            };
            // Same spec: only the placement and status fields travel.
            if known.is_some_and(|k| convert::same_but_update(k, p)) {
                d.update_pods.push(convert::pod_update(p));
            } else {
                d.upsert_pods.push(convert::pod(p));
            }
            self.pending.remove(&p.uid);
            sent.pods.insert(p.uid.clone(), p.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use crate::testing::{node, pod};
    use std::time::Duration;

    #[test]
    fn full_then_incremental_then_removals() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("a").cpu(1000).build());
        c.add_node(node("b").cpu(1000).build());
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        let mut r = Replicator::default();
        let d = r.delta(&snap).unwrap();
        assert!(d.full);
        assert_eq!(d.upsert_nodes.len(), 2);
        assert!(r.delta(&snap).is_none(), "no change, no delta");

        c.add_pod(pod("p").cpu(100).node("a").build()).unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert!(!d.full);
        assert!(d.upsert_nodes.is_empty(), "the node itself did not change");
        assert_eq!(d.upsert_pods.len(), 1);
        assert_eq!(d.upsert_pods[0].node_name, "a");

        let p = c.get_pod("uid-p").unwrap().clone();
        c.remove_pod(&p).unwrap();
        c.remove_node("b").unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert_eq!(d.remove_pods, vec!["uid-p".to_string()]);
        assert_eq!(d.remove_nodes.len(), 1);

        // Two updates in between: falls back to a walk and still finds the change.
        c.add_pod(pod("q").cpu(100).node("a").build()).unwrap();
        c.update_snapshot(&mut snap);
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert_eq!(d.upsert_pods.len(), 1);
        assert_eq!(d.upsert_pods[0].uid, "uid-q");
    }

    #[test]
    fn placed_cycle_pods_travel_as_updates() {
        let mut c = Cache::new(Duration::ZERO);
        c.add_node(node("a").cpu(1000).build());
        let mut snap = Snapshot::default();
        c.update_snapshot(&mut snap);
        let mut r = Replicator::default();
        assert!(r.delta(&snap).unwrap().full);

        // The pod of a CycleStart, then placed: a few bytes, not the object again.
        let pending = pod("p").cpu(100).build();
        r.note_cycle_pod(&pending);
        c.add_pod(Arc::new(pending.with_node("a".into()))).unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert!(d.upsert_pods.is_empty(), "{d:?}");
        assert_eq!(d.update_pods.len(), 1);
        assert_eq!(d.update_pods[0].uid, "uid-p");
        assert_eq!(d.update_pods[0].node_name, "a");

        // The cluster's copy after binding: a new spec (start time set), same object.
        let placed = c.get_pod("uid-p").unwrap().clone();
        let mut bound = (*placed).clone();
        let mut spec = (*bound.spec).clone();
        spec.start_time = Some(42);
        bound.spec = Arc::new(spec);
        c.update_pod(&placed, Arc::new(bound)).unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert!(d.upsert_pods.is_empty(), "{d:?}");
        assert_eq!(d.update_pods[0].start_time_micros, 42);

        // A pod the sidecar never saw travels whole.
        c.add_pod(pod("q").cpu(100).node("a").build()).unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert_eq!(d.upsert_pods.len(), 1);
        assert!(d.update_pods.is_empty());

        // After the cap every announced pod is forgotten, on both sides.
        let first = pod("first").cpu(100).build();
        r.note_cycle_pod(&first);
        for i in 0..MAX_PENDING_PODS {
            r.note_cycle_pod(&pod(&format!("x{i}")).cpu(1).build());
        }
        c.add_pod(Arc::new(first.with_node("a".into()))).unwrap();
        c.update_snapshot(&mut snap);
        let d = r.delta(&snap).unwrap();
        assert_eq!(d.upsert_pods.len(), 1, "forgotten: sent whole");
    }
}
