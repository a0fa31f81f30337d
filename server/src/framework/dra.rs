//! The DRA objects the DynamicResources plugin reads (upstream: the DeviceClass,
//! ResourceSlice and ResourceClaim informers' listers), with the claim tracker on top
//! (upstream `claimTracker`, AGENTS.md of `dynamicresources`):
//!
//! * an assume cache: a claim the scheduler wrote is seen as written before the
//!   informer delivers it, and an informer object at least as new replaces it;
//! * in-flight allocations: claims allocated at Reserve and not yet written (PreFilter
//!   refuses to allocate such a claim again; their devices are in use);
//! * allocated devices: every device some claim's allocation holds, kept
//!   incrementally so PreFilter copies a set instead of walking every claim.
//!
//! Like the volume store, these objects are not in the node snapshot: the plugin reads
//! them at PreFilter and keeps what Filter needs in its cycle state.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::dra::{DeviceClass, DeviceId, DraObject, ResourceClaim, ResourceSlice};

type NsName = (Arc<str>, Arc<str>);

#[derive(Default)]
pub struct DraState {
    /// Claims as the cluster has them.
    api_claims: FxHashMap<NsName, Arc<ResourceClaim>>,
    /// Claims the scheduler wrote, until the cluster's copy catches up.
    assumed: FxHashMap<NsName, Arc<ResourceClaim>>,
    /// Claims allocated at Reserve and not yet written, by UID.
    in_flight: FxHashMap<Arc<str>, Arc<ResourceClaim>>,
    /// Devices held by the effective claims' allocations (admin access excluded), with
    /// how many allocations hold each (shared claims hold a device once).
    allocated: FxHashMap<DeviceId, u32>,
    slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    classes: FxHashMap<Arc<str>, Arc<DeviceClass>>,
    /// The slices indexed for the allocator; rebuilt after a slice changes.
    index: std::sync::Mutex<Option<Arc<SliceIndex>>>,
}

/// What a pool's slices say across all nodes, for completeness.
#[derive(Debug, Clone, Copy)]
pub struct PoolFacts {
    pub latest_generation: i64,
    /// Slices at the latest generation.
    pub slices_at_latest: i64,
    pub resource_slice_count: i64,
}

/// Slices by the node they serve, so gathering a node's pools reads its own slices
/// and the few that are not node-local, not every slice of the cluster.
#[derive(Debug, Default)]
pub struct SliceIndex {
    pub by_node: FxHashMap<Arc<str>, Vec<Arc<ResourceSlice>>>,
    /// Slices with a node selector, for all nodes, or per-device node selection.
    pub other: Vec<Arc<ResourceSlice>>,
    pub pools: FxHashMap<(Arc<str>, Arc<str>), PoolFacts>,
}

impl SliceIndex {
    fn build(slices: &BTreeMap<Arc<str>, Arc<ResourceSlice>>) -> SliceIndex {
        let mut ix = SliceIndex::default();
        for s in slices.values() {
            match &s.nodes {
                crate::model::dra::NodeSelection::NodeName(n) => {
                    ix.by_node.entry(n.clone()).or_default().push(s.clone())
                }
                _ => ix.other.push(s.clone()),
            }
            let f = ix
                .pools
                .entry((s.driver.clone(), s.pool.name.clone()))
                .or_insert(PoolFacts {
                    latest_generation: s.pool.generation,
                    slices_at_latest: 0,
                    resource_slice_count: s.pool.resource_slice_count,
                });
            if s.pool.generation > f.latest_generation {
                *f = PoolFacts {
                    latest_generation: s.pool.generation,
                    slices_at_latest: 0,
                    resource_slice_count: s.pool.resource_slice_count,
                };
            }
            if s.pool.generation == f.latest_generation {
                f.slices_at_latest += 1;
            }
        }
        ix
    }
}

/// Shared by every profile of a scheduler; updated by its event handler.
#[derive(Default)]
pub struct DraStore {
    state: RwLock<DraState>,
}

fn key(ns: &str, name: &str) -> NsName {
    (ns.into(), name.into())
}

