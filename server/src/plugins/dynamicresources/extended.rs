//! Extended resources backed by DRA (upstream `extendeddynamicresources.go`, KEP-5004,
//! beta and on in v1.36): a pod asking for `example.com/gpu: 1` on a node whose
//! allocatable has no such resource is served by the DeviceClass that names it
//! (`extendedResourceName`, or the implicit `deviceclass.resource.kubernetes.io/<class>`).
//!
//! * PreFilter finds the claim an earlier cycle made for the pod, or makes one in
//!   memory (named `<extended-resources>`, a temporary UID) with no requests yet.
//! * Filter works out, per node, which of the pod's extended resources the node's
//!   allocatable lacks and gives the claim one `ExactCount` request per container and
//!   resource (`container-<i>-request-<j>`), allocated with the pod's other claims.
//! * PreBind creates the claim (`<pod>-extended-resources-…`, owned by the pod),
//!   writes its allocation and reservation, and records in the pod's
//!   `status.extendedResourceClaimStatus` which request serves which container.
//! * A claim left from an earlier cycle is stale: Filter rejects every node and
//!   PostFilter deletes it, so the next attempt starts anew (upstream's brute force).

use std::sync::Arc;
use std::time::Duration;

use crate::framework::dra::{DraState, DraStore};
use crate::framework::{NodeInfo, Status};
use crate::model::dra::{
    AllocationMode, ClaimSpec, ContainerExtended, ControllerRef, DeviceClass, DeviceRequest,
    ExactRequest, RequestKind, RequestMapping, ResourceClaim, ANN_EXTENDED_RESOURCE_CLAIM,
};
use crate::model::labels::Labels;
use crate::model::Pod;

use super::allocation::{ClaimData, RequestData};
use super::allocator::Prepared;

/// The in-memory claim's name: not a valid object name, so it never clashes with a
/// real claim (upstream `specialClaimInMemName`).
pub const SPECIAL_CLAIM_NAME: &str = "<extended-resources>";
pub const ERR_STALE_CLAIM: &str = "cannot schedule extended resource claim";
pub const ERR_CANNOT_FIT: &str = "cannot fit resource";

/// One extended resource a DeviceClass serves, as the pod's containers ask for it.
struct Served {
    class: Arc<DeviceClass>,
    /// Device requests: (name, count).
    requests: Vec<(Arc<str>, i64)>,
    mappings: Vec<RequestMapping>,
}

/// The pod's DRA-backed extended resources, worked out at PreFilter.
pub(super) struct Extended {
    /// In memory (`<extended-resources>`), or left by an earlier cycle.
    pub claim: Arc<ResourceClaim>,
    /// Every extended resource the pod asks for: its name and, when a class serves
    /// it, its index in `served`.
    asked: Vec<(Arc<str>, Option<usize>)>,
    served: Vec<Served>,
    /// The pod's other claims plus this one asking for every served resource: what a
    /// node without a device plugin for them (the usual case) allocates.
    full: Option<(Arc<Prepared>, Arc<[RequestMapping]>)>,
}

/// What a node needs of the extended-resource claim.
pub(super) enum ForNode {
    /// Nothing: device plugins serve every extended resource the pod asks for.
    Nothing,
    /// The pod's claims with the extended-resource claim as the node needs it, and
    /// which request serves which container.
    Allocate(Arc<Prepared>, Arc<[RequestMapping]>),
}

impl Extended {
    /// Upstream `preFilterExtendedResources`: `None` when no class serves any extended
    /// resource the pod asks for.
    pub fn for_pod(pod: &Pod, st: &DraState) -> Option<Extended> {
        if !st.has_extended() {
            return None;
        }
        let containers = pod.spec.extended_containers.as_deref()?;
        let mut asked: Vec<(Arc<str>, Option<usize>)> = Vec::new();
        let mut served = Vec::new();
        let mut names: Vec<(Arc<str>, i64)> = pod
            .spec
            .requests
            .scalar
            .iter()
            .filter(|(n, q)| *q != 0 && crate::model::resource::is_dra_extended_resource_name(n))
            .map(|(n, q)| (n.clone(), q))
            .collect();
        names.sort();
        for (name, _) in names {
            match st.extended_class(&name) {
                Some(class) => {
                    asked.push((name.clone(), Some(served.len())));
                    served.push(requests_and_mappings(containers, &name, class.clone()));
                }
                None => asked.push((name, None)),
            }
        }
        if served.is_empty() {
            return None;
        }
        let claim = match st
            .extended_claim_of(&pod.uid)
            .filter(|c| c.owner.as_ref().is_some_and(|o| *o.name == *pod.name))
        {
            Some(c) => c.clone(),
            None => Arc::new(in_memory_claim(pod)),
        };
        Some(Extended {
            claim,
            asked,
            served,
            full: None,
        })
    }

