//! Cluster events and queueing hints: which changes may make a rejected pod
//! schedulable, as each plugin declares them (upstream `EnqueueExtensions`).

use std::fmt;
use std::sync::Arc;

use crate::model::{Node, Pod};

/// What kind of object an event concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// Any pod; as a registration it matches both `AssignedPod` and `UnschedulablePod`.
    Pod,
    /// A pod bound to a node (internal; incoming events only).
    AssignedPod,
    /// A pod not yet bound (internal; incoming events only).
    UnschedulablePod,
    Node,
    PodDisruptionBudget,
    Namespace,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
    CSIDriver,
    CSIStorageCapacity,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    /// Every resource: as an incoming event (unschedulable timeout, force activate) it
    /// moves every pod; as a registration it matches every event.
    WildCard,
}

impl EventResource {
    pub fn as_str(self) -> &'static str {
        match self {
            EventResource::Pod => "Pod",
            EventResource::AssignedPod => "AssignedPod",
            EventResource::UnschedulablePod => "UnschedulablePod",
            EventResource::Node => "Node",
            EventResource::PodDisruptionBudget => "PodDisruptionBudget",
            EventResource::Namespace => "Namespace",
            EventResource::PersistentVolume => "PersistentVolume",
            EventResource::PersistentVolumeClaim => "PersistentVolumeClaim",
            EventResource::StorageClass => "StorageClass",
            EventResource::CSINode => "CSINode",
            EventResource::CSIDriver => "CSIDriver",
            EventResource::CSIStorageCapacity => "CSIStorageCapacity",
            EventResource::DeviceClass => "DeviceClass",
            EventResource::ResourceClaim => "ResourceClaim",
            EventResource::ResourceSlice => "ResourceSlice",
            EventResource::WildCard => "*",
        }
    }

    /// Parses a resource name as [`as_str`](Self::as_str) prints it.
    pub fn parse(name: &str) -> Option<EventResource> {
        [
            EventResource::Pod,
            EventResource::AssignedPod,
            EventResource::UnschedulablePod,
            EventResource::Node,
            EventResource::PodDisruptionBudget,
            EventResource::Namespace,
            EventResource::PersistentVolume,
            EventResource::PersistentVolumeClaim,
            EventResource::StorageClass,
            EventResource::CSINode,
            EventResource::CSIDriver,
            EventResource::CSIStorageCapacity,
            EventResource::DeviceClass,
            EventResource::ResourceClaim,
            EventResource::ResourceSlice,
            EventResource::WildCard,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// Bit flags of what happened, with upstream's bit layout.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionType(pub u32);

const ACTION_NAMES: [(ActionType, &str); 13] = [
    (ActionType::ADD, "Add"),
    (ActionType::DELETE, "Delete"),
    (ActionType::UPDATE_NODE_ALLOCATABLE, "UpdateNodeAllocatable"),
    (ActionType::UPDATE_NODE_LABEL, "UpdateNodeLabel"),
    (ActionType::UPDATE_NODE_TAINT, "UpdateNodeTaint"),
    (ActionType::UPDATE_NODE_CONDITION, "UpdateNodeCondition"),
    (ActionType::UPDATE_NODE_ANNOTATION, "UpdateNodeAnnotation"),
    (
        ActionType::UPDATE_NODE_DECLARED_FEATURE,
        "UpdateNodeDeclaredFeature",
    ),
    (ActionType::UPDATE_POD_LABEL, "UpdatePodLabel"),
    (ActionType::UPDATE_POD_SCALE_DOWN, "UpdatePodScaleDown"),
    (ActionType::UPDATE_POD_TOLERATION, "UpdatePodToleration"),
    (
        ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
        "UpdatePodSchedulingGatesEliminated",
    ),
    (
        ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
        "UpdatePodGeneratedResourceClaim",
    ),
];

impl ActionType {
    pub const NONE: ActionType = ActionType(0);
    pub const ADD: ActionType = ActionType(1 << 0);
    pub const DELETE: ActionType = ActionType(1 << 1);
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    pub const UPDATE_NODE_DECLARED_FEATURE: ActionType = ActionType(1 << 7);
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 8);
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 9);
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 10);
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 11);
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 12);
    pub const ALL: ActionType = ActionType((1 << 13) - 1);
    /// Every update kind.
    pub const UPDATE: ActionType = ActionType(((1 << 13) - 1) & !0b11);

    pub const fn union(self, other: ActionType) -> ActionType {
        ActionType(self.0 | other.0)
    }

    pub fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }

    /// Parses one action name (`Add`, `UpdateNodeTaint`, ...), `Update` or `All`.
    pub fn parse(name: &str) -> Option<ActionType> {
        match name {
            "All" | "*" => Some(ActionType::ALL),
            "Update" => Some(ActionType::UPDATE),
            _ => ACTION_NAMES
                .iter()
                .find(|(_, n)| *n == name)
                .map(|(a, _)| *a),
        }
    }

    fn name(self) -> String {
        const NAMES: [(ActionType, &str); 13] = ACTION_NAMES;
        if self == ActionType::ALL {
            return "All".into();
        }
        if self == ActionType::UPDATE {
            return "Update".into();
        }
        let parts: Vec<&str> = NAMES
            .iter()
            .filter(|(a, _)| self.intersects(*a))
            .map(|(_, n)| *n)
            .collect();
        if parts.is_empty() {
            "None".into()
        } else {
            parts.join("|")
        }
    }
}

