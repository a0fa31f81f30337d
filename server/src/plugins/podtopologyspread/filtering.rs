//! PodTopologySpread PreFilter, AddPod/RemovePod, and Filter (hard constraints).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{
    inclusion_is_trivial, node_has_all_keys, Constraint, DomainNumbers, PodTopologySpread,
    ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
};
use crate::cache::Snapshot;
use crate::framework::interface::{
    FilterPlugin, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::UnsatisfiableConstraintAction;
use crate::model::Pod;
use crate::plugins::helper::missing_state;

/// The two least-loaded domains of a constraint (upstream `criticalPaths`): exact for
/// the minimum under PreFilter and single-node AddPod/RemovePod updates.
#[derive(Clone, Debug)]
struct CriticalPaths([(Option<Box<str>>, i64); 2]);

impl Default for CriticalPaths {
    fn default() -> Self {
        CriticalPaths([(None, i64::from(i32::MAX)), (None, i64::from(i32::MAX))])
    }
}

impl CriticalPaths {
    fn update(&mut self, value: &str, num: i64) {
        let p = &mut self.0;
        let i = if p[0].0.as_deref() == Some(value) {
            Some(0)
        } else if p[1].0.as_deref() == Some(value) {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i].1 = num;
                if p[0].1 > p[1].1 {
                    p.swap(0, 1);
                }
            }
            None => {
                if num < p[0].1 {
                    p[1] = p[0].clone();
                    p[0] = (Some(value.into()), num);
                } else if num < p[1].1 {
                    p[1] = (Some(value.into()), num);
                }
            }
        }
    }

    fn min(&self) -> i64 {
        self.0[0].1
    }

    /// The critical paths of whole counts: the two least-loaded domains, ties broken by
    /// the smaller value. The same as [`CriticalPaths::update`] over the counts sorted by
    /// value, in one pass: a domain per node (hostname) made that sort most of
    /// PreFilter's time.
    fn from_counts<'a>(counts: impl IntoIterator<Item = (&'a str, i64)>) -> Self {
        let mut best: [(Option<&str>, i64); 2] = [(None, i64::from(i32::MAX)); 2];
        let before = |v: &str, n: i64, b: &(Option<&str>, i64)| {
            n < b.1 || (n == b.1 && b.0.is_some_and(|bv| v < bv))
        };
        for (v, n) in counts {
            if before(v, n, &best[0]) {
                best[1] = best[0];
                best[0] = (Some(v), n);
            } else if before(v, n, &best[1]) {
                best[1] = (Some(v), n);
            }
        }
        CriticalPaths(best.map(|(v, n)| (v.map(Box::from), n)))
    }

    /// [`CriticalPaths::from_counts`] over a constraint's counts, ties broken by the
    /// names' ranks (integers) where every eligible domain is numbered.
    fn of(counts: &DomainCounts) -> Self {
        if !counts.extra.is_empty() {
            return Self::from_counts(counts.iter());
        }
        let rank = counts.numbers.name_ranks();
        // (number, count, rank)
        let mut best: [Option<(usize, i64, u32)>; 2] = [None; 2];
        let before = |n: i64, r: u32, b: &Option<(usize, i64, u32)>| match b {
            None => n < i64::from(i32::MAX),
            Some((_, bn, br)) => n < *bn || (n == *bn && r < *br),
        };
        for (d, p) in counts.pods.iter().enumerate() {
            let Some(n) = *p else { continue };
            let r = rank[d];
            if before(n, r, &best[0]) {
                best[1] = best[0];
                best[0] = Some((d, n, r));
            } else if before(n, r, &best[1]) {
                best[1] = Some((d, n, r));
            }
        }
        CriticalPaths(best.map(|b| match b {
            Some((d, n, _)) => (Some(Box::from(&*counts.numbers.names[d])), n),
            None => (None, i64::from(i32::MAX)),
        }))
    }
}

#[derive(Clone)]
pub(crate) struct PreFilterState {
    constraints: Arc<[Constraint]>,
    /// Per constraint: topology value -> matching pods (every eligible domain present).
    match_num: Vec<DomainCounts>,
    critical_paths: Vec<CriticalPaths>,
    /// Per constraint: 1 when the incoming pod matches its selector (it would count
    /// itself), read by Filter on every node.
    self_match: Vec<i64>,
}