    /// Whether the claim was made by an earlier cycle (it exists in the cluster).
    pub fn is_stale(&self) -> bool {
        &*self.claim.name != SPECIAL_CLAIM_NAME
    }

    /// Builds the usual node's allocation input once (PreFilter), from the pod's
    /// other claims (`base`, or none).
    pub fn prepare_full(
        &mut self,
        base: Option<&Prepared>,
        st: &DraState,
        timeout: Option<Duration>,
    ) {
        let all: Vec<usize> = (0..self.served.len()).collect();
        self.full = Some(self.prepare(&all, base, st, timeout));
    }

    fn prepare(
        &self,
        which: &[usize],
        base: Option<&Prepared>,
        st: &DraState,
        timeout: Option<Duration>,
    ) -> (Arc<Prepared>, Arc<[RequestMapping]>) {
        let mut reqs: Vec<(Arc<str>, i64, Arc<DeviceClass>)> = Vec::new();
        let mut mappings = Vec::new();
        for &i in which {
            let s = &self.served[i];
            reqs.extend(
                s.requests
                    .iter()
                    .map(|(n, c)| (n.clone(), *c, s.class.clone())),
            );
            mappings.extend(s.mappings.iter().cloned());
        }
        reqs.sort_by(|a, b| a.0.cmp(&b.0));
        let raw_requests: Vec<serde_json::Value> = reqs
            .iter()
            .map(|(n, c, class)| {
                serde_json::json!({"name": &**n, "exactly": {
                    "deviceClassName": &*class.name, "allocationMode": "ExactCount", "count": c}})
            })
            .collect();
        let exact = |class: &Arc<DeviceClass>, count: i64| ExactRequest {
            device_class_name: class.name.clone(),
            selectors: Box::default(),
            mode: AllocationMode::ExactCount(u32::try_from(count).unwrap_or(u32::MAX)),
            admin_access: false,
            tolerations: Box::default(),
            capacity_requests: Box::default(),
        };
        let mut claim = (*self.claim).clone();
        claim.spec = Arc::new(ClaimSpec {
            requests: reqs
                .iter()
                .map(|(n, c, class)| DeviceRequest {
                    name: n.clone(),
                    kind: RequestKind::Exactly(exact(class, *c)),
                })
                .collect(),
            constraints: Box::default(),
            config: Box::default(),
            raw: Arc::new(serde_json::json!({"devices": {"requests": raw_requests}})),
        });
        let data = ClaimData {
            claim: Arc::new(claim),
            requests: reqs
                .iter()
                .map(|(n, c, class)| {
                    vec![RequestData {
                        result_name: n.clone(),
                        base: n.clone(),
                        sub: None,
                        request: exact(class, *c),
                        class: class.clone(),
                    }]
                })
                .collect(),
        };
        let mut claims = base.map(|b| b.claims.clone()).unwrap_or_default();
        claims.push(data);
        let prep = Prepared {
            claims,
            allocated: match base {
                Some(b) => b.allocated.clone(),
                None => st.allocated_devices(),
            },
            shared: match base {
                Some(b) => b.shared.clone(),
                None => st.shared_devices(),
            },
            index: match base {
                Some(b) => b.index.clone(),
                None => st.slice_index(),
            },
            timeout,
        };
        (Arc::new(prep), mappings.into())
    }