impl fmt::Debug for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A change in the cluster, or a registration for such changes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    pub resource: EventResource,
    pub action: ActionType,
    /// Overrides the label (upstream `CustomLabel`), e.g. `UnschedulableTimeout`.
    pub custom_label: Option<&'static str>,
}

impl ClusterEvent {
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        ClusterEvent {
            resource,
            action,
            custom_label: None,
        }
    }

    pub fn is_wildcard(&self) -> bool {
        self.resource == EventResource::WildCard && self.action == ActionType::ALL
    }

    /// The metrics / log label, e.g. `NodeAdd`, `AssignedPodDelete`.
    pub fn label(&self) -> String {
        match self.custom_label {
            Some(l) => l.to_string(),
            None => format!("{}{:?}", self.resource.as_str(), self.action),
        }
    }

    /// Upstream `MatchClusterEvents(registered, incoming)`: whether an incoming event
    /// is one this registration asked for.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        if self.is_wildcard() {
            return true;
        }
        let resource_match = self.resource == EventResource::WildCard
            || self.resource == incoming.resource
            || (self.resource == EventResource::Pod
                && matches!(
                    incoming.resource,
                    EventResource::AssignedPod | EventResource::UnschedulablePod
                ));
        resource_match
            && self.action.intersects(incoming.action)
            && incoming.action.0 <= self.action.0
    }
}

impl fmt::Debug for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

pub const EVENT_UNSCHEDULABLE_TIMEOUT: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    custom_label: Some("UnschedulableTimeout"),
};
/// A sidecar's connection came (back) up: its plugins can answer again.
pub const EVENT_PLUGIN_RECOVERED: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    custom_label: Some("PluginRecovered"),
};
pub const EVENT_FORCE_ACTIVATE: ClusterEvent = ClusterEvent {
    resource: EventResource::WildCard,
    action: ActionType::ALL,
    custom_label: Some("ForceActivate"),
};
pub const EVENT_ASSIGNED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD);
pub const EVENT_ASSIGNED_POD_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
pub const EVENT_NODE_ADD: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::ADD);
pub const EVENT_NODE_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::Node, ActionType::DELETE);

/// The objects an event carries, for queueing hints.
#[derive(Clone, Debug)]
pub enum EventObject {
    Pod(Arc<Pod>),
    Node(Arc<Node>),
    Storage(crate::model::storage::StorageObject),
    Dra(crate::model::dra::DraObject),
    Other,
}

impl EventObject {
    pub fn as_pod(&self) -> Option<&Arc<Pod>> {
        match self {
            EventObject::Pod(p) => Some(p),
            _ => None,
        }
    }

    pub fn as_node(&self) -> Option<&Arc<Node>> {
        match self {
            EventObject::Node(n) => Some(n),
            _ => None,
        }
    }

    pub fn as_dra(&self) -> Option<&crate::model::dra::DraObject> {
        match self {
            EventObject::Dra(d) => Some(d),
            _ => None,
        }
    }

    pub fn as_storage(&self) -> Option<&crate::model::storage::StorageObject> {
        match self {
            EventObject::Storage(s) => Some(s),
            _ => None,
        }
    }
}

/// A plugin's verdict on whether an event may make a pod it rejected schedulable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueingHint {
    Queue,
    QueueSkip,
}

/// `(pod, old, new) -> hint`. Must be cheap and must not panic: it runs on the event
/// path for every unschedulable pod the plugin rejected.
pub type QueueingHintFn =
    Arc<dyn Fn(&Pod, Option<&EventObject>, Option<&EventObject>) -> QueueingHint + Send + Sync>;

/// One registration: an event and the hint that filters it (`None` = always Queue).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    pub event: ClusterEvent,
    pub hint: Option<QueueingHintFn>,
}

impl ClusterEventWithHint {
    pub fn new(resource: EventResource, action: ActionType) -> Self {
        ClusterEventWithHint {
            event: ClusterEvent::new(resource, action),
            hint: None,
        }
    }

