//! The double's stand-in for kube-controller-manager's resourceclaim controller
//! (pkg/controller/resourceclaim/controller.go), which a scheduler relies on: a claim
//! for each template entry of a new pod (named `<pod>-<entry>-<suffix>`, owned by the
//! pod, annotated with the entry), the pod's `status.resourceClaimStatuses` written;
//! when a pod goes, it leaves every `reservedFor`, a claim nobody reserves is
//! deallocated (finalizer removed), and the pod's generated claims are deleted.

use serde_json::{json, Value};

use super::*;

/// `GET /apis/resource.k8s.io/v1`: the group version is served.
pub(super) fn discovery() -> Value {
    let res = |name: &str, kind: &str, namespaced: bool| {
        json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
               "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "resource.k8s.io/v1",
        "resources": [
            res("deviceclasses", "DeviceClass", false),
            res("resourceclaims", "ResourceClaim", true),
            {"name": "resourceclaims/status", "singularName": "", "namespaced": true, "kind": "ResourceClaim", "verbs": ["get", "patch", "update"]},
            res("resourceclaimtemplates", "ResourceClaimTemplate", true),
            res("resourceslices", "ResourceSlice", false),
        ],
    })
}

const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

impl Shared {
    pub(super) fn claims_for_pod(&self, pod: &Value) {
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        let uid = pod["metadata"]["uid"].clone();
        let mut statuses = pod["status"]["resourceClaimStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut changed = false;
        for rc in pod["spec"]["resourceClaims"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (Some(entry), Some(template)) = (
                rc["name"].as_str(),
                rc["resourceClaimTemplateName"].as_str(),
            ) else {
                continue;
            };
            if statuses.iter().any(|s| s["name"] == entry) {
                continue;
            }
            let Some(t) = self.get(RESOURCE_CLAIM_TEMPLATES, &ns, template) else {
                continue;
            };
            let n = self.state.lock().unwrap().rv;
            let claim_name = validate::generate_name(&format!("{name}-{entry}-"), n);
            let mut annotations = t["spec"]["metadata"]["annotations"].clone();
            if !annotations.is_object() {
                annotations = json!({});
            }
            annotations["resource.kubernetes.io/pod-claim-name"] = json!(entry);
            let claim = json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": ns,
                    "annotations": annotations,
                    "labels": t["spec"]["metadata"]["labels"].clone(),
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
                                         "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": t["spec"]["spec"].clone(),
            });
            self.put(RESOURCE_CLAIMS, claim);
            statuses.push(json!({"name": entry, "resourceClaimName": claim_name}));
            changed = true;
        }
        if changed {
            if let Some(mut p) = self.get(PODS, &ns, &name) {
                p["status"]["resourceClaimStatuses"] = json!(statuses);
                self.put(PODS, p);
            }
        }
    }

    pub(super) fn pod_gone(&self, pod: &Value) {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("");
        let claims: Vec<Value> = {
            let st = self.state.lock().unwrap();
            st.objects
                .iter()
                .filter(|((k, n, _), _)| *k == RESOURCE_CLAIMS && n == ns)
                .map(|(_, v)| v.clone())
                .collect()
        };
        for mut c in claims {
            let owned = c["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| o.iter().any(|r| r["uid"] == uid && r["controller"] == true));
            let reserved = c["status"]["reservedFor"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x["uid"] == uid));
            if !owned && !reserved {
                continue;
            }
            let name = c["metadata"]["name"].as_str().unwrap_or("").to_string();
            if let Some(r) = c["status"]["reservedFor"].as_array_mut() {
                r.retain(|x| x["uid"] != uid);
            }
            let empty = c["status"]["reservedFor"]
                .as_array()
                .is_none_or(Vec::is_empty);
            if empty && !c["status"]["allocation"].is_null() {
                if let Some(s) = c["status"].as_object_mut() {
                    s.remove("allocation");
                    s.remove("reservedFor");
                    s.remove("devices");
                }
                if let Some(f) = c["metadata"]["finalizers"].as_array_mut() {
                    f.retain(|x| x != FINALIZER);
                }
            }
            if owned {
                self.remove(RESOURCE_CLAIMS, ns, &name);
            } else {
                self.put(RESOURCE_CLAIMS, c);
            }
        }
    }
}