/// One constraint's matching pods per eligible domain, by domain number (upstream's
/// `TpValueToMatchNum` map, as a vector): Filter reads a node's count through its id.
#[derive(Clone)]
pub(crate) struct DomainCounts {
    numbers: Arc<DomainNumbers>,
    /// By domain number: matching pods of the eligible domains, `None` for the others.
    pods: Vec<Option<i64>>,
    /// Eligible domains the numbers lack (a preemption what-if on a node the index has
    /// not seen; none in practice).
    extra: FxHashMap<Arc<str>, i64>,
    /// Eligible domains.
    len: usize,
}

impl DomainCounts {
    fn new(numbers: Arc<DomainNumbers>) -> Self {
        DomainCounts {
            pods: vec![None; numbers.names.len()],
            numbers,
            extra: FxHashMap::default(),
            len: 0,
        }
    }

    fn set(&mut self, number: u32, pods: i64) {
        let slot = &mut self.pods[number as usize];
        if slot.is_none() {
            self.len += 1;
        }
        *slot = Some(pods);
    }

    fn get(&self, value: &str) -> Option<i64> {
        match self.numbers.by_name.get(value) {
            Some(&n) => self.pods[n as usize],
            None => self.extra.get(value).copied(),
        }
    }

    /// Adds `delta` to a numbered domain (making it eligible); returns its new count.
    fn add_numbered(&mut self, number: u32, delta: i64) -> i64 {
        let now = self.pods[number as usize].unwrap_or(0) + delta;
        self.set(number, now);
        now
    }

    /// Adds `delta` to a domain (making it eligible); returns its new count.
    fn add(&mut self, value: &str, delta: i64) -> i64 {
        if let Some(&n) = self.numbers.by_name.get(value) {
            return self.add_numbered(n, delta);
        }
        let e = match self.extra.get_mut(value) {
            Some(e) => e,
            None => {
                self.len += 1;
                self.extra.entry(Arc::from(value)).or_insert(0)
            }
        };
        *e += delta;
        *e
    }

    /// The eligible domains and their counts.
    fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        let numbered = self
            .pods
            .iter()
            .enumerate()
            .filter_map(|(n, p)| p.map(|p| (&*self.numbers.names[n], p)));
        numbered.chain(self.extra.iter().map(|(d, p)| (&**d, *p)))
    }

    /// The node's count, `Err` when it lacks the topology key.
    fn of_node(&self, node: &NodeInfo, key: &str) -> Result<i64, ()> {
        if let Some(n) = self.numbers.by_id(node.id) {
            return Ok(self.pods[n as usize].unwrap_or(0));
        }
        // A node the index did not number (or ids that do not tell nodes apart): read
        // its label.
        match node.node().labels.get(key) {
            Some(v) => Ok(self.get(v).unwrap_or(0)),
            None => Err(()),
        }
    }
}

#[cfg(test)]
pub(crate) fn match_num(state: &CycleState) -> Option<Vec<FxHashMap<Box<str>, i64>>> {
    state.read::<PreFilterState>().map(|s| {
        s.match_num
            .iter()
            .map(|m| m.iter().map(|(d, p)| (Box::from(d), p)).collect())
            .collect()
    })
}

impl PreFilterState {
    fn min_match_num(&self, i: usize, min_domains: i64) -> i64 {
        // Fewer eligible domains than minDomains: the global minimum counts as 0.
        if (self.match_num[i].len as i64) < min_domains {
            return 0;
        }
        self.critical_paths[i].min()
    }
}

