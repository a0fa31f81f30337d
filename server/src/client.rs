//! The boundary between the scheduler and a cluster (client-go's place in
//! kube-scheduler): a backend delivers object events (like informers) and carries out
//! the scheduler's decisions (bind, status, events, deletions). The scheduler core
//! depends on this module only, never on a backend, so it never knows which one it
//! talks to; the backends live in [`crate::cluster`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::model::node::{WorkloadKind, WorkloadSelector};
use crate::model::{Namespace, Node, Pod, PodDisruptionBudget};

/// A boxed future, for async methods of object-safe traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A change the backend observed, delivered in order per object.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    NodeAdd(Arc<Node>),
    NodeUpdate(Arc<Node>, Arc<Node>),
    NodeDelete(Arc<Node>),
    PodAdd(Arc<Pod>),
    PodUpdate(Arc<Pod>, Arc<Pod>),
    PodDelete(Arc<Pod>),
    NamespaceUpsert(Namespace),
    NamespaceDelete(Arc<str>),
    PdbUpsert(Arc<PodDisruptionBudget>),
    PdbDelete {
        namespace: Arc<str>,
        name: Arc<str>,
    },
    WorkloadSelectorUpsert(Arc<WorkloadSelector>),
    WorkloadSelectorDelete {
        kind: WorkloadKind,
        namespace: Arc<str>,
        name: Arc<str>,
    },
    /// A storage object (claim, volume, class, CSI object) added or updated.
    StorageUpsert(crate::model::storage::StorageObject),
    StorageDelete(crate::model::storage::StorageObject),
    /// A DRA object (device class, slice, claim) added or updated.
    DraUpsert(crate::model::dra::DraObject),
    DraDelete(crate::model::dra::DraObject),
    /// The initial listing is complete: the cache is warm.
    Synced,
}

/// Where a backend sends its events. Counts what is sent and not yet handled, so a
/// simulation can tell when the scheduler has caught up with the cluster.
#[derive(Clone)]
pub struct EventSink {
    tx: std::sync::mpsc::Sender<WatchEvent>,
    backlog: Arc<std::sync::atomic::AtomicUsize>,
}

/// The receiving end of an [`EventSink`].
pub struct EventSource {
    rx: std::sync::mpsc::Receiver<WatchEvent>,
    backlog: Arc<std::sync::atomic::AtomicUsize>,
}

/// A connected sink and source.
pub fn event_channel() -> (EventSink, EventSource) {
    let (tx, rx) = std::sync::mpsc::channel();
    let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    (
        EventSink {
            tx,
            backlog: backlog.clone(),
        },
        EventSource { rx, backlog },
    )
}

impl EventSink {
    /// Sends an event; false if the scheduler has stopped listening.
    pub fn send(&self, ev: WatchEvent) -> bool {
        self.backlog
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.tx.send(ev).is_err() {
            self.backlog
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Events sent and not yet fully handled.
    pub fn backlog(&self) -> usize {
        self.backlog.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl EventSource {
    /// Waits for the next event; `None` when every sink is gone.
    pub fn recv(&self) -> Option<WatchEvent> {
        self.rx.recv().ok()
    }

    /// Marks one received event as fully handled.
    pub fn handled(&self) {
        self.backlog
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn backlog_counter(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        self.backlog.clone()
    }
}

/// A `PodScheduled` condition, as the scheduler writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCondition {
    /// `True` or `False`.
    pub status: &'static str,
    /// `Unschedulable` or `SchedulerError`.
    pub reason: &'static str,
    pub message: String,
}

/// A status update for a pod: the PodScheduled condition and/or the nominated node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodStatusUpdate {
    pub condition: Option<PodCondition>,
    /// `Some(None)` clears the nominated node; `None` leaves it alone.
    pub nominated_node_name: Option<Option<Arc<str>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// The reason of the Warning event recorded with an attempt's outcome when plugin
/// calls failed and were skipped under `failurePolicy: Ignore` (Switchyard's own:
/// kube-scheduler has no remote plugins).
pub const REMOTE_PLUGIN_IGNORED: &str = "RemotePluginIgnored";

/// A Kubernetes Event about a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEvent {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
    pub event_type: EventType,
    /// `Scheduled`, `FailedScheduling`, `Preempted`, `RemotePluginIgnored`.
    pub reason: &'static str,
    /// `Binding`, `Scheduling`, `Preempting`.
    pub action: &'static str,
    pub message: String,
}

impl PodEvent {
    pub fn new(
        pod: &Pod,
        event_type: EventType,
        reason: &'static str,
        action: &'static str,
        message: String,
    ) -> Self {
        PodEvent {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            event_type,
            reason,
            action,
            message,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("pods \"{0}\" not found")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Other(String),
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        })
    }
}

/// What the scheduler asks of a cluster. Calls are async and must not block the
/// scheduling thread; the scheduler never waits on status updates or events.
pub trait ClusterClient: Send + Sync {
    /// Binds the pod to the node (the `pods/binding` subresource).
    fn bind<'a>(&'a self, pod: &'a Pod, node: &'a str) -> BoxFuture<'a, Result<(), ClientError>>;

    /// Patches the pod's status (condition, nominated node).
    fn update_pod_status<'a>(
        &'a self,
        pod: &'a Pod,
        update: PodStatusUpdate,
    ) -> BoxFuture<'a, Result<(), ClientError>>;

