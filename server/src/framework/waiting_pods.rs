//! Permit's waiting room (upstream `waitingPodsMap`): pods that a Permit plugin asked
//! to wait, each until every waiting plugin allows it, one rejects it, or a plugin's
//! timeout passes. Allow/reject may come from any thread (another pod's cycle, a
//! remote plugin); the binding task awaits the outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::interned::PluginName;
use super::status::{Code, Status};
use crate::model::{Pod, Uid};

/// One waiting pod.
pub struct WaitingPod {
    pod: Arc<Pod>,
    node: Arc<str>,
    inner: Mutex<WaitingInner>,
    /// Carries the final status once decided.
    outcome: watch::Sender<Option<Status>>,
}

struct WaitingInner {
    /// Plugins still to allow, with their deadlines.
    pending: HashMap<PluginName, (Instant, Duration)>,
    decided: bool,
}

impl WaitingPod {
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// Plugins that have not allowed the pod yet.
    pub fn pending_plugins(&self) -> Vec<PluginName> {
        match self.inner.lock() {
            Ok(g) => g.pending.keys().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// `plugin` allows the pod; once every waiting plugin has, the pod proceeds.
    pub fn allow(&self, plugin: &str) {
        let Ok(mut g) = self.inner.lock() else { return };
        if g.decided {
            return;
        }
        g.pending.remove(plugin);
        if g.pending.is_empty() {
            g.decided = true;
            self.outcome.send_replace(Some(Status::success()));
        }
    }

    /// Rejects the pod (by `plugin`, empty when not from a plugin).
    pub fn reject(&self, plugin: &str, msg: &str) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        if g.decided {
            return false;
        }
        g.decided = true;
        let mut s = Status::new(Code::Unschedulable, msg.to_string());
        if !plugin.is_empty() {
            s = s.with_plugin(&PluginName::new(plugin));
        }
        self.outcome.send_replace(Some(s));
        true
    }

    /// Preempts the pod (upstream `WaitingPod.Preempt`): like a rejection, but as an
    /// error, so the pod goes back through backoff instead of waiting for an event.
    pub fn preempt(&self, plugin: &str, msg: &str) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        if g.decided {
            return false;
        }
        g.decided = true;
        self.outcome.send_replace(Some(
            Status::error(msg.to_string()).with_plugin(&PluginName::new(plugin)),
        ));
        true
    }

    /// The earliest deadline among plugins still pending, with the plugin.
    fn next_deadline(&self) -> Option<(Instant, PluginName, Duration)> {
        let g = self.inner.lock().ok()?;
        g.pending
            .iter()
            .min_by_key(|(_, (d, _))| *d)
            .map(|(p, (d, w))| (*d, *p, *w))
    }
}

#[derive(Default)]
pub struct WaitingPods {
    pods: Mutex<HashMap<Uid, Arc<WaitingPod>>>,
    /// Woken whenever a pod is parked, for [`WaitingPods::wait_for`].
    added: tokio::sync::Notify,
}

impl WaitingPods {
    /// Parks a pod, waiting for each plugin in `plugins` (with its timeout).
    pub fn add(
        &self,
        pod: Arc<Pod>,
        node: Arc<str>,
        plugins: Vec<(PluginName, Duration)>,
        now: Instant,
    ) -> Arc<WaitingPod> {
        let (tx, _rx) = watch::channel(None);
        let wp = Arc::new(WaitingPod {
            pod: pod.clone(),
            node,
            inner: Mutex::new(WaitingInner {
                pending: plugins
                    .into_iter()
                    .map(|(p, d)| (p, (now + d, d)))
                    .collect(),
                decided: false,
            }),
            outcome: tx,
        });
        if let Ok(mut m) = self.pods.lock() {
            m.insert(pod.uid.clone(), wp.clone());
        }
        self.added.notify_waiters();
        wp
    }

    /// The waiting pod `uid`, waiting up to `within` for it to be parked: a sidecar's
    /// Permit decision can overtake the scheduling thread parking the pod after the
    /// sidecar's own Wait reply. `None` when it is not parked in time.
    pub async fn wait_for(&self, uid: &str, within: Duration) -> Option<Arc<WaitingPod>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let added = self.added.notified();
            tokio::pin!(added);
            // Registered before looking, so a pod parked in between still wakes us.
            added.as_mut().enable();
            if let Some(p) = self.get(uid) {
                return Some(p);
            }
            tokio::time::timeout_at(deadline, added).await.ok()?;
        }
    }

    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.pods.lock().ok()?.get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) {
        if let Ok(mut m) = self.pods.lock() {
            m.remove(uid);
        }
    }

    /// Every waiting pod (upstream `IterateOverWaitingPods`).
    pub fn list(&self) -> Vec<Arc<WaitingPod>> {
        match self.pods.lock() {
            Ok(m) => m.values().cloned().collect(),
            Err(_) => Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.pods.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rejects a waiting pod (e.g. it was deleted); true if it was waiting.
    pub fn reject(&self, uid: &str, msg: &str) -> bool {
        match self.get(uid) {
            Some(wp) => wp.reject("", msg),
            None => false,
        }
    }

    /// Waits until the pod is allowed, rejected, or a plugin's timeout passes, then
    /// removes it from the map. A pod that is not waiting returns Success at once.
    pub async fn wait(&self, uid: &str) -> Status {
        let Some(wp) = self.get(uid) else {
            return Status::success();
        };
        let mut rx = wp.outcome.subscribe();
        let status = loop {
            if let Some(s) = rx.borrow_and_update().clone() {
                break s;
            }
            let deadline = wp.next_deadline();
            match deadline {
                Some((at, plugin, waited)) => {
                    let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(at));
                    tokio::select! {
                        changed = rx.changed() => {
                            if changed.is_err() {
                                break Status::error("waiting pod dropped");
                            }
                        }
                        _ = sleep => {
                            wp.reject(&plugin, &format!(
                                "rejected due to timeout after waiting {} at plugin {}",
                                go_duration(waited), plugin
                            ));
                        }
                    }
                }
                None => {
                    if rx.changed().await.is_err() {
                        break Status::error("waiting pod dropped");
                    }
                }
            }
        };
        self.remove(uid);
        status
    }
}

