//! The embedded cluster's Dynamic Resource Allocation objects, with the part of
//! kube-controller-manager's resourceclaim controller a simulation needs: claims made
//! from a pod's templates (named as upstream names them, owned by the pod, the pod's
//! `status.resourceClaimStatuses` written), pods taken out of `reservedFor` when they
//! go, claims nobody reserves any more deallocated, and generated claims deleted with
//! their pod. The scheduler's claim writes (PreBind, Unreserve, PostFilter) land here.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::manifest::Object;
use crate::client::WatchEvent;
use crate::model::convert::{
    device_class_from_k8s, resource_claim_from_k8s, resource_claim_template_from_k8s,
    resource_slice_from_k8s, FieldError,
};
use crate::model::dra::{
    Allocation, ClaimName, ClaimSource, ConsumerRef, DeviceClass, DeviceId, DraObject,
    PodClaimStatus, ResourceClaim, ResourceClaimTemplate, ResourceSlice, ANN_POD_CLAIM_NAME,
    FINALIZER, RESERVED_FOR_MAX_SIZE,
};
use crate::model::{Labels, Pod};

type NsName = (Arc<str>, Arc<str>);

/// DRA objects of the embedded cluster.
#[derive(Default)]
pub(super) struct Dra {
    pub classes: BTreeMap<Arc<str>, Arc<DeviceClass>>,
    pub slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    pub claims: BTreeMap<NsName, Arc<ResourceClaim>>,
    pub templates: BTreeMap<NsName, Arc<ResourceClaimTemplate>>,
    next_uid: u64,
    /// Claims generated so far (for name suffixes).
    generated: u64,
}

fn key(ns: &str, name: &str) -> NsName {
    (ns.into(), name.into())
}

fn already_exists(kind: &str, name: &str) -> FieldError {
    FieldError {
        field: "metadata.name".into(),
        message: format!("AlreadyExists: {kind} {name:?} already exists"),
    }
}

/// The namespace label that allows admin access to devices.
pub const ADMIN_ACCESS_LABEL: &str = "resource.kubernetes.io/admin-access";

/// The API server's check for `adminAccess` requests (upstream resourceclaim and
/// resourceclaimtemplate strategies): only in a namespace labelled
/// `resource.kubernetes.io/admin-access: "true"`.
pub(super) fn check_admin_access(
    obj: &Object,
    namespace_labels: &dyn Fn(&str) -> Option<Labels>,
) -> Result<(), FieldError> {
    let (ns, spec, prefix) = match obj {
        Object::ResourceClaim(c) => (c.metadata.namespace.as_deref(), c.spec.as_ref(), "spec"),
        Object::ResourceClaimTemplate(t) => (
            t.metadata.namespace.as_deref(),
            t.spec.as_ref().and_then(|s| s.spec.as_ref()),
            "spec.spec",
        ),
        _ => return Ok(()),
    };
    let requests = spec
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default();
    let Some(i) = requests
        .iter()
        .position(|r| r.exactly.as_ref().and_then(|e| e.admin_access) == Some(true))
    else {
        return Ok(());
    };
    let ns = ns.unwrap_or("default");
    let allowed = namespace_labels(ns).is_some_and(|l| l.get(ADMIN_ACCESS_LABEL) == Some("true"));
    if allowed {
        return Ok(());
    }
    Err(FieldError {
        field: format!("{prefix}.devices.requests[{i}].exactly.adminAccess"),
        message: format!("Forbidden: admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing namespace"),
    })
}

/// Adds an object of a cluster-scoped kind, refusing a name already taken.
fn insert_new<T>(
    map: &mut BTreeMap<Arc<str>, Arc<T>>,
    name: Arc<str>,
    obj: T,
    kind: &str,
) -> Result<Arc<T>, FieldError> {
    if map.contains_key(&name) {
        return Err(already_exists(kind, &name));
    }
    let obj = Arc::new(obj);
    map.insert(name, obj.clone());
    Ok(obj)
}

