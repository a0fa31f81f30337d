//! The embedded cluster's DRA side: objects added, the resourceclaim controller's
//! claims for a pod, the scheduler's claim writes, and what the report and the
//! invariant check read (the objects themselves live in [`crate::cluster::embedded_dra`]).

use std::sync::Arc;

use super::*;

impl EmbeddedCluster {
    /// Adds a DRA object (device class, slice, claim or claim template); a new template
    /// lets the resourceclaim controller make the claims pods were waiting for.
    pub fn create_dra(&self, obj: &Object) -> Result<(), FieldError> {
        let mut st = self.lock();
        crate::cluster::embedded_dra::check_admin_access(obj, &|ns| {
            st.namespaces.get(ns).map(|n| n.labels.clone())
        })?;
        let mut dra = std::mem::take(&mut st.dra);
        let events = dra.create(obj, &mut || st.next_rv());
        st.dra = dra;
        for ev in events? {
            st.emit(ev);
        }
        if let Object::ResourceClaimTemplate(_) = obj {
            let waiting: Vec<Uid> = st
                .pods
                .values()
                .filter(|r| r.pod.node_name.is_none() && !r.pod.spec.resource_claims.is_empty())
                .map(|r| r.pod.uid.clone())
                .collect();
            for uid in waiting {
                Self::generate_claims(&mut st, &uid);
            }
        }
        Ok(())
    }

    /// The resourceclaim controller for one pod: claims from its templates, then its
    /// `status.resourceClaimStatuses`.
    pub(super) fn generate_claims(st: &mut State, uid: &str) {
        let Some(pod) = st.pods.get(uid).map(|r| r.pod.clone()) else {
            return;
        };
        let mut dra = std::mem::take(&mut st.dra);
        let (statuses, events) = dra.claims_for_pod(&pod, &mut || st.next_rv(), &name_suffix);
        st.dra = dra;
        if events.is_empty() {
            return;
        }
        for ev in events {
            st.emit(ev);
        }
        Self::update_pod(st, uid, |p| {
            let mut spec = (*p.spec).clone();
            spec.resource_claim_statuses = statuses.into();
            p.spec = Arc::new(spec);
        });
    }

    /// A claim write by the scheduler, numbered with the next resource version; emits
    /// its event and returns the claim as written.
    pub(super) fn dra_write(
        &self,
        f: impl FnOnce(
            &mut crate::cluster::embedded_dra::Dra,
            Arc<str>,
        ) -> Result<(Arc<crate::model::dra::ResourceClaim>, WatchEvent), String>,
    ) -> Result<Arc<crate::model::dra::ResourceClaim>, String> {
        let mut st = self.lock();
        let rv = st.next_rv();
        let (claim, ev) = f(&mut st.dra, rv)?;
        st.emit(ev);
        Ok(claim)
    }

    /// The ResourceClaims of a namespace, by name.
    pub fn claims_in(&self, namespace: &str) -> Vec<Arc<crate::model::dra::ResourceClaim>> {
        self.lock().dra.claims_in(namespace)
    }

    /// Writes a claim's allocation as a test's own allocator would (no reservation).
    pub fn allocate_claim(
        &self,
        claim: &crate::model::dra::ResourceClaim,
        allocation: &crate::model::dra::Allocation,
    ) -> Result<Arc<crate::model::dra::ResourceClaim>, String> {
        self.dra_write(|d, rv| d.set_allocation(claim, allocation, rv))
    }

    /// Every ResourceClaim and its allocation.
    pub fn resource_claim_outcomes(
        &self,
    ) -> Vec<crate::cluster::embedded_dra::ResourceClaimOutcome> {
        self.lock().dra.outcomes()
    }

    /// DRA rules the end state breaks, for the invariant check (pods the scheduler
    /// bound, on their nodes).
    pub fn dra_violations(&self) -> Vec<crate::cluster::embedded_dra::DraViolation> {
        let st = self.lock();
        let bound: Vec<(Arc<Pod>, Arc<Node>)> = st
            .pods
            .values()
            .filter(|r| r.condition.as_ref().is_some_and(|c| c.status == "True"))
            .filter_map(|r| {
                let n = st.nodes.get(r.pod.node_name.as_ref()?)?;
                Some((r.pod.clone(), n.clone()))
            })
            .collect();
        st.dra.violations(&bound)
    }
}
