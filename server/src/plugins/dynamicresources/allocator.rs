//! The structured allocator (upstream `k8s.io/dynamic-resource-allocation/structured`,
//! the "incubating" variant v1.36 uses by default): for one node, a depth-first search
//! over claims → requests → devices; the first full solution wins.
//!
//! * Pools are gathered per node: the slices reachable from it, newest pool
//!   generation only; a pool whose slices are not all there is incomplete (usable for
//!   `ExactCount`, fatal for `All`), one with duplicate device names invalid.
//! * A candidate passes when it is not in use (admin access: not used by the same
//!   claim), its class's and the request's CEL selectors accept it (memoised per
//!   device and request), its per-device node selection matches, its
//!   `NoSchedule`/`NoExecute` taints are tolerated, its counters fit, and the claim's
//!   constraints still hold.
//! * The `k`-th device of a request is only sought after the `k-1`-th one's position:
//!   combinations, not permutations (the same first solution, found sooner).
//!
//! Errors (a CEL runtime error, an invalid pool, an `All` request over an incomplete
//! pool, the filter timeout) end the search; the plugin turns them into statuses as
//! upstream does.

mod constraints;
mod scratch;

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashMap;

use super::allocation::{ClaimAllocation, ClaimData, Consumed, Pick};
use crate::framework::dra::{DeviceSet, PoolKey, SharedUse, SliceIndex};
use crate::model::dra::{
    AllocationMode, Device, ExactRequest, NodeSelection, ResourceSlice, ALLOCATION_RESULTS_MAX_SIZE,
};
use crate::model::taint::TaintEffect;
use crate::model::Node;

/// One allocation per claim of [`Prepared`], in its order; inline for the usual one
/// claim, as Filter keeps one per feasible node.
pub type Allocations = smallvec::SmallVec<[ClaimAllocation; 1]>;

/// Why the search stopped without an answer for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// Ends the scheduling cycle with an error (upstream `statusError`).
    Fatal(String),
    /// The filter timeout passed.
    Timeout,
}

/// What the allocator needs for one pod, built at PreFilter and shared by the Filter
/// threads.
pub struct Prepared {
    pub claims: Vec<ClaimData>,
    pub allocated: DeviceSet,
    /// Devices allowing multiple allocations already shared, and what they consume.
    pub shared: Arc<FxHashMap<u32, SharedUse>>,
    pub index: Arc<SliceIndex>,
    /// The filter timeout: how long one node's search may take.
    pub timeout: Option<std::time::Duration>,
}

/// A candidate device, in search order.
struct Candidate<'a> {
    slice: &'a ResourceSlice,
    slice_arc: &'a Arc<ResourceSlice>,
    device: &'a Device,
    /// The device's index in its slice.
    index: usize,
    /// The device's number in the store (see `DraState::device_number`).
    number: u32,
    pool: &'a PoolKey,
}

/// Whether every selector accepts the device; a runtime error names the selector
/// (`what(index)`) as upstream's allocator does.
fn all_match(
    device: &Device,
    selectors: &[switchyard_cel::Program],
    what: impl Fn(usize) -> String,
) -> Result<bool, AllocError> {
    for (i, p) in selectors.iter().enumerate() {
        match device.matches(p) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                return Err(AllocError::Fatal(format!(
                    "{}: CEL runtime error: {e}",
                    what(i)
                )))
            }
        }
    }
    Ok(true)
}

use constraints::ConstraintState;
use scratch::Scratch;

/// A device taken: (candidate, request, alternative, what its share consumes).
type Taken = (usize, usize, usize, Option<Consumed>);

/// Remaining counters per (driver, pool, counter set, counter).
type Counters = FxHashMap<(Arc<str>, Arc<str>, Arc<str>, Arc<str>), i128>;

