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

use crate::model::dra::NodeSelection;
use crate::model::labels::Labels;

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
    /// Every device identity seen (slices, allocations) numbered densely, so the
    /// allocator's in-use checks are bit tests and a pod's snapshot of them is a copy
    /// of a bitset.
    ids: FxHashMap<DeviceId, u32>,
    /// Per device number: how many effective allocations hold it (admin access
    /// excluded), and how many in-flight ones.
    allocated: Vec<u32>,
    in_flight_count: Vec<u32>,
    /// Devices with a non-zero count in either: what [`DraState::allocated_devices`]
    /// copies, kept in step by every count change.
    in_use: DeviceSet,
    /// Devices allowing multiple allocations that some allocated or in-flight share
    /// uses, with what the shares consume.
    shared: FxHashMap<u32, SharedUse>,
    slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    classes: FxHashMap<Arc<str>, Arc<DeviceClass>>,
    /// Extended resource name → the DeviceClass that serves it (upstream
    /// `DeviceClassResolver`): each class's `extendedResourceName` and its implicit
    /// `deviceclass.resource.kubernetes.io/<class>`. Rebuilt when a class changes.
    extended: FxHashMap<Arc<str>, Arc<DeviceClass>>,
    /// The claim made for a pod's DRA-backed extended resources, by the pod's UID.
    extended_claims: FxHashMap<Arc<str>, NsName>,
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

/// A pool's (driver, name).
pub type PoolKey = (Arc<str>, Arc<str>);

/// A slice with its devices' numbers (same order as its devices).
#[derive(Debug, Clone)]
pub struct NumberedSlice {
    pub slice: Arc<ResourceSlice>,
    pub numbers: Arc<[u32]>,
}

/// A pool as gathered for one node (upstream `Pool`).
#[derive(Debug, Clone)]
pub struct GatheredPool {
    pub key: PoolKey,
    /// `driver/pool`, for messages.
    pub id: Arc<str>,
    /// Its slices reachable from the node at the newest generation, by name.
    pub slices: Vec<NumberedSlice>,
    pub incomplete: bool,
    pub invalid: Option<String>,
}

/// Slices by the node they serve, so gathering a node's pools reads its own slices
/// and the few that are not node-local, not every slice of the cluster; where every
/// slice is node-local, each node's pools are gathered once per change of the slices.
#[derive(Debug, Default)]
pub struct SliceIndex {
    pub by_node: FxHashMap<Arc<str>, Vec<NumberedSlice>>,
    /// Slices with a node selector, for all nodes, or per-device node selection.
    pub other: Vec<NumberedSlice>,
    pub pools: FxHashMap<PoolKey, PoolFacts>,
    /// Each node's pools, when no slice is shared between nodes.
    gathered: FxHashMap<Arc<str>, Arc<[GatheredPool]>>,
    /// Per (class, node): the numbers of the node's devices of the class, worked out
    /// once per change of the slices (scoring DRA-backed extended resources asks this
    /// for every node of every pod). Keyed by the class's address, which the kept
    /// `Arc` pins.
    class_devices: std::sync::RwLock<ClassDevices>,
}

type ClassDevices = FxHashMap<(usize, Arc<str>), (Arc<DeviceClass>, Arc<[u32]>)>;

