//! Cluster events into cache and queue updates (upstream `eventhandlers.go`): assigned
//! pods go to the cache, pending pods of our profiles to the queue, and every change
//! that may help a waiting pod is offered to the queue's requeue logic.

use std::sync::Arc;

use super::Scheduler;
use crate::client::WatchEvent;
use crate::framework::events::{
    node_scheduling_properties_change, pod_scheduling_properties_change, ActionType, ClusterEvent,
    EventObject, EventResource, EVENT_ASSIGNED_POD_ADD, EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD,
    EVENT_NODE_DELETE,
};
use crate::model::Pod;

impl Scheduler {
    fn responsible_for(&self, pod: &Pod) -> bool {
        self.profiles.contains_key(&pod.spec.scheduler_name)
    }

    /// Handles one backend event.
    pub fn handle_event(&self, ev: WatchEvent) {
        match ev {
            WatchEvent::Synced => {
                self.set_synced();
            }
            WatchEvent::NodeAdd(node) => {
                self.cache().add_node(node.clone());
                self.queue.move_all_to_active_or_backoff(
                    EVENT_NODE_ADD,
                    None,
                    Some(EventObject::Node(node)),
                    None,
                );
            }
            WatchEvent::NodeUpdate(old, new) => {
                self.cache().update_node(&old, new.clone());
                for e in node_scheduling_properties_change(&old, &new) {
                    self.queue.move_all_to_active_or_backoff(
                        e,
                        Some(EventObject::Node(old.clone())),
                        Some(EventObject::Node(new.clone())),
                        None,
                    );
                }
            }
            WatchEvent::NodeDelete(node) => {
                self.queue.move_all_to_active_or_backoff(
                    EVENT_NODE_DELETE,
                    Some(EventObject::Node(node.clone())),
                    None,
                    None,
                );
                if let Err(e) = self.cache().remove_node(&node.name) {
                    tracing::warn!(node = %node.name, error = %e, "removing node from cache");
                }
            }
            WatchEvent::PodAdd(pod) => self.on_pod_add(pod),
            WatchEvent::PodUpdate(old, new) => self.on_pod_update(old, new),
            WatchEvent::PodDelete(pod) => self.on_pod_delete(pod),
            WatchEvent::NamespaceUpsert(ns) => {
                self.cache().set_namespace(&ns);
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(EventResource::Namespace, ActionType::ADD),
                    None,
                    Some(EventObject::Other),
                    None,
                );
            }
            WatchEvent::NamespaceDelete(name) => {
                self.cache().remove_namespace(&name);
            }
            WatchEvent::PdbUpsert(pdb) => {
                self.cache().set_pdb(pdb);
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(EventResource::PodDisruptionBudget, ActionType::ADD),
                    None,
                    Some(EventObject::Other),
                    None,
                );
            }
            WatchEvent::PdbDelete { namespace, name } => {
                self.cache().remove_pdb(&namespace, &name);
            }
            WatchEvent::StorageUpsert(obj) => {
                let old = self.volumes.upsert(&obj);
                let action = if old.is_some() {
                    ActionType::UPDATE
                } else {
                    ActionType::ADD
                };
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(storage_resource(&obj), action),
                    old.map(EventObject::Storage),
                    Some(EventObject::Storage(obj)),
                    None,
                );
            }
            WatchEvent::StorageDelete(obj) => {
                self.volumes.delete(&obj);
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(storage_resource(&obj), ActionType::DELETE),
                    Some(EventObject::Storage(obj)),
                    None,
                    None,
                );
            }
            WatchEvent::DraUpsert(obj) => {
                let old = self.dra.upsert(&obj);
                let Some(resource) = dra_resource(&obj) else {
                    return;
                };
                let action = if old.is_some() {
                    ActionType::UPDATE
                } else {
                    ActionType::ADD
                };
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(resource, action),
                    old.map(EventObject::Dra),
                    Some(EventObject::Dra(obj)),
                    None,
                );
            }
            WatchEvent::DraDelete(obj) => {
                self.dra.delete(&obj);
                let Some(resource) = dra_resource(&obj) else {
                    return;
                };
                self.queue.move_all_to_active_or_backoff(
                    ClusterEvent::new(resource, ActionType::DELETE),
                    Some(EventObject::Dra(obj)),
                    None,
                    None,
                );
            }
            WatchEvent::WorkloadSelectorUpsert(sel) => self.cache().set_workload_selector(sel),
            WatchEvent::WorkloadSelectorDelete {
                kind,
                namespace,
                name,
            } => self
                .cache()
                .remove_workload_selector(kind, &namespace, &name),
        }
    }

    fn on_pod_add(&self, pod: Arc<Pod>) {
        // Terminated pods use no resources and need no scheduling (the informer filters
        // them out upstream).
        if pod.is_terminated() {
            return;
        }
        self.pod_store().insert(pod.uid.clone(), pod.clone());
        if pod.is_assigned() {
            self.add_assigned_pod(pod);
        } else if self.responsible_for(&pod) {
            self.queue.add(pod);
        }
    }

    fn add_assigned_pod(&self, pod: Arc<Pod>) {
        if let Err(e) = self.cache().add_pod(pod.clone()) {
            tracing::warn!(pod = %pod.key(), error = %e, "adding pod to cache");
        }
        self.queue.move_all_to_active_or_backoff(
            EVENT_ASSIGNED_POD_ADD,
            None,
            Some(EventObject::Pod(pod)),
            None,
        );
    }

    fn on_pod_update(&self, old: Arc<Pod>, new: Arc<Pod>) {
        if new.is_terminated() {
            self.on_pod_delete(old);
            return;
        }
        self.pod_store().insert(new.uid.clone(), new.clone());
        if old.is_assigned() {
            if let Err(e) = self.cache().update_pod(&old, new.clone()) {
                tracing::warn!(pod = %new.key(), error = %e, "updating pod in cache");
            }
            for e in pod_scheduling_properties_change(&old, &new) {
                self.queue.move_all_to_active_or_backoff(
                    e,
                    Some(EventObject::Pod(old.clone())),
                    Some(EventObject::Pod(new.clone())),
                    None,
                );
            }
            return;
        }
        if new.is_assigned() {
            // The binding landed (ours or someone else's).
            self.add_assigned_pod(new);
            if self.responsible_for(&old) {
                self.queue.delete(&old);
            }
            return;
        }
        if !self.responsible_for(&old) {
            return;
        }
        if old.resource_version.is_some() && old.resource_version == new.resource_version {
            return;
        }
        if self.cache().is_assumed(&new.uid) {
            if new.deletion_timestamp.is_some() && old.deletion_timestamp.is_none() {
                self.handle_assumed_pod_deletion(&new);
            }
            return;
        }
        self.queue
            .update(&old, new.clone(), |uid| self.cache().is_assumed(uid));
        if let Some(nnn) = &old.nominated_node_name {
            if new.nominated_node_name.as_ref() != Some(nnn) {
                let prio = old.priority();
                self.queue.move_all_to_active_or_backoff(
                    EVENT_ASSIGNED_POD_DELETE,
                    Some(EventObject::Pod(old.clone())),
                    None,
                    Some(&|p: &Pod| p.priority() <= prio),
                );
            }
        }
    }

    fn on_pod_delete(&self, pod: Arc<Pod>) {
        self.pod_store().remove(&pod.uid);
        if pod.is_assigned() {
            let removed = self.cache().remove_pod(&pod);
            if let Err(e) = removed {
                tracing::debug!(pod = %pod.key(), error = %e, "removing pod from cache");
            }
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                Some(EventObject::Pod(pod)),
                None,
                None,
            );
            return;
        }
        if !self.responsible_for(&pod) {
            return;
        }
        self.queue.delete(&pod);
        if self.cache().is_assumed(&pod.uid) {
            self.handle_assumed_pod_deletion(&pod);
        } else if pod.nominated_node_name.is_some() {
            let prio = pod.priority();
            self.queue.move_all_to_active_or_backoff(
                EVENT_ASSIGNED_POD_DELETE,
                Some(EventObject::Pod(pod)),
                None,
                Some(&|p: &Pod| p.priority() <= prio),
            );
        }
    }

    /// A pod deleted while in its binding cycle: reject it if it waits at Permit (the
    /// binding cycle then cleans up), otherwise forget it now.
    fn handle_assumed_pod_deletion(&self, pod: &Pod) {
        let Some(assumed) = self.cache().get_pod(&pod.uid).cloned() else {
            return;
        };
        let fw = self.profiles.get(&pod.spec.scheduler_name);
        let waiting = fw.is_some_and(|f| f.waiting_pods().reject(&pod.uid, "removed"));
        if !waiting {
            if let Err(e) = self.cache().forget_pod(&assumed) {
                tracing::debug!(pod = %pod.key(), error = %e, "forgetting deleted assumed pod");
            }
        }
        self.queue.move_all_to_active_or_backoff(
            EVENT_ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(assumed)),
            None,
            None,
        );
    }
}

/// The event resource of a DRA object (templates are the controller's, not ours).
fn dra_resource(obj: &crate::model::dra::DraObject) -> Option<EventResource> {
    use crate::model::dra::DraObject as D;
    match obj {
        D::DeviceClass(_) => Some(EventResource::DeviceClass),
        D::ResourceSlice(_) => Some(EventResource::ResourceSlice),
        D::ResourceClaim(_) => Some(EventResource::ResourceClaim),
        D::ResourceClaimTemplate(_) => None,
    }
}

/// The event resource of a storage object.
fn storage_resource(obj: &crate::model::storage::StorageObject) -> EventResource {
    use crate::model::storage::StorageObject as S;
    match obj {
        S::Pvc(_) => EventResource::PersistentVolumeClaim,
        S::Pv(_) => EventResource::PersistentVolume,
        S::StorageClass(_) => EventResource::StorageClass,
        S::CsiNode(_) => EventResource::CSINode,
        S::CsiDriver(_) => EventResource::CSIDriver,
        S::CsiStorageCapacity(_) => EventResource::CSIStorageCapacity,
    }
}
