//! Requeueing on cluster events (upstream `MoveAllToActiveOrBackoffQueue` and
//! QueueingHints): which unschedulable pods an event may help, and where they go.

use super::*;

impl SchedulingQueue {
    pub(super) fn move_to_active(
        &self,
        inner: &mut Inner,
        mut p: QueuedPodInfo,
        event: &ClusterEvent,
        from_backoff: bool,
    ) -> Placement {
        if !from_backoff && !self.run_pre_enqueue(&mut p) {
            let uid = p.pod.uid.clone();
            if !inner.active.contains(&uid)
                && !inner.backoff.contains(&uid)
                && !inner.error_backoff.contains(&uid)
            {
                inner.unschedulable.insert(uid, p);
            }
            self.count(Placement::Unschedulable, event);
            return Placement::Unschedulable;
        }
        if p.initial_attempt_timestamp.is_none() {
            p.initial_attempt_timestamp = Some(self.clock.now());
        }
        let uid = p.pod.uid.clone();
        inner.unschedulable.remove(&uid);
        inner.backoff.delete(&uid);
        inner.error_backoff.delete(&uid);
        if *event == EVENT_UNSCHEDULED_POD_ADD || *event == EVENT_UNSCHEDULED_POD_UPDATE {
            let node = p.pod.nominated_node_name.clone();
            if node.is_some() {
                inner.nominator.add(p.pod.clone(), node);
            }
        }
        inner.active.add_or_update(p);
        self.count(Placement::Active, event);
        Placement::Active
    }

    pub(super) fn move_to_backoff(
        &self,
        inner: &mut Inner,
        mut p: QueuedPodInfo,
        event: &ClusterEvent,
    ) -> Placement {
        if !self.run_pre_enqueue(&mut p) {
            inner.unschedulable.insert_if_absent(p);
            self.count(Placement::Unschedulable, event);
            return Placement::Unschedulable;
        }
        let uid = p.pod.uid.clone();
        inner.unschedulable.remove(&uid);
        self.backoff_time(&mut p);
        if p.unschedulable_plugins.is_empty() && p.pending_plugins.is_empty() {
            inner.error_backoff.add_or_update(p);
        } else {
            inner.backoff.add_or_update(p);
        }
        self.count(Placement::Backoff, event);
        Placement::Backoff
    }

    pub(super) fn requeue(
        &self,
        inner: &mut Inner,
        mut p: QueuedPodInfo,
        s: Strategy,
        event: &ClusterEvent,
    ) -> Placement {
        match s {
            Strategy::Skip => {
                inner.unschedulable.insert(p.pod.uid.clone(), p);
                self.count(Placement::Unschedulable, event);
                Placement::Unschedulable
            }
            Strategy::AfterBackoff if self.is_backing_off(&mut p) => {
                self.move_to_backoff(inner, p, event)
            }
            _ => self.move_to_active(inner, p, event, false),
        }
    }