impl PreFilterPlugin for PodTopologySpread {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let constraints =
            self.constraints(pod, UnsatisfiableConstraintAction::DoNotSchedule, snapshot);
        if constraints.is_empty() {
            return (None, Status::skip());
        }
        let trivial = inclusion_is_trivial(pod, &constraints);
        let match_num: Vec<DomainCounts> = self.with_index(pod, &constraints, snapshot, |idx| {
            let mut counts: Vec<DomainCounts> = idx
                .numbers
                .iter()
                .map(|nums| DomainCounts::new(nums.clone()))
                .collect();
            if trivial {
                for (c, totals) in counts.iter_mut().zip(&idx.totals) {
                    for (d, t) in totals {
                        if (t.number as usize) < c.pods.len() {
                            c.set(t.number, t.pods);
                        } else {
                            c.add(d, t.pods);
                        }
                    }
                }
                return counts;
            }
            // Node inclusion depends on this pod: walk the nodes, counts come cached.
            for (ni, ns) in snapshot.node_infos().iter().zip(idx.per_node()) {
                if !ns.has_all_keys() {
                    continue;
                }
                let node = ni.node();
                for (i, c) in constraints.iter().enumerate() {
                    if !c.includes_node(pod, node) {
                        continue;
                    }
                    let Some(d) = &ns.domains[i] else { continue };
                    // By the node's id where the numbers have it: no hashing of names.
                    match counts[i].numbers.by_id(ns.id) {
                        Some(n) if (n as usize) < counts[i].pods.len() => {
                            counts[i].add_numbered(n, ns.counts[i])
                        }
                        _ => counts[i].add(d, ns.counts[i]),
                    };
                }
            }
            counts
        });
        let critical_paths = match_num.iter().map(CriticalPaths::of).collect();
        let self_match = constraints
            .iter()
            .map(|c| i64::from(c.selector.matches(pod.labels())))
            .collect();
        state.write(PreFilterState {
            constraints: constraints.into(),
            match_num,
            critical_paths,
            self_match,
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

fn update_with_pod(
    state: &mut PreFilterState,
    changed: &Pod,
    preemptor: &Pod,
    node: &NodeInfo,
    delta: i64,
) {
    if changed.namespace != preemptor.namespace {
        return;
    }
    let n = node.node();
    if !node_has_all_keys(&n.labels, &state.constraints) {
        return;
    }
    let constraints = state.constraints.clone();
    for (i, c) in constraints.iter().enumerate() {
        if !c.selector.matches(changed.labels()) || !c.includes_node(preemptor, n) {
            continue;
        }
        let Some(v) = n.labels.get(&c.topology_key) else {
            continue;
        };
        let num = state.match_num[i].add(v, delta);
        state.critical_paths[i].update(v, num);
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_add: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        update_with_pod(s, pod_to_add, pod, node, 1);
        Status::success()
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_remove: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        update_with_pod(s, pod_to_remove, pod, node, -1);
        Status::success()
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &CycleState, _pod: &Pod, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return missing_state("PreFilterPodTopologySpread");
        };
        for (i, c) in s.constraints.iter().enumerate() {
            let Ok(match_num) = s.match_num[i].of_node(node, &c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let min = s.min_match_num(i, c.min_domains);
            if match_num + s.self_match[i] - min > c.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_paths_track_the_minimum() {
        let mut cp = CriticalPaths::default();
        for (v, n) in [("a", 3), ("b", 1), ("c", 2)] {
            cp.update(v, n);
        }
        assert_eq!(cp.min(), 1);
        cp.update("b", 4);
        assert_eq!(cp.min(), 2);
        cp.update("c", 0);
        assert_eq!(cp.min(), 0);
    }

    #[test]
    fn ranks_break_ties_as_names_do() {
        let mut rng = crate::rand::SplitMix64(0x2545_f491_4f6c_dd1d);
        let mut next = |m: u64| rng.next_u64() % m;
        for round in 0..500 {
            // Names numbered in an order unlike their sorted one, some counted.
            let mut numbers = DomainNumbers::default();
            for _ in 0..next(12) {
                numbers.number(&Arc::from(format!("n{}", next(40)).as_str()));
            }
            let mut counts = DomainCounts::new(Arc::new(numbers));
            for d in 0..counts.pods.len() {
                if next(4) > 0 {
                    counts.set(d as u32, next(3) as i64);
                }
            }
            if round % 5 == 0 {
                // A domain the numbers lack: by names.
                counts.add("zz-extra", next(3) as i64);
            }
            let by_rank = CriticalPaths::of(&counts);
            let by_name = CriticalPaths::from_counts(counts.iter());
            assert_eq!(
                format!("{by_rank:?}"),
                format!("{by_name:?}"),
                "round {round}"
            );
        }
    }

    #[test]
    fn one_pass_equals_updates_in_value_order() {
        // Small counts over few values: many ties, in every input order.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..2000 {
            let len = next(8) as usize;
            let mut counts: Vec<(String, i64)> = (0..len)
                .map(|i| {
                    (
                        format!("d{}", (i as u64 * 7 + next(50)) % 50),
                        next(3) as i64,
                    )
                })
                .collect();
            counts.sort();
            counts.dedup_by(|a, b| a.0 == b.0);
            let mut sorted = CriticalPaths::default();
            for (v, n) in &counts {
                sorted.update(v, *n);
            }
            // Any order in: the hash map's.
            counts.reverse();
            let one = CriticalPaths::from_counts(counts.iter().map(|(v, n)| (v.as_str(), *n)));
            assert_eq!(format!("{one:?}"), format!("{sorted:?}"), "{counts:?}");
        }
    }
}
