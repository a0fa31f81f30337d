//! The allocator's input per claim ([`ClaimData`]) and its answer per claim
//! ([`ClaimAllocation`]), turned into the allocation result a claim's status carries:
//! results in upstream's order, share IDs for devices allowing multiple allocations,
//! configs, and the node selector of upstream `createNodeSelector`.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::dra::{
    AllocatedConfig, Allocation, AllocationNodes, ConfigSource, DeviceClass, DeviceResult,
    ExactRequest, NodeSelection, NodeSelectorRef, RequestKind, ResourceClaim, ResourceSlice,
};

/// One request or subrequest as the search sees it.
#[derive(Debug, Clone)]
pub struct RequestData {
    /// The name in results: `request` or `request/subrequest`.
    pub result_name: Arc<str>,
    pub base: Arc<str>,
    pub sub: Option<Arc<str>>,
    pub request: ExactRequest,
    pub class: Arc<DeviceClass>,
}

/// A claim to allocate: its requests, each with its alternatives (one, or the
/// subrequests of `firstAvailable` in order).
#[derive(Debug, Clone)]
pub struct ClaimData {
    pub claim: Arc<ResourceClaim>,
    pub requests: Vec<Vec<RequestData>>,
}

/// What one share consumes per capacity (qualified names; nano units).
pub(super) type Consumed = Arc<[(Arc<str>, i128)]>;

/// One claim's allocation on the node, and which subrequest each request used.
#[derive(Debug, Clone)]
pub struct ClaimAllocation {
    /// The devices picked, in order: the allocation is built from them only for the
    /// node Reserve takes (Filter finds one per feasible node).
    /// Inline: Filter keeps one per feasible node, and most claims take one device.
    pub(super) picks: smallvec::SmallVec<[Pick; 1]>,
    /// Per request: the index of the chosen alternative.
    pub chosen: smallvec::SmallVec<[usize; 2]>,
}

/// One device picked for (request, alternative).
#[derive(Debug, Clone)]
pub(super) struct Pick {
    pub(super) slice: Arc<ResourceSlice>,
    pub(super) device: usize,
    pub(super) request: usize,
    pub(super) alternative: usize,
    /// A share of a device allowing multiple allocations: what it consumes per
    /// capacity (qualified names).
    pub(super) consumed: Option<Consumed>,
}

impl ClaimAllocation {
    /// The allocation result on `node` (upstream's order of results and configs; the
    /// node selector of `createNodeSelector`: the node itself when a device is local
    /// to it or `bindsToNode`).
    pub fn allocation(&self, cd: &ClaimData, node: &Arc<str>) -> Allocation {
        let mut devices = Vec::with_capacity(self.picks.len());
        let mut local: Option<Arc<str>> = None;
        let mut selectors: Vec<Arc<NodeSelectorRef>> = Vec::new();
        for p in &self.picks {
            let rd = &cd.requests[p.request][p.alternative];
            let Some(d) = p.slice.devices.get(p.device) else {
                continue;
            };
            let share = p.consumed.as_ref().map(|c| {
                Arc::new(crate::model::dra::Share {
                    id: share_id(
                        &cd.claim.uid,
                        &rd.result_name,
                        &p.slice.driver,
                        &p.slice.pool.name,
                        &d.name,
                        devices.len(),
                    )
                    .into(),
                    consumed: c
                        .iter()
                        .map(|(q, v)| {
                            let raw = d
                                .capacity_info
                                .get(q)
                                .map_or_else(|| q.clone(), |i| i.raw_name.clone());
                            (raw, *v)
                        })
                        .collect(),
                })
            });
            devices.push(DeviceResult {
                share,
                request: rd.result_name.clone(),
                driver: p.slice.driver.clone(),
                pool: p.slice.pool.name.clone(),
                device: d.name.clone(),
                admin_access: rd.request.admin_access,
                binding: d.binding.clone(),
            });
            if d.binds_to_node {
                local.get_or_insert_with(|| node.clone());
            }
            let sel = match (&p.slice.nodes, &d.nodes) {
                (NodeSelection::PerDevice, Some(n)) => n,
                (n, _) => n,
            };
            match sel {
                NodeSelection::NodeName(n) => {
                    local.get_or_insert_with(|| n.clone());
                }
                NodeSelection::Selector(s) => {
                    if !selectors.contains(s) {
                        selectors.push(s.clone());
                    }
                }
                NodeSelection::AllNodes | NodeSelection::PerDevice => {}
            }
        }
        let node_selector = match (local, selectors.is_empty()) {
            (Some(n), _) => Some(AllocationNodes::Node(n)),
            (None, false) => Some(AllocationNodes::All(selectors)),
            (None, true) => None,
        };
        Allocation {
            devices,
            config: allocation_config(cd, &self.chosen),
            node_selector,
            timestamp: None,
        }
    }
}

/// A share ID: a version-4-shaped UUID derived from what it identifies, so runs
/// repeat (upstream draws a random one).
fn share_id(
    claim_uid: &str,
    request: &str,
    driver: &str,
    pool: &str,
    device: &str,
    i: usize,
) -> String {
    use std::hash::{Hash, Hasher};
    let mut words = [0u64; 2];
    for (salt, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (salt, claim_uid, request, driver, pool, device, i).hash(&mut h);
        *w = h.finish();
    }
    let b = ((words[0] as u128) << 64) | words[1] as u128;
    let b = (b & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let x = format!("{b:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &x[..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..]
    )
}

/// The configuration an allocation carries (upstream's order): each used class's
/// configs once, for the requests that used it; then the claim's configs, once per
/// request they name (upstream appends a config naming two requests twice).
fn allocation_config(cd: &ClaimData, chosen: &[usize]) -> Vec<AllocatedConfig> {
    let mut out: Vec<AllocatedConfig> = Vec::new();
    let mut class_ranges: FxHashMap<Arc<str>, (usize, usize)> = FxHashMap::default();
    for (ri, alts) in cd.requests.iter().enumerate() {
        let rd = &alts[chosen[ri]];
        if let Some(&(start, end)) = class_ranges.get(&rd.class.name) {
            for c in &mut out[start..end] {
                let mut r = c.requests.to_vec();
                r.push(rd.result_name.clone());
                c.requests = r.into();
            }
            continue;
        }
        let start = out.len();
        for c in rd.class.config.iter() {
            out.push(AllocatedConfig {
                source: ConfigSource::FromClass,
                requests: Box::new([rd.result_name.clone()]),
                opaque: c.clone(),
            });
        }
        class_ranges.insert(rd.class.name.clone(), (start, out.len()));
    }
    for c in cd.claim.spec.config.iter() {
        let entry = || AllocatedConfig {
            source: ConfigSource::FromClaim,
            requests: c.requests.clone(),
            opaque: c.opaque.clone(),
        };
        if c.requests.is_empty() {
            out.push(entry());
            continue;
        }
        for (ri, req) in cd.claim.spec.requests.iter().enumerate() {
            if c.requests.contains(&req.name) {
                out.push(entry());
                continue;
            }
            if let RequestKind::FirstAvailable(_) = req.kind {
                let rd = &cd.requests[ri][chosen[ri]];
                if c.requests.contains(&rd.result_name) {
                    out.push(entry());
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn share_ids_are_lowercase_v4_uuids_that_repeat() {
        let a = super::share_id("uid", "nic", "d", "p", "nic-0", 0);
        assert_eq!(a, super::share_id("uid", "nic", "d", "p", "nic-0", 0));
        assert_ne!(a, super::share_id("uid2", "nic", "d", "p", "nic-0", 0));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{a}"
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        assert!(a
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}
