//! The framework runtime: builds a profile's plugins from configuration and runs each
//! extension point in configured order with upstream's status handling. It is the only
//! place that knows plugin order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use smallvec::SmallVec;

use super::cycle_state::{CycleState, PluginSet};
use super::events::ClusterEventWithHint;
use super::interface::*;
use super::node_info::NodeInfo;
use super::status::{Code, Status};
use super::waiting_pods::WaitingPods;
use crate::cache::Snapshot;
use crate::cluster::ClusterClient;
use crate::config::{ExtensionPoint, PluginRef, ResolvedProfile};
use crate::model::Pod;

/// What plugins may reach outside their own calls (upstream `framework.Handle`).
pub struct Handle {
    pub waiting_pods: Arc<WaitingPods>,
    pub client: Arc<dyn ClusterClient>,
    /// Storage objects and the volume assume cache, shared by every profile.
    pub volumes: Arc<crate::cache::volumes::VolumeStore>,
    services: std::sync::OnceLock<std::sync::Weak<dyn SchedulerServices>>,
}

/// Scheduler services plugins may use once the scheduler runs.
pub trait SchedulerServices: Send + Sync {
    /// Runs work off the scheduling thread, counted until it finishes.
    fn spawn(&self, fut: BoxFuture<'static, ()>);
    /// The latest object of a pod as the backend reported it.
    fn pod(&self, uid: &str) -> Option<Arc<Pod>>;
    /// Moves pods to activeQ (e.g. a preemptor whose preemption failed).
    fn activate(&self, pods: &[Arc<Pod>]);
    /// Counts a preemption and its victims.
    fn record_preemption(&self, victims: usize);
    /// A sidecar serving `plugins` connected again: retry the pods they turned away.
    fn plugins_recovered(&self, plugins: &[String]);
}

impl Handle {
    pub fn new(waiting_pods: Arc<WaitingPods>, client: Arc<dyn ClusterClient>) -> Self {
        Self::with_volumes(
            waiting_pods,
            client,
            crate::cache::volumes::VolumeStore::new(),
        )
    }

    /// A handle whose plugins read `volumes` (the scheduler's shared store).
    pub fn with_volumes(
        waiting_pods: Arc<WaitingPods>,
        client: Arc<dyn ClusterClient>,
        volumes: Arc<crate::cache::volumes::VolumeStore>,
    ) -> Self {
        Handle {
            waiting_pods,
            client,
            volumes,
            services: std::sync::OnceLock::new(),
        }
    }

    /// Connects the scheduler's services (done once, when the scheduler is built).
    pub fn set_services(&self, s: std::sync::Weak<dyn SchedulerServices>) {
        let _ = self.services.set(s);
    }

    /// The scheduler's services, when running inside one.
    pub fn services(&self) -> Option<Arc<dyn SchedulerServices>> {
        self.services.get().and_then(|w| w.upgrade())
    }

    /// Pods parked at Permit, shared by every profile.
    pub fn waiting_pods(&self) -> &Arc<WaitingPods> {
        &self.waiting_pods
    }
}

/// Builds a plugin from its args (already parsed YAML, `None` when not configured).
pub type PluginFactory = Arc<
    dyn Fn(Option<&serde_json::Value>, &Arc<Handle>) -> Result<Arc<dyn Plugin>, String>
        + Send
        + Sync,
>;

/// Plugin factories by name: the built-in ones plus any a caller adds (remote plugins).
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
}

impl Registry {
    pub fn register(&mut self, name: &str, factory: PluginFactory) {
        self.factories.insert(name.to_string(), factory);
    }

    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(|s| s.as_str())
    }

    fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }
}

#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    plugin: Arc<dyn Plugin>,
}

#[derive(Clone)]
struct ScoreEntry {
    entry: Entry,
    weight: i64,
}

/// Per-cycle score storage, reused across cycles to keep the hot path allocation-free.
#[derive(Default)]
pub struct ScoreBuffer {
    /// Node-major: `scores[node * plugins + plugin]`.
    scores: Vec<i64>,
    column: Vec<i64>,
    /// Weighted totals per node, in input order.
    pub totals: Vec<i64>,
}

/// One profile's plugins, ready to run.
pub struct Framework {
    profile_name: Arc<str>,
    percentage_of_nodes_to_score: Option<i32>,
    pre_enqueue: Vec<Entry>,
    queue_sort: Entry,
    pre_filter: Vec<Entry>,
    /// For each PreFilter plugin, the position of the same plugin among Filter plugins.
    pre_filter_to_filter: Vec<Option<usize>>,
    filter: Vec<Entry>,
    post_filter: Vec<Entry>,
    pre_score: Vec<Entry>,
    pre_score_to_score: Vec<Option<usize>>,
    score: Vec<ScoreEntry>,
    reserve: Vec<Entry>,
    permit: Vec<Entry>,
    pre_bind: Vec<Entry>,
    bind: Vec<Entry>,
    post_bind: Vec<Entry>,
    /// Events each requeue-relevant plugin registered.
    enqueue_extensions: Vec<(Arc<str>, Vec<ClusterEventWithHint>)>,
    /// Sidecar connections to tell about attempt boundaries, once each.
    cycle_hooks: Vec<Arc<dyn CycleHooks>>,
    /// Filter plugins that evaluate batches (by position in `filter`).
    batch_filters: PluginSet,
    /// For each Filter plugin that is also a Score plugin: whether it is a PreScore
    /// plugin too (what a score-ahead request needs to know).
    filter_scores_ahead: Vec<Option<bool>>,
    handle: Arc<Handle>,
}

/// Pods nominated to a node that count for `pod`: priority at least its own, and not
/// the pod itself.
fn relevant_nominated<'a>(pod: &Pod, nominated: &'a [NominatedPod]) -> SmallVec<[&'a Arc<Pod>; 2]> {
    let (priority, uid_fp) = (pod.priority(), uid_fingerprint(&pod.uid));
    nominated
        .iter()
        .filter(|np| np.priority >= priority && !np.is(&pod.uid, uid_fp))
        .map(|np| &np.pod)
        .collect()
}

fn wrap(msg: String) -> Status {
    Status::error(msg)
}

