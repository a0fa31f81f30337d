//! The storage objects the volume plugins read (upstream: the PV, PVC, StorageClass
//! and CSI informers' listers), with VolumeBinding's assume cache on top: bindings
//! chosen at Reserve are visible to later cycles before the API server has them, and
//! an informer update of an object replaces whatever was assumed for it.
//!
//! Storage objects are not part of the node snapshot: like upstream, plugins read
//! them at PreFilter and keep what Filter needs in their cycle state, so the parallel
//! Filter loop reads only its own state. A change wakes PreBind waiting for claims.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::storage::{
    CsiDriver, CsiNode, CsiStorageCapacity, PersistentVolume, PersistentVolumeClaim, StorageClass,
    StorageObject,
};

type NsName = (Arc<str>, Arc<str>);

#[derive(Default)]
pub struct VolumeState {
    /// Claims as the cluster has them.
    api_pvcs: FxHashMap<NsName, Arc<PersistentVolumeClaim>>,
    /// Claims as plugins see them: assumed versions where there are any.
    pvcs: FxHashMap<NsName, Arc<PersistentVolumeClaim>>,
    assumed_pvcs: FxHashSet<NsName>,
    api_pvs: BTreeMap<Arc<str>, Arc<PersistentVolume>>,
    pvs: BTreeMap<Arc<str>, Arc<PersistentVolume>>,
    assumed_pvs: FxHashSet<Arc<str>>,
    /// Effective PVs by storage class, in name order (the binder's candidates).
    pvs_by_class: FxHashMap<Arc<str>, BTreeMap<Arc<str>, Arc<PersistentVolume>>>,
    classes: FxHashMap<Arc<str>, Arc<StorageClass>>,
    csi_nodes: FxHashMap<Arc<str>, Arc<CsiNode>>,
    csi_drivers: FxHashMap<Arc<str>, Arc<CsiDriver>>,
    capacities: BTreeMap<NsName, Arc<CsiStorageCapacity>>,
}

/// Shared by every profile of a scheduler; updated by its event handler.
#[derive(Default)]
pub struct VolumeStore {
    state: RwLock<VolumeState>,
    changed: tokio::sync::Notify,
}

fn key(ns: &str, name: &str) -> NsName {
    (ns.into(), name.into())
}

impl VolumeState {
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.pvcs.get(&key(namespace, name))
    }

    pub fn pv(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.pvs.get(name)
    }

    /// PVs of a class (empty name: PVs without a class), in name order: a copy for
    /// the cycle (upstream lists them per pod too).
    pub fn pvs_of_class(&self, class: &str) -> Arc<[Arc<PersistentVolume>]> {
        self.pvs_by_class
            .get(class)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_else(|| Arc::from(Vec::new()))
    }

    pub fn storage_class(&self, name: &str) -> Option<&Arc<StorageClass>> {
        self.classes.get(name)
    }

    pub fn csi_node(&self, name: &str) -> Option<&Arc<CsiNode>> {
        self.csi_nodes.get(name)
    }

    pub fn csi_driver(&self, name: &str) -> Option<&Arc<CsiDriver>> {
        self.csi_drivers.get(name)
    }

    pub fn capacities(&self) -> impl Iterator<Item = &Arc<CsiStorageCapacity>> {
        self.capacities.values()
    }

    fn set_pv(&mut self, pv: Arc<PersistentVolume>) {
        self.remove_pv(&pv.name);
        self.pvs_by_class
            .entry(pv.storage_class.clone())
            .or_default()
            .insert(pv.name.clone(), pv.clone());
        self.pvs.insert(pv.name.clone(), pv);
    }

    fn remove_pv(&mut self, name: &str) {
        let Some(old) = self.pvs.remove(name) else {
            return;
        };
        if let Some(m) = self.pvs_by_class.get_mut(&old.storage_class) {
            m.remove(name);
            if m.is_empty() {
                self.pvs_by_class.remove(&old.storage_class);
            }
        }
    }
}

impl VolumeStore {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn read(&self) -> RwLockReadGuard<'_, VolumeState> {
        match self.state.read() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn write(&self) -> RwLockWriteGuard<'_, VolumeState> {
        match self.state.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Wakes PreBind waiters after a claim or volume changed.
    fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// A future that completes at the next change; enable it before checking state.
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// An object added or updated by the cluster; returns the previous one.
    pub fn upsert(&self, obj: &StorageObject) -> Option<StorageObject> {
        let mut st = self.write();
        let old = match obj {
            StorageObject::Pvc(c) => {
                let k = key(&c.namespace, &c.name);
                st.assumed_pvcs.remove(&k);
                st.pvcs.insert(k.clone(), c.clone());
                st.api_pvcs.insert(k, c.clone()).map(StorageObject::Pvc)
            }
            StorageObject::Pv(v) => {
                st.assumed_pvs.remove(&v.name);
                st.set_pv(v.clone());
                st.api_pvs
                    .insert(v.name.clone(), v.clone())
                    .map(StorageObject::Pv)
            }
            StorageObject::StorageClass(c) => st
                .classes
                .insert(c.name.clone(), c.clone())
                .map(StorageObject::StorageClass),
            StorageObject::CsiNode(n) => st
                .csi_nodes
                .insert(n.name.clone(), n.clone())
                .map(StorageObject::CsiNode),
            StorageObject::CsiDriver(d) => st
                .csi_drivers
                .insert(d.name.clone(), d.clone())
                .map(StorageObject::CsiDriver),
            StorageObject::CsiStorageCapacity(c) => st
                .capacities
                .insert(key(&c.namespace, &c.name), c.clone())
                .map(StorageObject::CsiStorageCapacity),
        };
        drop(st);
        self.wake();
        old
    }

