//! The runners of the queue and scheduling-cycle extension points up to PostFilter
//! (upstream `framework.go`'s `RunPreEnqueuePlugins` ... `RunPostFilterPlugins`).

use super::*;

impl Framework {
    // ---- queue ---------------------------------------------------------------

    /// Runs PreEnqueue plugins, the gating plugin first; returns the first rejecting
    /// plugin and its status.
    pub fn run_pre_enqueue_plugins(
        &self,
        pod: &Pod,
        gating: Option<&str>,
    ) -> Option<(PluginName, Status)> {
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
                return Some((e.name, s.with_plugin(&e.name)));
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
    ) -> (PreFilterResult, Status, Vec<PluginName>) {
        self.pre_filter_plugins(state, pod, snapshot, false)
    }

    /// [`Self::run_pre_filter_plugins`], but a plugin that can start its PreFilter
    /// without waiting (a remote one) does, and counts as a plain Success for now:
    /// its call travels while the other plugins and Filter run. The caller must then
    /// call [`Self::confirm_started_pre_filters`] before it uses the Filter phase's
    /// outcome, and redo the phase with `run_pre_filter_plugins` when that says so,
    /// or when this returns anything but Success while some were started.
    /// Switchyard's; upstream waits for each PreFilter in turn.
    pub fn run_pre_filter_plugins_started(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status, Vec<PluginName>) {
        self.pre_filter_plugins(state, pod, snapshot, true)
    }

    /// Takes the outcomes of the PreFilters started by
    /// [`Self::run_pre_filter_plugins_started`] (waiting for them): true when each
    /// was Success without narrowing the nodes, or Skip (its Filter plugin is then
    /// marked skipped), so the Filter phase that ran meanwhile stands as it would
    /// have run after them; false when the phase must be redone.
    pub fn confirm_started_pre_filters(&self, state: &mut CycleState) -> bool {
        let started = std::mem::take(&mut state.started_pre_filter);
        for (i, e) in self.pre_filter.iter().enumerate() {
            if !started.contains(i) {
                continue;
            }
            let Some((r, s)) = e
                .plugin
                .as_pre_filter()
                .and_then(|p| p.finish_pre_filter(state))
            else {
                return false;
            };
            if s.is_skip() {
                if let Some(fi) = self.pre_filter_to_filter[i] {
                    state.skip_filter_plugins.insert(fi);
                }
                continue;
            }
            if !s.is_success() || r.is_some_and(|r| !r.all_nodes()) {
                return false;
            }
        }
        true
    }

    fn pre_filter_plugins(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        snapshot: &Snapshot,
        start: bool,
    ) -> (PreFilterResult, Status, Vec<PluginName>) {
        state.started_pre_filter = PluginSet::default();
        let mut result = PreFilterResult::default();
        let mut plugins_with_nodes: Vec<PluginName> = Vec::new();
        let mut return_status = Status::success();
        let mut skip = PluginSet::default();
        for (i, e) in self.pre_filter.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            if let Some(mut fr) = state.read::<FirstRound>().copied() {
                fr.ahead = self.pre_filter_to_filter[i]
                    .filter(|fi| self.batch_filters.contains(*fi))
                    .and_then(|fi| self.ahead_for(fi, fr.score_first));
                state.write(fr);
            }
            let span = state.trace.plugin("PreFilter", &e.name);
            if start && span.in_scope(|| p.start_pre_filter(state, pod, snapshot)) {
                state.started_pre_filter.insert(i);
                continue;
            }
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
                plugins_with_nodes.push(e.name);
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
        for i in state.skip_filter_plugins.absent_below(self.filter.len()) {
            let Some(p) = self.filter[i].plugin.as_filter() else {
                continue;
            };
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                return self.filter_failed(i, s);
            }
        }
        Status::success()
    }

    /// The Filter plugins of this cycle (those whose PreFilter did not skip, but the
    /// ones in `leave_out`), resolved once for the loop over every node: a node then
    /// costs one call per plugin, without looking the plugin up again.
    pub fn filter_run(&self, state: &CycleState, leave_out: PluginSet) -> FilterRun<'_> {
        let plugins = state
            .skip_filter_plugins
            .union(&leave_out)
            .absent_below(self.filter.len())
            .filter_map(|i| self.filter[i].plugin.as_filter().map(|p| (i, p)))
            .collect();
        FilterRun { fw: self, plugins }
    }

    /// A Filter plugin's failure as the framework reports it: the plugin named, and an
    /// error (not a rejection) wrapped as upstream words it.
    fn filter_failed(&self, i: usize, s: Status) -> Status {
        let e = &self.filter[i];
        let s = if s.is_rejected() {
            s
        } else {
            wrap(format!(
                "running {:?} filter plugin: {}",
                e.name,
                s.message()
            ))
        };
        s.with_plugin(&e.name)
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
        let mut rejector: Option<PluginName> = None;
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
                rejector = Some(e.name);
            }
        }
        let mut s = Status::with_reasons(Code::Unschedulable, reasons);
        s.set_plugin(rejector);
        (result, s)
    }
}

/// A cycle's Filter plugins, resolved (see [`Framework::filter_run`]).
pub struct FilterRun<'a> {
    fw: &'a Framework,
    plugins: SmallVec<[(usize, &'a dyn FilterPlugin); 16]>,
}

impl FilterRun<'_> {
    /// [`Framework::run_filter_plugins`] for one node, or the first failure with the
    /// plugin's position.
    pub fn run(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        match self.first_failure(state, pod, node) {
            None => Status::success(),
            Some((i, s)) => self.fw.filter_failed(i, s),
        }
    }

    /// The first plugin that does not pass the node, as it answered.
    pub fn first_failure(
        &self,
        state: &CycleState,
        pod: &Pod,
        node: &NodeInfo,
    ) -> Option<(usize, Status)> {
        for &(i, p) in &self.plugins {
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                return Some((i, s));
            }
        }
        None
    }
}