    pub fn with_hint(
        resource: EventResource,
        action: ActionType,
        hint: impl Fn(&Pod, Option<&EventObject>, Option<&EventObject>) -> QueueingHint
            + Send
            + Sync
            + 'static,
    ) -> Self {
        ClusterEventWithHint {
            event: ClusterEvent::new(resource, action),
            hint: Some(Arc::new(hint)),
        }
    }
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}{}",
            self.event,
            if self.hint.is_some() { "+hint" } else { "" }
        )
    }
}

/// The default registration for a plugin that declares none: every resource, every
/// action (upstream `UnrollWildCardResource`, restricted to the resources we model).
pub fn unroll_wildcard_resource() -> Vec<ClusterEventWithHint> {
    vec![
        ClusterEventWithHint::new(EventResource::Pod, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::Node, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::PodDisruptionBudget, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::Namespace, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::PersistentVolume, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::PersistentVolumeClaim, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::StorageClass, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::CSINode, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::CSIDriver, ActionType::ALL),
        ClusterEventWithHint::new(EventResource::CSIStorageCapacity, ActionType::ALL),
    ]
}

/// Upstream `NodeSchedulingPropertiesChange`: the update kinds a node change carries.
pub fn node_scheduling_properties_change(old: &Node, new: &Node) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    let mut push = |a| events.push(ClusterEvent::new(EventResource::Node, a));
    if old.unschedulable != new.unschedulable && !new.unschedulable {
        push(ActionType::UPDATE_NODE_TAINT);
    }
    if old.allocatable != new.allocatable {
        push(ActionType::UPDATE_NODE_ALLOCATABLE);
    }
    if old.labels != new.labels {
        push(ActionType::UPDATE_NODE_LABEL);
    }
    if old.taints != new.taints {
        push(ActionType::UPDATE_NODE_TAINT);
    }
    if old.declared_features != new.declared_features {
        push(ActionType::UPDATE_NODE_DECLARED_FEATURE);
    }
    events
}

/// Upstream `PodSchedulingPropertiesChange`: the update kinds a pod change carries;
/// a generic Update when none is recognised.
pub fn pod_scheduling_properties_change(old: &Pod, new: &Pod) -> Vec<ClusterEvent> {
    let resource = if new.is_assigned() {
        EventResource::AssignedPod
    } else {
        EventResource::UnschedulablePod
    };
    let mut events = Vec::new();
    let mut push = |a| events.push(ClusterEvent::new(resource, a));
    if old.spec.labels != new.spec.labels {
        push(ActionType::UPDATE_POD_LABEL);
    }
    let (o, n) = (&old.spec.requests, &new.spec.requests);
    let scaled_down = (o.milli_cpu > 0 && n.milli_cpu < o.milli_cpu)
        || (o.memory > 0 && n.memory < o.memory)
        || (o.ephemeral_storage > 0 && n.ephemeral_storage < o.ephemeral_storage)
        || o.scalar.iter().any(|(k, v)| n.scalar.get(k) < v);
    if scaled_down {
        push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    if !old.spec.scheduling_gates.is_empty() && new.spec.scheduling_gates.is_empty() {
        push(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    if old.spec.tolerations.len() != new.spec.tolerations.len() {
        push(ActionType::UPDATE_POD_TOLERATION);
    }
    // Upstream `extractPodGeneratedResourceClaimChange`.
    if old.spec.resource_claim_statuses != new.spec.resource_claim_statuses {
        push(ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM);
    }
    if events.is_empty() {
        events.push(ClusterEvent::new(resource, ActionType::UPDATE));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_follows_upstream() {
        let reg = ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD.union(ActionType::UPDATE_NODE_TAINT),
        );
        assert!(reg.matches(&EVENT_NODE_ADD));
        assert!(reg.matches(&ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_TAINT
        )));
        assert!(!reg.matches(&ClusterEvent::new(
            EventResource::Node,
            ActionType::UPDATE_NODE_LABEL
        )));
        assert!(!reg.matches(&EVENT_NODE_DELETE));
        let pod_delete = ClusterEvent::new(EventResource::Pod, ActionType::DELETE);
        assert!(pod_delete.matches(&EVENT_ASSIGNED_POD_DELETE));
        assert!(!pod_delete.matches(&EVENT_ASSIGNED_POD_ADD));
        // An incoming wildcard only matches a wildcard registration.
        assert!(!reg.matches(&EVENT_UNSCHEDULABLE_TIMEOUT));
        assert!(
            ClusterEvent::new(EventResource::WildCard, ActionType::ALL).matches(&EVENT_NODE_ADD)
        );
        assert_eq!(EVENT_ASSIGNED_POD_DELETE.label(), "AssignedPodDelete");
        assert_eq!(EVENT_UNSCHEDULABLE_TIMEOUT.label(), "UnschedulableTimeout");
    }
}