impl Framework {
    /// Builds a profile as upstream `NewFramework` does: instantiate every enabled
    /// plugin, fill each extension point from its own list and multiPoint, check the
    /// queue sort and bind plugins, and compute score weights.
    pub fn new(
        profile: &ResolvedProfile,
        registry: &Registry,
        handle: Arc<Handle>,
    ) -> Result<Framework, String> {
        let plugins = &profile.plugins;
        let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
        for name in plugins.all_enabled() {
            let factory = registry.get(name).ok_or_else(|| {
                format!(
                    "plugin {name:?} does not exist; known plugins: {}",
                    registry.names().collect::<Vec<_>>().join(", ")
                )
            })?;
            let args = profile.plugin_args.get(name);
            let p =
                factory(args, &handle).map_err(|e| format!("initializing plugin {name:?}: {e}"))?;
            instances.insert(name.to_string(), p);
        }

        let implements = |p: &Arc<dyn Plugin>, ep: ExtensionPoint| -> bool {
            match ep {
                ExtensionPoint::PreEnqueue => p.as_pre_enqueue().is_some(),
                ExtensionPoint::QueueSort => p.as_queue_sort().is_some(),
                ExtensionPoint::PreFilter => p.as_pre_filter().is_some(),
                ExtensionPoint::Filter => p.as_filter().is_some(),
                ExtensionPoint::PostFilter => p.as_post_filter().is_some(),
                ExtensionPoint::PreScore => p.as_pre_score().is_some(),
                ExtensionPoint::Score => p.as_score().is_some(),
                ExtensionPoint::Reserve => p.as_reserve().is_some(),
                ExtensionPoint::Permit => p.as_permit().is_some(),
                ExtensionPoint::PreBind => p.as_pre_bind().is_some(),
                ExtensionPoint::Bind => p.as_bind().is_some(),
                ExtensionPoint::PostBind => p.as_post_bind().is_some(),
            }
        };

        let mut lists: HashMap<ExtensionPoint, Vec<Entry>> = HashMap::new();
        for ep in ExtensionPoint::ALL {
            let set = plugins.get(ep);
            let mut specific: Vec<Entry> = Vec::new();
            for r in &set.enabled {
                let p = instances
                    .get(&r.name)
                    .ok_or_else(|| format!("{} {:?} does not exist", ep.interface(), r.name))?;
                if !implements(p, ep) {
                    return Err(format!(
                        "plugin {:?} does not extend {} plugin",
                        r.name,
                        ep.interface()
                    ));
                }
                if specific.iter().any(|e| *e.name == *r.name) {
                    return Err(format!(
                        "plugin {:?} already registered as {:?}",
                        r.name,
                        ep.interface()
                    ));
                }
                specific.push(Entry {
                    name: r.name.as_str().into(),
                    plugin: p.clone(),
                });
            }
            // MultiPoint expansion (upstream `expandMultiPointPlugins`).
            let disabled: HashSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
            let list = if disabled.contains("*") {
                specific
            } else {
                let mut overrides: Vec<&str> = Vec::new();
                let mut multi: Vec<Entry> = Vec::new();
                for r in &plugins.multi_point.enabled {
                    let p = instances
                        .get(&r.name)
                        .ok_or_else(|| format!("{} {:?} does not exist", ep.interface(), r.name))?;
                    if !implements(p, ep) || disabled.contains(r.name.as_str()) {
                        continue;
                    }
                    if specific.iter().any(|e| *e.name == *r.name) {
                        overrides.push(&r.name);
                        continue;
                    }
                    if multi.iter().any(|e| *e.name == *r.name) {
                        return Err(format!(
                            "plugin {:?} already registered as {:?}",
                            r.name,
                            ep.interface()
                        ));
                    }
                    multi.push(Entry {
                        name: r.name.as_str().into(),
                        plugin: p.clone(),
                    });
                }
                let mut out: Vec<Entry> = specific
                    .iter()
                    .filter(|e| overrides.contains(&&*e.name))
                    .cloned()
                    .collect();
                out.extend(multi);
                out.extend(
                    specific
                        .iter()
                        .filter(|e| !overrides.contains(&&*e.name))
                        .cloned(),
                );
                out
            };
            lists.insert(ep, list);
        }
        let mut take = |ep| lists.remove(&ep).unwrap_or_default();

        let mut queue_sort = take(ExtensionPoint::QueueSort);
        if queue_sort.len() != 1 {
            return Err(format!(
                "only one queue sort plugin required for profile with scheduler name {:?}, but got {}",
                profile.scheduler_name,
                queue_sort.len()
            ));
        }
        let bind = take(ExtensionPoint::Bind);
        if bind.is_empty() {
            return Err(format!(
                "at least one bind plugin is needed for profile with scheduler name {:?}",
                profile.scheduler_name
            ));
        }

        // Score weights: the first mention wins (a score-specific weight beats
        // multiPoint's); zero or unset means 1.
        let weight_sources: Vec<&PluginRef> = plugins
            .score
            .enabled
            .iter()
            .chain(plugins.multi_point.enabled.iter())
            .collect();
        let score_entries = take(ExtensionPoint::Score);
        let mut score = Vec::new();
        let mut total: i64 = 0;
        for e in score_entries {
            let w = weight_sources
                .iter()
                .find(|r| *r.name == *e.name)
                .and_then(|r| r.weight)
                .unwrap_or(0);
            if w < 0 {
                return Err(format!(
                    "score plugin {:?} has a negative weight {w}: weights must be 1 or more (0 means 1)",
                    e.name
                ));
            }
            let weight = if w == 0 { 1 } else { i64::from(w) };
            if weight * MAX_NODE_SCORE > i64::MAX - total {
                return Err("total score of Score plugins could overflow".into());
            }
            total += weight * MAX_NODE_SCORE;
            score.push(ScoreEntry { entry: e, weight });
        }

        let pre_filter = take(ExtensionPoint::PreFilter);
        let filter = take(ExtensionPoint::Filter);
        let pre_score = take(ExtensionPoint::PreScore);
        let pre_filter_to_filter = pre_filter
            .iter()
            .map(|p| filter.iter().position(|f| f.name == p.name))
            .collect();
        let pre_score_to_score = pre_score
            .iter()
            .map(|p| score.iter().position(|s| s.entry.name == p.name))
            .collect();

        let pre_enqueue = take(ExtensionPoint::PreEnqueue);
        let reserve = take(ExtensionPoint::Reserve);
        let permit = take(ExtensionPoint::Permit);

        // Plugins that can reject a pod register the events that may requeue it.
        let mut enqueue_extensions: Vec<(Arc<str>, Vec<ClusterEventWithHint>)> = Vec::new();
        for e in pre_enqueue
            .iter()
            .chain(pre_filter.iter())
            .chain(filter.iter())
            .chain(reserve.iter())
            .chain(permit.iter())
        {
            if enqueue_extensions.iter().any(|(n, _)| *n == e.name) {
                continue;
            }
            let events = e
                .plugin
                .events_to_register()
                .unwrap_or_else(super::events::unroll_wildcard_resource);
            enqueue_extensions.push((e.name.clone(), events));
        }

        let mut cycle_hooks: Vec<Arc<dyn CycleHooks>> = Vec::new();
        for p in instances.values() {
            if let Some(h) = p.cycle_hooks() {
                if !cycle_hooks.iter().any(|x| x.key() == h.key()) {
                    cycle_hooks.push(h);
                }
            }
        }
        let mut batch_filters = PluginSet::default();
        for (i, e) in filter.iter().enumerate() {
            if e.plugin.as_filter().is_some_and(|f| f.as_batch().is_some()) {
                batch_filters.insert(i);
            }
        }

        let filter_scores_ahead = filter
            .iter()
            .map(|f| {
                score
                    .iter()
                    .any(|s| s.entry.name == f.name)
                    .then(|| pre_score.iter().any(|p| p.name == f.name))
            })
            .collect();

        Ok(Framework {
            cycle_hooks,
            batch_filters,
            filter_scores_ahead,
            profile_name: profile.scheduler_name.as_str().into(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            pre_enqueue,
            queue_sort: queue_sort.remove(0),
            pre_filter,
            pre_filter_to_filter,
            filter,
            post_filter: take(ExtensionPoint::PostFilter),
            pre_score,
            pre_score_to_score,
            score,
            reserve,
            permit,
            pre_bind: take(ExtensionPoint::PreBind),
            bind,
            post_bind: take(ExtensionPoint::PostBind),
            enqueue_extensions,
            handle,
        })
    }

    pub fn profile_name(&self) -> &Arc<str> {
        &self.profile_name
    }

    /// Names of the Filter plugins this profile runs, in order.
    pub fn filter_names(&self) -> impl Iterator<Item = &str> {
        self.filter.iter().map(|e| &*e.name)
    }

    /// Tells sidecars an attempt starts (replicating the snapshot first).
    pub fn start_cycle(&self, state: &mut CycleState, pod: &Arc<Pod>, snapshot: &Snapshot) {
        for h in &self.cycle_hooks {
            h.cycle_start(state, pod, snapshot, &self.profile_name);
        }
    }

    /// Tells sidecars an attempt is over.
    pub fn end_cycle(&self, state: &CycleState) {
        for h in &self.cycle_hooks {
            h.cycle_end(state);
        }
    }

    /// Lookahead: while the current pod is still in its cycle, sends `pod`'s (the
    /// queue's next) batched Filter over `nodes`, the first round its attempt will
    /// evaluate, to the remote plugins that allow it. The returned state is where that
    /// attempt begins ([`cycle_start`](CycleHooks::cycle_start) adopts it); answers
    /// are used only if that round names the same unchanged nodes, so placements are
    /// what they would be without it. None when no plugin took part.
    pub fn lookahead(
        &self,
        cycle_id: u64,
        pod: &Arc<Pod>,
        snapshot: &Snapshot,
        nodes: &[&NodeInfo],
        score_first: usize,
    ) -> Option<CycleState> {
        if !self.has_batch_filters() {
            return None;
        }
        let mut state = CycleState::new();
        state.cycle_id = cycle_id;
        let mut started = false;
        for h in &self.cycle_hooks {
            started |= h.lookahead_start(&mut state, pod, snapshot, &self.profile_name);
        }
        if !started {
            return None;
        }
        let mut sent = false;
        for (i, e) in self.filter.iter().enumerate() {
            if !self.batch_filters.contains(i) {
                continue;
            }
            if let Some(b) = e.plugin.as_filter().and_then(|f| f.as_batch()) {
                sent |= b.lookahead_filter(&mut state, pod, nodes, self.ahead_for(i, score_first));
            }
        }
        if !sent {
            self.end_cycle(&state);
            return None;
        }
        Some(state)
    }

    /// How many queued pods one lookahead may cover: the most any of this profile's
    /// sidecars takes in one message (0 when none is node-local).
    pub fn lookahead_pods(&self) -> usize {
        self.cycle_hooks
            .iter()
            .map(|h| h.lookahead_pods())
            .max()
            .unwrap_or(0)
    }

    /// [`Self::lookahead`] for several queued pods (cycle id, pod, first round's
    /// nodes), their Filter calls to each sidecar travelling in one message.
    pub fn lookahead_batch(
        &self,
        pods: &[(u64, Arc<Pod>, Vec<&NodeInfo>)],
        snapshot: &Snapshot,
        score_first: usize,
    ) -> Vec<Option<CycleState>> {
        for h in &self.cycle_hooks {
            h.begin_lookahead_batch();
        }
        let out = pods
            .iter()
            .map(|(id, pod, nodes)| self.lookahead(*id, pod, snapshot, nodes, score_first))
            .collect();
        for h in &self.cycle_hooks {
            h.end_lookahead_batch();
        }
        out
    }

    /// The score-ahead request for batch filter `i` (see [`ScoreAhead`]).
    fn ahead_for(&self, i: usize, score_first: usize) -> Option<ScoreAhead> {
        match self.filter_scores_ahead[i] {
            Some(pre_score) if score_first > 0 => Some(ScoreAhead {
                first: score_first,
                pre_score,
            }),
            _ => None,
        }
    }

    /// Whether some Filter plugin evaluates batches (remote plugins).
    pub fn has_batch_filters(&self) -> bool {
        !self.batch_filters.is_empty()
    }

    /// Filter over a batch of nodes without nominated pods when some Filter plugins
    /// are remote: their calls go out first, the in-process plugins run meanwhile, and
    /// each node's status is the first failure in plugin order — what running the
    /// plugins node by node gives. Returns the failing nodes by index, in order.
    /// `score_first`: how many feasible nodes the caller still needs (0: no scoring
    /// follows); remote plugins that also score are asked to score that many ahead.
    pub fn run_filter_plugins_batched(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[&Arc<NodeInfo>],
        parallel: bool,
        score_first: usize,
    ) -> Result<Vec<(usize, Status)>, Status> {
        let refs: Vec<&NodeInfo> = nodes.iter().map(|n| &***n).collect();
        self.filter_batch(&[state], pod, &refs, parallel, score_first, true)
    }

    /// Filter for preemption's dry runs over many node copies at once, each with its
    /// own state fork and nominated pods: what
    /// [`run_filter_plugins_with_nominated_pods_mut`](Self::run_filter_plugins_with_nominated_pods_mut)
    /// gives per copy, but remote plugins answer every copy without relevant nominated
    /// pods in one batched call (each item carrying its what-if delta), so a reprieve
    /// step over many candidate nodes is one exchange.
    pub fn run_filter_plugins_what_if(
        &self,
        pod: &Pod,
        items: &mut [(&CycleState, &mut NodeInfo, &[NominatedPod])],
    ) -> Vec<Status> {
        let one = |(st, ni, nominated): &mut (&CycleState, &mut NodeInfo, &[NominatedPod])| {
            self.run_filter_plugins_with_nominated_pods_mut(st, pod, ni, nominated)
        };
        if !self.has_batch_filters() || items.len() < 2 {
            let min_len = PARALLEL_CHUNK.min(items.len().max(1));
            return items
                .par_iter_mut()
                .with_min_len(min_len)
                .map(one)
                .collect();
        }
        let mut out: Vec<Status> = vec![Status::success(); items.len()];
        let mut batched = Vec::with_capacity(items.len());
        for (i, it) in items.iter_mut().enumerate() {
            if relevant_nominated(pod, it.2).is_empty() {
                batched.push(i);
            } else {
                out[i] = one(it);
            }
        }
        let states: Vec<&CycleState> = batched.iter().map(|&i| items[i].0).collect();
        let refs: Vec<&NodeInfo> = batched.iter().map(|&i| &*items[i].1).collect();
        match self.filter_batch(
            &states,
            pod,
            &refs,
            refs.len() >= PARALLEL_THRESHOLD,
            0,
            false,
        ) {
            Ok(failures) => {
                for (k, s) in failures {
                    out[batched[k]] = s;
                }
            }
            Err(s) => {
                for &i in &batched {
                    out[i] = s.clone();
                }
            }
        }
        out
    }

    /// Batched Filter: `states` holds one state for every node, or one for all;
    /// `from_snapshot` as in [`BatchFilter::start_filter`].
    fn filter_batch(
        &self,
        states: &[&CycleState],
        pod: &Pod,
        refs: &[&NodeInfo],
        parallel: bool,
        score_first: usize,
        from_snapshot: bool,
    ) -> Result<Vec<(usize, Status)>, Status> {
        let Some(&state) = states.first() else {
            return Ok(Vec::new());
        };
        let state_of = |i: usize| if states.len() == 1 { state } else { states[i] };
        let skip = state.skip_filter_plugins;
        let mut pending = Vec::new();
        for (i, e) in self.filter.iter().enumerate() {
            if !self.batch_filters.contains(i) || skip.contains(i) {
                continue;
            }
            if let Some(b) = e.plugin.as_filter().and_then(|f| f.as_batch()) {
                let ahead = self.ahead_for(i, score_first);
                let call = b
                    .start_filter(state, pod, refs, ahead, from_snapshot)
                    .map_err(|s| {
                        wrap(format!(
                            "running {:?} filter plugin: {}",
                            e.name,
                            s.message()
                        ))
                    })?;
                pending.push((i, call));
            }
        }
        let local = |k: usize| -> Option<(usize, Status)> {
            let (state, ni) = (state_of(k), refs[k]);
            for (i, e) in self.filter.iter().enumerate() {
                if self.batch_filters.contains(i) || (!skip.is_empty() && skip.contains(i)) {
                    continue;
                }
                let Some(p) = e.plugin.as_filter() else {
                    continue;
                };
                let s = p.filter(state, pod, ni);
                if !s.is_success() {
                    return Some((i, s));
                }
            }
            None
        };
        let mut first: Vec<Option<(usize, Status)>> = if parallel {
            filter_map_adaptive(refs.len(), |k| Some(local(k)))
        } else {
            (0..refs.len()).map(local).collect()
        };
        for (pi, call) in pending {
            let failures = call.wait().map_err(|s| {
                wrap(format!(
                    "running {:?} filter plugin: {}",
                    self.filter[pi].name,
                    s.message()
                ))
            })?;
            for (ni, s) in failures {
                let Some(slot) = first.get_mut(ni) else {
                    continue;
                };
                if slot.as_ref().is_none_or(|(i, _)| pi < *i) {
                    *slot = Some((pi, s));
                }
            }
        }
        Ok(first
            .into_iter()
            .enumerate()
            .filter_map(|(ni, f)| {
                let (pi, s) = f?;
                let name = &self.filter[pi].name;
                let s = if s.is_rejected() {
                    s
                } else {
                    wrap(format!("running {:?} filter plugin: {}", name, s.message()))
                };
                Some((ni, s.with_plugin(name)))
            })
            .collect())
    }

    pub fn percentage_of_nodes_to_score(&self) -> Option<i32> {
        self.percentage_of_nodes_to_score
    }

    pub fn handle(&self) -> &Arc<Handle> {
        &self.handle
    }

    pub fn waiting_pods(&self) -> &Arc<WaitingPods> {
        &self.handle.waiting_pods
    }

    pub fn has_filter_plugins(&self) -> bool {
        !self.filter.is_empty()
    }

    pub fn has_score_plugins(&self) -> bool {
        !self.score.is_empty()
    }

    pub fn has_post_filter_plugins(&self) -> bool {
        !self.post_filter.is_empty()
    }

    pub fn queue_sort_name(&self) -> &str {
        &self.queue_sort.name
    }

    /// The events each plugin registered, for the queue's requeue decisions.
    pub fn enqueue_extensions(&self) -> &[(Arc<str>, Vec<ClusterEventWithHint>)] {
        &self.enqueue_extensions
    }

    /// Names of plugins configured at each point, for logs and `--help`-like output.
    pub fn describe(&self) -> Vec<(&'static str, Vec<String>)> {
        let names = |v: &[Entry]| v.iter().map(|e| e.name.to_string()).collect::<Vec<_>>();
        vec![
            ("preEnqueue", names(&self.pre_enqueue)),
            ("queueSort", vec![self.queue_sort.name.to_string()]),
            ("preFilter", names(&self.pre_filter)),
            ("filter", names(&self.filter)),
            ("postFilter", names(&self.post_filter)),
            ("preScore", names(&self.pre_score)),
            (
                "score",
                self.score
                    .iter()
                    .map(|s| format!("{}({})", s.entry.name, s.weight))
                    .collect(),
            ),
            ("reserve", names(&self.reserve)),
            ("permit", names(&self.permit)),
            ("preBind", names(&self.pre_bind)),
            ("bind", names(&self.bind)),
            ("postBind", names(&self.post_bind)),
        ]
    }

    // ---- queue ---------------------------------------------------------------

    /// Runs PreEnqueue plugins, the gating plugin first; returns the first rejecting
    /// plugin and its status.
    pub fn run_pre_enqueue_plugins(
        &self,
        pod: &Pod,
        gating: Option<&str>,
    ) -> Option<(Arc<str>, Status)> {
        let ordered = gating
            .and_then(|g| self.pre_enqueue.iter().find(|e| *e.name == *g))
            .into_iter()
            .chain(
                self.pre_enqueue
                    .iter()
                    .filter(move |e| Some(&*e.name) != gating),
            );
        for e in ordered {
            let Some(p) = e.plugin.as_pre_enqueue() else {
                continue;
            };
            let s = p.pre_enqueue(pod);
            if !s.is_success() {
                return Some((e.name.clone(), s.with_plugin(&e.name)));
            }
        }
        None
    }

    pub fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match self.queue_sort.plugin.as_queue_sort() {
            Some(q) => q.less(a, b),
            None => false,
        }
    }

