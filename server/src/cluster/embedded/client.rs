//! The embedded cluster carrying out the scheduler's decisions as an API server and
//! kubelet would: bindings (refused on conflict), status patches, victims deleted at
//! once or after their grace period, events kept per pod; and the event feed.

use super::*;

impl ClusterClient for EmbeddedCluster {
    fn bind<'a>(&'a self, pod: &'a Pod, node: &'a str) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let Some(rec) = st.pods.get(&pod.uid) else {
                return Err(ClientError::NotFound(pod.name.to_string()));
            };
            if let Some(existing) = rec.pod.node_name.clone() {
                st.bind_conflicts += 1;
                return Err(ClientError::Conflict(format!(
                    "pod {} is already assigned to node {existing:?}",
                    pod.key()
                )));
            }
            if !st.nodes.contains_key(node) {
                return Err(ClientError::NotFound(format!("node {node}")));
            }
            st.bindings += 1;
            let node: Arc<str> = node.into();
            let ts = now_micros();
            EmbeddedCluster::update_pod(&mut st, &pod.uid, |p| {
                p.node_name = Some(node);
                // The API server clears the nomination in the binding's own write
                // (ClearingNominatedNodeNameAfterBinding, on since v1.35).
                p.nominated_node_name = None;
                p.phase = crate::model::pod::PodPhase::Running;
                let mut spec = (*p.spec).clone();
                spec.start_time = Some(ts);
                p.spec = Arc::new(spec);
            });
            if let Some(rec) = st.pods.get_mut(&pod.uid) {
                rec.condition = Some(PodCondition {
                    status: "True",
                    reason: "",
                    message: String::new(),
                });
            }
            if !st.pdbs.is_empty() {
                st.refresh_pdbs(&pod.namespace, Some(pod.labels()));
            }
            Ok(())
        })
    }

    fn update_pod_status<'a>(
        &'a self,
        pod: &'a Pod,
        update: PodStatusUpdate,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let Some(rec) = st.pods.get_mut(&pod.uid) else {
                return Err(ClientError::NotFound(pod.name.to_string()));
            };
            if rec.pod.node_name.is_some() {
                // Bound meanwhile: the scheduler's stale failure must not overwrite it.
                return Ok(());
            }
            let mut changed = false;
            if let Some(c) = update.condition {
                if rec.condition.as_ref() != Some(&c) {
                    rec.condition = Some(c);
                    changed = true;
                }
            }
            let nominated = update.nominated_node_name;
            if let Some(n) = &nominated {
                changed |= rec.pod.nominated_node_name != *n;
            }
            if changed {
                EmbeddedCluster::update_pod(&mut st, &pod.uid, |p| {
                    if let Some(n) = nominated {
                        p.nominated_node_name = n;
                    }
                });
            }
            Ok(())
        })
    }

    fn delete_pod<'a>(
        &'a self,
        pod: &'a Pod,
        preemptor: &'a Pod,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut st = self.lock();
            let Some(rec) = st.pods.get(&pod.uid) else {
                return Err(ClientError::NotFound(pod.name.to_string()));
            };
            if rec.pod.deletion_timestamp.is_some() {
                return Ok(());
            }
            let victim = rec.pod.clone();
            let priority_of = |key: &str| st.ledger_pods.get(key).map_or(0, |f| f.priority);
            let record = crate::invariants::Preemption {
                victim: victim.key(),
                victim_priority: priority_of(&victim.key()),
                preemptor: preemptor.key(),
                preemptor_priority: priority_of(&preemptor.key()),
            };
            st.ledger_preemptions.push(record);
            st.evictions.push(Eviction {
                namespace: victim.namespace.clone(),
                name: victim.name.clone(),
                node: victim.node_name.clone(),
                preemptor: preemptor.key(),
            });
            // Terminate at once unless the pod asked for a grace period.
            match victim
                .spec
                .termination_grace_period_seconds
                .filter(|g| *g > 0)
            {
                Some(grace) => {
                    let now = now_micros();
                    EmbeddedCluster::update_pod(&mut st, &pod.uid, |p| {
                        p.deletion_timestamp = Some(now);
                    });
                    st.terminating
                        .push((grace_deadline(grace), victim.uid.clone()));
                }
                None => {
                    st.pods.remove(&pod.uid);
                    st.ledger_pods.remove(&victim.key());
                    st.names
                        .remove(&(victim.namespace.clone(), victim.name.clone()));
                    st.emit_pod_delete(victim.clone());
                }
            }
            if !st.pdbs.is_empty() {
                st.refresh_pdbs(&victim.namespace, Some(victim.labels()));
            }
            Ok(())
        })
    }

    fn reserve_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        allocation: Option<&'a crate::model::dra::Allocation>,
        pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(async move {
            self.dra_write(|d, rv| d.reserve(claim, allocation, pod, rv))
                .map_err(ClientError::Conflict)
        })
    }

    fn release_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        pod_uid: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(async move {
            self.dra_write(|d, rv| d.release(claim, pod_uid, rv))
                .map_err(ClientError::NotFound)
        })
    }

    fn deallocate_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(async move {
            self.dra_write(|d, rv| d.deallocate(claim, rv))
                .map_err(ClientError::Conflict)
        })
    }

    fn create_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        generate_name: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        Box::pin(async move {
            self.dra_write(|d, rv| d.create_claim(claim, generate_name, rv, &super::name_suffix))
                .map_err(ClientError::Other)
        })
    }

    fn delete_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut st = self.lock();
            if let Some(ev) = st.dra.delete_claim(claim) {
                st.emit(ev);
            }
            Ok(())
        })
    }

    fn set_extended_resource_claim_status<'a>(
        &'a self,
        pod: &'a Pod,
        status: &'a crate::model::dra::ExtendedResourceClaimStatus,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            let mut st = self.lock();
            if !st.pods.contains_key(&pod.uid) {
                return Err(ClientError::NotFound(format!(
                    "pods \"{}\" not found",
                    pod.name
                )));
            }
            let status = Arc::new(status.clone());
            Self::update_pod(&mut st, &pod.uid, |p| {
                let mut spec = (*p.spec).clone();
                spec.extended_resource_claim_status = Some(status);
                p.spec = Arc::new(spec);
            });
            Ok(())
        })
    }

    fn bind_volume<'a>(
        &'a self,
        pv: &'a crate::model::storage::PersistentVolume,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            self.storage_write(|s, nodes| s.bind_volume(pv, nodes))
                .map_err(ClientError::Conflict)
        })
    }

    fn select_node_for_claim<'a>(
        &'a self,
        pvc: &'a crate::model::storage::PersistentVolumeClaim,
        node: &'a str,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async move {
            self.storage_write(|s, nodes| s.select_node(&pvc.namespace, &pvc.name, node, nodes))
                .map_err(ClientError::NotFound)
        })
    }

    fn record_event(&self, event: PodEvent) {
        let mut st = self.lock();
        if let Some(rec) = st.pods.get_mut(&event.uid) {
            // The scheduler records an attempt's RemotePluginIgnored right before its
            // outcome, so an outcome carries the skips of its own attempt only.
            if event.reason == "Scheduled" || event.reason == "FailedScheduling" {
                rec.ignored = rec
                    .events
                    .last()
                    .filter(|e| e.reason == crate::client::REMOTE_PLUGIN_IGNORED)
                    .map(|e| e.message.clone());
            }
            if rec.events.len() == EVENTS_PER_POD {
                rec.events.remove(0);
            }
            rec.events.push(event);
        }
    }
}