    /// An object deleted from the cluster.
    pub fn delete(&self, obj: &StorageObject) {
        let mut st = self.write();
        match obj {
            StorageObject::Pvc(c) => {
                let k = key(&c.namespace, &c.name);
                st.assumed_pvcs.remove(&k);
                st.pvcs.remove(&k);
                st.api_pvcs.remove(&k);
            }
            StorageObject::Pv(v) => {
                st.assumed_pvs.remove(&v.name);
                st.api_pvs.remove(&v.name);
                st.remove_pv(&v.name);
            }
            StorageObject::StorageClass(c) => {
                st.classes.remove(&c.name);
            }
            StorageObject::CsiNode(n) => {
                st.csi_nodes.remove(&n.name);
            }
            StorageObject::CsiDriver(d) => {
                st.csi_drivers.remove(&d.name);
            }
            StorageObject::CsiStorageCapacity(c) => {
                st.capacities.remove(&key(&c.namespace, &c.name));
            }
        }
        drop(st);
        self.wake();
    }

    /// Makes an assumed PV visible (Reserve).
    pub fn assume_pv(&self, pv: Arc<PersistentVolume>) {
        let mut st = self.write();
        st.assumed_pvs.insert(pv.name.clone());
        st.set_pv(pv);
    }

    /// Makes an assumed claim visible (Reserve).
    pub fn assume_pvc(&self, pvc: Arc<PersistentVolumeClaim>) {
        let mut st = self.write();
        let k = key(&pvc.namespace, &pvc.name);
        st.assumed_pvcs.insert(k.clone());
        st.pvcs.insert(k, pvc);
    }

    /// Drops an assumed PV, back to the cluster's version (Unreserve).
    pub fn restore_pv(&self, name: &str) {
        let mut st = self.write();
        if !st.assumed_pvs.remove(name) {
            return;
        }
        match st.api_pvs.get(name).cloned() {
            Some(api) => st.set_pv(api),
            None => st.remove_pv(name),
        }
    }

    /// Drops an assumed claim, back to the cluster's version (Unreserve).
    pub fn restore_pvc(&self, namespace: &str, name: &str) {
        let mut st = self.write();
        let k = key(namespace, name);
        if !st.assumed_pvcs.remove(&k) {
            return;
        }
        match st.api_pvcs.get(&k).cloned() {
            Some(api) => {
                st.pvcs.insert(k, api);
            }
            None => {
                st.pvcs.remove(&k);
            }
        }
    }

    /// The cluster's own version of a claim (not an assumed one).
    pub fn api_pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.read().api_pvcs.get(&key(namespace, name)).cloned()
    }

    /// The cluster's own version of a PV (not an assumed one).
    pub fn api_pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.read().api_pvs.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::convert::pv_from_k8s;

    #[test]
    fn assumed_until_restored_or_replaced_by_the_cluster() {
        let store = VolumeStore::new();
        let pv: PersistentVolume = pv_from_k8s(
            &crate::yaml::from_str("metadata: {name: a}\nspec: {storageClassName: local}")
                .expect("yaml"),
        )
        .expect("pv");
        store.upsert(&StorageObject::Pv(Arc::new(pv.clone())));
        let mut assumed = pv.clone();
        assumed.claim_ref = Some(crate::model::storage::ClaimRef {
            namespace: "default".into(),
            name: "c".into(),
            uid: "u".into(),
        });
        store.assume_pv(Arc::new(assumed.clone()));
        assert!(store.read().pv("a").is_some_and(|v| v.claim_ref.is_some()));
        assert!(store.read().pvs_of_class("local")[0].claim_ref.is_some());
        assert!(store.api_pv("a").is_some_and(|v| v.claim_ref.is_none()));
        store.restore_pv("a");
        assert!(store.read().pvs_of_class("local")[0].claim_ref.is_none());
        // An informer update replaces the assumed object.
        store.assume_pv(Arc::new(assumed));
        store.upsert(&StorageObject::Pv(Arc::new(pv)));
        assert!(store.read().pv("a").is_some_and(|v| v.claim_ref.is_none()));
        store.restore_pv("a");
        assert!(store.read().pv("a").is_some());
    }
}
