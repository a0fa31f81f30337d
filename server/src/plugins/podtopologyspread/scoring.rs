//! PodTopologySpread PreScore, Score and NormalizeScore (soft constraints).

use std::sync::Arc;

use rustc_hash::FxHashSet;
#[cfg(test)]
use {super::blank, rustc_hash::FxHashMap};

use smallvec::SmallVec;

use super::{
    count_matching, inclusion_is_trivial, Constraint, DomainNumbers, PodTopologySpread,
    LABEL_HOSTNAME,
};
use crate::cache::Snapshot;
use crate::framework::domains::Domain;
use crate::framework::interface::{PreScorePlugin, ScorePlugin, MAX_NODE_SCORE};
use crate::framework::{CycleState, NodeInfo, Status};
use crate::model::pod::UnsatisfiableConstraintAction;
use crate::model::Pod;
use crate::plugins::helper::missing_state;

#[derive(Clone)]
struct PreScoreState(Arc<PreScoreData>);

struct PreScoreData {
    constraints: Vec<Constraint>,
    /// Per constraint, what Score reads.
    terms: SmallVec<[ScoreTerm; 2]>,
    /// Feasible nodes lacking a topology key (when every key is required): scored 0.
    ignored_nodes: FxHashSet<Arc<str>>,
}

/// One constraint's part of Score, read by domain number or node id: Score reads
/// neither a node's labels nor its pods, and PreScore copies no domain names.
struct ScoreTerm {
    hostname: bool,
    /// ln(domains + 2), domains over the feasible nodes not ignored.
    weight: f64,
    /// The index's numbers for the constraint's topology key.
    numbers: Arc<DomainNumbers>,
    /// Not hostname: matching pods by domain number, and in the slot past the numbers
    /// the nodes without the key, read as the domain "" as upstream reads them (when
    /// no node is labelled ""; else they share that domain's slot). Hostname: matching
    /// pods on the node by node id, [`UNCOUNTED`] for nodes PreScore did not count
    /// (Score counts those itself); empty when node ids repeat.
    pods: Vec<i64>,
}

/// A node PreScore did not count (hostname terms).
const UNCOUNTED: i64 = i64::MIN;

/// Node ids past this are not kept in a hostname term's vector (Score counts).
const MAX_DENSE_ID: usize = 1 << 20;

impl ScoreTerm {
    fn new(c: &Constraint, numbers: &Arc<DomainNumbers>) -> Self {
        let hostname = *c.topology_key == *LABEL_HOSTNAME;
        ScoreTerm {
            hostname,
            weight: 0.0,
            pods: vec![0; if hostname { 0 } else { numbers.names.len() + 1 }],
            numbers: numbers.clone(),
        }
    }

    /// The slot of nodes without the key.
    fn blank(&self) -> usize {
        match self.numbers.by_name.get("") {
            Some(&n) => n as usize,
            None => self.numbers.names.len(),
        }
    }

    /// The slot of a domain (not hostname); `None` for a value without a number.
    fn slot(&self, d: Domain, blank: usize) -> Option<usize> {
        match d {
            Domain::Missing => Some(blank),
            Domain::Numbered(n) => Some(n as usize),
            Domain::Unnumbered(_) => None,
        }
    }
}

#[cfg(test)]
pub(crate) fn counts(state: &CycleState) -> Option<Vec<FxHashMap<Arc<str>, i64>>> {
    let s = &state.read::<PreScoreState>()?.0;
    let by_domain = |t: &ScoreTerm| -> FxHashMap<Arc<str>, i64> {
        if t.hostname {
            return FxHashMap::default();
        }
        let mut m: FxHashMap<Arc<str>, i64> = (t.numbers.names.iter().cloned())
            .zip(t.pods.iter().copied())
            .collect();
        m.entry(blank()).or_insert(t.pods[t.blank()]);
        m
    };
    Some(s.terms.iter().map(by_domain).collect())
}

#[cfg(test)]
pub(crate) fn weights(state: &CycleState) -> Option<Vec<f64>> {
    let s = &state.read::<PreScoreState>()?.0;
    Some(s.terms.iter().map(|t| t.weight).collect())
}