impl ClusterBackend for EmbeddedCluster {
    fn start(&self, sink: EventSink) {
        let mut st = self.lock();
        let mut initial = Vec::new();
        initial.extend(
            st.namespaces
                .values()
                .cloned()
                .map(WatchEvent::NamespaceUpsert),
        );
        initial.extend(st.nodes.values().cloned().map(WatchEvent::NodeAdd));
        initial.extend(st.storage.initial_events());
        initial.extend(st.dra.initial_events());
        initial.extend(st.pdbs.values().cloned().map(WatchEvent::PdbUpsert));
        initial.extend(
            st.selectors
                .iter()
                .cloned()
                .map(WatchEvent::WorkloadSelectorUpsert),
        );
        let mut pods: Vec<&PodRecord> = st.pods.values().collect();
        pods.sort_by_key(|r| (r.pod.node_name.is_none(), r.order));
        initial.extend(pods.into_iter().map(|r| WatchEvent::PodAdd(r.pod.clone())));
        initial.push(WatchEvent::Synced);
        for ev in initial {
            sink.send(ev);
        }
        st.sinks.push(sink);
    }
}

pub(super) fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// When a termination with `grace` seconds ends. Any grace the API server accepts (up
/// to i64::MAX seconds) is taken; beyond what an `Instant` can hold it is a century,
/// which a simulation never waits for (see [`EmbeddedCluster::finish_next_termination`]).
pub(super) fn grace_deadline(grace: i64) -> std::time::Instant {
    let now = std::time::Instant::now();
    let grace = std::time::Duration::from_secs(grace.max(0) as u64);
    now.checked_add(grace)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}
