//! Cluster-wide counts InterPodAffinity needs in every cycle, kept across cycles and
//! updated only for nodes whose NodeInfo changed (see `framework::derived`).
//!
//! Two kinds: counts for the incoming pod's own terms (which pods match them, by
//! domain), cached per set of terms since pods of one workload share them; and the
//! terms existing pods carry (anti-affinity against newcomers, affinity that scores
//! them), interned once so a cycle only asks "does this pod match term T" per
//! distinct term instead of per existing pod.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::{matches_all, TopologyCounts, EMPTY_LABELS};
use crate::framework::derived::{Change, NodeDerived};
use crate::framework::domains::{DomainNumbers, KeyDomains};
use crate::framework::NodeInfo;
use crate::model::pod::{AffinityTerm, WeightedAffinityTerm};
use crate::model::Labels;

/// A node's contributions: (topology key, the node's value for it, amount).
pub(crate) type Contribs = SmallVec<[(Arc<str>, Arc<str>, i64); 2]>;

fn add(c: &mut Contribs, labels: &Labels, key: &str, amount: i64) {
    let Some(v) = labels.get(key) else { return };
    match c.iter_mut().find(|(k, val, _)| **k == *key && **val == *v) {
        Some(e) => e.2 += amount,
        None => c.push((Arc::from(key), Arc::from(v), amount)),
    }
}

fn apply(totals: &mut TopologyCounts, c: &Contribs, sign: i64) {
    for (k, v, n) in c {
        totals.add_shared(k, v, sign * n);
    }
}

/// The incoming pod's required terms (PreFilter).
#[derive(Clone, PartialEq)]
pub(crate) struct RequiredQuery {
    pub affinity: Vec<AffinityTerm>,
    pub anti_affinity: Vec<AffinityTerm>,
}

/// Per domain: pods matching all affinity terms (under each term's key), and pods
/// matching each anti-affinity term.
#[derive(Default)]
pub(crate) struct RequiredIndex {
    nodes: NodeDerived<[Contribs; 2]>,
    pub affinity: TopologyCounts,
    pub anti_affinity: TopologyCounts,
}

impl RequiredIndex {
    pub fn refresh(&mut self, q: &RequiredQuery, all: &[Arc<NodeInfo>]) {
        let compute = |ni: &NodeInfo| {
            let labels = &ni.node().labels;
            let (mut aff, mut anti) = (Contribs::new(), Contribs::new());
            for p in &ni.pods {
                if matches_all(&q.affinity, p) {
                    for t in &q.affinity {
                        add(&mut aff, labels, &t.topology_key, 1);
                    }
                }
                for t in &q.anti_affinity {
                    if t.matches(p, &EMPTY_LABELS) {
                        add(&mut anti, labels, &t.topology_key, 1);
                    }
                }
            }
            [aff, anti]
        };
        let (aff, anti) = (&mut self.affinity, &mut self.anti_affinity);
        self.nodes.refresh(all, compute, |c| match c {
            Change::Reset => {
                *aff = TopologyCounts::default();
                *anti = TopologyCounts::default();
            }
            Change::Replaced { old, new } => {
                if let Some(o) = old {
                    apply(aff, &o[0], -1);
                    apply(anti, &o[1], -1);
                }
                apply(aff, &new[0], 1);
                apply(anti, &new[1], 1);
            }
        });
    }
}

/// The incoming pod's preferred terms (PreScore).
#[derive(Clone, PartialEq)]
pub(crate) struct PreferredQuery {
    pub affinity: Vec<WeightedAffinityTerm>,
    pub anti_affinity: Vec<WeightedAffinityTerm>,
}

/// Per domain: the weights of the incoming pod's preferred terms that existing pods
/// match (anti-affinity negative).
#[derive(Default)]
pub(crate) struct PreferredIndex {
    nodes: NodeDerived<Contribs>,
    pub score: TopologyCounts,
}

impl PreferredIndex {
    pub fn refresh(&mut self, q: &PreferredQuery, all: &[Arc<NodeInfo>]) {
        let compute = |ni: &NodeInfo| {
            let labels = &ni.node().labels;
            let mut c = Contribs::new();
            if labels.is_empty() {
                return c;
            }
            for p in &ni.pods {
                for w in &q.affinity {
                    if w.term.matches(p, &EMPTY_LABELS) {
                        add(&mut c, labels, &w.term.topology_key, i64::from(w.weight));
                    }
                }
                for w in &q.anti_affinity {
                    if w.term.matches(p, &EMPTY_LABELS) {
                        add(&mut c, labels, &w.term.topology_key, -i64::from(w.weight));
                    }
                }
            }
            c
        };
        let score = &mut self.score;
        self.nodes.refresh(all, compute, |c| match c {
            Change::Reset => *score = TopologyCounts::default(),
            Change::Replaced { old, new } => {
                if let Some(o) = old {
                    apply(score, o, -1);
                }
                apply(score, new, 1);
            }
        });
    }
}

/// Which of an existing pod's term lists a term came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum TermKind {
    Required,
    RequiredAnti,
    Preferred,
    PreferredAnti,
}

/// A distinct term some existing pod carries.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct ExistingTerm {
    pub kind: TermKind,
    pub weight: i32,
    pub term: AffinityTerm,
}

/// Interned terms: ids are positions.
#[derive(Default)]
struct Interner {
    terms: Vec<Arc<ExistingTerm>>,
    ids: FxHashMap<Arc<ExistingTerm>, u32>,
}

impl Interner {
    fn id(&mut self, t: ExistingTerm) -> u32 {
        if let Some(&id) = self.ids.get(&t) {
            return id;
        }
        let id = self.terms.len() as u32;
        let t = Arc::new(t);
        self.terms.push(t.clone());
        self.ids.insert(t, id);
        id
    }
}

