//! The embedded cluster: an in-memory stand-in for the API server, behind the same
//! boundary as the Kubernetes backend. It delivers informer-style events, applies
//! bindings and deletions, records conditions, events and nominations, and lets a
//! workload add or remove objects while the scheduler runs.

mod client;
mod dra;
mod update;
mod volumes;

use client::*;
use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1 as core;

use super::manifest::{ManifestError, ManifestObject, Object, Source};
use crate::client::BoxFuture;
use crate::client::{
    ClientError, ClusterBackend, ClusterClient, EventSink, PodCondition, PodEvent, PodStatusUpdate,
    WatchEvent,
};
use crate::model::convert::{
    namespace_from_k8s, node_from_k8s, pdb_from_k8s, pod_from_k8s, priority_class_from_k8s,
    replica_set_selector, replication_controller_selector, service_selector, stateful_set_selector,
    system_priority_class, FieldError, PriorityResolver,
};
use crate::model::labels::LABEL_HOSTNAME;
use crate::model::node::{WorkloadKind, WorkloadSelector};
use crate::model::{Labels, Namespace, Node, Pod, PodDisruptionBudget, PriorityClass, Uid};

/// Events kept per pod (the latest ones).
const EVENTS_PER_POD: usize = 8;

/// A pod and what the scheduler wrote about it.
#[derive(Clone, Debug)]
pub struct PodRecord {
    pub pod: Arc<Pod>,
    pub condition: Option<PodCondition>,
    pub events: Vec<PodEvent>,
    /// Creation order, for stable reports.
    pub order: u64,
    /// Plugin calls skipped under `failurePolicy: Ignore` in the attempt that gave
    /// the pod its current outcome (bound or pending), from its `RemotePluginIgnored`
    /// event.
    pub ignored: Option<String>,
}

/// A pod deleted by preemption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub node: Option<Arc<str>>,
    pub preemptor: String,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<Arc<str>, Arc<Node>>,
    pods: FxHashMap<Uid, PodRecord>,
    names: FxHashMap<(Arc<str>, Arc<str>), Uid>,
    namespaces: BTreeMap<Arc<str>, Namespace>,
    priority_classes: BTreeMap<Arc<str>, PriorityClass>,
    /// RuntimeClasses by name, for what admission does to the pods that name one.
    runtime_classes: BTreeMap<String, k8s_openapi::api::node::v1::RuntimeClass>,
    pdbs: BTreeMap<(Arc<str>, Arc<str>), Arc<PodDisruptionBudget>>,
    selectors: Vec<Arc<WorkloadSelector>>,
    evictions: Vec<Eviction>,
    /// Victims given a grace period: removed when their deadline passes.
    terminating: Vec<(std::time::Instant, Uid)>,
    next_uid: u64,
    next_order: u64,
    next_rv: u64,
    bindings: u64,
    bind_conflicts: u64,
    sinks: Vec<EventSink>,
    /// What the invariant checker knows of every pod handed in and not deleted since,
    /// and of every node, read from the objects as given (`namespace/name` keys).
    ledger_pods: HashMap<String, crate::invariants::PodFacts>,
    ledger_nodes: HashMap<String, crate::invariants::NodeFacts>,
    ledger_preemptions: Vec<crate::invariants::Preemption>,
    storage: super::embedded_volumes::Storage,
    dra: super::embedded_dra::Dra,
}

/// What the invariant checker is given: the input's own facts, kept beside the cluster.
pub struct Ledger {
    pub pods: HashMap<String, crate::invariants::PodFacts>,
    pub nodes: HashMap<String, crate::invariants::NodeFacts>,
    pub preemptions: Vec<crate::invariants::Preemption>,
}

impl State {
    /// What the invariant checker keeps of a pod, its priority resolved as
    /// admission resolves it against this cluster's classes.
    fn ledger_facts(&self, pod: &core::Pod) -> crate::invariants::PodFacts {
        let mut facts = crate::invariants::PodFacts::of(pod);
        facts.resolve_priority(pod, &|class| {
            match class {
                Some(name) => self.priority_class(name),
                None => self.global_default(),
            }
            .map(|c| c.value)
        });
        facts
    }
}

impl PriorityResolver for State {
    fn priority_class(&self, name: &str) -> Option<PriorityClass> {
        self.priority_classes
            .get(name)
            .cloned()
            .or_else(|| system_priority_class(name))
    }
    fn global_default(&self) -> Option<PriorityClass> {
        self.priority_classes
            .values()
            .find(|c| c.global_default)
            .cloned()
    }
}