impl SliceIndex {
    fn build(
        slices: &BTreeMap<Arc<str>, Arc<ResourceSlice>>,
        ids: &FxHashMap<DeviceId, u32>,
    ) -> SliceIndex {
        let mut ix = SliceIndex::default();
        for s in slices.values() {
            let numbers: Arc<[u32]> = s
                .devices
                .iter()
                .map(|d| {
                    let id = DeviceId {
                        driver: s.driver.clone(),
                        pool: s.pool.name.clone(),
                        device: d.name.clone(),
                    };
                    ids.get(&id).copied().unwrap_or(u32::MAX)
                })
                .collect();
            let ns = NumberedSlice {
                slice: s.clone(),
                numbers,
            };
            match &s.nodes {
                NodeSelection::NodeName(n) => ix.by_node.entry(n.clone()).or_default().push(ns),
                _ => ix.other.push(ns),
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
        if ix.other.is_empty() {
            let gathered: FxHashMap<Arc<str>, Arc<[GatheredPool]>> = ix
                .by_node
                .keys()
                .map(|n| (n.clone(), ix.gather(n, &Labels::default()).into()))
                .collect();
            ix.gathered = gathered;
        }
        ix
    }

    /// The pools reachable from a node (upstream `GatherPools`), sorted by driver and
    /// pool: newest generation only; a pool missing slices is incomplete (its slices
    /// are counted over all nodes first, and dropped when stale); duplicate device
    /// names make it invalid.
    pub fn pools_for(&self, node_name: &str, labels: &Labels) -> Arc<[GatheredPool]> {
        if self.other.is_empty() {
            return self
                .gathered
                .get(node_name)
                .cloned()
                .unwrap_or_else(|| Arc::from(Vec::new()));
        }
        self.gather(node_name, labels).into()
    }

    /// Every slice (of any generation) with a device the node can reach.
    fn reachable<'a>(
        &'a self,
        node_name: &'a str,
        labels: &'a Labels,
    ) -> impl Iterator<Item = &'a NumberedSlice> + 'a {
        let local = self
            .by_node
            .get(node_name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        local
            .iter()
            .chain(self.other.iter().filter(move |s| match &s.slice.nodes {
                NodeSelection::PerDevice => s.slice.devices.iter().any(|d| {
                    d.nodes
                        .as_ref()
                        .is_some_and(|n| n.matches(node_name, labels))
                }),
                n => n.matches(node_name, labels),
            }))
    }

    /// The node's devices of `class`, and how many of them are in use (upstream
    /// `calculateDRAResourceTotals`, which scores DRA-backed extended resources: every
    /// reachable slice counts, whatever its pool's generation; a selector that fails
    /// to evaluate leaves the device out).
    pub fn count_class_devices(
        &self,
        node_name: &Arc<str>,
        labels: &Labels,
        class: &Arc<DeviceClass>,
        in_use: &DeviceSet,
    ) -> (i64, i64) {
        let k = (Arc::as_ptr(class) as usize, node_name.clone());
        let cached = self
            .class_devices
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&k)
            .filter(|(c, _)| Arc::ptr_eq(c, class))
            .map(|(_, n)| n.clone());
        let numbers = match cached {
            Some(n) => n,
            None => {
                let n = self.class_device_numbers(node_name, labels, class);
                self.class_devices
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(k, (class.clone(), n.clone()));
                n
            }
        };
        let used = numbers.iter().filter(|n| in_use.contains(**n)).count();
        (numbers.len() as i64, used as i64)
    }

    fn class_device_numbers(
        &self,
        node_name: &str,
        labels: &Labels,
        class: &DeviceClass,
    ) -> Arc<[u32]> {
        let mut out = Vec::new();
        for ns in self.reachable(node_name, labels) {
            let per_device = matches!(ns.slice.nodes, NodeSelection::PerDevice);
            for (d, n) in ns.slice.devices.iter().zip(ns.numbers.iter()) {
                if per_device
                    && !d
                        .nodes
                        .as_ref()
                        .is_some_and(|s| s.matches(node_name, labels))
                {
                    continue;
                }
                if class
                    .selectors
                    .iter()
                    .all(|p| matches!(d.matches(p), Ok(true)))
                {
                    out.push(*n);
                }
            }
        }
        out.into()
    }

    fn gather(&self, node_name: &str, labels: &Labels) -> Vec<GatheredPool> {
        let mut pools: BTreeMap<PoolKey, Vec<NumberedSlice>> = BTreeMap::new();
        for s in self.reachable(node_name, labels) {
            let v = pools
                .entry((s.slice.driver.clone(), s.slice.pool.name.clone()))
                .or_default();
            match v.first().map(|f| f.slice.pool.generation) {
                Some(g) if s.slice.pool.generation < g => continue,
                Some(g) if s.slice.pool.generation > g => v.clear(),
                _ => {}
            }
            v.push(s.clone());
        }
        pools
            .into_iter()
            .map(|(key, mut slices)| {
                slices.sort_by(|a, b| a.slice.name.cmp(&b.slice.name));
                let want = slices
                    .first()
                    .map_or(0, |s| s.slice.pool.resource_slice_count);
                let mut incomplete = slices.len() as i64 != want;
                if incomplete {
                    if let Some(f) = self.pools.get(&key) {
                        incomplete = f.slices_at_latest != f.resource_slice_count;
                        if incomplete
                            && slices
                                .first()
                                .is_some_and(|s| s.slice.pool.generation != f.latest_generation)
                        {
                            slices.clear();
                        }
                    }
                }
                let mut names = FxHashSet::default();
                let invalid = slices
                    .iter()
                    .flat_map(|s| s.slice.devices.iter())
                    .find(|d| !names.insert(d.name.clone()))
                    .map(|d| format!("duplicate device name {}", d.name));
                GatheredPool {
                    id: format!("{}/{}", key.0, key.1).into(),
                    key,
                    slices,
                    incomplete,
                    invalid,
                }
            })
            .collect()
    }
}

/// Shared by every profile of a scheduler; updated by its event handler.
#[derive(Default)]
pub struct DraStore {
    state: RwLock<DraState>,
    /// Woken on every claim change: PreBind's wait for binding conditions.
    claims: tokio::sync::Notify,
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

