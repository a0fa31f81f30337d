//! Unschedulable pods (upstream `unschedulablePods`), with gated pods grouped by the
//! PreEnqueue plugin that holds them back.
//!
//! A cluster event can only release a gated pod if its gating plugin registered that
//! event, so an event looks at each (profile, gate) group once and skips the whole group
//! when the gate did not register it. Upstream keeps each gated pod's gating-plugin events
//! on the pod and still visits every pod per event (kubernetes#124618); grouping makes an
//! event's cost independent of how many pods are gated, which is what
//! SchedulingWhileGated measures.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::framework::{PluginName, QueuedPodInfo};
use crate::model::Uid;

/// A gated pod's group: the pod's profile (scheduler name) and its gating plugin.
pub(super) type GateKey = (Arc<str>, PluginName);

#[derive(Default)]
pub(super) struct UnschedulablePods {
    /// Pods rejected in an attempt (not gated).
    rejected: FxHashMap<Uid, QueuedPodInfo>,
    /// Pods held back by a PreEnqueue plugin.
    gated: FxHashMap<Uid, QueuedPodInfo>,
    by_gate: FxHashMap<GateKey, FxHashSet<Uid>>,
}

fn gate_key(p: &QueuedPodInfo) -> Option<GateKey> {
    p.gating_plugin
        .as_ref()
        .map(|g| (p.pod.spec.scheduler_name.clone(), *g))
}

impl UnschedulablePods {
    /// Adds or replaces the pod under `uid`.
    pub fn insert(&mut self, uid: Uid, p: QueuedPodInfo) {
        self.remove(&uid);
        match gate_key(&p) {
            None => {
                self.rejected.insert(uid, p);
            }
            Some(key) => {
                self.by_gate.entry(key).or_default().insert(uid.clone());
                self.gated.insert(uid, p);
            }
        }
    }

    /// Adds the pod unless one with its uid is here already.
    pub fn insert_if_absent(&mut self, p: QueuedPodInfo) {
        if !self.contains_key(&p.pod.uid) {
            self.insert(p.pod.uid.clone(), p);
        }
    }

    pub fn remove(&mut self, uid: &str) -> Option<QueuedPodInfo> {
        if let Some(p) = self.rejected.remove(uid) {
            return Some(p);
        }
        let p = self.gated.remove(uid)?;
        if let Some(key) = gate_key(&p) {
            if let Some(set) = self.by_gate.get_mut(&key) {
                set.remove(uid);
                if set.is_empty() {
                    self.by_gate.remove(&key);
                }
            }
        }
        Some(p)
    }

    pub fn contains_key(&self, uid: &str) -> bool {
        self.rejected.contains_key(uid) || self.gated.contains_key(uid)
    }

    /// Pods rejected in an attempt (not gated).
    pub fn rejected_len(&self) -> usize {
        self.rejected.len()
    }

    pub fn gated_len(&self) -> usize {
        self.gated.len()
    }

    /// Every pod, rejected and gated.
    pub fn iter(&self) -> impl Iterator<Item = (&Uid, &QueuedPodInfo)> {
        self.rejected.iter().chain(self.gated.iter())
    }

    pub fn values(&self) -> impl Iterator<Item = &QueuedPodInfo> {
        self.iter().map(|(_, p)| p)
    }

    /// Pods rejected in an attempt.
    pub fn rejected(&self) -> impl Iterator<Item = (&Uid, &QueuedPodInfo)> {
        self.rejected.iter()
    }

    /// The gated pods in groups, with each group's key: a caller skips a whole group
    /// whose gate does not care about an event.
    pub fn gate_groups(
        &self,
    ) -> impl Iterator<Item = (&GateKey, impl Iterator<Item = (&Uid, &QueuedPodInfo)>)> {
        self.by_gate.iter().map(move |(key, uids)| {
            let pods = uids.iter().filter_map(move |u| self.gated.get_key_value(u));
            (key, pods)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;
    use std::time::Instant;

    fn info(name: &str, gate: Option<&str>) -> QueuedPodInfo {
        let mut p = QueuedPodInfo::new(pod(name).build(), Instant::now());
        p.gating_plugin = gate.map(PluginName::new);
        p
    }

    fn put(u: &mut UnschedulablePods, name: &str, gate: Option<&str>) {
        let p = info(name, gate);
        u.insert(p.pod.uid.clone(), p);
    }

    #[test]
    fn gated_pods_are_grouped_by_gate_and_leave_no_empty_group() {
        let mut u = UnschedulablePods::default();
        put(&mut u, "a", None);
        put(&mut u, "b", Some("SchedulingGates"));
        put(&mut u, "c", Some("SchedulingGates"));
        put(&mut u, "d", Some("Quota"));
        assert_eq!((u.rejected_len(), u.gated_len()), (1, 3));
        let mut groups: Vec<(String, usize)> = u
            .gate_groups()
            .map(|((_, g), pods)| (g.to_string(), pods.count()))
            .collect();
        groups.sort();
        assert_eq!(groups, [("Quota".into(), 1), ("SchedulingGates".into(), 2)]);

        // A pod that passes its gate on re-insert moves out of its group.
        put(&mut u, "d", None);
        assert_eq!((u.rejected_len(), u.gated_len()), (2, 2));
        assert_eq!(u.gate_groups().count(), 1);
        assert!(u.remove("uid-b").is_some() && u.remove("uid-c").is_some());
        assert_eq!(u.gate_groups().count(), 0);
        assert!(u.remove("uid-b").is_none());
        assert_eq!(u.iter().count(), 2);
        u.insert_if_absent(info("a", Some("SchedulingGates")));
        assert_eq!((u.rejected_len(), u.gated_len()), (2, 0));
    }
}