/// Whether a resource version is older than another; opaque versions compare unequal
/// only (then the cluster's copy wins, as it is what the API server holds).
fn older(a: Option<&str>, b: Option<&str>) -> bool {
    match (
        a.and_then(|v| v.parse::<u64>().ok()),
        b.and_then(|v| v.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    }
}

impl DraState {
    /// The claim as the scheduler sees it: its own write where the cluster lags.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<ResourceClaim>> {
        let k = key(namespace, name);
        self.assumed.get(&k).or_else(|| self.api_claims.get(&k))
    }

    pub fn is_in_flight(&self, uid: &str) -> bool {
        self.in_flight.contains_key(uid)
    }

    pub fn device_class(&self, name: &str) -> Option<&Arc<DeviceClass>> {
        self.classes.get(name)
    }

    pub fn classes(&self) -> impl Iterator<Item = &Arc<DeviceClass>> {
        self.classes.values()
    }

    /// Every slice, in name order.
    pub fn slices(&self) -> impl Iterator<Item = &Arc<ResourceSlice>> {
        self.slices.values()
    }

    pub fn has_slices(&self) -> bool {
        !self.slices.is_empty()
    }

    /// The slices indexed by node (built once per change of the slices).
    pub fn slice_index(&self) -> Arc<SliceIndex> {
        let mut ix = self.index.lock().unwrap_or_else(|e| e.into_inner());
        ix.get_or_insert_with(|| Arc::new(SliceIndex::build(&self.slices)))
            .clone()
    }

    fn slices_changed(&mut self) {
        *self.index.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Devices in use: allocated by some claim, or by an in-flight allocation (upstream
    /// `ListAllAllocatedDevices`). Admin-access results do not take a device.
    pub fn allocated_devices(&self) -> FxHashSet<DeviceId> {
        let mut out: FxHashSet<DeviceId> = self.allocated.keys().cloned().collect();
        for c in self.in_flight.values() {
            if let Some(a) = &c.allocation {
                out.extend(a.devices.iter().filter(|d| !d.admin_access).map(|d| d.id()));
            }
        }
        out
    }

    fn effective(&self, k: &NsName) -> Option<Arc<ResourceClaim>> {
        self.assumed
            .get(k)
            .or_else(|| self.api_claims.get(k))
            .cloned()
    }

    fn count(&mut self, claim: Option<&Arc<ResourceClaim>>, add: bool) {
        let Some(a) = claim.and_then(|c| c.allocation.as_ref()) else {
            return;
        };
        for d in a.devices.iter().filter(|d| !d.admin_access) {
            let id = d.id();
            if add {
                *self.allocated.entry(id).or_insert(0) += 1;
            } else if let Some(n) = self.allocated.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.allocated.remove(&id);
                }
            }
        }
    }

    /// Runs `f` on the claim maps, keeping the allocated-device counts in step with
    /// the effective claim of `k`.
    fn change_claim(&mut self, k: &NsName, f: impl FnOnce(&mut Self)) {
        let before = self.effective(k);
        f(self);
        let after = self.effective(k);
        let same = match (&before, &after) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.count(before.as_ref(), false);
            self.count(after.as_ref(), true);
        }
    }
}

impl DraStore {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn read(&self) -> RwLockReadGuard<'_, DraState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, DraState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// An object added or updated in the cluster; returns the previous one.
    pub fn upsert(&self, obj: &DraObject) -> Option<DraObject> {
        let mut st = self.write();
        match obj {
            DraObject::ResourceClaim(c) => {
                let k = key(&c.namespace, &c.name);
                let mut old = None;
                st.change_claim(&k, |st| {
                    old = st.api_claims.insert(k.clone(), c.clone());
                    if let Some(a) = st.assumed.get(&k) {
                        if !older(c.resource_version.as_deref(), a.resource_version.as_deref())
                            || a.uid != c.uid
                        {
                            st.assumed.remove(&k);
                        }
                    }
                });
                old.map(DraObject::ResourceClaim)
            }
            DraObject::ResourceSlice(s) => {
                st.slices_changed();
                st.slices
                    .insert(s.name.clone(), s.clone())
                    .map(DraObject::ResourceSlice)
            }
            DraObject::DeviceClass(c) => st
                .classes
                .insert(c.name.clone(), c.clone())
                .map(DraObject::DeviceClass),
            // The scheduler reads no templates (the resourceclaim controller does).
            DraObject::ResourceClaimTemplate(_) => None,
        }
    }