impl State {
    fn emit(&mut self, ev: WatchEvent) {
        self.sinks.retain(|s| s.send(ev.clone()));
    }

    /// Recomputes `disruptionsAllowed` of PDBs that carry no status of their own (the
    /// embedded cluster has no disruption controller): healthy pods are bound and not
    /// terminating; expected pods are all that match.
    /// Only PDBs in `namespace` whose selector matches `changed` (all, when `None`).
    fn refresh_pdbs(&mut self, namespace: &str, changed: Option<&Labels>) {
        let keys: Vec<(Arc<str>, Arc<str>)> = self
            .pdbs
            .iter()
            .filter(|((ns, _), p)| {
                **ns == *namespace && changed.is_none_or(|l| p.selector.matches(l))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let Some(pdb) = self.pdbs.get(&key).cloned() else {
                continue;
            };
            if pdb.status_given {
                continue;
            }
            let matching = self.pods.values().filter(|r| {
                *r.pod.namespace == *pdb.namespace && pdb.selector.matches(r.pod.labels())
            });
            let (mut expected, mut healthy) = (0i32, 0i32);
            for r in matching {
                expected += 1;
                if r.pod.node_name.is_some() && r.pod.deletion_timestamp.is_none() {
                    healthy += 1;
                }
            }
            let desired = match (pdb.min_available, pdb.max_unavailable) {
                (Some(m), _) => m.scaled(expected),
                (None, Some(m)) => expected - m.scaled(expected),
                (None, None) => expected,
            };
            let allowed = (healthy - desired).max(0);
            if pdb.disruptions_allowed != Some(allowed) {
                let mut updated = (*pdb).clone();
                updated.disruptions_allowed = Some(allowed);
                let updated = Arc::new(updated);
                self.pdbs.insert(key, updated.clone());
                self.emit(WatchEvent::PdbUpsert(updated));
            }
        }
    }

    /// A pod went away: the resourceclaim controller's part runs after the deletion.
    fn emit_pod_delete(&mut self, pod: Arc<Pod>) {
        self.emit(WatchEvent::PodDelete(pod.clone()));
        // Claims from templates, and the one the scheduler made for DRA-backed
        // extended resources.
        if !pod.spec.resource_claims.is_empty() || pod.spec.extended_containers.is_some() {
            let mut dra = std::mem::take(&mut self.dra);
            let events = dra.pod_gone(&pod, &mut || self.next_rv());
            self.dra = dra;
            for ev in events {
                self.emit(ev);
            }
        }
    }

    fn next_rv(&mut self) -> Arc<str> {
        self.next_rv += 1;
        self.next_rv.to_string().into()
    }

    fn gen_uid(&mut self) -> String {
        self.next_uid += 1;
        format!("embedded-{:08}", self.next_uid)
    }
}

/// The in-memory cluster.
#[derive(Default)]
pub struct EmbeddedCluster {
    state: Mutex<State>,
}

fn field_err(source: &Source, e: FieldError) -> ManifestError {
    ManifestError::field(source, e.field, e.message)
}

/// Deterministic 5-character name suffixes, as the API server appends to a
/// `generateName`.
pub fn name_suffix(n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (n >> 7);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            x ^= n.rotate_left(17);
            c
        })
        .collect()
}