impl PreScorePlugin for PodTopologySpread {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        filtered: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let all = snapshot.node_infos();
        if all.is_empty() {
            return Status::skip();
        }
        let constraints =
            self.constraints(pod, UnsatisfiableConstraintAction::ScheduleAnyway, snapshot);
        if constraints.is_empty() {
            return Status::skip();
        }
        let require_all =
            !pod.spec.topology_spread_constraints.is_empty() || !self.system_defaulted;
        let trivial = inclusion_is_trivial(pod, &constraints);
        let (terms, ignored_nodes) = self.with_index(pod, &constraints, snapshot, |idx| {
            let mut terms: SmallVec<[ScoreTerm; 2]> = constraints
                .iter()
                .zip(&idx.numbers)
                .map(|(c, numbers)| ScoreTerm::new(c, numbers))
                .collect();
            let blank: SmallVec<[usize; 2]> = terms.iter().map(ScoreTerm::blank).collect();
            // The feasible nodes' domains, for the weights.
            let mut seen: SmallVec<[Vec<bool>; 2]> =
                terms.iter().map(|t| vec![false; t.pods.len()]).collect();
            let mut unnumbered: SmallVec<[FxHashSet<&str>; 2]> =
                terms.iter().map(|_| FxHashSet::default()).collect();
            let mut ignored_nodes = FxHashSet::default();
            let mut ids_unique = true;
            let mut domains: SmallVec<[Domain; 2]> = SmallVec::new();
            for ni in filtered {
                domains.clear();
                domains.extend(
                    terms
                        .iter()
                        .zip(&constraints)
                        .map(|(t, c)| t.numbers.domain_of(ni, &c.topology_key)),
                );
                if require_all && domains.contains(&Domain::Missing) {
                    ignored_nodes.insert(ni.node().name.clone());
                    continue;
                }
                for (i, t) in terms.iter_mut().enumerate() {
                    if !t.hostname {
                        match t.slot(domains[i], blank[i]) {
                            Some(s) => seen[i][s] = true,
                            None => {
                                if let Domain::Unnumbered(v) = domains[i] {
                                    unnumbered[i].insert(v);
                                }
                            }
                        }
                        continue;
                    }
                    // Score skips a node without the hostname label.
                    let id = ni.id as usize;
                    if domains[i] == Domain::Missing || id >= MAX_DENSE_ID {
                        ids_unique &= id < MAX_DENSE_ID;
                        continue;
                    }
                    let c = &constraints[i];
                    let n = match idx.get(ni) {
                        Some(ns) => ns.counts[i],
                        None => count_matching(&ni.pods, &c.selector, &pod.namespace),
                    };
                    if t.pods.len() <= id {
                        t.pods.resize(id + 1, UNCOUNTED);
                    }
                    ids_unique &= t.pods[id] == UNCOUNTED;
                    t.pods[id] = n;
                }
            }
            for (i, t) in terms.iter_mut().enumerate() {
                let size = if t.hostname {
                    if !ids_unique {
                        t.pods = Vec::new();
                    }
                    filtered.len() - ignored_nodes.len()
                } else {
                    seen[i].iter().filter(|s| **s).count() + unnumbered[i].len()
                };
                t.weight = ((size + 2) as f64).ln();
            }
            if trivial {
                // Every node is included: the index's totals are the counts. With every
                // key required they are over the nodes that have all keys, else over
                // every node with a missing key read as "".
                for (i, t) in terms.iter_mut().enumerate() {
                    if t.hostname {
                        continue;
                    }
                    let totals = if require_all {
                        &idx.totals[i]
                    } else {
                        &idx.by_value[i]
                    };
                    for (d, total) in totals {
                        let slot = if d.is_empty() {
                            Some(blank[i])
                        } else if total.number != u32::MAX {
                            Some(total.number as usize)
                        } else {
                            t.numbers.by_name.get(&**d).map(|&n| n as usize)
                        };
                        if let Some(p) = slot.and_then(|s| t.pods.get_mut(s)) {
                            *p += total.pods;
                        }
                    }
                }
            } else {
                for (ni, ns) in all.iter().zip(idx.per_node()) {
                    if require_all && !ns.has_all_keys() {
                        continue;
                    }
                    let node = ni.node();
                    for (i, c) in constraints.iter().enumerate() {
                        let t = &mut terms[i];
                        if t.hostname || !c.includes_node(pod, node) {
                            continue;
                        }
                        let slot = match &ns.domains[i] {
                            None => Some(blank[i]),
                            Some(d) => t
                                .numbers
                                .by_id(ns.id)
                                .or_else(|| t.numbers.by_name.get(&**d).copied())
                                .map(|n| n as usize),
                        };
                        if let Some(p) = slot.and_then(|s| t.pods.get_mut(s)) {
                            *p += ns.counts[i];
                        }
                    }
                }
            }
            (terms, ignored_nodes)
        });
        state.write(PreScoreState(Arc::new(PreScoreData {
            constraints,
            terms,
            ignored_nodes,
        })));
        Status::success()
    }
}

impl PreScoreData {
    fn ignored(&self, node: &NodeInfo) -> bool {
        !self.ignored_nodes.is_empty() && self.ignored_nodes.contains(&node.node().name)
    }

    fn score(&self, pod: &Pod, node: &NodeInfo) -> i64 {
        if self.ignored(node) {
            return 0;
        }
        let mut score = 0f64;
        for (t, c) in self.terms.iter().zip(&self.constraints) {
            let cnt = match t.numbers.domain_of(node, &c.topology_key) {
                Domain::Missing => continue,
                _ if t.hostname => match t.pods.get(node.id as usize) {
                    Some(&n) if n != UNCOUNTED => n,
                    _ => count_matching(&node.pods, &c.selector, &pod.namespace),
                },
                Domain::Numbered(n) => t.pods.get(n as usize).copied().unwrap_or(0),
                Domain::Unnumbered(_) => 0,
            };
            score += cnt as f64 * t.weight + (c.max_skew - 1) as f64;
        }
        score.round() as i64
    }
}

impl ScorePlugin for PodTopologySpread {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScorePodTopologySpread"))?;
        Ok(s.0.score(pod, node))
    }

    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let s = state
            .read::<PreScoreState>()
            .ok_or_else(|| missing_state("PreScorePodTopologySpread"))?;
        for (n, o) in nodes.iter().zip(out.iter_mut()) {
            *o = s.0.score(pod, n);
        }
        Ok(())
    }

    fn has_normalize_score(&self) -> bool {
        true
    }

    /// `100 * (max + min - score) / max`; ignored nodes 0; all-zero maxima 100.
    fn normalize_score(
        &self,
        state: &CycleState,
        _pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        scores: &mut [i64],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>() else {
            return Status::success();
        };
        let ignored = |i: usize| s.0.ignored(&nodes[i]);
        let mut min = i64::MAX;
        let mut max = 0i64;
        for (i, v) in scores.iter().enumerate() {
            if ignored(i) {
                continue;
            }
            min = min.min(*v);
            max = max.max(*v);
        }
        for (i, v) in scores.iter_mut().enumerate() {
            if ignored(i) {
                *v = 0;
            } else if max == 0 {
                *v = MAX_NODE_SCORE;
            } else {
                *v = MAX_NODE_SCORE * (max + min - *v) / max;
            }
        }
        Status::success()
    }
}
