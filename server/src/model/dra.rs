//! Dynamic Resource Allocation objects (`resource.k8s.io/v1`): DeviceClasses,
//! ResourceSlices, ResourceClaims and their templates, as the DynamicResources plugin
//! and its structured allocator read them. Parsed once at ingest: CEL selectors are
//! compiled there (the API server rejects an expression that does not compile) and
//! every device's CEL view is built once, so the allocator's inner loop only
//! evaluates.

use std::collections::BTreeMap;
use std::sync::Arc;

use switchyard_cel::{DeviceValue, Program, Quantity as CelQuantity};

use super::labels::{Labels, NodeSelector};
use super::taint::TaintEffect;

/// The finalizer the scheduler puts on a claim it allocates (upstream
/// `resourceapi.Finalizer`): the claim cannot go away while a pod may use it.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// The annotation naming the pod's claim entry a generated claim was made for.
pub const ANN_POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";
/// The annotation (value `"true"`) marking the claim the scheduler made for a pod's
/// DRA-backed extended resources (upstream `ExtendedResourceClaimAnnotation`).
pub const ANN_EXTENDED_RESOURCE_CLAIM: &str = "resource.kubernetes.io/extended-resource-claim";
/// Every DeviceClass serves the extended resource `<prefix><class name>`
/// (upstream `ResourceDeviceClassPrefix`).
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";
/// At most this many consumers may reserve a claim (`ResourceClaimReservedForMaxSize`).
pub const RESERVED_FOR_MAX_SIZE: usize = 256;
/// At most this many devices in one claim's allocation (`AllocationResultsMaxSize`).
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// A device class: selectors every device of the class must pass, and configuration
/// handed to the driver.
#[derive(Clone, Debug)]
pub struct DeviceClass {
    pub name: Arc<str>,
    pub selectors: Box<[Program]>,
    pub config: Box<[OpaqueConfig]>,
    /// `spec.extendedResourceName` (DRA-backed extended resources).
    pub extended_resource_name: Option<Arc<str>>,
    pub creation_timestamp: Option<i64>,
    pub resource_version: Option<Arc<str>>,
}

/// Opaque driver configuration, carried into the allocation result unchanged.
#[derive(Clone, Debug, PartialEq)]
pub struct OpaqueConfig {
    pub driver: Arc<str>,
    pub parameters: Arc<serde_json::Value>,
}

/// Which nodes a slice's (or a device's) devices are reachable from.
#[derive(Clone, Debug)]
pub enum NodeSelection {
    NodeName(Arc<str>),
    Selector(Arc<NodeSelectorRef>),
    AllNodes,
    /// The slice's devices each say (`perDeviceNodeSelection`).
    PerDevice,
}

impl NodeSelection {
    /// Whether devices under this selection are reachable from the node. `PerDevice`
    /// answers per device.
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        match self {
            NodeSelection::NodeName(n) => &**n == node_name,
            NodeSelection::Selector(s) => s.selector.matches(node_name, labels),
            NodeSelection::AllNodes | NodeSelection::PerDevice => true,
        }
    }
}

/// A pool as a slice names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRef {
    pub name: Arc<str>,
    pub generation: i64,
    pub resource_slice_count: i64,
}

/// A ResourceSlice: some of a driver's pool's devices.
#[derive(Clone, Debug)]
pub struct ResourceSlice {
    pub name: Arc<str>,
    pub driver: Arc<str>,
    pub pool: PoolRef,
    pub nodes: NodeSelection,
    pub devices: Box<[Device]>,
    /// `sharedCounters`: counter sets partitionable devices draw from.
    pub shared_counters: Box<[CounterSet]>,
    pub resource_version: Option<Arc<str>>,
}

/// Named counters (`CounterSet`), values exact.
#[derive(Clone, Debug)]
pub struct CounterSet {
    pub name: Arc<str>,
    pub counters: BTreeMap<Arc<str>, CelQuantity>,
}

/// A device's typed attribute value, for `matchAttribute` / `distinctAttribute`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttributeValue {
    Int(i64),
    Bool(bool),
    String(Arc<str>),
    /// A semantic version, normalised (build metadata dropped, as semver equality
    /// ignores it).
    Version(Arc<str>),
}

/// A device taint (`DeviceTaint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceTaint {
    pub key: Arc<str>,
    pub value: Arc<str>,
    /// `None` is upstream's `None` effect: informational, never blocks.
    pub effect: Option<TaintEffect>,
}