    /// Upstream `isPodWorthRequeuing`.
    pub(super) fn worth_requeuing(
        &self,
        p: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Strategy {
        if p.unschedulable_plugins.is_empty() && p.pending_plugins.is_empty() {
            return Strategy::AfterBackoff;
        }
        if event.is_wildcard() {
            if let Some(n) = new {
                match n.as_pod() {
                    Some(np) if np.uid == p.pod.uid => {}
                    _ => return Strategy::Skip,
                }
            }
            return Strategy::AfterBackoff;
        }
        let Some(fw) = self.framework(&p.pod) else {
            return Strategy::AfterBackoff;
        };
        let mut strategy = Strategy::Skip;
        for (plugin, registrations) in fw.enqueue_extensions() {
            let rejected = p.unschedulable_plugins.contains(plugin);
            let pending = p.pending_plugins.contains(plugin);
            if !rejected && !pending {
                continue;
            }
            for reg in registrations {
                if !reg.event.matches(event) {
                    continue;
                }
                let hint = match &reg.hint {
                    Some(h) => h(&p.pod, old, new),
                    None => crate::framework::events::QueueingHint::Queue,
                };
                if hint == crate::framework::events::QueueingHint::QueueSkip {
                    continue;
                }
                if pending {
                    return Strategy::Immediately;
                }
                if p.pending_plugins.is_empty() {
                    return Strategy::AfterBackoff;
                }
                strategy = Strategy::AfterBackoff;
            }
        }
        strategy
    }

    pub(super) fn is_event_of_interest(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard()
            || self.profiles.values().any(|fw| {
                fw.enqueue_extensions()
                    .iter()
                    .any(|(_, regs)| regs.iter().any(|r| r.event.matches(event)))
            })
    }

    /// Moves unschedulable pods that this event may help (upstream
    /// `MoveAllToActiveOrBackoffQueue`), and records it for pods in flight.
    pub fn move_all_to_active_or_backoff(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        pre_check: Option<&dyn Fn(&Pod) -> bool>,
    ) {
        if !self.is_event_of_interest(&event) {
            return;
        }
        let mut inner = self.lock();
        let mut to_move: Vec<(Uid, Strategy)> = Vec::new();
        let mut consider = |uid: &Uid, p: &QueuedPodInfo| {
            if pre_check.is_some_and(|f| !f(&p.pod)) {
                return;
            }
            let s = self.worth_requeuing(p, &event, old.as_ref(), new.as_ref());
            if s != Strategy::Skip {
                to_move.push((uid.clone(), s));
            }
        };
        for (uid, p) in inner.unschedulable.rejected() {
            consider(uid, p);
        }
        // A gated pod can only be released by an event its gating plugin registered:
        // that is decided once per (profile, gate), and a group whose gate did not
        // register the event is not visited at all.
        for ((profile, gate), pods) in inner.unschedulable.gate_groups() {
            let registered = self
                .profiles
                .get(profile)
                .and_then(|fw| fw.enqueue_extensions().iter().find(|(n, _)| n == gate))
                .is_some_and(|(_, regs)| regs.iter().any(|r| r.event.matches(&event)));
            if registered {
                for (uid, p) in pods {
                    consider(uid, p);
                }
            }
        }
        let mut moved = false;
        for (uid, s) in to_move {
            let Some(p) = inner.unschedulable.remove(&uid) else {
                continue;
            };
            if self.requeue(&mut inner, p, s, &event) != Placement::Unschedulable {
                moved = true;
            }
        }
        if !inner.in_flight.is_empty() {
            let seq = inner.next_seq;
            inner.next_seq += 1;
            inner.in_flight_events.push_back(InFlightEvent {
                seq,
                event,
                old,
                new,
            });
        }
        drop(inner);
        if moved {
            self.cond.notify_all();
        }
    }

    /// Moves these pods to activeQ now (upstream `Activate`). A pod being scheduled
    /// gets a targeted event instead, so it is retried when its attempt fails.
    pub fn activate(&self, pods: &[Arc<Pod>]) {
        let mut inner = self.lock();
        let mut moved = false;
        for pod in pods {
            let uid = &pod.uid;
            let p = inner
                .unschedulable
                .remove(uid)
                .or_else(|| inner.backoff.delete(uid))
                .or_else(|| inner.error_backoff.delete(uid));
            match p {
                Some(p) => {
                    moved |= self.move_to_active(&mut inner, p, &EVENT_FORCE_ACTIVATE, false)
                        == Placement::Active;
                }
                None if inner.in_flight.contains_key(uid) => {
                    let seq = inner.next_seq;
                    inner.next_seq += 1;
                    inner.in_flight_events.push_back(InFlightEvent {
                        seq,
                        event: EVENT_FORCE_ACTIVATE,
                        old: None,
                        new: Some(EventObject::Pod(pod.clone())),
                    });
                }
                None => {}
            }
        }
        drop(inner);
        if moved {
            self.cond.notify_all();
        }
    }

    /// A sidecar serving `plugins` (re)connected: pods those plugins gated or rejected
    /// while it was unreachable may pass now, so they are retried after their backoff
    /// (gated pods go through PreEnqueue again). No cluster event would move them.
    pub fn plugins_recovered(&self, plugins: &[String]) {
        let event = crate::framework::events::EVENT_PLUGIN_RECOVERED;
        let mut inner = self.lock();
        let uids: Vec<Uid> = inner
            .unschedulable
            .iter()
            .filter(|(_, p)| {
                let ours = |name: &str| plugins.iter().any(|x| x == name);
                p.gating_plugin.as_deref().is_some_and(ours)
                    || p.unschedulable_plugins.iter().any(|x| ours(x))
            })
            .map(|(k, _)| k.clone())
            .collect();
        let mut moved = false;
        for uid in uids {
            let Some(p) = inner.unschedulable.remove(&uid) else {
                continue;
            };
            if self.requeue(&mut inner, p, Strategy::AfterBackoff, &event)
                != Placement::Unschedulable
            {
                moved = true;
            }
        }
        drop(inner);
        if moved {
            self.cond.notify_all();
        }
    }
}
