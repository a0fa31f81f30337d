//! The embedded cluster's storage side: objects added, the PV controller's passes, and
//! what the invariant check and the report read (the objects themselves live in
//! [`crate::cluster::embedded_volumes`]).

use super::*;

impl EmbeddedCluster {
    /// Adds a storage object (claim, volume, class or CSI object), then lets the PV
    /// controller bind what it can.
    pub fn create_storage(&self, obj: &Object) -> Result<(), FieldError> {
        let mut st = self.lock();
        for ev in st.storage.create(obj)? {
            st.emit(ev);
        }
        Ok(())
    }

    /// Runs the embedded PV controller and provisioner once over unbound claims.
    pub fn sync_volumes(&self) {
        let _ = self.storage_write(|s, nodes| {
            let mut out = Vec::new();
            s.sync(nodes, &mut out);
            Ok(out)
        });
    }

    /// A change to the storage objects, given the nodes; emits its events.
    pub(super) fn storage_write(
        &self,
        f: impl FnOnce(
            &mut crate::cluster::embedded_volumes::Storage,
            &BTreeMap<Arc<str>, Arc<Node>>,
        ) -> Result<Vec<WatchEvent>, String>,
    ) -> Result<(), String> {
        let mut st = self.lock();
        let nodes = std::mem::take(&mut st.nodes);
        let events = f(&mut st.storage, &nodes);
        st.nodes = nodes;
        for ev in events? {
            st.emit(ev);
        }
        Ok(())
    }

    /// Bound pods whose claims' volumes cannot be reached from their node, as
    /// `(pod, node, detail)`: recomputed from the cluster's objects, not the
    /// scheduler's caches.
    pub fn unreachable_volumes(&self) -> Vec<(String, String, String)> {
        let st = self.lock();
        let mut out = Vec::new();
        for r in st.pods.values() {
            // Pods the scheduler bound (pods bound in the input are the input's state).
            let bound_here = r.condition.as_ref().is_some_and(|c| c.status == "True");
            let (Some(node_name), false, true) =
                (&r.pod.node_name, r.pod.spec.volumes.is_empty(), bound_here)
            else {
                continue;
            };
            let Some(node) = st.nodes.get(node_name) else {
                continue;
            };
            for claim in r.pod.spec.volumes.iter().filter_map(|v| v.claim()) {
                let key = (r.pod.namespace.clone(), claim.clone());
                let pv = st
                    .storage
                    .pvcs
                    .get(&key)
                    .and_then(|c| c.volume_name.as_ref())
                    .and_then(|v| st.storage.pvs.get(v));
                match pv {
                    Some(pv) if !pv.fits_node("", &node.labels) => out.push((
                        r.pod.key(),
                        node_name.to_string(),
                        format!(
                            "claim {claim} is bound to {}, whose node affinity excludes the node",
                            pv.name
                        ),
                    )),
                    Some(_) => {}
                    None => out.push((
                        r.pod.key(),
                        node_name.to_string(),
                        format!("claim {claim} is not bound to a volume"),
                    )),
                }
            }
        }
        out
    }

    /// Every claim's state, in `namespace/name` order.
    pub fn claim_outcomes(&self) -> Vec<crate::cluster::embedded_volumes::ClaimOutcome> {
        self.lock().storage.outcomes()
    }
}