    /// Deletes a pod as a preemption victim, after marking it with the
    /// `DisruptionTarget` condition; the UID guards against deleting a new pod of
    /// the same name.
    fn delete_pod<'a>(
        &'a self,
        pod: &'a Pod,
        preemptor: &'a Pod,
    ) -> BoxFuture<'a, Result<(), ClientError>>;

    /// Records an event; fire and forget.
    fn record_event(&self, event: PodEvent);

    /// VolumeBinding's PreBind for a static PV: writes the PV as assumed at Reserve
    /// (`spec.claimRef` naming the claim, and `pv.kubernetes.io/bound-by-controller`
    /// unless the user pre-bound it). The PV controller then binds the claim.
    fn bind_volume<'a>(
        &'a self,
        pv: &'a crate::model::storage::PersistentVolume,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        not_written(format!(
            "cannot bind persistentvolume {:?}: this cluster backend does not write volumes",
            pv.name
        ))
    }

    /// DynamicResources' PreBind: see [`ClaimWriter::reserve_claim`].
    fn reserve_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        _allocation: Option<&'a crate::model::dra::Allocation>,
        _pod: &'a Pod,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        not_written(format!(
            "cannot write resourceclaim {:?}: this cluster backend does not write ResourceClaims",
            claim.key()
        ))
    }

    /// DynamicResources' Unreserve after PreBind wrote the claim: takes the pod out of
    /// `status.reservedFor` again.
    fn release_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
        _pod_uid: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        not_written(format!(
            "cannot write resourceclaim {:?}: this cluster backend does not write ResourceClaims",
            claim.key()
        ))
    }

    /// DynamicResources' PostFilter: clears `status.allocation`, `reservedFor` and
    /// `devices` of a claim nobody else uses.
    fn deallocate_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        not_written(format!(
            "cannot write resourceclaim {:?}: this cluster backend does not write ResourceClaims",
            claim.key()
        ))
    }

    /// DynamicResources' PreBind for DRA-backed extended resources: creates the claim
    /// (its spec, owner, annotations and finalizer; the name from `generate_name`).
    fn create_claim<'a>(
        &'a self,
        _claim: &'a crate::model::dra::ResourceClaim,
        generate_name: &'a str,
    ) -> BoxFuture<'a, Result<Arc<crate::model::dra::ResourceClaim>, ClientError>> {
        not_written(format!("cannot create a resourceclaim {generate_name}…: this cluster backend does not write ResourceClaims"))
    }

    /// Deletes a claim the scheduler made, removing its finalizer first (upstream
    /// `deleteClaim`). A claim already gone is no error.
    fn delete_claim<'a>(
        &'a self,
        claim: &'a crate::model::dra::ResourceClaim,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        not_written(format!(
            "cannot delete resourceclaim {:?}: this cluster backend does not write ResourceClaims",
            claim.key()
        ))
    }

    /// Writes the pod's `status.extendedResourceClaimStatus`.
    fn set_extended_resource_claim_status<'a>(
        &'a self,
        pod: &'a Pod,
        _status: &'a crate::model::dra::ExtendedResourceClaimStatus,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        not_written(format!(
            "cannot write the status of pod {:?}: this cluster backend does not write it",
            pod.key()
        ))
    }

    /// VolumeBinding's PreBind for a claim to provision: sets the
    /// `volume.kubernetes.io/selected-node` annotation the provisioner waits for.
    fn select_node_for_claim<'a>(
        &'a self,
        pvc: &'a crate::model::storage::PersistentVolumeClaim,
        node: &'a str,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        not_written(format!(
                "cannot select node {node:?} for persistentvolumeclaim {:?}: this cluster backend does not write volumes",
                pvc.key()
            ))
    }
}

/// What a backend that does not make a write answers: the write, refused, naming it.
fn not_written<'a, T: 'a>(msg: String) -> BoxFuture<'a, Result<T, ClientError>> {
    Box::pin(async move { Err(ClientError::Other(msg)) })
}

/// A cluster backend: a client plus the event feed.
pub trait ClusterBackend: ClusterClient {
    /// Starts delivering events to `sink`: first the current objects (namespaces, nodes,
    /// PDBs, then pods), then `Synced`, then changes as they happen.
    fn start(&self, sink: EventSink);
}