impl EmbeddedCluster {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Builds a cluster from manifests. PriorityClasses, RuntimeClasses and Namespaces
    /// are taken first so pods can refer to them wherever they appear.
    pub fn from_manifests(objects: &[ManifestObject]) -> Result<Self, ManifestError> {
        let c = EmbeddedCluster::new();
        for o in objects {
            match &o.object {
                Object::PriorityClass(pc) => {
                    let pc = priority_class_from_k8s(pc).map_err(|e| field_err(&o.source, e))?;
                    c.lock().priority_classes.insert(pc.name.clone(), pc);
                }
                Object::Namespace(ns) => {
                    let ns = namespace_from_k8s(ns).map_err(|e| field_err(&o.source, e))?;
                    c.lock().namespaces.insert(ns.name.clone(), ns);
                }
                Object::RuntimeClass(rc) => {
                    c.create_runtime_class(rc)
                        .map_err(|e| field_err(&o.source, e))?;
                }
                _ => {}
            }
        }
        let defaults = c
            .lock()
            .priority_classes
            .values()
            .filter(|p| p.global_default)
            .count();
        if defaults > 1 {
            return Err(ManifestError::field(
                &objects[0].source,
                "PriorityClass.globalDefault",
                "more than one PriorityClass is marked globalDefault: keep one",
            ));
        }
        // Storage: classes first (a claim without one gets the default class), then CSI
        // objects, volumes and claims; the PV controller's first pass runs at the end.
        for pass in 0..3 {
            for o in objects {
                let this_pass = match &o.object {
                    Object::StorageClass(_) => 0,
                    Object::CSINode(_)
                    | Object::CSIDriver(_)
                    | Object::CSIStorageCapacity(_)
                    | Object::PersistentVolume(_) => 1,
                    Object::PersistentVolumeClaim(_) => 2,
                    _ => continue,
                };
                if this_pass == pass {
                    c.create_storage(&o.object)
                        .map_err(|e| field_err(&o.source, e))?;
                }
            }
        }
        for o in objects {
            match &o.object {
                Object::Node(n) => {
                    c.create_node(n).map_err(|e| field_err(&o.source, e))?;
                }
                Object::PodDisruptionBudget(p) => {
                    c.create_pdb(p).map_err(|e| field_err(&o.source, e))?
                }
                Object::Service(s) => {
                    c.add_selector(service_selector(s).map_err(|e| field_err(&o.source, e))?)
                }
                Object::ReplicationController(r) => c.add_selector(
                    replication_controller_selector(r).map_err(|e| field_err(&o.source, e))?,
                ),
                Object::ReplicaSet(r) => {
                    c.add_selector(replica_set_selector(r).map_err(|e| field_err(&o.source, e))?)
                }
                Object::StatefulSet(s) => {
                    c.add_selector(stateful_set_selector(s).map_err(|e| field_err(&o.source, e))?)
                }
                _ => {}
            }
        }
        // DRA: classes, slices, templates and claims, before the pods that use them.
        for o in objects {
            if crate::cluster::manifest::DRA_KINDS.contains(&o.object.kind()) {
                c.create_dra(&o.object)
                    .map_err(|e| field_err(&o.source, e))?;
            }
        }
        for o in objects {
            if let Object::Pod(p) = &o.object {
                c.create_pod(p).map_err(|e| field_err(&o.source, e))?;
            }
        }
        // The StatefulSet controller: claims and pods not already given.
        for o in objects {
            if let Object::StatefulSet(s) = &o.object {
                c.expand_stateful_set(s)
                    .map_err(|e| field_err(&o.source, e))?;
            }
        }
        c.sync_volumes();
        Ok(c)
    }

    /// Creates what the StatefulSet controller would: claims from the templates and
    /// pods `<name>-<ordinal>`, each unless one of that name exists.
    fn expand_stateful_set(
        &self,
        ss: &k8s_openapi::api::apps::v1::StatefulSet,
    ) -> Result<(), FieldError> {
        let uid = {
            let mut st = self.lock();
            ss.metadata.uid.clone().unwrap_or_else(|| st.gen_uid())
        };
        let (claims, pods) = super::embedded_volumes::stateful_set_objects(ss, &uid)?;
        for c in claims {
            let key = (
                Arc::from(c.metadata.namespace.as_deref().unwrap_or("default")),
                Arc::from(c.metadata.name.as_deref().unwrap_or("")),
            );
            if self.lock().storage.pvcs.contains_key(&key) {
                continue;
            }
            self.create_storage(&Object::PersistentVolumeClaim(Box::new(c)))?;
        }
        for p in pods {
            let key = (
                Arc::from(p.metadata.namespace.as_deref().unwrap_or("default")),
                Arc::from(p.metadata.name.as_deref().unwrap_or("")),
            );
            if self.lock().names.contains_key(&key) {
                continue;
            }
            self.create_pod(&p)?;
        }
        Ok(())
    }

    /// Adds a node (allocatable defaults to capacity, and the hostname label is set as
    /// a kubelet would).
    pub fn create_node(&self, node: &core::Node) -> Result<Arc<str>, FieldError> {
        crate::model::convert::validate_labels(node.metadata.labels.as_ref(), "metadata.labels")?;
        let mut st = self.lock();
        let mut n = node_from_k8s(node, String::new)?;
        if n.uid.is_empty() {
            // An update keeps the node's uid.
            n.uid = match st.nodes.get(&*n.name) {
                Some(old) => old.uid.clone(),
                None => st.gen_uid().into(),
            };
        }
        if !n.labels.contains_key(LABEL_HOSTNAME) {
            let mut pairs: Vec<(String, String)> = n
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            pairs.push((LABEL_HOSTNAME.into(), n.name.to_string()));
            n.labels = Labels::new(pairs);
        }
        let name = n.name.clone();
        st.ledger_nodes
            .insert(name.to_string(), crate::invariants::NodeFacts::of(node));
        let n = Arc::new(n);
        match st.nodes.insert(name.clone(), n.clone()) {
            Some(old) => st.emit(WatchEvent::NodeUpdate(old, n)),
            None => st.emit(WatchEvent::NodeAdd(n)),
        }
        Ok(name)
    }