    /// An object deleted from the cluster.
    pub fn delete(&self, obj: &DraObject) {
        let mut st = self.write();
        match obj {
            DraObject::ResourceClaim(c) => {
                let k = key(&c.namespace, &c.name);
                st.change_claim(&k, |st| {
                    st.api_claims.remove(&k);
                    st.assumed.remove(&k);
                });
            }
            DraObject::ResourceSlice(s) => {
                st.slices_changed();
                st.slices.remove(&s.name);
            }
            DraObject::DeviceClass(c) => {
                st.classes.remove(&c.name);
            }
            DraObject::ResourceClaimTemplate(_) => {}
        }
    }

    /// Marks a claim allocated at Reserve (upstream `SignalClaimPendingAllocation`).
    pub fn start_allocation(&self, claim: Arc<ResourceClaim>) {
        self.write().in_flight.insert(claim.uid.clone(), claim);
    }

    /// Drops an in-flight allocation (Unreserve, or after PreBind wrote it).
    pub fn end_allocation(&self, uid: &str) {
        self.write().in_flight.remove(uid);
    }

    /// The scheduler wrote `claim` (PreBind): see it before the informer does.
    pub fn assume(&self, claim: Arc<ResourceClaim>) {
        let mut st = self.write();
        let k = key(&claim.namespace, &claim.name);
        st.change_claim(&k, |st| {
            let stale = st.api_claims.get(&k).is_some_and(|a| {
                older(
                    claim.resource_version.as_deref(),
                    a.resource_version.as_deref(),
                )
            });
            if !stale {
                st.assumed.insert(k.clone(), claim);
            }
        });
    }

    /// Forgets what the scheduler assumed about a claim (a failed write).
    pub fn restore(&self, namespace: &str, name: &str) {
        let mut st = self.write();
        let k = key(namespace, name);
        st.change_claim(&k, |st| {
            st.assumed.remove(&k);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::dra::{Allocation, ClaimSpec, DeviceResult};

    fn claim(rv: &str, devices: &[&str]) -> Arc<ResourceClaim> {
        Arc::new(ResourceClaim {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u1".into(),
            resource_version: Some(rv.into()),
            deleting: false,
            finalizers: Box::new([]),
            annotations: Default::default(),
            owner: None,
            spec: Arc::new(ClaimSpec::default()),
            allocation: (!devices.is_empty()).then(|| {
                Arc::new(Allocation {
                    devices: devices
                        .iter()
                        .map(|d| DeviceResult {
                            request: "r".into(),
                            driver: "d".into(),
                            pool: "p".into(),
                            device: (*d).into(),
                            admin_access: false,
                        })
                        .collect(),
                    config: vec![],
                    node_selector: None,
                })
            }),
            reserved_for: vec![],
        })
    }

    fn names(s: &DraStore) -> Vec<String> {
        let mut v: Vec<String> = s
            .read()
            .allocated_devices()
            .iter()
            .map(|d| d.device.to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn assumed_claims_win_until_the_cluster_catches_up() {
        let s = DraStore::default();
        s.upsert(&DraObject::ResourceClaim(claim("5", &[])));
        assert!(names(&s).is_empty());
        s.start_allocation(claim("5", &["gpu-0"]));
        assert_eq!(names(&s), ["gpu-0"]);
        s.assume(claim("7", &["gpu-0"]));
        s.end_allocation("u1");
        assert_eq!(names(&s), ["gpu-0"]);
        // An older informer event does not undo the scheduler's write.
        s.upsert(&DraObject::ResourceClaim(claim("6", &[])));
        assert_eq!(names(&s), ["gpu-0"]);
        assert_eq!(
            s.read()
                .claim("ns", "c")
                .unwrap()
                .resource_version
                .as_deref(),
            Some("7")
        );
        // The cluster's copy at least as new replaces it.
        s.upsert(&DraObject::ResourceClaim(claim("8", &["gpu-1"])));
        assert_eq!(names(&s), ["gpu-1"]);
        s.delete(&DraObject::ResourceClaim(claim("8", &["gpu-1"])));
        assert!(names(&s).is_empty());
    }
}