    /// Upstream `filterExtendedResources`: what `node` needs, or why it cannot serve
    /// the pod. A node with a device plugin for only some of the resources gets its
    /// own variant of the claim, built here (rare).
    pub fn for_node(
        &self,
        node: &NodeInfo,
        base: Option<&Prepared>,
        dra: &DraStore,
        timeout: Option<Duration>,
    ) -> Result<ForNode, Status> {
        if self.is_stale() && !self.claim.spec.requests.is_empty() {
            return Err(Status::unresolvable(ERR_STALE_CLAIM));
        }
        let alloc = &node.allocatable.scalar;
        let mut which: smallvec::SmallVec<[usize; 4]> = smallvec::SmallVec::new();
        for (name, served) in &self.asked {
            match served {
                Some(i) if alloc.get(name) == 0 => which.push(*i),
                _ if !alloc.contains(name) => return Err(Status::unresolvable(ERR_CANNOT_FIT)),
                _ => {}
            }
        }
        if which.is_empty() || self.claim.allocation.is_some() {
            return Ok(ForNode::Nothing);
        }
        if which.len() == self.served.len() {
            if let Some((p, m)) = &self.full {
                return Ok(ForNode::Allocate(p.clone(), m.clone()));
            }
        }
        let (p, m) = self.prepare(&which, base, &dra.read(), timeout);
        Ok(ForNode::Allocate(p, m))
    }
}

/// The claim as upstream makes it in memory: owned by the pod, annotated, no requests.
fn in_memory_claim(pod: &Pod) -> ResourceClaim {
    ResourceClaim {
        namespace: pod.namespace.clone(),
        name: SPECIAL_CLAIM_NAME.into(),
        // A temporary UID for the in-flight bookkeeping until PreBind creates it.
        uid: format!("{}/extended-resources", pod.uid).into(),
        resource_version: None,
        deleting: false,
        finalizers: Box::default(),
        annotations: Labels::new([(ANN_EXTENDED_RESOURCE_CLAIM, "true")]),
        owner: Some(ControllerRef {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        }),
        spec: Arc::new(ClaimSpec {
            requests: Box::default(),
            constraints: Box::default(),
            config: Box::default(),
            raw: Arc::new(serde_json::json!({})),
        }),
        allocation: None,
        reserved_for: Vec::new(),
        devices: Vec::new(),
    }
}

