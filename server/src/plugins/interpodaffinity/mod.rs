//! InterPodAffinity: required pod affinity and anti-affinity (the incoming pod's and,
//! symmetrically, existing pods' anti-affinity against it) filter nodes per topology
//! domain; preferred terms, and existing pods' terms toward the incoming pod, score them.
//!
//! PreFilter counts matching pods per (topology key, value) once per cycle; AddPod and
//! RemovePod adjust the counts, so preemption dry runs and nominated pods see the right
//! domains without recounting.

mod filtering;
mod index;
mod scoring;

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::cache::Snapshot;
use crate::framework::derived::DerivedCache;
use crate::framework::events::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
};
use crate::framework::interface::{
    FilterPlugin, Plugin, PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use crate::framework::{Handle, PluginFactory};
use crate::model::pod::AffinityTerm;
use crate::model::{LabelSelector, Labels, Pod};
use crate::plugins::helper::decode_args;

pub const NAME: &str = "InterPodAffinity";
pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default = "default_hard_weight")]
    hard_pod_affinity_weight: i32,
    #[serde(default)]
    ignore_preferred_terms_of_existing_pods: bool,
}

fn default_hard_weight() -> i32 {
    1
}

impl Default for Args {
    fn default() -> Self {
        Args {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

pub struct InterPodAffinity {
    hard_pod_affinity_weight: i64,
    ignore_preferred_terms_of_existing_pods: bool,
    /// Counts for incoming pods' required terms, per recent set of terms.
    required: DerivedCache<index::RequiredQuery, index::RequiredIndex>,
    /// Scores for incoming pods' preferred terms, per recent set of terms.
    preferred: DerivedCache<index::PreferredQuery, index::PreferredIndex>,
    /// Existing pods' terms by domain.
    existing: Mutex<index::ExistingIndex>,
}

/// Term sets whose counts are kept (pods of a few workloads interleave).
const INDEX_CAPACITY: usize = 8;

impl InterPodAffinity {
    fn new(hard_pod_affinity_weight: i64, ignore_preferred_terms_of_existing_pods: bool) -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight,
            ignore_preferred_terms_of_existing_pods,
            required: DerivedCache::new(INDEX_CAPACITY),
            preferred: DerivedCache::new(INDEX_CAPACITY),
            existing: Mutex::new(index::ExistingIndex::default()),
        }
    }

    /// Runs `f` on the existing-terms index, brought up to date with the snapshot.
    fn with_existing<R>(
        &self,
        snapshot: &Snapshot,
        f: impl FnOnce(&index::ExistingIndex) -> R,
    ) -> R {
        let mut idx = match self.existing.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        idx.refresh(snapshot.node_infos());
        f(&idx)
    }
}

/// Matching-pod counts per topology domain: key -> value -> count. Nested so lookups by
/// a node's `&str` labels need no allocation; entries that reach zero are removed, so
/// "empty" means no domain has a match. Keys are shared strings, so copying counts
/// out of the cluster-wide index each cycle allocates nothing per domain.
#[derive(Clone, Default, Debug, PartialEq)]
pub(crate) struct TopologyCounts(FxHashMap<Arc<str>, FxHashMap<Arc<str>, i64>>);

impl TopologyCounts {
    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|m| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    pub fn add(&mut self, key: &str, value: &str, delta: i64) {
        self.add_shared(&Arc::from(key), &Arc::from(value), delta);
    }

    /// [`TopologyCounts::add`] with the strings already shared.
    pub fn add_shared(&mut self, key: &Arc<str>, value: &Arc<str>, delta: i64) {
        if delta == 0 {
            return;
        }
        let m = match self.0.get_mut(&**key) {
            Some(m) => m,
            None => self.0.entry(key.clone()).or_default(),
        };
        let e = match m.get_mut(&**value) {
            Some(e) => e,
            None => m.entry(value.clone()).or_insert(0),
        };
        *e += delta;
        if *e == 0 {
            m.remove(&**value);
            if m.is_empty() {
                self.0.remove(&**key);
            }
        }
    }

