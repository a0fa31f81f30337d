//! DynamicResources' API writes beyond a claim's reservation: the extended-resource
//! claim created at PreBind and the pod's status naming it, and the deletions and
//! deallocations Unreserve and PostFilter make (the latter waited for, as upstream's
//! synchronous calls there are).

use std::sync::Arc;
use std::time::Duration;

use super::{lock, DynamicResources, StateData};
use crate::framework::Status;
use crate::model::dra::{Allocation, ExtendedResourceClaimStatus, ResourceClaim};
use crate::model::Pod;

impl DynamicResources {
    /// PreBind for the extended-resource claim (upstream `bindClaim` with
    /// `createExtendedResourceClaimInAPI` and `patchPodExtendedResourceClaimStatus`):
    /// created with its finalizer (one write fewer than upstream's create then
    /// update), allocated and reserved for the pod, then named in the pod's status.
    pub(super) async fn bind_extended(
        &self,
        s: &StateData,
        c: &Arc<ResourceClaim>,
        pod: &Arc<Pod>,
    ) -> Status {
        let client = &self.handle.client;
        let generate_name = format!("{}-extended-resources-", pod.name);
        let created = match client.create_claim(c, &generate_name).await {
            Ok(created) => created,
            Err(e) => {
                return Status::error(format!(
                    "create claim for extended resources {}: {e}",
                    pod.key()
                ))
            }
        };
        *lock(&s.created) = Some(created.clone());
        self.dra.assume(created.clone());
        let allocation = super::binding::stamped(c.allocation.as_deref());
        let reserved = self
            .reserve_in_api(&created, allocation.as_ref(), &c.uid, pod)
            .await;
        if !reserved.is_success() {
            return reserved;
        }
        let status = ExtendedResourceClaimStatus {
            claim_name: created.name.clone(),
            mappings: s.ext_mappings.as_deref().unwrap_or_default().to_vec(),
        };
        if let Err(e) = client
            .set_extended_resource_claim_status(pod, &status)
            .await
        {
            return Status::error(format!(
                "update pod {} ExtendedResourceClaimStatus: {e}",
                pod.key()
            ));
        }
        Status::success()
    }

    /// Deletes a claim in the background (Unreserve).
    pub(super) fn spawn_delete(&self, claim: Arc<ResourceClaim>) {
        if let Some(services) = self.handle.services() {
            let client = self.handle.client.clone();
            let dra = self.dra.clone();
            services.spawn(Box::pin(async move {
                if client.delete_claim(&claim).await.is_ok() {
                    dra.restore(&claim.namespace, &claim.name);
                }
            }));
        }
    }

    /// Writes `allocation` (when Reserve made one) and the pod's reservation into
    /// `claim` (upstream `bindClaim`'s update), and assumes what the API answered;
    /// `uid` is the claim whose in-flight allocation that ends.
    pub(super) async fn reserve_in_api(
        &self,
        claim: &ResourceClaim,
        allocation: Option<&Allocation>,
        uid: &str,
        pod: &Pod,
    ) -> Status {
        match self
            .handle
            .client
            .reserve_claim(claim, allocation, pod)
            .await
        {
            Ok(updated) => {
                self.dra.assume(updated);
                self.dra.end_allocation(uid);
                Status::success()
            }
            Err(e) => Status::error(format!(
                "add allocation and reservation to claim {}: {e}",
                claim.key()
            )),
        }
    }

    /// Deletes a claim and waits (PostFilter, as upstream's synchronous call there).
    pub(super) fn delete_claim(&self, claim: Arc<ResourceClaim>) -> Result<(), String> {
        let client = self.handle.client.clone();
        self.written_now(("delete", "deleting"), async move {
            client.delete_claim(&claim).await
        })
    }

    /// Writes the claim deallocated and waits for the answer: PostFilter is synchronous,
    /// as upstream's API call there is.
    pub(super) fn deallocate(
        &self,
        claim: Arc<ResourceClaim>,
    ) -> Result<Arc<ResourceClaim>, String> {
        let client = self.handle.client.clone();
        self.written_now(("deallocate", "deallocating"), async move {
            client.deallocate_claim(&claim).await
        })
    }

    /// Runs an API write on the scheduler's services and waits for its answer, at
    /// most [`DEALLOCATE_TIMEOUT`]; `what` names the write ("delete", "deleting").
    fn written_now<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
        &self,
        (what, doing): (&str, &str),
        write: impl std::future::Future<Output = Result<T, E>> + Send + 'static,
    ) -> Result<T, String> {
        let Some(services) = self.handle.services() else {
            return Err(format!("cannot {what} a claim outside a running scheduler"));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        services.spawn(Box::pin(async move {
            let _ = tx.send(write.await);
        }));
        match rx.recv_timeout(DEALLOCATE_TIMEOUT) {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("timed out {doing} the claim")),
        }
    }
}

/// How long PostFilter waits for its deallocation (or deletion) to be written.
const DEALLOCATE_TIMEOUT: Duration = Duration::from_secs(30);