    /// Adds (or replaces) a Service's or controller's selector.
    pub fn add_selector(&self, sel: WorkloadSelector) {
        let mut st = self.lock();
        let sel = Arc::new(sel);
        st.selectors.retain(|s| {
            !(s.kind == sel.kind && s.namespace == sel.namespace && s.name == sel.name)
        });
        st.selectors.push(sel.clone());
        st.emit(WatchEvent::WorkloadSelectorUpsert(sel));
    }

    /// Removes a Service's or controller's selector; false if there is none.
    pub fn delete_selector(&self, kind: WorkloadKind, namespace: &str, name: &str) -> bool {
        let mut st = self.lock();
        let before = st.selectors.len();
        st.selectors
            .retain(|s| !(s.kind == kind && &*s.namespace == namespace && &*s.name == name));
        if st.selectors.len() == before {
            return false;
        }
        st.emit(WatchEvent::WorkloadSelectorDelete {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        });
        true
    }

    pub fn delete_node(&self, name: &str) -> bool {
        let mut st = self.lock();
        match st.nodes.remove(name) {
            Some(n) => {
                st.ledger_nodes.remove(name);
                st.emit(WatchEvent::NodeDelete(n));
                true
            }
            None => false,
        }
    }

    pub fn create_namespace(&self, ns: &core::Namespace) -> Result<(), FieldError> {
        let ns = namespace_from_k8s(ns)?;
        let mut st = self.lock();
        st.namespaces.insert(ns.name.clone(), ns.clone());
        st.emit(WatchEvent::NamespaceUpsert(ns));
        Ok(())
    }

    pub fn create_pdb(
        &self,
        pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
    ) -> Result<(), FieldError> {
        let pdb = Arc::new(pdb_from_k8s(pdb)?);
        let mut st = self.lock();
        st.pdbs
            .insert((pdb.namespace.clone(), pdb.name.clone()), pdb.clone());
        st.emit(WatchEvent::PdbUpsert(pdb.clone()));
        st.refresh_pdbs(&pdb.namespace, None);
        Ok(())
    }

    /// Adds a RuntimeClass (validated as the API server validates it) for the pods
    /// created after it.
    pub fn create_runtime_class(
        &self,
        rc: &k8s_openapi::api::node::v1::RuntimeClass,
    ) -> Result<(), FieldError> {
        crate::cluster::admission::validate_runtime_class(rc)?;
        let name = rc.metadata.name.clone().unwrap_or_default();
        let mut st = self.lock();
        if st.runtime_classes.contains_key(&name) {
            return Err(FieldError {
                field: "metadata.name".into(),
                message: format!(
                    "AlreadyExists: runtimeclasses.node.k8s.io {name:?} already exists"
                ),
            });
        }
        st.runtime_classes.insert(name, rc.clone());
        Ok(())
    }