/// A device toleration (`DeviceToleration`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceToleration {
    pub key: Option<Arc<str>>,
    /// `Exists` when true, else `Equal`.
    pub exists: bool,
    pub value: Arc<str>,
    /// `None`: tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl DeviceToleration {
    /// Upstream's `ToleratesTaint` for device taints.
    pub fn tolerates(&self, taint: &DeviceTaint) -> bool {
        if self.effect.is_some() && self.effect != taint.effect {
            return false;
        }
        if let Some(k) = &self.key {
            if *k != taint.key {
                return false;
            }
        }
        self.exists || self.value == taint.value
    }
}

/// A capacity's spelling and request policy (`DeviceCapacity.requestPolicy`).
#[derive(Clone, Debug, Default)]
pub struct CapacityInfo {
    pub raw_name: Arc<str>,
    /// `default`: what an allocation consumes when its request names no amount.
    pub default: Option<i128>,
    /// `validValues`, ascending (nano units).
    pub valid_values: Box<[i128]>,
    /// `validRange`: min, and max and step when set (nano units).
    pub valid_range: Option<(i128, Option<i128>, Option<i128>)>,
}

impl CapacityInfo {
    /// What one allocation of the device consumes of this capacity (upstream
    /// `calculateConsumedCapacity`): the request rounded up to the policy (the next
    /// step of the range from its min, the next valid value), the policy's default
    /// when nothing is requested, the whole capacity without either.
    pub fn consumed(&self, requested: Option<i128>, capacity: i128) -> i128 {
        let Some(req) = requested else {
            return self.default.unwrap_or(capacity);
        };
        if let Some((min, _, step)) = self.valid_range {
            if req < min {
                return min;
            }
            return match step {
                Some(st) if st > 0 => {
                    let n = (req - min + st - 1) / st;
                    min + st * n
                }
                _ => req,
            };
        }
        if !self.valid_values.is_empty() {
            return self
                .valid_values
                .iter()
                .copied()
                .find(|v| *v >= req)
                .unwrap_or(req);
        }
        req
    }

    /// Whether a consumed amount breaks the policy (upstream `violatesPolicy`).
    pub fn violates(&self, consumed: i128) -> bool {
        if self.default == Some(consumed) {
            return false;
        }
        if let Some((min, max, step)) = self.valid_range {
            if max.is_some_and(|m| consumed > m) {
                return true;
            }
            if let Some(st) = step.filter(|s| *s > 0) {
                return (consumed - min) % st != 0;
            }
            return false;
        }
        if !self.valid_values.is_empty() {
            return !self.valid_values.contains(&consumed);
        }
        false
    }
}

/// One device of a slice.
#[derive(Clone, Debug)]
pub struct Device {
    pub name: Arc<str>,
    /// Attributes by fully qualified name (`domain/id`; unqualified names get the
    /// driver as domain), for constraints.
    pub attributes: BTreeMap<Arc<str>, AttributeValue>,
    /// Capacities by fully qualified name.
    pub capacity: BTreeMap<Arc<str>, CelQuantity>,
    /// Per capacity (same keys): its name as the slice spells it, for
    /// `consumedCapacity`, and its `requestPolicy` (consumable capacity).
    pub capacity_info: BTreeMap<Arc<str>, CapacityInfo>,
    /// `consumesCounters`: (counter set, counters) drawn from the slice's shared sets.
    pub consumes_counters: Box<[CounterConsumption]>,
    pub taints: Box<[DeviceTaint]>,
    /// Per-device node selection, under `perDeviceNodeSelection`.
    pub nodes: Option<NodeSelection>,
    pub binds_to_node: bool,
    /// `bindingConditions` and `bindingFailureConditions`, shared with the allocation
    /// results that copy them.
    pub binding: Option<Arc<BindingConditions>>,
    pub allow_multiple_allocations: bool,
    /// The device as CEL selectors see it, built once.
    pub cel: Arc<DeviceValue>,
    /// Selector outcomes already evaluated on this device.
    pub matches: SelectorCache,
}

impl Device {
    /// Whether the selector accepts this device. A device and a compiled selector never
    /// change, so the outcome is kept: every pod asking the same class reuses it.
    /// Errors are not kept (they end the cycle anyway).
    pub fn matches(&self, selector: &Program) -> Result<bool, switchyard_cel::EvalError> {
        if let Some(m) = self.matches.get(selector) {
            return Ok(m);
        }
        let m = selector.eval_device(&self.cel, switchyard_cel::DEFAULT_COST_LIMIT)?;
        self.matches.put(selector, m);
        Ok(m)
    }
}