struct Search<'a> {
    prep: &'a Prepared,
    node: &'a Node,
    candidates: Vec<Candidate<'a>>,
    /// Per candidate and alternative (`alt_base[claim][request] + alternative`):
    /// selectors pass (1), fail (0), not asked yet (-1).
    selectable: Vec<i8>,
    alt_base: Vec<Vec<usize>>,
    alts: usize,
    /// Devices taken in this search: (number, claim index).
    allocating: Vec<(u32, usize)>,
    counters: Counters,
    /// Per claim: per constraint: (value fixed, devices counted) or distinct values.
    constraint_state: Vec<Vec<ConstraintState>>,
    /// Per claim: (candidate, request, alternative, what a share consumes).
    results: Vec<Vec<Taken>>,
    chosen: Vec<Vec<usize>>,
    /// Shares of devices allowing multiple allocations taken in this search.
    allocating_shares: Vec<(u32, Consumed)>,
    /// Per device taken (in take order): whether its counters were taken.
    counter_stack: Vec<bool>,
    steps: u64,
    deadline: Option<Instant>,
}

impl Search<'_> {
    fn check_time(&mut self) -> Result<(), AllocError> {
        self.steps += 1;
        if self.steps.is_multiple_of(256) {
            if let Some(d) = self.deadline {
                if Instant::now() >= d {
                    return Err(AllocError::Timeout);
                }
            }
        }
        Ok(())
    }

    fn in_use(&self, n: u32) -> bool {
        self.prep.allocated.contains(n) || self.allocating.iter().any(|(d, _)| *d == n)
    }

    /// In use for a request: a device allowing multiple allocations is never taken
    /// whole; its capacity decides ([`Search::capacity_fits`]).
    fn cand_in_use(&self, cand: usize) -> bool {
        let c = &self.candidates[cand];
        !c.device.allow_multiple_allocations && self.in_use(c.number)
    }

    /// Upstream `CmpRequestOverCapacity`: `None` when a requested capacity is
    /// missing, the policy refuses the amount, or the device's shares would exceed a
    /// capacity; else, for a device allowing multiple allocations, what one more share
    /// consumes of each capacity (`Some(None)`: taken whole, nothing to record).
    fn capacity_fits(&self, cand: usize, req: &ExactRequest) -> Option<Option<Consumed>> {
        let c = &self.candidates[cand];
        let d = c.device;
        if req.capacity_requests.is_empty() && !d.allow_multiple_allocations {
            return Some(None);
        }
        let driver = &c.slice.driver;
        let requested: Vec<(Arc<str>, i128)> = req
            .capacity_requests
            .iter()
            .map(|(k, v)| (crate::model::dra::qualify(k, driver), *v))
            .collect();
        if requested.iter().any(|(k, _)| !d.capacity.contains_key(k)) {
            return None;
        }
        let current = self.prep.shared.get(&c.number);
        let mut out = Vec::with_capacity(d.capacity.len());
        for (name, cap) in &d.capacity {
            let cap = cap.nanos();
            let want = requested.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
            let info = d.capacity_info.get(name);
            let consumed = match info {
                Some(i) => i.consumed(want, cap),
                None => want.unwrap_or(cap),
            };
            if info.is_some_and(|i| i.violates(consumed)) {
                return None;
            }
            let mut sum = consumed;
            if d.allow_multiple_allocations {
                sum += current
                    .and_then(|u| u.consumed.get(name))
                    .copied()
                    .unwrap_or(0);
                for (n, taken) in &self.allocating_shares {
                    if *n == c.number {
                        sum += taken.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
                    }
                }
            }
            if sum > cap {
                return None;
            }
            out.push((name.clone(), consumed));
        }
        Some(d.allow_multiple_allocations.then(|| out.into()))
    }

    /// Whether a device allowing multiple allocations already has a share (its
    /// counters were taken by the first).
    fn shared_already(&self, cand: usize) -> bool {
        let n = self.candidates[cand].number;
        self.prep.shared.contains_key(&n) || self.allocating_shares.iter().any(|(d, _)| *d == n)
    }

    fn selectable(
        &mut self,
        cand: usize,
        ci: usize,
        ri: usize,
        ai: usize,
    ) -> Result<bool, AllocError> {
        let slot = cand * self.alts + self.alt_base[ci][ri] + ai;
        match self.selectable[slot] {
            0 => return Ok(false),
            1 => return Ok(true),
            _ => {}
        }
        let c = &self.candidates[cand];
        let rd = &self.prep.claims[ci].requests[ri][ai];
        let claim = &self.prep.claims[ci].claim;
        let mut ok = all_match(c.device, &rd.class.selectors, |i| {
            format!("class {}: selector #{i}", rd.class.name)
        })?;
        if ok {
            ok = all_match(c.device, &rd.request.selectors, |i| {
                format!("claim {}: selector #{i}", claim.key())
            })?;
        }
        if ok {
            if let (NodeSelection::PerDevice, Some(n)) = (&c.slice.nodes, &c.device.nodes) {
                ok = n.matches(&self.node.name, &self.node.labels);
            }
        }
        self.selectable[slot] = i8::from(ok);
        Ok(ok)
    }

    fn taint_blocks(device: &Device, req: &ExactRequest) -> bool {
        device.taints.iter().any(|t| {
            matches!(
                t.effect,
                Some(TaintEffect::NoSchedule | TaintEffect::NoExecute)
            ) && !req.tolerations.iter().any(|tol| tol.tolerates(t))
        })
    }

    /// Takes the counters the device consumes; false (nothing taken) if they do not fit.
    fn take_counters(&mut self, cand: usize) -> bool {
        let c = &self.candidates[cand];
        if c.device.consumes_counters.is_empty() {
            return true;
        }
        let mut taken = Vec::new();
        let mut fits = true;
        'sets: for cc in c.device.consumes_counters.iter() {
            let set = &cc.counter_set;
            for (name, q) in &cc.counters {
                let key = (
                    c.pool.0.clone(),
                    c.pool.1.clone(),
                    set.clone(),
                    name.clone(),
                );
                let Some(left) = self.counters.get_mut(&key) else {
                    fits = false;
                    break 'sets;
                };
                *left -= q.nanos();
                let negative = *left < 0;
                taken.push((key, q.nanos()));
                if negative {
                    fits = false;
                    break 'sets;
                }
            }
        }
        if !fits {
            for (key, q) in taken {
                if let Some(left) = self.counters.get_mut(&key) {
                    *left += q;
                }
            }
        }
        fits
    }

    fn give_counters(&mut self, cand: usize) {
        let c = &self.candidates[cand];
        for cc in c.device.consumes_counters.iter() {
            let set = &cc.counter_set;
            for (name, q) in &cc.counters {
                let key = (
                    c.pool.0.clone(),
                    c.pool.1.clone(),
                    set.clone(),
                    name.clone(),
                );
                if let Some(left) = self.counters.get_mut(&key) {
                    *left += q.nanos();
                }
            }
        }
    }

    /// Tries to take candidate `cand` for (claim, request, alternative); on success the
    /// state records it and `undo` must be called to give it back.
    fn take(
        &mut self,
        cand: usize,
        ci: usize,
        ri: usize,
        ai: usize,
        must: bool,
    ) -> Result<bool, AllocError> {
        let rd = &self.prep.claims[ci].requests[ri][ai];
        let number = self.candidates[cand].number;
        let admin = rd.request.admin_access;
        let multi = self.candidates[cand].device.allow_multiple_allocations;
        if admin {
            if self.allocating.contains(&(number, ci)) {
                return Ok(false);
            }
        } else if self.cand_in_use(cand) {
            return Ok(false);
        }
        let Some(consumed) = self.capacity_fits(cand, &rd.request) else {
            return Ok(false);
        };
        let device = self.candidates[cand].device;
        // A shared device draws its partition counters once, with its first share.
        let counters = !(multi && self.shared_already(cand));
        if counters && !self.take_counters(cand) {
            return Ok(false);
        }
        let give = |s: &mut Self| {
            if counters {
                s.give_counters(cand);
            }
        };
        if Self::taint_blocks(device, &rd.request) {
            give(self);
            return Ok(false);
        }
        if !self.add_constraints(ci, rd, device) {
            give(self);
            if must {
                return Err(AllocError::Fatal(format!(
                    "claim {}, request {}: cannot add device {}/{}/{} because a claim constraint would not be satisfied",
                    self.prep.claims[ci].claim.key(),
                    rd.result_name,
                    self.candidates[cand].slice.driver,
                    self.candidates[cand].slice.pool.name,
                    device.name
                )));
            }
            return Ok(false);
        }
        match &consumed {
            Some(c) => self.allocating_shares.push((number, c.clone())),
            None => self.allocating.push((number, ci)),
        }
        let share = consumed;
        self.counter_stack.push(counters);
        self.results[ci].push((cand, ri, ai, share));
        Ok(true)
    }

    fn undo(&mut self, cand: usize, ci: usize, ri: usize, ai: usize) {
        let rd = &self.prep.claims[ci].requests[ri][ai];
        let device = self.candidates[cand].device;
        let n = self.prep.claims[ci].claim.spec.constraints.len();
        self.remove_constraints(ci, rd, device, n);
        let number = self.candidates[cand].number;
        if self.candidates[cand].device.allow_multiple_allocations {
            if let Some(p) = self.allocating_shares.iter().rposition(|e| e.0 == number) {
                self.allocating_shares.remove(p);
            }
        } else if let Some(p) = self.allocating.iter().rposition(|e| *e == (number, ci)) {
            self.allocating.remove(p);
        }
        if self.counter_stack.pop().unwrap_or(true) {
            self.give_counters(cand);
        }
        self.results[ci].pop();
    }

    /// Allocates claim `ci` from request `ri` on.
    fn request(&mut self, ci: usize, ri: usize) -> Result<bool, AllocError> {
        self.check_time()?;
        if ci == self.prep.claims.len() {
            return Ok(true);
        }
        if ri == self.prep.claims[ci].requests.len() {
            return self.request(ci + 1, 0);
        }
        let alternatives = self.prep.claims[ci].requests[ri].len();
        for ai in 0..alternatives {
            let rd = &self.prep.claims[ci].requests[ri][ai];
            let ok = match rd.request.mode {
                AllocationMode::ExactCount(n) => {
                    if self.results[ci].len() + n as usize > ALLOCATION_RESULTS_MAX_SIZE {
                        continue;
                    }
                    self.devices(ci, ri, ai, n as usize, 0)?
                }
                AllocationMode::All => self.all(ci, ri, ai)?,
            };
            if ok {
                self.chosen[ci][ri] = ai;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Picks `left` more devices for (claim, request, alternative) from candidate `from` on.
    fn devices(
        &mut self,
        ci: usize,
        ri: usize,
        ai: usize,
        left: usize,
        from: usize,
    ) -> Result<bool, AllocError> {
        if left == 0 {
            return self.request(ci, ri + 1);
        }
        self.check_time()?;
        let admin = self.prep.claims[ci].requests[ri][ai].request.admin_access;
        for cand in from..self.candidates.len() {
            // In use is cheap to tell and usually the answer: before the selectors.
            if !admin && self.cand_in_use(cand) {
                continue;
            }
            if !self.selectable(cand, ci, ri, ai)? {
                continue;
            }
            if !self.take(cand, ci, ri, ai, false)? {
                continue;
            }
            if self.devices(ci, ri, ai, left - 1, cand + 1)? {
                return Ok(true);
            }
            self.undo(cand, ci, ri, ai);
        }
        Ok(false)
    }

    /// `allocationMode: All`: every selectable device of the node's pools, at least one.
    fn all(&mut self, ci: usize, ri: usize, ai: usize) -> Result<bool, AllocError> {
        let mut picks = Vec::new();
        for cand in 0..self.candidates.len() {
            // Upstream drops devices whose capacity cannot serve the request.
            if self.selectable(cand, ci, ri, ai)?
                && self
                    .capacity_fits(cand, &self.prep.claims[ci].requests[ri][ai].request)
                    .is_some()
            {
                picks.push(cand);
            }
        }
        if picks.is_empty() || self.results[ci].len() + picks.len() > ALLOCATION_RESULTS_MAX_SIZE {
            return Ok(false);
        }
        let mut taken = 0;
        for &cand in &picks {
            if !self.take(cand, ci, ri, ai, true)? {
                break;
            }
            taken += 1;
        }
        if taken == picks.len() && self.request(ci, ri + 1)? {
            return Ok(true);
        }
        for &cand in picks[..taken].iter().rev() {
            self.undo(cand, ci, ri, ai);
        }
        Ok(false)
    }
}

/// Allocates every claim of `prep` on `node`: `Ok(None)` when they do not fit.
pub fn allocate(prep: &Prepared, node: &Node) -> Result<Option<Allocations>, AllocError> {
    let pools = prep.index.pools_for(&node.name, &node.labels);
    // `All` needs every pool complete and valid (upstream checks before searching).
    for cd in &prep.claims {
        for alts in &cd.requests {
            for rd in alts {
                if rd.request.mode != AllocationMode::All {
                    continue;
                }
                for p in pools.iter() {
                    if p.incomplete {
                        return Err(AllocError::Fatal(format!(
                            "claim {}, request {}: asks for all devices, but resource pool {} is currently being updated",
                            cd.claim.key(), rd.result_name, p.id
                        )));
                    }
                    if p.invalid.is_some() {
                        return Err(AllocError::Fatal(format!(
                            "claim {}, request {}: asks for all devices, but resource pool {} is currently invalid",
                            cd.claim.key(), rd.result_name, p.id
                        )));
                    }
                }
            }
        }
    }
    let mut counters: Counters = FxHashMap::default();
    for p in pools.iter() {
        if let Some(why) = &p.invalid {
            // Upstream fails as soon as the search reaches an invalid pool.
            return Err(AllocError::Fatal(format!(
                "pool {} is invalid: {why}",
                p.id
            )));
        }
        for ns in &p.slices {
            let s = &ns.slice;
            for cs in s.shared_counters.iter() {
                for (name, q) in &cs.counters {
                    counters.insert(
                        (
                            s.driver.clone(),
                            s.pool.name.clone(),
                            cs.name.clone(),
                            name.clone(),
                        ),
                        q.nanos(),
                    );
                }
            }
        }
    }
    // Counters consumed by devices already allocated.
    if !counters.is_empty() {
        for p in pools.iter() {
            for ns in &p.slices {
                let s = &ns.slice;
                for (d, n) in s.devices.iter().zip(ns.numbers.iter()) {
                    if d.consumes_counters.is_empty()
                        || !(prep.allocated.contains(*n) || prep.shared.contains_key(n))
                    {
                        continue;
                    }
                    for cc in d.consumes_counters.iter() {
                        for (name, q) in &cc.counters {
                            let key = (
                                s.driver.clone(),
                                s.pool.name.clone(),
                                cc.counter_set.clone(),
                                name.clone(),
                            );
                            if let Some(left) = counters.get_mut(&key) {
                                *left -= q.nanos();
                            }
                        }
                    }
                }
            }
        }
    }
    let devices = pools
        .iter()
        .flat_map(|p| p.slices.iter())
        .map(|ns| ns.slice.devices.len())
        .sum();
    let mut candidates = Vec::with_capacity(devices);
    for p in pools.iter() {
        for ns in &p.slices {
            for (index, (d, n)) in ns.slice.devices.iter().zip(ns.numbers.iter()).enumerate() {
                candidates.push(Candidate {
                    slice: &ns.slice,
                    slice_arc: &ns.slice,
                    device: d,
                    index,
                    number: *n,
                    pool: &p.key,
                });
            }
        }
    }
    let (
        Scratch {
            selectable,
            alt_base,
            allocating,
            constraint_state,
            results,
            chosen,
            allocating_shares,
            counter_stack,
        },
        alts,
    ) = Scratch::for_search(prep, candidates.len());
    let mut search = Search {
        prep,
        node,
        selectable,
        candidates,
        alt_base,
        alts,
        allocating,
        counters,
        constraint_state,
        results,
        chosen,
        steps: 0,
        deadline: prep.timeout.map(|t| Instant::now() + t),
        allocating_shares,
        counter_stack,
    };
    if !search.request(0, 0)? {
        return Ok(None);
    }
    let mut out = Allocations::with_capacity(prep.claims.len());
    for ci in 0..prep.claims.len() {
        let picks = search.results[ci]
            .iter()
            .map(|(cand, request, alternative, consumed)| {
                let c = &search.candidates[*cand];
                Pick {
                    slice: c.slice_arc.clone(),
                    device: c.index,
                    request: *request,
                    alternative: *alternative,
                    consumed: consumed.clone(),
                }
            })
            .collect();
        out.push(ClaimAllocation {
            picks,
            chosen: search.chosen[ci].iter().copied().collect(),
        });
    }
    Ok(Some(out))
}