/// Upstream's `generateName` for a claim from a template: `<pod>-<claim>-`, both parts
/// cut proportionally when longer than 57 characters together.
fn generate_name(pod: &str, claim: &str) -> String {
    const MAX: usize = 57;
    let (mut p, mut c) = (pod.to_string(), claim.to_string());
    let len = p.len() + 1 + c.len();
    if len > MAX {
        let keep_pod = p.len() * MAX / len;
        let keep_claim = MAX.saturating_sub(keep_pod + 1);
        p.truncate(keep_pod.min(p.len()));
        c.truncate(keep_claim.min(c.len()));
    }
    format!("{p}-{c}-")
}

impl Dra {
    fn uid(&mut self) -> Arc<str> {
        self.next_uid += 1;
        format!("embedded-claim-{:08}", self.next_uid).into()
    }

    /// Every object as a watch's initial listing delivers it: classes, slices, claims.
    pub fn initial_events(&self) -> Vec<WatchEvent> {
        let up = WatchEvent::DraUpsert;
        let mut out: Vec<WatchEvent> = Vec::new();
        out.extend(
            self.classes
                .values()
                .cloned()
                .map(|c| up(DraObject::DeviceClass(c))),
        );
        out.extend(
            self.slices
                .values()
                .cloned()
                .map(|s| up(DraObject::ResourceSlice(s))),
        );
        out.extend(
            self.claims
                .values()
                .cloned()
                .map(|c| up(DraObject::ResourceClaim(c))),
        );
        out
    }

    /// Adds a DRA object from a manifest; the events to emit. `rv` numbers the write.
    pub fn create(
        &mut self,
        obj: &Object,
        rv: &mut dyn FnMut() -> Arc<str>,
    ) -> Result<Vec<WatchEvent>, FieldError> {
        let o = match obj {
            Object::DeviceClass(c) => {
                let mut c = device_class_from_k8s(c)?;
                c.resource_version = Some(rv());
                DraObject::DeviceClass(insert_new(
                    &mut self.classes,
                    c.name.clone(),
                    c,
                    "deviceclass",
                )?)
            }
            Object::ResourceSlice(s) => {
                let mut s = resource_slice_from_k8s(s)?;
                refuse_unattended(&s)?;
                s.resource_version = Some(rv());
                DraObject::ResourceSlice(insert_new(
                    &mut self.slices,
                    s.name.clone(),
                    s,
                    "resourceslice",
                )?)
            }
            Object::ResourceClaim(c) => {
                let n = self.next_uid + 1;
                let mut c = resource_claim_from_k8s(c, || format!("embedded-claim-{n:08}"))?;
                self.next_uid = n;
                let k = key(&c.namespace, &c.name);
                if self.claims.contains_key(&k) {
                    return Err(already_exists("resourceclaim", &c.key()));
                }
                c.resource_version = Some(rv());
                let c = Arc::new(c);
                self.claims.insert(k, c.clone());
                DraObject::ResourceClaim(c)
            }
            Object::ResourceClaimTemplate(t) => {
                let t = Arc::new(resource_claim_template_from_k8s(t)?);
                let k = key(&t.namespace, &t.name);
                if self.templates.contains_key(&k) {
                    return Err(already_exists(
                        "resourceclaimtemplate",
                        &format!("{}/{}", t.namespace, t.name),
                    ));
                }
                self.templates.insert(k, t);
                return Ok(Vec::new());
            }
            _ => return Ok(Vec::new()),
        };
        Ok(vec![WatchEvent::DraUpsert(o)])
    }