/// A few (selector, outcome) pairs; the oldest goes when full.
#[derive(Default)]
pub struct SelectorCache(std::sync::Mutex<Vec<(Program, bool)>>);

impl SelectorCache {
    const MAX: usize = 8;

    fn get(&self, p: &Program) -> Option<bool> {
        let v = self.0.lock().ok()?;
        v.iter().find(|(q, _)| q.same(p)).map(|(_, m)| *m)
    }

    fn put(&self, p: &Program, m: bool) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() == Self::MAX {
                v.remove(0);
            }
            v.push((p.clone(), m));
        }
    }
}

impl Clone for SelectorCache {
    /// A copy starts empty (its device may be a changed one).
    fn clone(&self) -> Self {
        SelectorCache::default()
    }
}

impl std::fmt::Debug for SelectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SelectorCache")
    }
}

/// How many devices a request wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocationMode {
    ExactCount(u32),
    All,
}

/// A request for devices of one class (`ExactDeviceRequest`, also a subrequest).
#[derive(Clone, Debug)]
pub struct ExactRequest {
    pub device_class_name: Arc<str>,
    pub selectors: Box<[Program]>,
    pub mode: AllocationMode,
    pub admin_access: bool,
    pub tolerations: Box<[DeviceToleration]>,
    /// `capacity.requests`: how much of each device capacity one device of this
    /// request consumes (names as written; nano units).
    pub capacity_requests: Box<[(Arc<str>, i128)]>,
}

/// One entry of `spec.devices.requests`.
#[derive(Clone, Debug)]
pub struct DeviceRequest {
    pub name: Arc<str>,
    pub kind: RequestKind,
}

#[derive(Clone, Debug)]
pub enum RequestKind {
    Exactly(ExactRequest),
    /// `firstAvailable`: subrequests tried in order.
    FirstAvailable(Box<[(Arc<str>, ExactRequest)]>),
}

/// `spec.devices.constraints`.
#[derive(Clone, Debug)]
pub struct DeviceConstraint {
    /// The requests it applies to; empty means all (subrequests included by parent).
    pub requests: Box<[Arc<str>]>,
    pub kind: ConstraintKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstraintKind {
    /// All devices have this attribute with the same value.
    MatchAttribute(Arc<str>),
    /// All devices have this attribute with pairwise different values.
    DistinctAttribute(Arc<str>),
}

/// Claim configuration: for `requests` (empty: all).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimConfig {
    pub requests: Box<[Arc<str>]>,
    pub opaque: OpaqueConfig,
}

/// What a claim asks for; shared between a template and the claims made from it.
#[derive(Clone, Debug, Default)]
pub struct ClaimSpec {
    pub requests: Box<[DeviceRequest]>,
    pub constraints: Box<[DeviceConstraint]>,
    pub config: Box<[ClaimConfig]>,
    /// The spec as given, for writing a claim from a template.
    pub raw: Arc<serde_json::Value>,
}

/// One allocated device (`DeviceRequestAllocationResult`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceResult {
    /// The request, or `request/subrequest` for firstAvailable.
    pub request: Arc<str>,
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub device: Arc<str>,
    pub admin_access: bool,
    /// A share of a device allowing multiple allocations: its share ID and what it
    /// consumes of each capacity (the device's spelling; nano units).
    pub share: Option<Arc<Share>>,
    /// The device's binding conditions at allocation time (KEP-5007): PreBind waits
    /// for them.
    pub binding: Option<Arc<BindingConditions>>,
}

/// A device's `bindingConditions` and `bindingFailureConditions`, copied into the
/// allocation result: the pod binds once the first are all `True` in the claim's
/// `status.devices`, and fails to bind when any of the second is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BindingConditions {
    pub conditions: Box<[Arc<str>]>,
    pub failure: Box<[Arc<str>]>,
}

impl BindingConditions {
    /// `None` when both lists are empty: nothing to wait for.
    pub fn new(conditions: Box<[Arc<str>]>, failure: Box<[Arc<str>]>) -> Option<Arc<Self>> {
        (!conditions.is_empty() || !failure.is_empty()).then(|| {
            Arc::new(BindingConditions {
                conditions,
                failure,
            })
        })
    }
}

/// A claim's `status.devices` entry: what the driver reports for one allocated device
/// (only the conditions are read, for binding conditions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatedDeviceStatus {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub device: Arc<str>,
    pub share_id: Option<Arc<str>>,
    pub conditions: Vec<DeviceCondition>,
    /// The entry as the API has it, written back unchanged.
    pub raw: Arc<serde_json::Value>,
}

