//! DynamicResources' writes to ResourceClaims, as kube-scheduler v1.36 makes them
//! (`dynamicresources.go` bindClaim, Unreserve, PostFilter): conditional on the
//! claim's resourceVersion, retried on conflict (client-go's `DefaultRetry`: five
//! tries) with the claim read again. Binding a claim costs what upstream's costs: a
//! metadata write for the finalizer when it is missing, then one status write.

use std::sync::Arc;

use k8s_openapi::api::resource::v1 as resource;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::errors::{client_error, report_api_error};
use super::KubernetesCluster;
use crate::client::ClientError;
use crate::model::convert::{allocation_to_json, resource_claim_from_k8s};
use crate::model::dra::{Allocation, ResourceClaim, FINALIZER};
use crate::model::Pod;

/// client-go's `retry.DefaultRetry` steps.
const RETRIES: usize = 5;

fn model(c: &resource::ResourceClaim) -> Result<Arc<ResourceClaim>, ClientError> {
    resource_claim_from_k8s(c, String::new)
        .map(Arc::new)
        .map_err(|e| ClientError::Other(format!("resourceclaim from the API server: {e}")))
}

fn is_conflict(e: &ClientError) -> bool {
    matches!(e, ClientError::Conflict(_))
}

impl KubernetesCluster {
    fn claims(&self, namespace: &str) -> Api<resource::ResourceClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn get_claim(&self, claim: &ResourceClaim) -> Result<Arc<ResourceClaim>, ClientError> {
        let what = format!("resourceclaims.resource.k8s.io \"{}\"", claim.name);
        match self.claims(&claim.namespace).get(&claim.name).await {
            Ok(c) => model(&c),
            Err(e) => Err(client_error(&what, e)),
        }
    }

    /// A merge patch of the claim (`status`: of its status subresource).
    async fn patch_claim(
        &self,
        claim: &ResourceClaim,
        status: bool,
        body: serde_json::Value,
    ) -> Result<Arc<ResourceClaim>, ClientError> {
        let what = format!("resourceclaims.resource.k8s.io \"{}\"", claim.name);
        self.limiter.acquire().await;
        let _permit = self.writes.acquire().await;
        let api = self.claims(&claim.namespace);
        let params = PatchParams::default();
        let r = if status {
            api.patch_status(&claim.name, &params, &Patch::Merge(body))
                .await
        } else {
            api.patch(&claim.name, &params, &Patch::Merge(body)).await
        };
        match r {
            Ok(c) => model(&c),
            Err(e) => {
                report_api_error("patch", "resourceclaims", &claim.key(), &e);
                Err(client_error(&what, e))
            }
        }
    }