/// Upstream `createRequestsAndMappings` for one resource: a request per long-lived
/// container (sidecars and app containers) asking for it; short-lived init
/// containers reuse the requests of containers after them and share one request for
/// what is still missing (the largest such need).
fn requests_and_mappings(
    containers: &[ContainerExtended],
    resource: &Arc<str>,
    class: Arc<DeviceClass>,
) -> Served {
    let asks = |c: &ContainerExtended| {
        c.extended
            .iter()
            .find(|(n, _)| n == resource)
            .map(|(_, q)| *q)
            .filter(|q| *q > 0)
    };
    let name_of = |i: usize, c: &ContainerExtended| -> Arc<str> {
        let j = c.keys.iter().position(|k| k == resource).unwrap_or(0);
        format!("container-{i}-request-{j}").into()
    };
    let mapping = |c: &ContainerExtended, request: &Arc<str>| RequestMapping {
        container: c.name.clone(),
        resource: resource.clone(),
        request: request.clone(),
    };
    // Long-lived containers' requests, by container index.
    let mut long: Vec<Option<(Arc<str>, i64)>> = vec![None; containers.len()];
    let mut long_mappings = Vec::new();
    for (i, c) in containers
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.short_lived)
    {
        if let Some(q) = asks(c) {
            let n = name_of(i, c);
            long_mappings.push(mapping(c, &n));
            long[i] = Some((n, q));
        }
    }
    let mut short_max: Option<(Arc<str>, i64)> = None;
    let mut short_names: Vec<Arc<str>> = Vec::new();
    let mut short_mappings = Vec::new();
    for (i, c) in containers.iter().enumerate().filter(|(_, c)| c.short_lived) {
        let Some(q) = asks(c) else {
            continue;
        };
        let mut sum = 0;
        let mut covered = false;
        for (n, count) in long[i..].iter().flatten() {
            sum += count;
            short_mappings.push(mapping(c, n));
            if sum >= q {
                covered = true;
                break;
            }
        }
        if covered {
            continue;
        }
        let n = name_of(i, c);
        short_mappings.push(mapping(c, &n));
        short_names.push(n.clone());
        if short_max.as_ref().is_none_or(|(_, m)| *m < q - sum) {
            short_max = Some((n, q - sum));
        }
    }
    if let Some((max, _)) = &short_max {
        if short_names.len() > 1 {
            for m in &mut short_mappings {
                if short_names.contains(&m.request) && m.request != *max {
                    m.request = max.clone();
                }
            }
        }
    }
    let mut requests: Vec<(Arc<str>, i64)> = short_max.into_iter().collect();
    requests.extend(long.into_iter().flatten());
    long_mappings.extend(short_mappings);
    Served {
        class,
        requests,
        mappings: long_mappings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, short: bool, keys: &[&str], ext: &[(&str, i64)]) -> ContainerExtended {
        ContainerExtended {
            name: name.into(),
            short_lived: short,
            keys: keys.iter().map(|k| Arc::from(*k)).collect(),
            extended: ext.iter().map(|(k, q)| (Arc::from(*k), *q)).collect(),
        }
    }

    /// Requests as (name, count), and mappings as (container, request).
    type Shown<'a> = (Vec<(&'a str, i64)>, Vec<(&'a str, &'a str)>);

    fn shown(s: &Served) -> Shown<'_> {
        (
            s.requests.iter().map(|(n, q)| (&**n, *q)).collect(),
            s.mappings
                .iter()
                .map(|m| (&*m.container, &*m.request))
                .collect(),
        )
    }

    fn class() -> Arc<DeviceClass> {
        Arc::new(DeviceClass {
            name: "gpu".into(),
            selectors: Box::default(),
            config: Box::default(),
            extended_resource_name: Some("example.com/gpu".into()),
            creation_timestamp: None,
            resource_version: None,
        })
    }

    #[test]
    fn one_request_per_container_named_by_position() {
        let cs = [
            c(
                "a",
                false,
                &["cpu", "example.com/gpu"],
                &[("example.com/gpu", 2)],
            ),
            c("b", false, &["example.com/gpu"], &[("example.com/gpu", 1)]),
        ];
        let s = requests_and_mappings(&cs, &"example.com/gpu".into(), class());
        let (r, m) = shown(&s);
        assert_eq!(
            r,
            [("container-0-request-1", 2), ("container-1-request-0", 1)]
        );
        assert_eq!(
            m,
            [
                ("a", "container-0-request-1"),
                ("b", "container-1-request-0")
            ]
        );
    }

    #[test]
    fn init_containers_reuse_later_requests_and_share_the_largest_gap() {
        // init0 needs 3: reuses app's 1, still misses 2; init1 needs 2: reuses app's 1,
        // misses 1. One request for the larger gap serves both.
        let cs = [
            c(
                "init0",
                true,
                &["example.com/gpu"],
                &[("example.com/gpu", 3)],
            ),
            c(
                "init1",
                true,
                &["example.com/gpu"],
                &[("example.com/gpu", 2)],
            ),
            c(
                "app",
                false,
                &["example.com/gpu"],
                &[("example.com/gpu", 1)],
            ),
        ];
        let s = requests_and_mappings(&cs, &"example.com/gpu".into(), class());
        let (r, m) = shown(&s);
        assert_eq!(
            r,
            [("container-0-request-0", 2), ("container-2-request-0", 1)]
        );
        assert_eq!(
            m,
            [
                ("app", "container-2-request-0"),
                ("init0", "container-2-request-0"),
                ("init0", "container-0-request-0"),
                ("init1", "container-2-request-0"),
                ("init1", "container-0-request-0"),
            ]
        );
    }

    #[test]
    fn an_init_container_covered_by_later_ones_needs_no_request() {
        let cs = [
            c(
                "init",
                true,
                &["example.com/gpu"],
                &[("example.com/gpu", 1)],
            ),
            c(
                "app",
                false,
                &["example.com/gpu"],
                &[("example.com/gpu", 2)],
            ),
        ];
        let s = requests_and_mappings(&cs, &"example.com/gpu".into(), class());
        assert_eq!(s.requests.len(), 1);
        assert_eq!(s.mappings.len(), 2);
        assert_eq!(&*s.mappings[1].request, "container-1-request-0");
    }
}