    /// The DeviceClass serving an extended resource, if one does.
    pub fn extended_class(&self, resource: &str) -> Option<&Arc<DeviceClass>> {
        self.extended.get(resource)
    }

    /// Whether any DeviceClass serves an extended resource (every class does, by its
    /// implicit name): false means no pod needs the lookups.
    pub fn has_extended(&self) -> bool {
        !self.extended.is_empty()
    }

    /// The claim made for `pod_uid`'s extended resources (upstream
    /// `findExtendedResourceClaim`), as the scheduler sees it.
    pub fn extended_claim_of(&self, pod_uid: &str) -> Option<&Arc<ResourceClaim>> {
        let (ns, name) = self.extended_claims.get(pod_uid)?;
        self.claim(ns, name)
    }

    /// Upstream's mapping: the implicit name always; for an explicit name claimed by
    /// several classes, the newest class wins and, created in the same second, the
    /// one whose name sorts first.
    fn rebuild_extended(&mut self) {
        let mut m: FxHashMap<Arc<str>, Arc<DeviceClass>> = FxHashMap::default();
        for c in self.classes.values() {
            m.insert(
                format!(
                    "{}{}",
                    crate::model::dra::DEVICE_CLASS_RESOURCE_PREFIX,
                    c.name
                )
                .into(),
                c.clone(),
            );
        }
        for c in self.classes.values() {
            let Some(n) = &c.extended_resource_name else {
                continue;
            };
            let wins = match m.get(n) {
                None => true,
                Some(o) => {
                    let (a, b) = (c.creation_timestamp, o.creation_timestamp);
                    a > b || (a == b && c.name < o.name)
                }
            };
            if wins {
                m.insert(n.clone(), c.clone());
            }
        }
        self.extended = m;
    }

    /// Keeps `extended_claims` in step with a claim seen (`add`) or gone.
    fn index_extended_claim(&mut self, c: &ResourceClaim, add: bool) {
        if !c.is_extended_resource_claim() {
            return;
        }
        let Some(owner) = &c.owner else {
            return;
        };
        if add {
            self.extended_claims
                .insert(owner.uid.clone(), (c.namespace.clone(), c.name.clone()));
        } else if self
            .extended_claims
            .get(&owner.uid)
            .is_some_and(|(ns, n)| *ns == c.namespace && *n == c.name)
        {
            self.extended_claims.remove(&owner.uid);
        }
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
        ix.get_or_insert_with(|| Arc::new(SliceIndex::build(&self.slices, &self.ids)))
            .clone()
    }