    /// PreBind (upstream `bindClaim`): finalizer, then allocation and reservation.
    pub(super) async fn reserve_claim_api(
        &self,
        claim: &ResourceClaim,
        allocation: Option<&Allocation>,
        pod: &Pod,
    ) -> Result<Arc<ResourceClaim>, ClientError> {
        let mut cur = Arc::new(claim.clone());
        let mut last = None;
        for attempt in 0..RETRIES {
            if attempt > 0 {
                cur = self.get_claim(claim).await?;
                if cur.uid != claim.uid || cur.deleting {
                    return Err(ClientError::Conflict(format!(
                        "claim {} got deleted in the meantime",
                        claim.key()
                    )));
                }
                if allocation.is_some()
                    && cur.allocation.is_some()
                    && !cur.is_reserved_for(&pod.uid)
                {
                    return Err(ClientError::Conflict(format!(
                        "claim {} got allocated elsewhere in the meantime",
                        claim.key()
                    )));
                }
            }
            if !cur.finalizers.iter().any(|f| &**f == FINALIZER) {
                let mut finalizers: Vec<&str> = cur.finalizers.iter().map(|f| &**f).collect();
                finalizers.push(FINALIZER);
                let body = json!({"metadata": {
                    "resourceVersion": cur.resource_version.as_deref(),
                    "finalizers": finalizers,
                }});
                match self.patch_claim(&cur, false, body).await {
                    Ok(c) => cur = c,
                    Err(e) if is_conflict(&e) => {
                        last = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            if cur.is_reserved_for(&pod.uid) && (allocation.is_none() || cur.allocation.is_some()) {
                return Ok(cur);
            }
            let mut reserved: Vec<serde_json::Value> = cur
                .reserved_for
                .iter()
                .map(|r| {
                    let mut v = json!({"resource": &*r.resource, "name": &*r.name, "uid": &*r.uid});
                    if !r.api_group.is_empty() {
                        v["apiGroup"] = json!(&*r.api_group);
                    }
                    v
                })
                .collect();
            reserved.push(json!({"resource": "pods", "name": &*pod.name, "uid": &*pod.uid}));
            let mut status = json!({"reservedFor": reserved});
            match (allocation, &cur.allocation) {
                (Some(a), None) => status["allocation"] = allocation_to_json(a),
                (None, None) => {
                    return Err(ClientError::Conflict(format!(
                        "claim {} got deallocated in the meantime",
                        claim.key()
                    )))
                }
                _ => {}
            }
            let body = json!({
                "metadata": {"resourceVersion": cur.resource_version.as_deref()},
                "status": status,
            });
            match self.patch_claim(&cur, true, body).await {
                Ok(c) => return Ok(c),
                Err(e) if is_conflict(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Conflict(format!("claim {}", claim.key()))))
    }

    /// Unreserve after PreBind wrote the claim: the pod out of `reservedFor`.
    pub(super) async fn release_claim_api(
        &self,
        claim: &ResourceClaim,
        pod_uid: &str,
    ) -> Result<Arc<ResourceClaim>, ClientError> {
        let mut cur = Arc::new(claim.clone());
        let mut last = None;
        for attempt in 0..RETRIES {
            if attempt > 0 {
                cur = self.get_claim(claim).await?;
            }
            if !cur.is_reserved_for(pod_uid) {
                return Ok(cur);
            }
            let reserved: Vec<serde_json::Value> = cur
                .reserved_for
                .iter()
                .filter(|r| &*r.uid != pod_uid)
                .map(|r| {
                    let mut v = json!({"resource": &*r.resource, "name": &*r.name, "uid": &*r.uid});
                    if !r.api_group.is_empty() {
                        v["apiGroup"] = json!(&*r.api_group);
                    }
                    v
                })
                .collect();
            let body = json!({
                "metadata": {"resourceVersion": cur.resource_version.as_deref()},
                "status": {"reservedFor": if reserved.is_empty() { serde_json::Value::Null } else { json!(reserved) }},
            });
            match self.patch_claim(&cur, true, body).await {
                Ok(c) => return Ok(c),
                Err(e) if is_conflict(&e) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Conflict(format!("claim {}", claim.key()))))
    }

    /// PreBind for DRA-backed extended resources: the claim created with its
    /// finalizer (upstream creates it, then adds the finalizer in a second write).
    pub(super) async fn create_claim_api(
        &self,
        claim: &ResourceClaim,
        generate_name: &str,
    ) -> Result<Arc<ResourceClaim>, ClientError> {
        let owner = claim.owner.as_ref().map(|o| {
            json!([{"apiVersion": &*o.api_version, "kind": &*o.kind, "name": &*o.name,
                    "uid": &*o.uid, "controller": true}])
        });
        let annotations: serde_json::Map<String, serde_json::Value> = claim
            .annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let finalizers: Vec<&str> = claim.finalizers.iter().map(|f| &**f).collect();
        let body = json!({
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": generate_name,
                "namespace": &*claim.namespace,
                "ownerReferences": owner,
                "annotations": annotations,
                "finalizers": finalizers,
            },
            "spec": &*claim.spec.raw,
        });
        let obj: resource::ResourceClaim = serde_json::from_value(body)
            .map_err(|e| ClientError::Other(format!("resourceclaim to create: {e}")))?;
        self.limiter.acquire().await;
        let _permit = self.writes.acquire().await;
        match self
            .claims(&claim.namespace)
            .create(&Default::default(), &obj)
            .await
        {
            Ok(c) => model(&c),
            Err(e) => {
                let what = format!("{}/{generate_name}", claim.namespace);
                report_api_error("create", "resourceclaims", &what, &e);
                Err(client_error(
                    &format!("resourceclaims.resource.k8s.io {generate_name:?}"),
                    e,
                ))
            }
        }
    }

    /// Unreserve and PostFilter (upstream `deleteClaim`): the finalizer removed, then
    /// the claim deleted; one already gone is no error.
    pub(super) async fn delete_claim_api(&self, claim: &ResourceClaim) -> Result<(), ClientError> {
        let mut cur = Arc::new(claim.clone());
        for attempt in 0..RETRIES {
            if attempt > 0 {
                cur = match self.get_claim(claim).await {
                    Ok(c) => c,
                    Err(ClientError::NotFound(_)) => return Ok(()),
                    Err(e) => return Err(e),
                };
            }
            if !cur.finalizers.iter().any(|f| &**f == FINALIZER) {
                break;
            }
            let finalizers: Vec<&str> = cur
                .finalizers
                .iter()
                .map(|f| &**f)
                .filter(|f| *f != FINALIZER)
                .collect();
            let body = json!({"metadata": {
                "resourceVersion": cur.resource_version.as_deref(),
                "finalizers": finalizers,
            }});
            match self.patch_claim(&cur, false, body).await {
                Ok(_) => break,
                Err(ClientError::NotFound(_)) => return Ok(()),
                Err(e) if is_conflict(&e) && attempt + 1 < RETRIES => continue,
                Err(e) => return Err(e),
            }
        }
        self.limiter.acquire().await;
        let _permit = self.writes.acquire().await;
        match self
            .claims(&claim.namespace)
            .delete(&claim.name, &Default::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match client_error(
                &format!("resourceclaims.resource.k8s.io {:?}", claim.name),
                e,
            ) {
                ClientError::NotFound(_) => Ok(()),
                e => Err(e),
            },
        }
    }

    /// PreBind: the pod's `status.extendedResourceClaimStatus`.
    pub(super) async fn set_extended_resource_claim_status_api(
        &self,
        pod: &Pod,
        status: &crate::model::dra::ExtendedResourceClaimStatus,
    ) -> Result<(), ClientError> {
        let mappings: Vec<serde_json::Value> = status
            .mappings
            .iter()
            .map(|m| json!({"containerName": &*m.container, "resourceName": &*m.resource, "requestName": &*m.request}))
            .collect();
        let body = json!({"status": {"extendedResourceClaimStatus": {
            "requestMappings": mappings,
            "resourceClaimName": &*status.claim_name,
        }}});
        self.limiter.acquire().await;
        let _permit = self.writes.acquire().await;
        let api: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), &pod.namespace);
        match api
            .patch_status(&pod.name, &PatchParams::default(), &Patch::Merge(body))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                report_api_error("patch", "pods/status", &pod.key(), &e);
                Err(client_error(&format!("pods {:?}", pod.name), e))
            }
        }
    }

    /// PostFilter: the claim deallocated (one conditional status write, no retry).
    pub(super) async fn deallocate_claim_api(
        &self,
        claim: &ResourceClaim,
    ) -> Result<Arc<ResourceClaim>, ClientError> {
        let body = json!({
            "metadata": {"resourceVersion": claim.resource_version.as_deref()},
            "status": {"allocation": null, "reservedFor": null, "devices": null},
        });
        self.patch_claim(claim, true, body).await
    }
}