/// Interned terms are dropped (and the index rebuilt) once there are this many and
/// most of them no longer occur.
const INTERNER_GC_AT: usize = 4096;

/// A node's existing terms: (term id, the node's domain for its key, pods).
type TermContribs = SmallVec<[(u32, Arc<str>, i64); 2]>;

/// One existing term's pods by domain of its topology key.
#[derive(Clone, Default)]
pub(crate) struct TermTotals {
    /// The term's topology key.
    pub key: Arc<str>,
    /// Pods carrying the term, over all domains (0: it no longer occurs).
    pub pods: i64,
    /// By domain number (in the key's [`DomainNumbers`]): pods carrying the term.
    /// Shared with the cycle states that read it, copied when it changes meanwhile.
    pub by_domain: Arc<Vec<i64>>,
}

impl TermTotals {
    /// The domains with pods, by name.
    pub fn iter<'a>(
        &'a self,
        numbers: &'a DomainNumbers,
    ) -> impl Iterator<Item = (&'a Arc<str>, i64)> + 'a {
        self.by_domain
            .iter()
            .enumerate()
            .filter(|(_, n)| **n != 0)
            .filter_map(|(d, n)| numbers.names.get(d).map(|name| (name, *n)))
    }
}

/// Per distinct existing term: pods carrying it, by the domain of its topology key.
#[derive(Default)]
pub(crate) struct ExistingIndex {
    interner: Mutex<Interner>,
    nodes: NodeDerived<TermContribs>,
    /// By term id.
    totals: Vec<TermTotals>,
    /// By topology key of the interned terms: the key's domains, numbered.
    domains: FxHashMap<Arc<str>, KeyDomains>,
}

impl ExistingIndex {
    pub fn refresh(&mut self, all: &[Arc<NodeInfo>]) {
        let live = self.totals.iter().filter(|t| t.pods != 0).count();
        let interned = self.lock().terms.len();
        if interned >= INTERNER_GC_AT && live * 2 < interned {
            *self.lock() = Interner::default();
            self.nodes = NodeDerived::default();
            self.domains.clear();
        }
        // The domains first: when a key's numbers start over, every total by number
        // is void and the terms are recounted.
        let mut renumbered = false;
        for (key, kd) in self.domains.iter_mut() {
            renumbered |= kd.refresh(key, all);
        }
        if renumbered {
            self.nodes = NodeDerived::default();
        }
        let interner = &self.interner;
        let compute = |ni: &NodeInfo| {
            let labels = &ni.node().labels;
            let mut out = TermContribs::new();
            if ni.pods_with_affinity.is_empty() || labels.is_empty() {
                return out;
            }
            let mut int = match interner.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            let mut push = |kind, weight, term: &AffinityTerm| {
                let Some(v) = labels.get(&term.topology_key) else {
                    return;
                };
                let id = int.id(ExistingTerm {
                    kind,
                    weight,
                    term: term.clone(),
                });
                match out.iter_mut().find(|(i, val, _)| *i == id && **val == *v) {
                    Some(e) => e.2 += 1,
                    None => out.push((id, Arc::from(v), 1)),
                }
            };
            for p in &ni.pods_with_affinity {
                let s = &p.spec;
                for t in s.required_affinity_terms.iter() {
                    push(TermKind::Required, 0, t);
                }
                for t in s.required_anti_affinity_terms.iter() {
                    push(TermKind::RequiredAnti, 0, t);
                }
                for w in s.preferred_affinity_terms.iter() {
                    push(TermKind::Preferred, w.weight, &w.term);
                }
                for w in s.preferred_anti_affinity_terms.iter() {
                    push(TermKind::PreferredAnti, w.weight, &w.term);
                }
            }
            out
        };
        let (totals, domains) = (&mut self.totals, &mut self.domains);
        self.nodes.refresh(all, compute, |c| match c {
            Change::Reset => totals.clear(),
            Change::Replaced { old, new } => {
                for (sign, list) in [(-1, old), (1, Some(new))] {
                    for (id, v, n) in list.into_iter().flatten() {
                        let i = *id as usize;
                        if totals.len() <= i {
                            totals.resize_with(i + 1, TermTotals::default);
                        }
                        let t = &mut totals[i];
                        if t.key.is_empty() {
                            let int = match interner.lock() {
                                Ok(g) => g,
                                Err(p) => p.into_inner(),
                            };
                            if let Some(term) = int.terms.get(i) {
                                t.key = Arc::from(&*term.term.topology_key);
                            }
                        }
                        let kd = match domains.get_mut(&*t.key) {
                            Some(kd) => kd,
                            None => {
                                let mut kd = KeyDomains::default();
                                kd.refresh(&t.key, all);
                                domains.entry(t.key.clone()).or_insert(kd)
                            }
                        };
                        // The node's own label numbered it already.
                        let d = kd.number(v) as usize;
                        let by_domain = Arc::make_mut(&mut t.by_domain);
                        if by_domain.len() <= d {
                            by_domain.resize(d + 1, 0);
                        }
                        by_domain[d] += sign * n;
                        t.pods += sign * n;
                    }
                }
            }
        });
    }

    /// Every distinct term that occurs now, with its pods by domain and the numbers of
    /// those domains.
    pub fn terms(&self) -> Vec<(Arc<ExistingTerm>, &TermTotals, &Arc<DomainNumbers>)> {
        let int = self.lock();
        self.totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.pods != 0)
            .filter_map(|(i, t)| {
                let term = int.terms.get(i)?;
                let kd = self.domains.get(&*t.key)?;
                Some((term.clone(), t, kd.numbers()))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Interner> {
        match self.interner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}