    /// The QueueSort plugin's key for `pod`, if it orders by key (see
    /// `QueueSortPlugin::sort_key`).
    pub fn queue_sort_key(&self, pod: &Pod) -> Option<Arc<[u8]>> {
        self.queue_sort.plugin.as_queue_sort()?.sort_key(pod)
    }

    // ---- scheduling cycle ----------------------------------------------------

    /// Runs PreFilter plugins (upstream `RunPreFilterPlugins`). Returns the merged node
    /// narrowing, the status, and the plugins that narrowed the nodes.
    pub fn run_pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status, Vec<Arc<str>>) {
        let mut result = PreFilterResult::default();
        let mut plugins_with_nodes: Vec<Arc<str>> = Vec::new();
        let mut return_status = Status::success();
        let mut skip = PluginSet::default();
        for (i, e) in self.pre_filter.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            let span = state.trace.plugin("PreFilter", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            let (r, s) = span.in_scope(|| p.pre_filter(state, pod, snapshot));
            plugin_metric(&e.name, "PreFilter", s.code(), t);
            if s.is_skip() {
                if let Some(fi) = self.pre_filter_to_filter[i] {
                    skip.insert(fi);
                }
                continue;
            }
            if !s.is_success() {
                let s = s.with_plugin(&e.name);
                match s.code() {
                    Code::UnschedulableAndUnresolvable => {
                        state.skip_filter_plugins = skip;
                        return (PreFilterResult::default(), s, Vec::new());
                    }
                    Code::Unschedulable => {
                        return_status = s;
                        continue;
                    }
                    _ => {
                        state.skip_filter_plugins = skip;
                        return (
                            PreFilterResult::default(),
                            wrap(format!(
                                "running PreFilter plugin {:?}: {}",
                                e.name,
                                s.message()
                            ))
                            .with_plugin(&e.name),
                            Vec::new(),
                        );
                    }
                }
            }
            if r.as_ref().is_some_and(|r| !r.all_nodes()) {
                plugins_with_nodes.push(e.name.clone());
            }
            result = result.merge(r);
            if result.node_names.as_ref().is_some_and(|n| n.is_empty()) {
                let mut names: Vec<&str> = plugins_with_nodes.iter().map(|n| &**n).collect();
                names.sort();
                let msg = if names.len() == 1 {
                    format!("node(s) didn't satisfy plugin {}", names[0])
                } else {
                    format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        names.join(" ")
                    )
                };
                state.skip_filter_plugins = skip;
                return (result, Status::unresolvable(msg), plugins_with_nodes);
            }
        }
        state.skip_filter_plugins = skip;
        (result, return_status, plugins_with_nodes)
    }

    /// Whether some PreFilter plugin not skipped this cycle has AddPod/RemovePod
    /// extensions, i.e. whether adding a pod to a node changes the cycle state.
    pub fn add_pod_extensions_active(&self, state: &CycleState) -> bool {
        self.pre_filter.iter().enumerate().any(|(i, e)| {
            !self.pre_filter_to_filter[i].is_some_and(|fi| state.skip_filter_plugins.contains(fi))
                && e.plugin
                    .as_pre_filter()
                    .and_then(|p| p.pre_filter_extensions())
                    .is_some()
        })
    }

    /// AddPod on every PreFilter plugin's extensions (upstream
    /// `RunPreFilterExtensionAddPod`).
    pub fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_add: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        for (i, e) in self.pre_filter.iter().enumerate() {
            if self.pre_filter_to_filter[i].is_some_and(|fi| state.skip_filter_plugins.contains(fi))
            {
                continue;
            }
            let Some(ext) = e
                .plugin
                .as_pre_filter()
                .and_then(|p| p.pre_filter_extensions())
            else {
                continue;
            };
            let s = ext.add_pod(state, pod, pod_to_add, node);
            if !s.is_success() {
                return wrap(format!(
                    "running AddPod on PreFilter plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        Status::success()
    }

    /// RemovePod on every PreFilter plugin's extensions.
    pub fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        pod_to_remove: &Arc<Pod>,
        node: &NodeInfo,
    ) -> Status {
        for (i, e) in self.pre_filter.iter().enumerate() {
            if self.pre_filter_to_filter[i].is_some_and(|fi| state.skip_filter_plugins.contains(fi))
            {
                continue;
            }
            let Some(ext) = e
                .plugin
                .as_pre_filter()
                .and_then(|p| p.pre_filter_extensions())
            else {
                continue;
            };
            let s = ext.remove_pod(state, pod, pod_to_remove, node);
            if !s.is_success() {
                return wrap(format!(
                    "running RemovePod on PreFilter plugin {:?}: {}",
                    e.name,
                    s.message()
                ));
            }
        }
        Status::success()
    }

    /// Filter plugins on one node; the first failure wins (upstream `RunFilterPlugins`).
    #[inline]
    pub fn run_filter_plugins(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let skip = state.skip_filter_plugins;
        for (i, e) in self.filter.iter().enumerate() {
            if !skip.is_empty() && skip.contains(i) {
                continue;
            }
            let Some(p) = e.plugin.as_filter() else {
                continue;
            };
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                let s = if s.is_rejected() {
                    s
                } else {
                    wrap(format!(
                        "running {:?} filter plugin: {}",
                        e.name,
                        s.message()
                    ))
                };
                return s.with_plugin(&e.name);
            }
        }
        Status::success()
    }

    /// Filter with nominated pods (upstream `RunFilterPluginsWithNominatedPods`): pods
    /// nominated to this node with priority ≥ the pod's count as if placed; when any
    /// were added and the pod fits, it must also fit without them.
    pub fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
        nominated: &[NominatedPod],
    ) -> Status {
        let relevant = relevant_nominated(pod, nominated);
        if relevant.is_empty() {
            return self.run_filter_plugins(state, pod, node);
        }
        if !self.add_pod_extensions_active(state) {
            // AddPod would change no state: reuse the node's shared copy with these
            // pods added instead of copying node and state for this cycle.
            let with = node.with_added_pods(&relevant);
            let s = self.run_filter_plugins(state, pod, &with);
            if !s.is_success() {
                return s;
            }
            return self.run_filter_plugins(state, pod, node);
        }
        let mut node_out = node.clone();
        let mut state_out = state.clone();
        for np in relevant {
            node_out.add_pod(np.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_out, pod, np, &node_out);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter_plugins(&state_out, pod, &node_out);
        if !s.is_success() {
            return s;
        }
        self.run_filter_plugins(state, pod, node)
    }

    /// The same decision on a node copy the caller owns (preemption's dry run): the
    /// nominated pods are added to it and taken out again instead of copying it.
    pub fn run_filter_plugins_with_nominated_pods_mut(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &mut NodeInfo,
        nominated: &[NominatedPod],
    ) -> Status {
        let relevant = relevant_nominated(pod, nominated);
        if relevant.is_empty() {
            return self.run_filter_plugins(state, pod, node);
        }
        if self.add_pod_extensions_active(state) {
            return self.run_filter_plugins_with_nominated_pods(state, pod, node, nominated);
        }
        for np in &relevant {
            node.add_pod((*np).clone());
        }
        let s = self.run_filter_plugins(state, pod, node);
        for np in relevant.iter().rev() {
            node.remove_pod_object(np);
        }
        if !s.is_success() {
            return s;
        }
        self.run_filter_plugins(state, pod, node)
    }

    /// PostFilter plugins (upstream `RunPostFilterPlugins`).
    pub fn run_post_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        statuses: &NodeToStatus,
        snapshot: &Snapshot,
        nominated: &NominatedPods,
    ) -> (Option<PostFilterResult>, Status) {
        let mut result = None;
        let mut reasons: Vec<std::borrow::Cow<'static, str>> = Vec::new();
        let mut rejector: Option<Arc<str>> = None;
        for e in &self.post_filter {
            let Some(p) = e.plugin.as_post_filter() else {
                continue;
            };
            let ctx = PostFilterContext {
                state: &mut *state,
                snapshot,
                framework: self,
                nominated,
            };
            let (r, s) = p.post_filter(ctx, pod, statuses);
            if s.is_success() {
                return (r, s);
            }
            if s.code() == Code::UnschedulableAndUnresolvable {
                return (r, s.with_plugin(&e.name));
            }
            if !s.is_rejected() {
                return (None, Status::error(s.message()).with_plugin(&e.name));
            }
            if let Some(r) = r {
                if r.nominating_info != NominatingInfo::Noop {
                    result = Some(r);
                }
            }
            reasons.extend(s.reasons().iter().cloned());
            if rejector.is_none() {
                rejector = Some(e.name.clone());
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        s.set_plugin(rejector);
        (result, s)
    }

    /// PreScore plugins; Skip marks the plugin's Score to be skipped.
    pub fn run_pre_score_plugins(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let mut skip = PluginSet::default();
        let mut deferred = PluginSet::default();
        state.deferred_pre_score = deferred;
        for (i, e) in self.pre_score.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_score() else {
                continue;
            };
            if p.deferrable() {
                if let Some(si) = self.pre_score_to_score[i] {
                    if self.score[si]
                        .entry
                        .plugin
                        .as_score()
                        .is_some_and(|s| s.as_batch().is_some())
                    {
                        deferred.insert(si);
                        continue;
                    }
                }
            }
            let s = p.pre_score(state, pod, nodes, snapshot);
            if s.is_skip() {
                if let Some(si) = self.pre_score_to_score[i] {
                    skip.insert(si);
                }
                continue;
            }
            if !s.is_success() {
                state.skip_score_plugins = skip;
                return wrap(format!(
                    "running PreScore plugin {:?}: {}",
                    e.name,
                    s.message()
                ))
                .with_plugin(&e.name);
            }
        }
        state.skip_score_plugins = skip;
        state.deferred_pre_score = deferred;
        Status::success()
    }

    /// Score, NormalizeScore and weighting over `nodes` (upstream `RunScorePlugins`):
    /// nodes are split into chunks, each plugin scoring a whole chunk at once, in
    /// parallel when the first chunk's time says it pays; totals land in `buf.totals`
    /// in input order.
    pub fn run_score_plugins(
        &self,
        state: &CycleState,
        pod: &Pod,
        nodes: &[Arc<NodeInfo>],
        buf: &mut ScoreBuffer,
    ) -> Result<(), Status> {
        let active: Vec<usize> = (0..self.score.len())
            .filter(|i| !state.skip_score_plugins.contains(*i))
            .collect();
        let np = active.len();
        let n = nodes.len();
        buf.totals.clear();
        buf.totals.resize(n, 0);
        if np == 0 || n == 0 {
            return Ok(());
        }
        buf.scores.clear();
        buf.scores.resize(n * np, 0);
        // Remote plugins' calls go out before the in-process scoring starts.
        let mut remote = Vec::new();
        for (slot, &pi) in active.iter().enumerate() {
            let e = &self.score[pi].entry;
            if let Some(b) = e.plugin.as_score().and_then(|p| p.as_batch()) {
                let call = b
                    .start_score(state, pod, nodes, state.deferred_pre_score.contains(pi))
                    .map_err(|s| {
                        wrap(format!(
                            "running Score plugins: plugin {:?} failed with: {}",
                            e.name,
                            s.message()
                        ))
                        .with_plugin(&e.name)
                    })?;
                remote.push((slot, call));
            }
        }
        let mut remote_results: Vec<(usize, Vec<i64>, bool)> = Vec::new();
        // Chunk-major layout: chunk k holds, plugin by plugin, the scores of its nodes.
        let chunk = if n >= PARALLEL_THRESHOLD {
            n.div_ceil(rayon::current_num_threads().max(1) * 4)
                .max(PARALLEL_CHUNK)
        } else {
            n
        };
        let entries = &self.score;
        let score_chunk = |(scores, nodes): (&mut [i64], &[Arc<NodeInfo>])| -> Result<(), Status> {
            let len = nodes.len();
            for (slot, &pi) in active.iter().enumerate() {
                let e = &entries[pi].entry;
                let Some(p) = e.plugin.as_score() else {
                    continue;
                };
                if p.as_batch().is_some() {
                    continue;
                }
                p.score_nodes(state, pod, nodes, &mut scores[slot * len..(slot + 1) * len])
                    .map_err(|s| {
                        wrap(format!(
                            "running Score plugins: plugin {:?} failed with: {}",
                            e.name,
                            s.message()
                        ))
                        .with_plugin(&e.name)
                    })?;
            }
            Ok(())
        };
        if chunk < n {
            // The first chunk here, timed; the rest in parallel only if it pays (see
            // filter_map_adaptive). The layout is the same either way.
            let (head, tail) = buf.scores.split_at_mut(chunk * np);
            let t0 = Instant::now();
            score_chunk((head, &nodes[..chunk]))?;
            if worth_parallel(t0.elapsed(), chunk, n - chunk, rayon::current_num_threads()) {
                tail.par_chunks_mut(chunk * np)
                    .zip(nodes[chunk..].par_chunks(chunk))
                    .try_for_each(score_chunk)?;
            } else {
                tail.chunks_mut(chunk * np)
                    .zip(nodes[chunk..].chunks(chunk))
                    .try_for_each(score_chunk)?;
            }
        } else {
            score_chunk((&mut buf.scores[..], nodes))?;
        }
        for (slot, call) in remote {
            let e = &self.score[active[slot]].entry;
            let (scores, normalized) = call.wait().map_err(|s| {
                wrap(format!(
                    "running Score plugins: plugin {:?} failed with: {}",
                    e.name,
                    s.message()
                ))
                .with_plugin(&e.name)
            })?;
            remote_results.push((slot, scores, normalized));
        }
        let at = |node: usize, slot: usize| -> usize {
            let k = node / chunk;
            let start = k * chunk;
            let len = chunk.min(n - start);
            start * np + slot * len + (node - start)
        };
        // NormalizeScore per plugin, then range check and weights.
        for (slot, &pi) in active.iter().enumerate() {
            let e = &self.score[pi];
            let Some(p) = e.entry.plugin.as_score() else {
                continue;
            };
            buf.column.clear();
            let mut normalized = false;
            match remote_results.iter_mut().find(|(s, _, _)| *s == slot) {
                Some((_, scores, norm)) => {
                    buf.column.append(scores);
                    normalized = *norm;
                }
                None => buf.column.extend((0..n).map(|i| buf.scores[at(i, slot)])),
            }
            if p.has_normalize_score() && !normalized {
                let s = p.normalize_score(state, pod, nodes, &mut buf.column);
                if !s.is_success() {
                    return Err(wrap(format!(
                        "running Normalize on Score plugins: plugin {:?} failed with: {}",
                        e.entry.name,
                        s.message()
                    ))
                    .with_plugin(&e.entry.name));
                }
            }
            for (total, &v) in buf.totals.iter_mut().zip(buf.column.iter()) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&v) {
                    return Err(wrap(format!(
                        "applying score defaultWeights on Score plugins: plugin {:?} returns an invalid score {v}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        e.entry.name
                    ))
                    .with_plugin(&e.entry.name));
                }
                *total += v * e.weight;
            }
        }
        Ok(())
    }

    pub fn run_reserve_plugins_reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
    ) -> Status {
        for e in &self.reserve {
            let Some(p) = e.plugin.as_reserve() else {
                continue;
            };
            let span = state.trace.plugin("Reserve", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            let s = span.in_scope(|| p.reserve(state, pod, node));
            plugin_metric(&e.name, "Reserve", s.code(), t);
            if !s.is_success() {
                if s.is_rejected() {
                    return s.with_plugin(&e.name);
                }
                return wrap(format!(
                    "running Reserve plugin {:?}: {}",
                    e.name,
                    s.message()
                ))
                .with_plugin(&e.name);
            }
        }
        Status::success()
    }

    /// Unreserve on every Reserve plugin, in reverse order.
    pub fn run_reserve_plugins_unreserve(&self, state: &mut CycleState, pod: &Pod, node: &str) {
        for e in self.reserve.iter().rev() {
            if let Some(p) = e.plugin.as_reserve() {
                p.unreserve(state, pod, node);
            }
        }
    }

    /// Permit plugins; a Wait parks the pod in the waiting-pods map and returns Wait.
    pub fn run_permit_plugins(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        node: &Arc<str>,
    ) -> Status {
        let mut waits: Vec<(Arc<str>, Duration)> = Vec::new();
        for e in &self.permit {
            let Some(p) = e.plugin.as_permit() else {
                continue;
            };
            let span = state.trace.plugin("Permit", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            let (s, timeout) = span.in_scope(|| p.permit(state, pod, node));
            plugin_metric(&e.name, "Permit", s.code(), t);
            if s.is_success() {
                continue;
            }
            if s.is_rejected() {
                return s.with_plugin(&e.name);
            }
            if s.is_wait() {
                waits.push((e.name.clone(), timeout.min(MAX_PERMIT_TIMEOUT)));
                continue;
            }
            return wrap(format!(
                "running Permit plugin {:?}: {}",
                e.name,
                s.message()
            ))
            .with_plugin(&e.name);
        }
        if waits.is_empty() {
            return Status::success();
        }
        self.handle
            .waiting_pods
            .add(pod.clone(), node.clone(), waits, Instant::now());
        Status::new(
            Code::Wait,
            format!(
                "one or more plugins asked to wait and no plugin rejected pod {:?}",
                pod.name
            ),
        )
    }

    /// Blocks the binding cycle until a waiting pod is allowed or rejected.
    pub async fn wait_on_permit(&self, pod: &Pod) -> Status {
        let s = self.handle.waiting_pods.wait(&pod.uid).await;
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let plugin = s.plugin().cloned();
        let mut out = wrap(format!("waiting on permit for pod: {}", s.message()));
        out.set_plugin(plugin);
        out
    }

    pub fn will_wait_on_permit(&self, pod: &Pod) -> bool {
        self.handle.waiting_pods.get(&pod.uid).is_some()
    }

    // ---- binding cycle -------------------------------------------------------

    pub async fn run_pre_bind_plugins(
        &self,
        state: &CycleState,
        pod: &Arc<Pod>,
        node: &str,
    ) -> Status {
        for e in &self.pre_bind {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            let span = state.trace.plugin("PreBind", &e.name);
            let s = tracing::Instrument::instrument(p.pre_bind(state, pod, node), span).await;
            if s.is_success() || s.is_skip() {
                continue;
            }
            if s.is_rejected() {
                return s.with_plugin(&e.name);
            }
            return wrap(format!(
                "running PreBind plugin {:?}: {}",
                e.name,
                s.message()
            ))
            .with_plugin(&e.name);
        }
        Status::success()
    }

    /// Bind plugins in order until one handles the pod (does not return Skip).
    pub async fn run_bind_plugins(&self, state: &CycleState, pod: &Arc<Pod>, node: &str) -> Status {
        let mut last = Status::skip();
        for e in &self.bind {
            let Some(p) = e.plugin.as_bind() else {
                continue;
            };
            let span = state.trace.plugin("Bind", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            let s = tracing::Instrument::instrument(p.bind(state, pod, node), span).await;
            plugin_metric(&e.name, "Bind", s.code(), t);
            if s.is_skip() {
                last = s;
                continue;
            }
            if s.is_success() {
                return s;
            }
            if s.is_rejected() {
                return s.with_plugin(&e.name);
            }
            return wrap(format!("running Bind plugin {:?}: {}", e.name, s.message()))
                .with_plugin(&e.name);
        }
        last
    }

    pub async fn run_post_bind_plugins(&self, state: &CycleState, pod: &Arc<Pod>, node: &str) {
        for e in &self.post_bind {
            if let Some(p) = e.plugin.as_post_bind() {
                let span = state.trace.plugin("PostBind", &e.name);
                tracing::Instrument::instrument(p.post_bind(state, pod, node), span).await;
            }
        }
    }
}

/// Below this many nodes, Filter and Score run on the calling thread: handing work to
/// the pool costs more than it saves.
pub const PARALLEL_THRESHOLD: usize = 64;
/// Smallest unit of work a pool thread takes.
pub const PARALLEL_CHUNK: usize = 16;
/// Work projected below this stays on the calling thread even over many nodes: waking
/// pool threads and letting them spin down costs tens of µs of CPU (more on small
/// VMs) and takes a core that the binding thread or a plugin sidecar may need. On 2
/// cores, SchedulingBasic's cheap filters over 641 nodes ran no faster in parallel
/// but used a quarter more CPU per pod.
pub const PARALLEL_MIN_WORK: Duration = Duration::from_micros(100);
/// Nodes evaluated (and timed) on the calling thread before deciding.
const PROBE_NODES: usize = 32;

/// Whether the `rest` items after `probe` items that took `elapsed` are worth a pool
/// of `threads`.
fn worth_parallel(elapsed: Duration, probe: usize, rest: usize, threads: usize) -> bool {
    if probe == 0 || rest < 2 * PARALLEL_CHUNK || threads < 2 {
        return false;
    }
    // Nanoseconds fit u64 for any realistic run; saturate rather than wrap.
    let per = elapsed.as_nanos() / probe as u128;
    per.saturating_mul(rest as u128) >= PARALLEL_MIN_WORK.as_nanos()
}

/// `(0..n).filter_map(f)` in order, in parallel only when it pays: the first nodes run
/// on the calling thread, timed, and the rest go to the pool only if their projected
/// time reaches [`PARALLEL_MIN_WORK`]. Results never depend on the choice.
pub fn filter_map_adaptive<T, F>(n: usize, f: F) -> Vec<T>
where
    T: Send,
    F: Fn(usize) -> Option<T> + Sync + Send,
{
    let probe = PROBE_NODES.min(n);
    let t0 = Instant::now();
    let mut out: Vec<T> = (0..probe).filter_map(&f).collect();
    if worth_parallel(t0.elapsed(), probe, n - probe, rayon::current_num_threads()) {
        let min_len = ((n - probe) / (rayon::current_num_threads().max(1) * 4)).max(PARALLEL_CHUNK);
        let rest: Vec<T> = (probe..n)
            .into_par_iter()
            .with_min_len(min_len)
            .filter_map(&f)
            .collect();
        out.extend(rest);
    } else {
        out.extend((probe..n).filter_map(&f));
    }
    out
}

/// `scheduler_plugin_execution_duration_seconds`, for the sampled attempts (`start`
/// is `None` in the others, as upstream samples 10%).
fn plugin_metric(plugin: &str, point: &str, code: Code, start: Option<Instant>) {
    if let Some(t) = start {
        crate::telemetry::metrics::SCHEDULER
            .plugin_execution_duration
            .observe(&[plugin, point, code.as_str()], t.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{default_framework, node, pod};

    #[test]
    fn parallel_only_when_the_projected_work_pays() {
        let us = Duration::from_micros;
        // 1 µs per node over 200 more nodes: 200 µs, worth it.
        assert!(worth_parallel(us(32), 32, 200, 2));
        // 0.1 µs per node: 20 µs, not.
        assert!(!worth_parallel(Duration::from_nanos(3200), 32, 200, 2));
        // Never with one thread, too few nodes left, or nothing timed.
        assert!(!worth_parallel(us(32), 32, 200, 1));
        assert!(!worth_parallel(us(3200), 32, 2 * PARALLEL_CHUNK - 1, 2));
        assert!(!worth_parallel(us(32), 0, 200, 2));
    }

    /// Both ways give `(0..n).filter_map(f)` in order; slow items go to the pool, cheap
    /// ones stay on the calling thread.
    #[test]
    fn filter_map_adaptive_keeps_order_either_way() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let n = 200;
        let expect: Vec<usize> = (0..n).filter(|i| i % 3 != 0).collect();
        let mut cheap_on_one_thread = false;
        // The cheap case runs three times: a preemption while the first nodes are timed
        // could make one projection large (the slow case needs no such allowance).
        for slow in [false, false, false, true] {
            // Bit k: pool thread k ran an item.
            let threads = std::sync::atomic::AtomicUsize::new(0);
            let got = pool.install(|| {
                filter_map_adaptive(n, |i| {
                    if slow {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    let k = rayon::current_thread_index().unwrap_or(63);
                    threads.fetch_or(1 << k, std::sync::atomic::Ordering::Relaxed);
                    (i % 3 != 0).then_some(i)
                })
            });
            assert_eq!(got, expect, "slow={slow}");
            let used = threads.into_inner().count_ones();
            if slow {
                assert_eq!(used, 2, "40 ms of work is shared");
            } else {
                cheap_on_one_thread |= used == 1;
            }
        }
        assert!(
            cheap_on_one_thread,
            "cheap work stays on the calling thread"
        );
    }

    /// The shared-copy and in-place paths of Filter-with-nominated-pods decide alike,
    /// and the in-place one leaves the node as it found it.
    #[test]
    fn nominated_pod_paths_agree() {
        let fw = default_framework();
        let mut ni = NodeInfo::new(node("n").cpu(4000).build());
        ni.add_pod(pod("low").cpu(900).node("n").build());
        let high = pod("high").cpu(3000).priority(10).build();
        let cases: Vec<(Arc<Pod>, bool)> = vec![
            // A nominated pod of equal priority takes the room: rejected.
            (
                pod("nom").cpu(2000).priority(10).nominated("n").build(),
                false,
            ),
            // A lower-priority nomination does not count.
            (
                pod("nom").cpu(2000).priority(1).nominated("n").build(),
                true,
            ),
            // The pod's own nomination does not count against it.
            (high.clone(), true),
        ];
        for (nominated, fits) in cases {
            let list = [NominatedPod::new(nominated.clone())];
            let mut state = CycleState::new();
            let snapshot = crate::cache::Snapshot::from_node_infos(vec![ni.clone()]);
            let (_, s, _) = fw.run_pre_filter_plugins(&mut state, &high, &snapshot);
            assert!(s.is_success(), "{s:?}");
            let shared = fw.run_filter_plugins_with_nominated_pods(&state, &high, &ni, &list);
            let mut copy = ni.clone();
            let in_place =
                fw.run_filter_plugins_with_nominated_pods_mut(&state, &high, &mut copy, &list);
            assert_eq!(shared.is_success(), fits, "{}: {shared:?}", nominated.name);
            assert_eq!(shared.message(), in_place.message());
            assert_eq!(copy.pods.len(), 1);
            assert_eq!(copy.requested.milli_cpu, 900);
        }
    }
}