/// One `metav1.Condition` of a device status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCondition {
    pub type_: Arc<str>,
    /// `True`, `False` or `Unknown`.
    pub status: Arc<str>,
    pub reason: Arc<str>,
    pub message: Arc<str>,
}

/// One allocation's share of a device (`shareID`, `consumedCapacity`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Share {
    pub id: Arc<str>,
    pub consumed: Vec<(Arc<str>, i128)>,
}

impl DeviceResult {
    pub fn id(&self) -> DeviceId {
        DeviceId {
            driver: self.driver.clone(),
            pool: self.pool.clone(),
            device: self.device.clone(),
        }
    }
}

/// A device's identity across the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: Arc<str>,
    pub pool: Arc<str>,
    pub device: Arc<str>,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// Where a configuration in an allocation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    FromClass,
    FromClaim,
}

/// A configuration carried into an allocation result.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatedConfig {
    pub source: ConfigSource,
    pub requests: Box<[Arc<str>]>,
    pub opaque: OpaqueConfig,
}

/// `status.allocation`.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    pub devices: Vec<DeviceResult>,
    pub config: Vec<AllocatedConfig>,
    /// Where the devices are reachable; `None`: everywhere.
    pub node_selector: Option<AllocationNodes>,
    /// `allocationTimestamp` (microseconds since the epoch): set by PreBind, the start
    /// of a binding-conditions wait's timeout.
    pub timestamp: Option<i64>,
}

/// An allocation's node selector: one node (any node-local device), or the selectors
/// of the slices (merged as upstream does: every term must match).
#[derive(Clone, Debug, PartialEq)]
pub enum AllocationNodes {
    Node(Arc<str>),
    /// All of these must match.
    All(Vec<Arc<NodeSelectorRef>>),
}

/// A node selector kept with its source text for equality and writing back.
#[derive(Clone, Debug)]
pub struct NodeSelectorRef {
    pub selector: NodeSelector,
    pub raw: serde_json::Value,
}

impl PartialEq for NodeSelectorRef {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl AllocationNodes {
    pub fn matches(&self, node_name: &str, labels: &Labels) -> bool {
        match self {
            AllocationNodes::Node(n) => &**n == node_name,
            AllocationNodes::All(sels) => {
                sels.iter().all(|s| s.selector.matches(node_name, labels))
            }
        }
    }
}

/// A consumer in `status.reservedFor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRef {
    pub api_group: Arc<str>,
    pub resource: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
}

impl ConsumerRef {
    pub fn pod(name: &str, uid: &str) -> ConsumerRef {
        ConsumerRef {
            api_group: "".into(),
            resource: "pods".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }
}

/// An object's controlling owner (its `ownerReferences` entry with `controller: true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerRef {
    pub api_version: Arc<str>,
    pub kind: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
}

/// A ResourceClaim.
#[derive(Clone, Debug)]
pub struct ResourceClaim {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub resource_version: Option<Arc<str>>,
    pub deleting: bool,
    pub finalizers: Box<[Arc<str>]>,
    pub annotations: Labels,
    /// The controlling owner (a pod, for claims made from a template).
    pub owner: Option<ControllerRef>,
    pub spec: Arc<ClaimSpec>,
    pub allocation: Option<Arc<Allocation>>,
    pub reserved_for: Vec<ConsumerRef>,
    /// `status.devices`: the drivers' reports on the allocated devices.
    pub devices: Vec<AllocatedDeviceStatus>,
}

impl ResourceClaim {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Made by the scheduler for a pod's DRA-backed extended resources.
    pub fn is_extended_resource_claim(&self) -> bool {
        self.annotations.get(ANN_EXTENDED_RESOURCE_CLAIM) == Some("true")
    }

    pub fn is_reserved_for(&self, uid: &str) -> bool {
        self.reserved_for.iter().any(|r| &*r.uid == uid)
    }

    /// Upstream `resourceclaim.CanBeReserved`: not full, or already ours.
    pub fn can_be_reserved_for(&self, uid: &str) -> bool {
        self.reserved_for.len() < RESERVED_FOR_MAX_SIZE || self.is_reserved_for(uid)
    }
}

/// A ResourceClaimTemplate: the spec (and metadata) claims are made from.
#[derive(Clone, Debug)]
pub struct ResourceClaimTemplate {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub labels: Labels,
    pub annotations: Labels,
    pub spec: Arc<ClaimSpec>,
}

