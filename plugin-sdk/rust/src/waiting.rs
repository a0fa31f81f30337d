//! Pods waiting at Permit, and the [`Handle`] a plugin decides about them with (allow
//! or reject, from any thread). The service registers a pod here when a plugin
//! answers Wait and forgets it when its cycle ends; decisions go to the scheduler on
//! the open Permit stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::{pb, Pod};

/// The sending half of the open Permit stream.
pub(crate) type PermitSender = mpsc::UnboundedSender<Result<pb::PermitResponse, tonic::Status>>;

/// A pod some plugin answered Wait for at Permit.
struct Waiting {
    pod: Arc<Pod>,
    plugins: Vec<String>,
}

/// The pods waiting at Permit, by uid, and the open Permit stream.
#[derive(Default)]
pub(crate) struct WaitingPods {
    waiting: Mutex<HashMap<String, Waiting>>,
    /// The open Permit stream, for decisions about waiting pods.
    permit_tx: Mutex<Option<PermitSender>>,
}

impl WaitingPods {
    /// Records that `plugin` answered Wait for `pod`.
    pub(crate) fn wait(&self, pod: &Arc<Pod>, plugin: &str) {
        let mut waiting = lock(&self.waiting);
        let w = waiting.entry(pod.uid.clone()).or_insert_with(|| Waiting {
            pod: pod.clone(),
            plugins: Vec::new(),
        });
        if !w.plugins.iter().any(|p| p == plugin) {
            w.plugins.push(plugin.to_string());
        }
    }

    /// Forgets the pod `uid` (its cycle ended).
    pub(crate) fn remove(&self, uid: &str) {
        lock(&self.waiting).remove(uid);
    }

    /// Forgets every pod (a full snapshot replaced the replica).
    pub(crate) fn clear(&self) {
        lock(&self.waiting).clear();
    }

    /// Decisions go to `tx` from now on (the latest Permit stream opened).
    pub(crate) fn set_permit_stream(&self, tx: PermitSender) {
        *lock(&self.permit_tx) = Some(tx);
    }
}

/// What a plugin uses to decide about pods waiting at Permit, from any thread.
#[derive(Clone)]
pub struct Handle {
    pods: Arc<WaitingPods>,
}

impl Handle {
    pub(crate) fn new(pods: Arc<WaitingPods>) -> Self {
        Handle { pods }
    }

    /// Lets `plugin` release the waiting pod `uid`. False when the pod is not waiting
    /// on it (already decided, timed out, or never waited).
    pub fn allow(&self, plugin: &str, uid: &str) -> bool {
        self.decide(plugin, uid, true, String::new())
    }
    /// Rejects the waiting pod `uid`: the scheduler unreserves it and retries it later.
    pub fn reject(&self, plugin: &str, uid: &str, message: impl Into<String>) -> bool {
        self.decide(plugin, uid, false, message.into())
    }
    /// Pods currently waiting on `plugin`.
    pub fn waiting_pods(&self, plugin: &str) -> Vec<Arc<Pod>> {
        lock(&self.pods.waiting)
            .values()
            .filter(|w| w.plugins.iter().any(|p| p == plugin))
            .map(|w| w.pod.clone())
            .collect()
    }

    fn decide(&self, plugin: &str, uid: &str, allow: bool, message: String) -> bool {
        {
            let mut waiting = lock(&self.pods.waiting);
            let Some(w) = waiting.get_mut(uid) else {
                return false;
            };
            let Some(i) = w.plugins.iter().position(|p| p == plugin) else {
                return false;
            };
            w.plugins.swap_remove(i);
            if !allow || w.plugins.is_empty() {
                waiting.remove(uid);
            }
        }
        let tx = lock(&self.pods.permit_tx).clone();
        let Some(tx) = tx else { return false };
        tx.send(Ok(pb::PermitResponse {
            request_id: 0,
            decision: Some(pb::WaitingPodDecision {
                pod_uid: uid.to_string(),
                plugin: plugin.to_string(),
                allow,
                message,
            }),
            ..Default::default()
        }))
        .is_ok()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Arc<Pod> {
        Arc::new(Pod {
            uid: uid.into(),
            ..Default::default()
        })
    }

    #[test]
    fn a_pod_is_released_once_every_plugin_it_waits_on_allows_it() {
        let pods = Arc::new(WaitingPods::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        pods.set_permit_stream(tx);
        let h = Handle::new(pods.clone());
        pods.wait(&pod("a"), "Gang");
        pods.wait(&pod("a"), "Quota");
        pods.wait(&pod("a"), "Gang");
        assert_eq!(h.waiting_pods("Gang").len(), 1);
        assert!(!h.allow("Other", "a"), "not waiting on Other");
        assert!(h.allow("Gang", "a"));
        assert!(!h.allow("Gang", "a"), "Gang already decided");
        assert_eq!(h.waiting_pods("Quota").len(), 1);
        assert!(h.allow("Quota", "a"));
        assert!(h.waiting_pods("Quota").is_empty());
        let d = rx.try_recv().unwrap().unwrap().decision.unwrap();
        assert_eq!(
            (d.pod_uid.as_str(), d.plugin.as_str(), d.allow),
            ("a", "Gang", true)
        );
    }

    #[test]
    fn a_rejection_ends_the_wait_and_no_stream_means_no_decision() {
        let pods = Arc::new(WaitingPods::default());
        let h = Handle::new(pods.clone());
        pods.wait(&pod("b"), "Gang");
        pods.wait(&pod("b"), "Quota");
        assert!(!h.reject("Gang", "b", "no room"), "no Permit stream open");
        assert!(
            h.waiting_pods("Quota").is_empty(),
            "a rejection ends the wait"
        );
        pods.wait(&pod("c"), "Gang");
        pods.remove("c");
        assert!(h.waiting_pods("Gang").is_empty());
        pods.wait(&pod("d"), "Gang");
        pods.clear();
        assert!(h.waiting_pods("Gang").is_empty());
    }
}
