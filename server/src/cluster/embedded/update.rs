//! Changes to objects already in the embedded cluster, as the API server makes them
//! for a client: a pod or node replaced by a full-object update (a workload's
//! `updateAny`, with a pod's `resize` subresource), a nomination written to a pod's
//! status, scheduling gates removed, and any kind a manifest may hold created on
//! the fly (a workload's `createAny`).

use super::*;
use crate::cluster::manifest::Object;

/// The uid of pod `namespace/name`, if there is one.
fn uid_of(st: &State, namespace: &str, name: &str) -> Option<Uid> {
    st.names
        .get(&(Arc::from(namespace), Arc::from(name)))
        .cloned()
}

impl EmbeddedCluster {
    /// Replaces the pod `pod` names by `pod` (an update of the whole object): what
    /// the API server keeps on an update stays (uid, the node it is bound to, its
    /// nomination, deletion), the rest is the template's. Requests change as an
    /// in-place resize changes them.
    pub fn replace_pod(&self, pod: &core::Pod) -> Result<(), FieldError> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let mut st = self.lock();
        let Some(uid) = uid_of(&st, ns, name) else {
            return Err(FieldError {
                field: "metadata.name".into(),
                message: format!("NotFound: pods {name:?} not found in namespace {ns:?}"),
            });
        };
        crate::model::convert::validate_pod(pod)?;
        let mut new = pod_from_k8s(pod, &*st, || uid.to_string())?;
        let Some(old) = st.pods.get(&uid).map(|r| r.pod.clone()) else {
            return Ok(());
        };
        new.uid = old.uid.clone();
        new.namespace = old.namespace.clone();
        if new.node_name.is_none() {
            new.node_name = old.node_name.clone();
        }
        if new.nominated_node_name.is_none() {
            new.nominated_node_name = old.nominated_node_name.clone();
        }
        new.deletion_timestamp = old.deletion_timestamp;
        let mut facts = st.ledger_facts(pod);
        // Growth of a bound pod is the resize's, not a placement (see PodFacts).
        if let Some(before) = st.ledger_pods.get(&old.key()) {
            // Who placed it does not change with an update.
            facts.pinned = before.pinned.clone();
            facts.grown_in_place = before.grown_in_place.clone();
            if old.node_name.is_some() {
                for (r, v) in &facts.requests {
                    let was = before.requests.get(r).copied().unwrap_or(0);
                    if *v > was {
                        *facts.grown_in_place.entry(r.clone()).or_default() += v - was;
                    }
                }
            }
        }
        st.ledger_pods.insert(old.key(), facts);
        let ungated = new.spec.scheduling_gates.is_empty();
        Self::update_pod(&mut st, &uid, move |p| *p = new);
        if ungated {
            Self::clear_gated_condition(&mut st, &uid);
        }
        Ok(())
    }

    /// Replaces an existing node (an update of the whole object), keeping its uid.
    pub fn replace_node(&self, node: &core::Node) -> Result<(), FieldError> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if !self.lock().nodes.contains_key(name) {
            return Err(FieldError {
                field: "metadata.name".into(),
                message: format!("NotFound: nodes {name:?} not found"),
            });
        }
        self.create_node(node).map(|_| ())
    }

    /// Writes `status.nominatedNodeName` of a pod, as another component may
    /// (scheduler_perf's `nominatedNodeName`); false if there is no such pod.
    pub fn nominate(&self, namespace: &str, name: &str, node: &str) -> bool {
        let mut st = self.lock();
        let Some(uid) = uid_of(&st, namespace, name) else {
            return false;
        };
        let node: Arc<str> = Arc::from(node);
        Self::update_pod(&mut st, &uid, move |p| p.nominated_node_name = Some(node)).is_some()
    }

    /// Removes every scheduling gate of a pod (an update of `spec.schedulingGates`);
    /// false if there is no such pod.
    pub fn clear_scheduling_gates(&self, namespace: &str, name: &str) -> bool {
        let mut st = self.lock();
        let Some(uid) = uid_of(&st, namespace, name) else {
            return false;
        };
        let gated = st
            .pods
            .get(&uid)
            .is_some_and(|r| !r.pod.spec.scheduling_gates.is_empty());
        if gated {
            Self::update_pod(&mut st, &uid, |p| {
                let mut spec = (*p.spec).clone();
                spec.scheduling_gates = Box::default();
                p.spec = Arc::new(spec);
            });
            Self::clear_gated_condition(&mut st, &uid);
        }
        true
    }

    /// The API server's `SchedulingGated` condition goes with the last gate.
    fn clear_gated_condition(st: &mut State, uid: &str) {
        if let Some(r) = st.pods.get_mut(uid) {
            if r.condition
                .as_ref()
                .is_some_and(|c| c.reason == "SchedulingGated")
            {
                r.condition = None;
            }
        }
    }

    /// Creates one object of any kind a manifest may hold in the running cluster.
    pub fn create_object(&self, obj: &Object) -> Result<(), FieldError> {
        match obj {
            Object::Node(n) => self.create_node(n).map(|_| ()),
            Object::Pod(p) => self.create_pod(p).map(|_| ()),
            Object::Namespace(ns) => self.create_namespace(ns),
            Object::PriorityClass(pc) => {
                let pc = priority_class_from_k8s(pc)?;
                self.lock().priority_classes.insert(pc.name.clone(), pc);
                Ok(())
            }
            Object::RuntimeClass(rc) => self.create_runtime_class(rc),
            Object::PodDisruptionBudget(p) => self.create_pdb(p),
            Object::Service(s) => {
                self.add_selector(service_selector(s)?);
                Ok(())
            }
            Object::ReplicationController(r) => {
                self.add_selector(replication_controller_selector(r)?);
                Ok(())
            }
            Object::ReplicaSet(r) => {
                self.add_selector(replica_set_selector(r)?);
                Ok(())
            }
            Object::StatefulSet(s) => {
                self.add_selector(stateful_set_selector(s)?);
                Ok(())
            }
            Object::PersistentVolumeClaim(_)
            | Object::PersistentVolume(_)
            | Object::StorageClass(_)
            | Object::CSINode(_)
            | Object::CSIDriver(_)
            | Object::CSIStorageCapacity(_) => self.create_storage(obj),
            Object::DeviceClass(_)
            | Object::ResourceSlice(_)
            | Object::ResourceClaim(_)
            | Object::ResourceClaimTemplate(_) => self.create_dra(obj),
        }
    }
}