    fn slices_changed(&mut self) {
        *self.index.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Devices in use: allocated by some claim, or by an in-flight allocation (upstream
    /// `ListAllAllocatedDevices`). Admin-access results do not take a device.
    pub fn allocated_devices(&self) -> DeviceSet {
        self.in_use.clone()
    }

    /// What shares of devices allowing multiple allocations consume (upstream
    /// `GatherAllocatedState`'s aggregated capacity), by device number.
    pub fn shared_devices(&self) -> Arc<FxHashMap<u32, SharedUse>> {
        Arc::new(self.shared.clone())
    }

    /// The number of a device, if it was ever seen.
    pub fn device_number(&self, id: &DeviceId) -> Option<u32> {
        self.ids.get(id).copied()
    }

    fn intern(&mut self, id: DeviceId) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(id).or_insert(next)
    }

    fn effective(&self, k: &NsName) -> Option<Arc<ResourceClaim>> {
        self.assumed
            .get(k)
            .or_else(|| self.api_claims.get(k))
            .cloned()
    }

    /// Counts the cluster's (or the assumed) copy of a claim, unless an allocation
    /// of the same claim is in flight: that one counts instead, so a claim's devices
    /// and shared capacity count once (upstream `GatherAllocatedState` uses the
    /// in-flight allocation in place of the cached claim).
    fn count(&mut self, claim: Option<&Arc<ResourceClaim>>, add: bool) {
        if claim.is_some_and(|c| self.in_flight.contains_key(&c.uid)) {
            return;
        }
        bump(self, claim, add, false)
    }

    /// The effective claim with `uid` at the in-flight claim's name.
    fn effective_with_uid(&self, c: &ResourceClaim) -> Option<Arc<ResourceClaim>> {
        self.effective(&key(&c.namespace, &c.name))
            .filter(|e| e.uid == c.uid)
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

/// Counts a claim's devices in (or out), as allocated or as in flight.
fn bump(st: &mut DraState, claim: Option<&Arc<ResourceClaim>>, add: bool, in_flight: bool) {
    let Some(a) = claim.and_then(|c| c.allocation.as_ref()) else {
        return;
    };
    for d in a.devices.iter().filter(|d| !d.admin_access) {
        let i = st.intern(d.id()) as usize;
        // A share of a device that allows multiple allocations: what it consumes,
        // not the whole device (upstream `AggregatedCapacity`).
        if let Some(sh) = &d.share {
            let n = i as u32;
            let e = st.shared.entry(n).or_default();
            if add {
                e.shares += 1;
            } else {
                e.shares = e.shares.saturating_sub(1);
            }
            for (k, v) in &sh.consumed {
                let q = crate::model::dra::qualify(k, &d.driver);
                let c = e.consumed.entry(q).or_insert(0);
                *c = if add { *c + v } else { (*c - v).max(0) };
            }
            if e.shares == 0 {
                st.shared.remove(&n);
            }
            continue;
        }
        let counts = if in_flight {
            &mut st.in_flight_count
        } else {
            &mut st.allocated
        };
        if counts.len() <= i {
            counts.resize(i + 1, 0);
        }
        if add {
            counts[i] += 1;
        } else {
            counts[i] = counts[i].saturating_sub(1);
        }
        let busy = st.allocated.get(i).is_some_and(|c| *c > 0)
            || st.in_flight_count.get(i).is_some_and(|c| *c > 0);
        st.in_use.set(i, busy);
    }
}

/// The shares of one device allowing multiple allocations.
#[derive(Clone, Debug, Default)]
pub struct SharedUse {
    pub shares: u32,
    /// Consumed per capacity (fully qualified name; nano units).
    pub consumed: FxHashMap<Arc<str>, i128>,
}

/// A set of device numbers (see [`DraState::device_number`]).
#[derive(Clone, Debug, Default)]
pub struct DeviceSet {
    bits: Vec<u64>,
}

impl DeviceSet {
    fn set(&mut self, i: usize, on: bool) {
        let w = i / 64;
        if self.bits.len() <= w {
            if !on {
                return;
            }
            self.bits.resize(w + 1, 0);
        }
        if on {
            self.bits[w] |= 1 << (i % 64);
        } else {
            self.bits[w] &= !(1 << (i % 64));
        }
    }

    pub fn contains(&self, n: u32) -> bool {
        let n = n as usize;
        self.bits
            .get(n / 64)
            .is_some_and(|w| w & (1 << (n % 64)) != 0)
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

    /// Completes at the next change of any claim (taken before reading, enabled, so a
    /// change in between is not missed).
    pub fn claims_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.claims.notified()
    }

    /// An object added or updated in the cluster; returns the previous one.
    pub fn upsert(&self, obj: &DraObject) -> Option<DraObject> {
        let mut st = self.write();
        match obj {
            DraObject::ResourceClaim(c) => {
                let k = key(&c.namespace, &c.name);
                let mut old = None;
                st.index_extended_claim(c, true);
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
                drop(st);
                self.claims.notify_waiters();
                old.map(DraObject::ResourceClaim)
            }
            DraObject::ResourceSlice(s) => {
                st.slices_changed();
                for d in s.devices.iter() {
                    st.intern(DeviceId {
                        driver: s.driver.clone(),
                        pool: s.pool.name.clone(),
                        device: d.name.clone(),
                    });
                }
                st.slices
                    .insert(s.name.clone(), s.clone())
                    .map(DraObject::ResourceSlice)
            }
            DraObject::DeviceClass(c) => {
                let old = st.classes.insert(c.name.clone(), c.clone());
                st.rebuild_extended();
                old.map(DraObject::DeviceClass)
            }
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
                st.index_extended_claim(c, false);
                st.change_claim(&k, |st| {
                    st.api_claims.remove(&k);
                    st.assumed.remove(&k);
                });
                drop(st);
                self.claims.notify_waiters();
            }
            DraObject::ResourceSlice(s) => {
                st.slices_changed();
                st.slices.remove(&s.name);
            }
            DraObject::DeviceClass(c) => {
                st.classes.remove(&c.name);
                st.rebuild_extended();
            }
            DraObject::ResourceClaimTemplate(_) => {}
        }
    }

    /// Marks a claim allocated at Reserve (upstream `SignalClaimPendingAllocation`).
    pub fn start_allocation(&self, claim: Arc<ResourceClaim>) {
        let mut st = self.write();
        let cached = st.effective_with_uid(&claim);
        // Uncount what counted for this claim until now: an earlier in-flight
        // allocation, else the cached copy.
        match st.in_flight.insert(claim.uid.clone(), claim.clone()) {
            Some(old) => bump(&mut st, Some(&old), false, true),
            None => bump(&mut st, cached.as_ref(), false, false),
        }
        bump(&mut st, Some(&claim), true, true);
    }

    /// Drops an in-flight allocation (Unreserve, or after PreBind wrote it).
    pub fn end_allocation(&self, uid: &str) {
        let mut st = self.write();
        if let Some(old) = st.in_flight.remove(uid) {
            bump(&mut st, Some(&old), false, true);
            // The cached copy (assumed after PreBind's write, or the cluster's)
            // counts again.
            let cached = st.effective_with_uid(&old);
            bump(&mut st, cached.as_ref(), true, false);
        }
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
                st.index_extended_claim(&claim, true);
                st.assumed.insert(k.clone(), claim);
            }
        });
        drop(st);
        self.claims.notify_waiters();
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
        claim_sharing(rv, devices, None)
    }