    /// The resourceclaim controller for a new pod: a claim for each template entry
    /// whose template exists and that has no status yet. Returns the pod's claim
    /// statuses to write (all entries handled so far) and the events.
    pub fn claims_for_pod(
        &mut self,
        pod: &Pod,
        rv: &mut dyn FnMut() -> Arc<str>,
        suffix: &dyn Fn(u64) -> String,
    ) -> (Vec<PodClaimStatus>, Vec<WatchEvent>) {
        let mut statuses = pod.spec.resource_claim_statuses.to_vec();
        let mut events = Vec::new();
        for pc in pod.spec.resource_claims.iter() {
            let ClaimSource::Template(tname) = &pc.source else {
                continue;
            };
            if statuses.iter().any(|s| s.name == pc.name) {
                continue;
            }
            let Some(t) = self.templates.get(&key(&pod.namespace, tname)).cloned() else {
                continue;
            };
            let base = generate_name(&pod.name, &pc.name);
            let name = loop {
                self.generated += 1;
                let candidate = format!("{base}{}", suffix(self.generated));
                if !self.claims.contains_key(&key(&pod.namespace, &candidate)) {
                    break candidate;
                }
            };
            let mut annotations: Vec<(String, String)> = t
                .annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            annotations.push((ANN_POD_CLAIM_NAME.into(), pc.name.to_string()));
            let claim = ResourceClaim {
                namespace: pod.namespace.clone(),
                name: name.as_str().into(),
                uid: self.uid(),
                resource_version: Some(rv()),
                deleting: false,
                finalizers: Box::new([]),
                annotations: Labels::new(annotations),
                owner: Some(crate::model::dra::ControllerRef {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod.name.clone(),
                    uid: pod.uid.clone(),
                }),
                spec: t.spec.clone(),
                allocation: None,
                reserved_for: Vec::new(),
                devices: Vec::new(),
            };
            let claim = Arc::new(claim);
            self.claims
                .insert(key(&claim.namespace, &claim.name), claim.clone());
            events.push(WatchEvent::DraUpsert(DraObject::ResourceClaim(claim)));
            statuses.push(PodClaimStatus {
                name: pc.name.clone(),
                claim: Some(name.into()),
            });
        }
        (statuses, events)
    }

    /// A claim the scheduler creates (DRA-backed extended resources): named from
    /// `generate_name` (the API server cuts a prefix past 58 characters), a fresh UID,
    /// no status.
    pub fn create_claim(
        &mut self,
        claim: &ResourceClaim,
        generate_name: &str,
        rv: Arc<str>,
        suffix: &dyn Fn(u64) -> String,
    ) -> Result<(Arc<ResourceClaim>, WatchEvent), String> {
        let base: String = generate_name.chars().take(58).collect();
        let name = loop {
            self.generated += 1;
            let candidate = format!("{base}{}", suffix(self.generated));
            if !self.claims.contains_key(&key(&claim.namespace, &candidate)) {
                break candidate;
            }
        };
        let mut c = claim.clone();
        c.name = name.into();
        c.uid = self.uid();
        c.allocation = None;
        c.devices.clear();
        c.reserved_for = Vec::new();
        c.deleting = false;
        Ok(self.written(c, rv))
    }

    /// Writes a claim's allocation (no reservation), as a test's own allocator does
    /// (scheduler_perf's `allocResourceClaims`).
    pub fn set_allocation(
        &mut self,
        claim: &ResourceClaim,
        allocation: &Allocation,
        rv: Arc<str>,
    ) -> Result<(Arc<ResourceClaim>, WatchEvent), String> {
        let cur = self.current(claim)?;
        if cur.allocation.is_some() {
            return Err(format!("claim {} is already allocated", claim.key()));
        }
        let mut c = (*cur).clone();
        c.allocation = Some(Arc::new(allocation.clone()));
        Ok(self.written(c, rv))
    }