    /// Adds `delta` at the node's domain for `key`, when the node has that label.
    pub fn add_for_node(&mut self, labels: &Labels, key: &str, delta: i64) {
        if let Some(v) = labels.get(key) {
            self.add(key, v, delta);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `scale` times every count of `other`.
    pub fn add_all(&mut self, other: &TopologyCounts, scale: i64) {
        if self.0.is_empty() && scale == 1 {
            self.0.clone_from(&other.0);
            return;
        }
        for (k, vals) in &other.0 {
            for (v, c) in vals {
                self.add_shared(k, v, scale * c);
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &FxHashMap<Arc<str>, i64>)> {
        self.0.iter()
    }
}

/// The incoming pod's terms with namespace selectors resolved to namespace names
/// (upstream `mergeAffinityTermNamespacesIfNotEmpty`): a non-empty selector becomes the
/// list of matching namespaces; an empty one (`{}`) keeps matching every namespace.
pub(crate) fn resolve_term(term: &AffinityTerm, snapshot: &Snapshot) -> AffinityTerm {
    match &term.namespace_selector {
        Some(sel) if !sel.is_empty() => {
            let mut namespaces: Vec<Arc<str>> = term.namespaces.to_vec();
            for (name, labels) in snapshot.namespaces.iter() {
                if sel.matches(labels) && !namespaces.contains(name) {
                    namespaces.push(name.clone());
                }
            }
            AffinityTerm {
                namespaces: namespaces.into(),
                namespace_selector: Some(LabelSelector::Nothing),
                selector: term.selector.clone(),
                topology_key: term.topology_key.clone(),
            }
        }
        _ => term.clone(),
    }
}

/// Upstream `podMatchesAllAffinityTerms`: false for no terms.
pub(crate) fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, &EMPTY_LABELS))
}

pub(crate) static EMPTY_LABELS: std::sync::LazyLock<Labels> =
    std::sync::LazyLock::new(Labels::default);

impl Plugin for InterPodAffinity {
    fn name(&self) -> &str {
        NAME
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::ADD
                    .union(ActionType::UPDATE_POD_LABEL)
                    .union(ActionType::DELETE),
                is_schedulable_after_pod_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD
                    .union(ActionType::UPDATE_NODE_LABEL)
                    .union(ActionType::UPDATE_NODE_TAINT),
                |pod, _old, new| {
                    let Some(node) = new.and_then(|n| n.as_node()) else {
                        return QueueingHint::QueueSkip;
                    };
                    let s = &pod.spec;
                    let relevant = s
                        .required_affinity_terms
                        .iter()
                        .chain(s.required_anti_affinity_terms.iter())
                        .any(|t| node.labels.contains_key(&t.topology_key));
                    if relevant {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::QueueSkip
                    }
                },
            ),
        ])
    }
}

/// Upstream `isSchedulableAfterPodChange` (with the 1.35 fixes: a deleted pod whose own
/// anti-affinity blocked ours also requeues; anti-affinity matches on any term).
fn is_schedulable_after_pod_change(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let old = old.and_then(|o| o.as_pod());
    let new = new.and_then(|n| n.as_pod());
    if old.is_some_and(|p| p.node_name.is_none()) || new.is_some_and(|p| p.node_name.is_none()) {
        return QueueingHint::QueueSkip;
    }
    let affinity = &pod.spec.required_affinity_terms;
    let anti = &pod.spec.required_anti_affinity_terms;
    let any_anti = |p: &Pod| anti.iter().any(|t| t.matches(p, &EMPTY_LABELS));
    let hint = match (old, new) {
        (Some(o), Some(n)) => {
            (!matches_all(affinity, o) && matches_all(affinity, n)) || (any_anti(o) && !any_anti(n))
        }
        (None, Some(n)) => matches_all(affinity, n),
        (Some(o), None) => {
            any_anti(o)
                || o.spec
                    .required_anti_affinity_terms
                    .iter()
                    .any(|t| t.matches(pod, &EMPTY_LABELS))
        }
        (None, None) => false,
    };
    if hint {
        QueueingHint::Queue
    } else {
        QueueingHint::QueueSkip
    }
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, _h: &Arc<Handle>| {
        let a: Args = decode_args(args)?;
        if !(0..=100).contains(&a.hard_pod_affinity_weight) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {}: not in valid range [0, 100]",
                a.hard_pod_affinity_weight
            )
            .into());
        }
        Ok(Arc::new(InterPodAffinity::new(
            i64::from(a.hard_pod_affinity_weight),
            a.ignore_preferred_terms_of_existing_pods,
        )) as Arc<dyn Plugin>)
    })
}

#[cfg(test)]
mod tests {
    //! The incremental indexes against a plain recount, over random cluster changes.

    use super::filtering::PreFilterState;
    use super::*;
    use crate::framework::{CycleState, NodeInfo};
    use crate::model::labels::{Operator, Requirement};
    use crate::model::pod::WeightedAffinityTerm;
    use crate::rand::SplitMix64;
    use crate::testing::{node, pod};

    fn term(key: &str, app: &str) -> AffinityTerm {
        AffinityTerm {
            namespaces: vec![Arc::from("default")].into(),
            namespace_selector: None,
            selector: LabelSelector::Requirements(
                vec![Requirement::new("app", Operator::In, vec![app.to_string()]).unwrap()].into(),
            ),
            topology_key: key.into(),
        }
    }