    fn claim_sharing(rv: &str, devices: &[&str], consumed: Option<i128>) -> Arc<ResourceClaim> {
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
                            binding: None,
                            share: consumed.map(|c| {
                                Arc::new(crate::model::dra::Share {
                                    id: "s1".into(),
                                    consumed: vec![("memory".into(), c)],
                                })
                            }),
                        })
                        .collect(),
                    config: vec![],
                    node_selector: None,
                    timestamp: None,
                })
            }),
            reserved_for: vec![],
            devices: vec![],
        })
    }

    fn names(s: &DraStore) -> Vec<String> {
        let st = s.read();
        let set = st.allocated_devices();
        let mut v: Vec<String> = st
            .ids
            .iter()
            .filter(|(_, n)| set.contains(**n))
            .map(|(d, _)| d.device.to_string())
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

    fn consumed(s: &DraStore) -> Vec<(u32, i128)> {
        let st = s.read();
        let mut v: Vec<(u32, i128)> = st
            .shared_devices()
            .values()
            .map(|u| (u.shares, u.consumed.values().sum()))
            .collect();
        v.sort();
        v
    }

    /// A claim's share of a device counts once while its allocation is in flight and
    /// the cluster (or the scheduler's write) already has it allocated: counted
    /// twice, the device would look fuller than it is and the next pod would be
    /// refused capacity that is free.
    #[test]
    fn a_claim_in_flight_and_allocated_counts_its_share_once() {
        let s = DraStore::default();
        s.upsert(&DraObject::ResourceClaim(claim_sharing(
            "5",
            &["gpu-0"],
            Some(4),
        )));
        assert_eq!(consumed(&s), [(1, 4)]);
        s.start_allocation(claim_sharing("5", &["gpu-0"], Some(4)));
        assert_eq!(consumed(&s), [(1, 4)]);
        // A newer in-flight allocation of the same claim replaces the earlier one.
        s.start_allocation(claim_sharing("5", &["gpu-0"], Some(6)));
        assert_eq!(consumed(&s), [(1, 6)]);
        s.assume(claim_sharing("7", &["gpu-0"], Some(6)));
        assert_eq!(consumed(&s), [(1, 6)]);
        s.end_allocation("u1");
        assert_eq!(consumed(&s), [(1, 6)]);
        s.upsert(&DraObject::ResourceClaim(claim_sharing(
            "8",
            &["gpu-0"],
            Some(6),
        )));
        assert_eq!(consumed(&s), [(1, 6)]);
        s.delete(&DraObject::ResourceClaim(claim_sharing(
            "8",
            &["gpu-0"],
            Some(6),
        )));
        assert!(consumed(&s).is_empty());
        // Unreserve of an allocation never written: the cached copy counts again.
        s.upsert(&DraObject::ResourceClaim(claim_sharing(
            "9",
            &["gpu-0"],
            Some(2),
        )));
        s.start_allocation(claim_sharing("9", &["gpu-0"], Some(3)));
        assert_eq!(consumed(&s), [(1, 3)]);
        s.end_allocation("u1");
        assert_eq!(consumed(&s), [(1, 2)]);
    }
}