    /// The claims of a namespace, by name.
    pub fn claims_in(&self, namespace: &str) -> Vec<Arc<ResourceClaim>> {
        self.claims
            .iter()
            .filter(|((ns, _), _)| &**ns == namespace)
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// Deletes a claim (its finalizer removed first, as the scheduler does); `None`
    /// when it is already gone.
    pub fn delete_claim(&mut self, claim: &ResourceClaim) -> Option<WatchEvent> {
        let k = key(&claim.namespace, &claim.name);
        let cur = self.claims.get(&k)?;
        if cur.uid != claim.uid {
            return None;
        }
        let cur = self.claims.remove(&k)?;
        Some(WatchEvent::DraDelete(DraObject::ResourceClaim(cur)))
    }

    /// The claim as stored, or upstream's not-found error.
    fn current(&self, claim: &ResourceClaim) -> Result<Arc<ResourceClaim>, String> {
        self.claims
            .get(&key(&claim.namespace, &claim.name))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "resourceclaims.resource.k8s.io \"{}\" not found",
                    claim.name
                )
            })
    }

    /// Stores a claim write and returns it with its watch event.
    fn written(&mut self, c: ResourceClaim, rv: Arc<str>) -> (Arc<ResourceClaim>, WatchEvent) {
        let c = self.put(c, rv);
        (
            c.clone(),
            WatchEvent::DraUpsert(DraObject::ResourceClaim(c)),
        )
    }

    fn put(&mut self, c: ResourceClaim, rv: Arc<str>) -> Arc<ResourceClaim> {
        let mut c = c;
        c.resource_version = Some(rv);
        let c = Arc::new(c);
        self.claims.insert(key(&c.namespace, &c.name), c.clone());
        c
    }

    /// The scheduler's PreBind (upstream `bindClaim`): finalizer, allocation,
    /// reservation.
    pub fn reserve(
        &mut self,
        claim: &ResourceClaim,
        allocation: Option<&Allocation>,
        pod: &Pod,
        rv: Arc<str>,
    ) -> Result<(Arc<ResourceClaim>, WatchEvent), String> {
        let Some(cur) = self
            .claims
            .get(&key(&claim.namespace, &claim.name))
            .cloned()
        else {
            return Err(format!("claim {} got deleted in the meantime", claim.key()));
        };
        if cur.uid != claim.uid {
            return Err(format!("claim {} got deleted in the meantime", claim.key()));
        }
        let mut c = (*cur).clone();
        if let Some(a) = allocation {
            if c.allocation.is_some() {
                return Err(format!(
                    "claim {} got allocated elsewhere in the meantime",
                    claim.key()
                ));
            }
            c.allocation = Some(Arc::new(a.clone()));
        } else if c.allocation.is_none() {
            return Err(format!("claim {} is not allocated any more", claim.key()));
        }
        if !c.finalizers.iter().any(|f| &**f == FINALIZER) {
            let mut f = c.finalizers.to_vec();
            f.push(FINALIZER.into());
            c.finalizers = f.into();
        }
        if !c.is_reserved_for(&pod.uid) {
            if c.reserved_for.len() >= RESERVED_FOR_MAX_SIZE {
                return Err(format!(
                    "claim {} is reserved for too many consumers",
                    claim.key()
                ));
            }
            c.reserved_for.push(ConsumerRef::pod(&pod.name, &pod.uid));
        }
        Ok(self.written(c, rv))
    }

    /// Takes a pod out of a claim's `reservedFor` (the scheduler's Unreserve).
    pub fn release(
        &mut self,
        claim: &ResourceClaim,
        pod_uid: &str,
        rv: Arc<str>,
    ) -> Result<(Arc<ResourceClaim>, WatchEvent), String> {
        let cur = self.current(claim)?;
        let mut c = (*cur).clone();
        c.reserved_for.retain(|r| &*r.uid != pod_uid);
        Ok(self.written(c, rv))
    }

    /// PostFilter's deallocation (an UpdateStatus: refused when the claim changed).
    pub fn deallocate(
        &mut self,
        claim: &ResourceClaim,
        rv: Arc<str>,
    ) -> Result<(Arc<ResourceClaim>, WatchEvent), String> {
        let cur = self.current(claim)?;
        if cur.resource_version != claim.resource_version {
            return Err(format!(
                "Operation cannot be fulfilled on resourceclaims.resource.k8s.io \"{}\": the object has been modified; please apply your changes to the latest version and try again",
                claim.name
            ));
        }
        let mut c = (*cur).clone();
        c.allocation = None;
        c.devices.clear();
        c.reserved_for.clear();
        Ok(self.written(c, rv))
    }

    /// The resourceclaim controller when a pod goes: out of every `reservedFor`; a claim
    /// nobody reserves any more is deallocated (finalizer removed); claims generated
    /// for the pod are deleted.
    pub fn pod_gone(&mut self, pod: &Pod, rv: &mut dyn FnMut() -> Arc<str>) -> Vec<WatchEvent> {
        let mut out = Vec::new();
        let keys: Vec<NsName> = self
            .claims
            .iter()
            .filter(|(_, c)| {
                c.is_reserved_for(&pod.uid) || c.owner.as_ref().is_some_and(|o| *o.uid == *pod.uid)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            let Some(cur) = self.claims.get(&k).cloned() else {
                continue;
            };
            if cur.owner.as_ref().is_some_and(|o| *o.uid == *pod.uid) {
                self.claims.remove(&k);
                out.push(WatchEvent::DraDelete(DraObject::ResourceClaim(cur)));
                continue;
            }
            let mut c = (*cur).clone();
            c.reserved_for.retain(|r| *r.uid != *pod.uid);
            if c.reserved_for.is_empty() && c.allocation.is_some() {
                c.allocation = None;
                c.devices.clear();
                c.finalizers = c
                    .finalizers
                    .iter()
                    .filter(|f| &***f != FINALIZER)
                    .cloned()
                    .collect();
            }
            let c = self.put(c, rv());
            out.push(WatchEvent::DraUpsert(DraObject::ResourceClaim(c)));
        }
        out
    }
}