    /// Creates a pod (a name is generated from `generateName` when missing; the
    /// namespace is created implicitly; RuntimeClass admission applies). Returns
    /// `namespace/name`.
    pub fn create_pod(&self, pod: &core::Pod) -> Result<String, FieldError> {
        let mut st = self.lock();
        let mut pod = pod.clone();
        if pod.metadata.name.as_deref().is_none_or(str::is_empty) {
            let Some(prefix) = pod.metadata.generate_name.clone() else {
                return Err(FieldError {
                    field: "metadata.name".into(),
                    message: "Required value: name or generateName is required".into(),
                });
            };
            let n = st.next_uid + st.pods.len() as u64 + 1;
            let mut name = format!("{prefix}{}", name_suffix(n));
            let ns = pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let mut k = n;
            while st
                .names
                .contains_key(&(Arc::from(ns.as_str()), Arc::from(name.as_str())))
            {
                k += 7919;
                name = format!("{prefix}{}", name_suffix(k));
            }
            pod.metadata.name = Some(name);
        }
        crate::cluster::admission::admit_runtime_class(&mut pod, &st.runtime_classes)?;
        crate::model::convert::validate_pod(&pod)?;
        let uid = st.gen_uid();
        let mut p = pod_from_k8s(&pod, &*st, || uid)?;
        let key = (p.namespace.clone(), p.name.clone());
        if st.names.contains_key(&key) {
            return Err(FieldError {
                field: "metadata.name".into(),
                message: format!(
                    "AlreadyExists: pod {}/{} already exists",
                    p.namespace, p.name
                ),
            });
        }
        if st.pods.contains_key(&p.uid) {
            return Err(FieldError {
                field: "metadata.uid".into(),
                message: format!(
                    "Duplicate value: {:?} is already the uid of pod {}",
                    &*p.uid,
                    st.pods.get(&p.uid).map(|r| r.pod.key()).unwrap_or_default()
                ),
            });
        }
        let facts = st.ledger_facts(&pod);
        st.ledger_pods.insert(p.key(), facts);
        p.resource_version = Some(st.next_rv());
        let p = Arc::new(p);
        if !st.namespaces.contains_key(&p.namespace) {
            let ns = Namespace {
                name: p.namespace.clone(),
                labels: Labels::new([("kubernetes.io/metadata.name", &*p.namespace)]),
            };
            st.namespaces.insert(ns.name.clone(), ns.clone());
            st.emit(WatchEvent::NamespaceUpsert(ns));
        }
        st.next_order += 1;
        let order = st.next_order;
        st.names.insert(key, p.uid.clone());
        // The API server marks gated pods itself (upstream `SchedulingGated`).
        let condition = (!p.spec.scheduling_gates.is_empty()).then(|| PodCondition {
            status: "False",
            reason: "SchedulingGated",
            message: "Scheduling is blocked due to non-empty scheduling gates".into(),
        });
        st.pods.insert(
            p.uid.clone(),
            PodRecord {
                pod: p.clone(),
                condition,
                events: Vec::new(),
                order,
                ignored: None,
            },
        );
        st.emit(WatchEvent::PodAdd(p.clone()));
        if p.spec
            .resource_claims
            .iter()
            .any(|c| matches!(c.source, crate::model::dra::ClaimSource::Template(_)))
        {
            Self::generate_claims(&mut st, &p.uid);
        }
        // A pod created already terminating (a snapshot of a cluster mid-deletion) goes
        // away after its grace period.
        if p.deletion_timestamp.is_some() {
            let deadline = grace_deadline(p.spec.termination_grace_period_seconds.unwrap_or(0));
            st.terminating.push((deadline, p.uid.clone()));
        }
        if !st.pdbs.is_empty() {
            st.refresh_pdbs(&p.namespace, Some(p.labels()));
        }
        Ok(p.key())
    }

