//! What the embedded cluster's DRA objects say after a run: each claim's outcome for
//! the report, and the invariant checks on devices (none allocated twice, shares
//! within capacity, every bound pod's claims served on its node).

use super::*;

/// What became of one ResourceClaim, for the simulation report.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ResourceClaimOutcome {
    /// `namespace/name`.
    pub claim: String,
    /// For a claim made from a pod's template: `namespace/pod:entry`; for the claim
    /// serving a pod's DRA-backed extended resources: `namespace/pod:<extended-resources>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_claim: Option<String>,
    /// `request: driver/pool/device` per allocated device (empty: not allocated).
    pub devices: Vec<String>,
    /// The pods (`namespace/name`) it is reserved for.
    pub reserved_for: Vec<String>,
}

/// A DRA rule broken by the end state: (pod, node, rule, detail).
pub type DraViolation = (Option<String>, Option<String>, &'static str, String);

impl Dra {
    pub fn outcomes(&self) -> Vec<ResourceClaimOutcome> {
        self.claims
            .values()
            .map(|c| ResourceClaimOutcome {
                claim: c.key(),
                pod_claim: match (&c.owner, c.annotations.get(ANN_POD_CLAIM_NAME)) {
                    (Some(o), Some(entry)) => Some(format!("{}/{}:{entry}", c.namespace, o.name)),
                    // The claim serving a pod's DRA-backed extended resources.
                    (Some(o), None) if c.is_extended_resource_claim() => {
                        Some(format!("{}/{}:<extended-resources>", c.namespace, o.name))
                    }
                    _ => None,
                },
                devices: c
                    .allocation
                    .iter()
                    .flat_map(|a| a.devices.iter())
                    .map(|d| format!("{}: {}/{}/{}", d.request, d.driver, d.pool, d.device))
                    .collect(),
                reserved_for: c
                    .reserved_for
                    .iter()
                    .map(|r| format!("{}/{}", c.namespace, r.name))
                    .collect(),
            })
            .collect()
    }

    /// The newest-generation device of a pool, with its slice.
    fn device(
        &self,
        driver: &str,
        pool: &str,
        name: &str,
    ) -> Option<(&Arc<ResourceSlice>, &crate::model::dra::Device)> {
        let newest = self
            .slices
            .values()
            .filter(|s| &*s.driver == driver && &*s.pool.name == pool)
            .map(|s| s.pool.generation)
            .max()?;
        self.slices
            .values()
            .filter(|s| {
                &*s.driver == driver && &*s.pool.name == pool && s.pool.generation == newest
            })
            .find_map(|s| s.devices.iter().find(|d| &*d.name == name).map(|d| (s, d)))
    }

    /// Recomputed from the objects, not the scheduler's caches: no device allocated
    /// twice (admin access aside); every allocated device exists and passes its
    /// class's and request's selectors; every pod the scheduler bound has its claims
    /// allocated, reserved for it and reachable from its node.
    pub fn violations(&self, bound: &[(Arc<Pod>, Arc<crate::model::Node>)]) -> Vec<DraViolation> {
        use crate::model::dra::{NodeSelection, RequestKind};
        let mut out = Vec::new();
        let mut owner: BTreeMap<DeviceId, String> = BTreeMap::new();
        // Shares of devices allowing multiple allocations: consumed per capacity.
        let mut shared: BTreeMap<DeviceId, BTreeMap<Arc<str>, i128>> = BTreeMap::new();
        for c in self.claims.values() {
            let Some(a) = &c.allocation else { continue };
            for d in &a.devices {
                if let (Some(sh), false) = (&d.share, d.admin_access) {
                    let e = shared.entry(d.id()).or_default();
                    for (k, v) in &sh.consumed {
                        *e.entry(crate::model::dra::qualify(k, &d.driver))
                            .or_insert(0) += v;
                    }
                } else if !d.admin_access {
                    if let Some(other) = owner.insert(d.id(), c.key()) {
                        if other != c.key() {
                            out.push((
                                None,
                                None,
                                "device allocated twice",
                                format!(
                                    "{}/{}/{} is allocated to claims {other} and {}",
                                    d.driver,
                                    d.pool,
                                    d.device,
                                    c.key()
                                ),
                            ));
                        }
                    }
                }
                let Some((_, dev)) = self.device(&d.driver, &d.pool, &d.device) else {
                    out.push((
                        None,
                        None,
                        "allocated device missing",
                        format!(
                            "claim {}: device {}/{}/{} is in no ResourceSlice",
                            c.key(),
                            d.driver,
                            d.pool,
                            d.device
                        ),
                    ));
                    continue;
                };
                let (base, sub) = match d.request.split_once('/') {
                    Some((b, s)) => (b, Some(s)),
                    None => (&*d.request, None),
                };
                let req = c
                    .spec
                    .requests
                    .iter()
                    .find(|r| &*r.name == base)
                    .and_then(|r| match (&r.kind, sub) {
                        (RequestKind::Exactly(e), None) => Some(e),
                        (RequestKind::FirstAvailable(subs), Some(s)) => {
                            subs.iter().find(|(n, _)| &**n == s).map(|(_, e)| e)
                        }
                        _ => None,
                    });
                let Some(req) = req else {
                    out.push((
                        None,
                        None,
                        "allocated device without request",
                        format!(
                            "claim {}: result for unknown request {}",
                            c.key(),
                            d.request
                        ),
                    ));
                    continue;
                };
                let class_selectors = self
                    .classes
                    .get(&req.device_class_name)
                    .map(|k| k.selectors.to_vec())
                    .unwrap_or_default();
                let passes = class_selectors.iter().chain(req.selectors.iter()).all(|p| {
                    matches!(
                        p.eval_device(&dev.cel, switchyard_cel::DEFAULT_COST_LIMIT),
                        Ok(true)
                    )
                });
                if !passes {
                    out.push((
                        None,
                        None,
                        "allocated device does not match",
                        format!(
                            "claim {}: device {}/{}/{} fails the selectors of request {}",
                            c.key(),
                            d.driver,
                            d.pool,
                            d.device,
                            d.request
                        ),
                    ));
                }
            }
        }
        for (id, consumed) in &shared {
            let Some((_, dev)) = self.device(&id.driver, &id.pool, &id.device) else {
                continue;
            };
            if !dev.allow_multiple_allocations {
                out.push((
                    None,
                    None,
                    "device shared",
                    format!(
                        "{}/{}/{} is shared but does not allow multiple allocations",
                        id.driver, id.pool, id.device
                    ),
                ));
                continue;
            }
            for (k, v) in consumed {
                let cap = dev.capacity.get(k).map_or(0, |q| q.nanos());
                if *v > cap {
                    out.push((
                        None,
                        None,
                        "device capacity exceeded",
                        format!(
                            "{}/{}/{}: shares consume {} of {k}, capacity {}",
                            id.driver,
                            id.pool,
                            id.device,
                            switchyard_cel::Quantity::from_nanos(*v),
                            switchyard_cel::Quantity::from_nanos(cap)
                        ),
                    ));
                }
            }
        }
        for (pod, node) in bound {
            let mut names: Vec<Arc<str>> = Vec::new();
            for pc in pod.spec.resource_claims.iter() {
                match pod.spec.claim_name(pc) {
                    ClaimName::Named(n, _) => names.push(n),
                    ClaimName::NotNeeded => {}
                    ClaimName::NotCreated => out.push((
                        Some(pod.key()),
                        Some(node.name.to_string()),
                        "claim missing",
                        format!("claim entry {} has no claim", pc.name),
                    )),
                }
            }
            match &pod.spec.extended_resource_claim_status {
                Some(e) => names.push(e.claim_name.clone()),
                None => {
                    if let Some(r) = self.unserved_extended_resource(pod, node) {
                        out.push((
                            Some(pod.key()),
                            Some(node.name.to_string()),
                            "extended resource not served",
                            format!("{r}: the node's allocatable lacks it and no claim of the pod serves it"),
                        ));
                    }
                }
            }
            for name in names {
                let Some(c) = self.claims.get(&key(&pod.namespace, &name)) else {
                    out.push((
                        Some(pod.key()),
                        Some(node.name.to_string()),
                        "claim missing",
                        format!("claim {name} does not exist"),
                    ));
                    continue;
                };
                let Some(a) = &c.allocation else {
                    out.push((
                        Some(pod.key()),
                        Some(node.name.to_string()),
                        "claim not allocated",
                        format!("claim {} is not allocated", c.key()),
                    ));
                    continue;
                };
                if !c.is_reserved_for(&pod.uid) {
                    out.push((
                        Some(pod.key()),
                        Some(node.name.to_string()),
                        "claim not reserved",
                        format!("claim {} is not reserved for the pod", c.key()),
                    ));
                }
                for d in &a.devices {
                    let Some((slice, dev)) = self.device(&d.driver, &d.pool, &d.device) else {
                        continue;
                    };
                    let sel = match (&slice.nodes, &dev.nodes) {
                        (NodeSelection::PerDevice, Some(n)) => n,
                        (n, _) => n,
                    };
                    if !sel.matches(&node.name, &node.labels) {
                        out.push((
                            Some(pod.key()),
                            Some(node.name.to_string()),
                            "device not reachable",
                            format!(
                                "claim {}: device {}/{}/{} is not reachable from the node",
                                c.key(),
                                d.driver,
                                d.pool,
                                d.device
                            ),
                        ));
                    }
                }
            }
        }
        out
    }

    /// An extended resource the pod asks for that the node's allocatable lacks and a
    /// DeviceClass serves: DRA must have allocated it.
    fn unserved_extended_resource(&self, pod: &Pod, node: &crate::model::Node) -> Option<Arc<str>> {
        pod.spec
            .requests
            .scalar
            .iter()
            .filter(|(r, q)| *q > 0 && node.allocatable.scalar.get(r) == 0)
            .find(|(r, _)| {
                self.classes.values().any(|c| {
                    c.extended_resource_name.as_deref() == Some(&**r)
                        || r.strip_prefix(crate::model::dra::DEVICE_CLASS_RESOURCE_PREFIX)
                            == Some(&*c.name)
                })
            })
            .map(|(r, _)| r.clone())
    }
}
