//! Reserve, Permit and the binding cycle's runners (upstream
//! `RunReservePluginsReserve` ... `RunPostBindPlugins`).

use super::*;

impl Framework {
    pub fn run_reserve_plugins_reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
    ) -> Status {
        let last = self.reserve_then_permit();
        for (i, e) in self.reserve.iter().enumerate() {
            let Some(p) = e.plugin.as_reserve() else {
                continue;
            };
            let span = state.trace.plugin("Reserve", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            state.permit_follows_reserve = last == Some(i);
            let s = span.in_scope(|| p.reserve(state, pod, node));
            state.permit_follows_reserve = false;
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

    /// The position of the last Reserve plugin when it is also the first Permit
    /// plugin: its Permit runs right after its Reserve succeeds, with nothing between
    /// (see `CycleState::permit_follows_reserve`).
    fn reserve_then_permit(&self) -> Option<usize> {
        let last = self
            .reserve
            .iter()
            .rposition(|e| e.plugin.as_reserve().is_some())?;
        let first = self
            .permit
            .iter()
            .find(|e| e.plugin.as_permit().is_some())?;
        (first.name == self.reserve[last].name).then_some(last)
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