/// A pod's `spec.resourceClaims` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodResourceClaim {
    pub name: Arc<str>,
    pub source: ClaimSource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimSource {
    Claim(Arc<str>),
    Template(Arc<str>),
}

/// A `status.resourceClaimStatuses` entry: the claim generated for a template entry
/// (`None`: no claim needed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodClaimStatus {
    pub name: Arc<str>,
    pub claim: Option<Arc<str>>,
}

/// What a pod's claim entry resolves to (upstream `resourceclaim.Name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimName {
    /// The claim, and whether it must be owned by the pod (made from a template).
    Named(Arc<str>, bool),
    /// The resourceclaim controller decided no claim is needed.
    NotNeeded,
    /// A template's claim is not created yet.
    NotCreated,
}

/// Counters a device draws from one of its pool's counter sets.
#[derive(Clone, Debug)]
pub struct CounterConsumption {
    pub counter_set: Arc<str>,
    pub counters: BTreeMap<Arc<str>, CelQuantity>,
}

/// Any DRA object, as events carry them.
#[derive(Clone, Debug)]
pub enum DraObject {
    DeviceClass(Arc<DeviceClass>),
    ResourceSlice(Arc<ResourceSlice>),
    ResourceClaim(Arc<ResourceClaim>),
    ResourceClaimTemplate(Arc<ResourceClaimTemplate>),
}

impl DraObject {
    pub fn kind(&self) -> &'static str {
        match self {
            DraObject::DeviceClass(_) => "DeviceClass",
            DraObject::ResourceSlice(_) => "ResourceSlice",
            DraObject::ResourceClaim(_) => "ResourceClaim",
            DraObject::ResourceClaimTemplate(_) => "ResourceClaimTemplate",
        }
    }
}

/// The fully qualified form of an attribute or capacity name: unqualified names
/// belong to the driver's domain.
pub fn qualify(name: &str, driver: &str) -> Arc<str> {
    if name.contains('/') {
        name.into()
    } else {
        format!("{driver}/{name}").into()
    }
}

/// One container's extended-resource requests (init containers first, then app
/// containers, as upstream numbers them for DRA-backed extended resources).
#[derive(Clone, Debug)]
pub struct ContainerExtended {
    pub name: Arc<str>,
    /// An init container that is not a sidecar: it runs before the others, so what it
    /// needs can be reused from them.
    pub short_lived: bool,
    /// All the container's request names, sorted: a device request is named by the
    /// resource's position among them (`container-<i>-request-<j>`).
    pub keys: Box<[Arc<str>]>,
    /// Its extended resources and their integer quantities.
    pub extended: Box<[(Arc<str>, i64)]>,
}

/// `status.extendedResourceClaimStatus`: which claim and request serves each
/// container's extended resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedResourceClaimStatus {
    pub claim_name: Arc<str>,
    pub mappings: Vec<RequestMapping>,
}

/// One `requestMappings` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestMapping {
    pub container: Arc<str>,
    pub resource: Arc<str>,
    pub request: Arc<str>,
}

#[cfg(test)]
mod capacity_tests {
    use super::CapacityInfo;

    const G: i128 = 1 << 30;

    #[test]
    fn requests_round_up_to_the_policy_and_unrequested_capacity_takes_the_default() {
        let range = CapacityInfo {
            default: Some(G),
            valid_range: Some((G, Some(8 * G), Some(G))),
            ..Default::default()
        };
        assert_eq!(range.consumed(Some(3 * G + G / 2), 10 * G), 4 * G);
        assert_eq!(range.consumed(Some(G / 2), 10 * G), G, "below min: min");
        assert_eq!(range.consumed(None, 10 * G), G, "not requested: default");
        assert!(range.violates(9 * G), "above max");
        assert!(!range.violates(4 * G));
        let values = CapacityInfo {
            default: Some(2 * G),
            valid_values: vec![2 * G, 4 * G].into(),
            ..Default::default()
        };
        assert_eq!(values.consumed(Some(3 * G), 10 * G), 4 * G);
        assert_eq!(values.consumed(Some(5 * G), 10 * G), 5 * G);
        assert!(values.violates(5 * G), "above every valid value");
        let none = CapacityInfo::default();
        assert_eq!(
            none.consumed(None, 10 * G),
            10 * G,
            "no policy: the whole capacity"
        );
        assert_eq!(none.consumed(Some(3), 10 * G), 3);
    }
}