/// Formats a duration as Go's `time.Duration.String()` does for whole and fractional
/// seconds (`10s`, `1.5s`, `15m0s`, `100ms`).
pub fn go_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let secs = d.as_secs();
    let frac = d.subsec_millis();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let sec_str = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{sec_str}")
    } else if m > 0 {
        format!("{m}m{sec_str}")
    } else {
        sec_str
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(900)), "15m0s");
        assert_eq!(go_duration(Duration::from_millis(100)), "100ms");
    }

    #[tokio::test]
    async fn allowed_by_all_plugins_proceeds() {
        let w = Arc::new(WaitingPods::default());
        let p = pod("p").node("n").build();
        w.add(
            p.clone(),
            "n".into(),
            vec![
                ("a".into(), Duration::from_secs(60)),
                ("b".into(), Duration::from_secs(60)),
            ],
            Instant::now(),
        );
        let w2 = w.clone();
        let uid = p.uid.clone();
        let waiter = tokio::spawn(async move { w2.wait(&uid).await });
        tokio::task::yield_now().await;
        w.get(&p.uid).unwrap().allow("a");
        assert!(!waiter.is_finished());
        w.get(&p.uid).unwrap().allow("b");
        assert!(waiter.await.unwrap().is_success());
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn timeout_rejects_naming_the_plugin() {
        let w = WaitingPods::default();
        let p = pod("p").node("n").build();
        w.add(
            p.clone(),
            "n".into(),
            vec![("gang".into(), Duration::from_millis(30))],
            Instant::now(),
        );
        let s = w.wait(&p.uid).await;
        assert_eq!(s.code(), Code::Unschedulable);
        assert_eq!(
            s.message(),
            "rejected due to timeout after waiting 30ms at plugin gang"
        );
        assert_eq!(s.plugin().map(|p| p.as_str()), Some("gang"));
    }

    #[tokio::test]
    async fn reject_from_elsewhere() {
        let w = WaitingPods::default();
        let p = pod("p").node("n").build();
        w.add(
            p.clone(),
            "n".into(),
            vec![("gang".into(), Duration::from_secs(60))],
            Instant::now(),
        );
        assert!(w.get(&p.uid).unwrap().reject("gang", "group failed"));
        let s = w.wait(&p.uid).await;
        assert_eq!(s.message(), "group failed");
    }

    #[tokio::test]
    async fn wait_for_sees_a_pod_parked_later_and_gives_up_on_one_never_parked() {
        let w = Arc::new(WaitingPods::default());
        let p = pod("p").node("n").build();
        let (w2, uid) = (w.clone(), p.uid.clone());
        let looking = tokio::spawn(async move { w2.wait_for(&uid, Duration::from_secs(30)).await });
        tokio::task::yield_now().await;
        assert!(!looking.is_finished());
        w.add(
            p.clone(),
            "n".into(),
            vec![("gang".into(), Duration::from_secs(60))],
            Instant::now(),
        );
        let found = looking.await.unwrap().expect("parked pod found");
        assert_eq!(found.pod().uid, p.uid);
        let t = Instant::now();
        assert!(w
            .wait_for("nobody", Duration::from_millis(20))
            .await
            .is_none());
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}

#[cfg(test)]
mod multi_thread_tests {
    use super::*;
    use crate::testing::pod;

    #[test]
    fn two_pods_time_out_on_a_one_worker_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let w = Arc::new(WaitingPods::default());
        let mut handles = Vec::new();
        for n in ["a", "b"] {
            let p = pod(n).node("x").build();
            w.add(
                p.clone(),
                "x".into(),
                vec![("g".into(), Duration::from_millis(50))],
                Instant::now(),
            );
            let w2 = w.clone();
            handles.push(rt.spawn(async move { w2.wait(&p.uid).await }));
        }
        for h in handles {
            let s = rt.block_on(h).unwrap();
            assert_eq!(s.code(), Code::Unschedulable);
        }
    }
}