    const APPS: [&str; 3] = ["a", "b", "c"];
    const KEYS: [&str; 2] = ["kubernetes.io/hostname", "topology.kubernetes.io/zone"];

    fn random_pod(rng: &mut SplitMix64, n: usize, node_name: Option<&str>) -> Arc<Pod> {
        let app = APPS[rng.below(3)];
        let mut b = pod(&format!("p{n}")).label("app", app);
        if let Some(nn) = node_name {
            b = b.node(nn);
        }
        let kind = rng.below(5);
        let (k, other) = (KEYS[rng.below(2)], APPS[rng.below(3)]);
        b.spec(|s| match kind {
            0 => s.required_anti_affinity_terms = vec![term(k, other)].into(),
            1 => s.required_affinity_terms = vec![term(k, other)].into(),
            2 => {
                s.preferred_affinity_terms = vec![WeightedAffinityTerm {
                    weight: 3,
                    term: term(k, other),
                }]
                .into()
            }
            3 => {
                s.preferred_anti_affinity_terms = vec![WeightedAffinityTerm {
                    weight: 2,
                    term: term(k, other),
                }]
                .into()
            }
            _ => {}
        })
        .build()
    }

    /// PreFilter's counts, recounted over every pod.
    fn brute_prefilter(p: &Pod, snap: &Snapshot) -> [TopologyCounts; 3] {
        let (mut existing, mut aff, mut anti) = Default::default();
        let (a, n) = (
            &p.spec.required_affinity_terms,
            &p.spec.required_anti_affinity_terms,
        );
        for ni in snap.node_infos() {
            let labels = &ni.node().labels;
            for e in &ni.pods {
                for t in e.spec.required_anti_affinity_terms.iter() {
                    if t.matches(p, &EMPTY_LABELS) {
                        TopologyCounts::add_for_node(&mut existing, labels, &t.topology_key, 1);
                    }
                }
                if matches_all(a, e) {
                    for t in a.iter() {
                        TopologyCounts::add_for_node(&mut aff, labels, &t.topology_key, 1);
                    }
                }
                for t in n.iter() {
                    if t.matches(e, &EMPTY_LABELS) {
                        TopologyCounts::add_for_node(&mut anti, labels, &t.topology_key, 1);
                    }
                }
            }
        }
        [existing, aff, anti]
    }

    /// PreScore's per-domain score, recounted over every pod.
    fn brute_score(p: &Pod, snap: &Snapshot) -> TopologyCounts {
        let mut score = TopologyCounts::default();
        let s = &p.spec;
        for ni in snap.node_infos() {
            let labels = &ni.node().labels;
            for e in &ni.pods {
                let mut add = |t: &AffinityTerm, w: i64, who: &Pod| {
                    if t.matches(who, &EMPTY_LABELS) {
                        score.add_for_node(labels, &t.topology_key, w);
                    }
                };
                for w in s.preferred_affinity_terms.iter() {
                    add(&w.term, i64::from(w.weight), e);
                }
                for w in s.preferred_anti_affinity_terms.iter() {
                    add(&w.term, -i64::from(w.weight), e);
                }
                for t in e.spec.required_affinity_terms.iter() {
                    add(t, 1, p);
                }
                for w in e.spec.preferred_affinity_terms.iter() {
                    add(&w.term, i64::from(w.weight), p);
                }
                for w in e.spec.preferred_anti_affinity_terms.iter() {
                    add(&w.term, -i64::from(w.weight), p);
                }
            }
        }
        score
    }

    /// Whether a recount's existing anti-affinity counts reject the node.
    fn brute_rejects(existing: &TopologyCounts, ni: &NodeInfo) -> bool {
        let labels = &ni.node().labels;
        existing.iter().any(|(k, vals)| {
            labels
                .get(k)
                .and_then(|v| vals.get(v))
                .is_some_and(|c| *c > 0)
        })
    }