mod outcomes;
pub use outcomes::{DraViolation, ResourceClaimOutcome};

/// Devices with binding conditions wait for a driver to report them attached; the
/// embedded cluster has no such driver yet, so a pod would wait out `bindingTimeout`,
/// be deallocated and retried for ever. Refused there (the Kubernetes backend, where
/// drivers report, takes them).
pub fn refuse_unattended(s: &ResourceSlice) -> Result<(), FieldError> {
    match s
        .devices
        .iter()
        .position(|d| d.binding.as_ref().is_some_and(|b| !b.conditions.is_empty()))
    {
        Some(i) => Err(FieldError {
            field: format!("spec.devices[{i}].bindingConditions"),
            message: "not supported yet in the embedded cluster: no driver there reports devices' binding conditions, so the pod would wait out bindingTimeout and be retried for ever; on a real cluster (the kubernetes backend) they work".into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_fit_as_upstream_cuts_them() {
        assert_eq!(generate_name("p", "gpu"), "p-gpu-");
        let long = generate_name(&"a".repeat(60), &"b".repeat(20));
        assert!(long.len() <= 59, "{long}");
        assert!(long.starts_with("aaaa") && long.ends_with("b-"));
    }

    /// The embedded cluster has no driver to report binding conditions: a slice whose
    /// device names them is refused there, naming the field; others load.
    #[test]
    fn slices_with_binding_conditions_are_refused_in_the_embedded_cluster() {
        let slice = |device: serde_json::Value| {
            let v = serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "p", "generation": 1,
                         "resourceSliceCount": 1}, "devices": [{"name": "a"}, device]}});
            resource_slice_from_k8s(&serde_json::from_value(v).unwrap()).unwrap()
        };
        assert!(refuse_unattended(&slice(serde_json::json!({"name": "b"}))).is_ok());
        let e = refuse_unattended(&slice(serde_json::json!({"name": "b",
            "bindingConditions": ["Attached"], "bindingFailureConditions": ["Failed"]})))
        .unwrap_err();
        assert_eq!(e.field, "spec.devices[1].bindingConditions");
        assert!(
            e.message
                .starts_with("not supported yet in the embedded cluster"),
            "{}",
            e.message
        );
    }
}