    /// Deletes a pod by namespace and name; false if there is none.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> bool {
        let mut st = self.lock();
        let Some(uid) = st.names.remove(&(Arc::from(namespace), Arc::from(name))) else {
            return false;
        };
        match st.pods.remove(&uid) {
            Some(r) => {
                let pod = r.pod.clone();
                st.ledger_pods.remove(&pod.key());
                st.emit_pod_delete(r.pod);
                if !st.pdbs.is_empty() {
                    st.refresh_pdbs(&pod.namespace, Some(pod.labels()));
                }
                true
            }
            None => false,
        }
    }

    /// Finishes terminations whose grace period has passed; returns how many are still
    /// pending. The simulation driver calls it while it waits.
    pub fn advance(&self) -> usize {
        self.advance_to(std::time::Instant::now())
    }

    /// Lets simulated time jump to the next termination deadline and finishes the
    /// terminations due then: with no kubelet, a grace period is only a wait, and a
    /// settled simulation need not sit through it (nor through one of 292 years).
    /// Returns how many are still pending.
    pub fn finish_next_termination(&self) -> usize {
        let next = self.lock().terminating.iter().map(|(t, _)| *t).min();
        match next {
            Some(t) => self.advance_to(t.max(std::time::Instant::now())),
            None => 0,
        }
    }

    /// Pods terminating now, as `namespace/name`, for messages.
    pub fn terminating_pods(&self) -> Vec<String> {
        let st = self.lock();
        st.terminating
            .iter()
            .filter_map(|(_, uid)| st.pods.get(uid).map(|r| r.pod.key()))
            .collect()
    }

    fn advance_to(&self, now: std::time::Instant) -> usize {
        let mut st = self.lock();
        if st.terminating.is_empty() {
            return 0;
        }
        let (due, pending): (Vec<_>, Vec<_>) = std::mem::take(&mut st.terminating)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        st.terminating = pending;
        for (_, uid) in due {
            if let Some(r) = st.pods.remove(&uid) {
                st.ledger_pods.remove(&r.pod.key());
                st.names
                    .remove(&(r.pod.namespace.clone(), r.pod.name.clone()));
                let pod = r.pod.clone();
                st.emit_pod_delete(r.pod);
                if !st.pdbs.is_empty() {
                    st.refresh_pdbs(&pod.namespace, Some(pod.labels()));
                }
            }
        }
        st.terminating.len()
    }

    /// The creation order the next pod will get; with [`PodRecord::order`] this
    /// tells which pods were created after a point in time.
    pub fn next_order(&self) -> u64 {
        self.lock().next_order + 1
    }

    /// Every pod with what the scheduler recorded, in creation order.
    pub fn pods(&self) -> Vec<PodRecord> {
        let st = self.lock();
        let mut v: Vec<PodRecord> = st.pods.values().cloned().collect();
        v.sort_by_key(|r| r.order);
        v
    }

    pub fn pod(&self, namespace: &str, name: &str) -> Option<PodRecord> {
        let st = self.lock();
        let uid = st.names.get(&(Arc::from(namespace), Arc::from(name)))?;
        st.pods.get(uid).cloned()
    }

    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.lock().nodes.values().cloned().collect()
    }

    /// The invariant checker's view of the input: pods handed in and not deleted since,
    /// and nodes, read from the objects as they were given.
    pub fn ledger(&self) -> Ledger {
        let st = self.lock();
        Ledger {
            pods: st.ledger_pods.clone(),
            nodes: st.ledger_nodes.clone(),
            preemptions: st.ledger_preemptions.clone(),
        }
    }

    /// Whether a pod is being deleted (a victim under its grace period).
    pub fn is_terminating(&self, uid: &str) -> bool {
        self.lock().terminating.iter().any(|(_, u)| &**u == uid)
    }

    pub fn evictions(&self) -> Vec<Eviction> {
        self.lock().evictions.clone()
    }

    /// Successful bind calls.
    pub fn bindings(&self) -> u64 {
        self.lock().bindings
    }

    /// Bind calls for pods that were already bound (the scheduler must never make one).
    pub fn bind_conflicts(&self) -> u64 {
        self.lock().bind_conflicts
    }

    fn update_pod(st: &mut State, uid: &str, f: impl FnOnce(&mut Pod)) -> Option<Arc<Pod>> {
        let rv = st.next_rv();
        let rec = st.pods.get_mut(uid)?;
        let old = rec.pod.clone();
        let mut new = (*old).clone();
        f(&mut new);
        new.resource_version = Some(rv);
        let new = Arc::new(new);
        rec.pod = new.clone();
        st.emit(WatchEvent::PodUpdate(old, new.clone()));
        Some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::event_channel;

    fn node_yaml(name: &str) -> core::Node {
        crate::yaml::from_str(&format!("metadata: {{name: {name}}}\nstatus: {{capacity: {{cpu: '2', memory: 4Gi, pods: '10'}}}}")).unwrap()
    }

    #[test]
    fn lists_then_streams_and_applies_bindings() {
        let c = EmbeddedCluster::new();
        c.create_node(&node_yaml("n1")).unwrap();
        let p: core::Pod = crate::yaml::from_str(
            "metadata: {generateName: web-}\nspec: {containers: [{name: c}]}",
        )
        .unwrap();
        let key = c.create_pod(&p).unwrap();
        assert!(key.starts_with("default/web-"));
        let (sink, source) = event_channel();
        c.start(sink);
        let mut kinds = Vec::new();
        while source
            .backlog_counter()
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
        {
            let ev = source.recv().unwrap();
            source.handled();
            kinds.push(format!("{ev:?}").split('(').next().unwrap().to_string());
        }
        assert_eq!(kinds, ["NamespaceUpsert", "NodeAdd", "PodAdd", "Synced"]);
        let pod = c.pods()[0].pod.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(c.bind(&pod, "n1")).unwrap();
        assert!(matches!(
            rt.block_on(c.bind(&pod, "n1")),
            Err(ClientError::Conflict(_))
        ));
        assert!(matches!(source.recv(), Some(WatchEvent::PodUpdate(_, _))));
        assert_eq!(c.pods()[0].pod.node_name.as_deref(), Some("n1"));
        assert_eq!(c.bindings(), 1);
        assert!(c.nodes()[0].labels.get(LABEL_HOSTNAME) == Some("n1"));
    }
}