    /// The indexes against a recount as pods come and go and nodes are relabelled;
    /// with `ids`, node infos carry distinct ids (as the cache numbers them) and Filter
    /// reads existing anti-affinity by domain number, else all ids are 0 (hand-built
    /// snapshots) and it reads labels.
    fn check_indexes_against_recount(ids: bool) {
        let mut rng = SplitMix64(7);
        let mut infos = Vec::new();
        let mut n = 0;
        for i in 0..24 {
            let name = format!("n{i}");
            let mut ni = NodeInfo::new(
                node(&name)
                    .label("kubernetes.io/hostname", &name)
                    .label("topology.kubernetes.io/zone", ["z1", "z2", "z3"][i % 3])
                    .build(),
            );
            if ids {
                ni.id = i as u32 + 1;
            }
            for _ in 0..rng.below(4) {
                n += 1;
                ni.add_pod(random_pod(&mut rng, n, Some(&name)));
            }
            infos.push(ni);
        }
        let mut snap = Snapshot::from_node_infos(infos);
        let plugin = InterPodAffinity::new(1, false);
        let incoming: Vec<Arc<Pod>> = (0..6)
            .map(|i| random_pod(&mut rng, 1000 + i, None))
            .collect();
        // Which kinds of counts were non-empty at least once, and how many Filter
        // verdicts were rejections: the test is not vacuous.
        let mut seen = [false; 4];
        let mut rejected = 0;
        for round in 0..60 {
            for p in &incoming {
                let mut state = CycleState::new();
                let (_, s) = PreFilterPlugin::pre_filter(&plugin, &mut state, p, &snap);
                let [mut existing, aff, anti] = brute_prefilter(p, &snap);
                for (i, c) in [&existing, &aff, &anti].iter().enumerate() {
                    seen[i] |= !c.is_empty();
                }
                match state.read::<PreFilterState>() {
                    Some(st) => {
                        assert_eq!(
                            st.counts(),
                            (existing.clone(), &aff, &anti),
                            "round {round}"
                        )
                    }
                    None => {
                        assert!(s.is_skip());
                        assert!(existing.is_empty() && aff.is_empty() && anti.is_empty());
                    }
                }
                if state.read::<PreFilterState>().is_some() {
                    // Filter's verdicts, then again after AddPod/RemovePod (a what-if:
                    // the changes by label on top of the shared counts).
                    for step in 0..2 {
                        let st = state.read::<PreFilterState>().unwrap();
                        for ni in snap.node_infos() {
                            let copy = NodeInfo::new(ni.node_arc().unwrap().clone());
                            let want = brute_rejects(&existing, ni);
                            rejected += usize::from(want);
                            assert_eq!(st.existing_anti_rejects(ni), want, "round {round}");
                            assert_eq!(st.existing_anti_rejects(&copy), want, "round {round}");
                        }
                        if step == 1 {
                            break;
                        }
                        let at = &snap.node_infos()[rng.below(snap.node_infos.len())];
                        let labels = &at.node().labels;
                        let (changed, sign) = match at.pods.first() {
                            Some(e) if rng.below(2) == 0 => (e.clone(), -1),
                            _ => (random_pod(&mut rng, 5000 + round, None), 1),
                        };
                        for t in changed.spec.required_anti_affinity_terms.iter() {
                            if t.matches(p, &EMPTY_LABELS) {
                                existing.add_for_node(labels, &t.topology_key, sign);
                            }
                        }
                        let ext = plugin.pre_filter_extensions().unwrap();
                        let s = if sign > 0 {
                            ext.add_pod(&mut state, p, &changed, at)
                        } else {
                            ext.remove_pod(&mut state, p, &changed, at)
                        };
                        assert!(s.is_success(), "{s:?}");
                    }
                }
                let mut state = CycleState::new();
                let s = PreScorePlugin::pre_score(&plugin, &mut state, p, &[], &snap);
                let want = brute_score(p, &snap);
                seen[3] |= !want.is_empty();
                if s.is_skip() {
                    assert!(want.is_empty(), "round {round}: skipped but {want:?}");
                } else {
                    assert_eq!(
                        scoring::topology_score(&state),
                        Some(&want),
                        "round {round}"
                    );
                }
            }
            // Replace one node: add or remove a pod, or move it to another zone (its
            // domain number changes). Others keep their Arc.
            let i = rng.below(snap.node_infos.len());
            let mut ni = (*snap.node_infos[i]).clone();
            match rng.below(5) {
                0 => {
                    let old = ni.node();
                    let zone = ["z1", "z2", "z3", "z4"][rng.below(4)];
                    let mut b = node(&old.name);
                    for (k, v) in old.labels.iter() {
                        b = b.label(k, if k == KEYS[1] { zone } else { v });
                    }
                    ni.set_node(b.build());
                }
                1 | 2 if !ni.pods.is_empty() => {
                    let uid = ni.pods[rng.below(ni.pods.len())].uid.clone();
                    ni.remove_pod(&uid);
                }
                _ => {
                    n += 1;
                    let name = ni.node().name.to_string();
                    ni.add_pod(random_pod(&mut rng, n, Some(&name)));
                }
            }
            snap.node_infos[i] = Arc::new(ni);
            snap.rebuild_affinity_lists();
        }
        assert_eq!(seen, [true; 4]);
        assert!(rejected > 100, "{rejected} rejections");
    }

    #[test]
    fn indexes_match_a_recount_as_the_cluster_changes() {
        check_indexes_against_recount(true);
    }

    #[test]
    fn indexes_match_a_recount_with_node_ids_repeated() {
        check_indexes_against_recount(false);
    }
}
