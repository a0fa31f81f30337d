//! Reserve, Permit and the binding cycle's runners (upstream
//! `RunReservePluginsReserve` ... `RunPostBindPlugins`).

use super::*;
use crate::framework::unsettled_permit::{UnsettledPermit, Verdict};

impl Framework {
    pub fn run_reserve_plugins_reserve(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
    ) -> Status {
        let last = self.reserve_then_permit();
        let only_permit = self.permit_plugins().count() == 1;
        for (i, e) in self.reserve.iter().enumerate() {
            let Some(p) = e.plugin.as_reserve() else {
                continue;
            };
            let span = state.trace.plugin("Reserve", &e.name);
            let t = state.record_plugin_metrics.then(Instant::now);
            state.permit_follows_reserve = last == Some(i);
            state.permit_may_settle_later = state.permit_follows_reserve && only_permit;
            let s = span.in_scope(|| p.reserve(state, pod, node));
            state.permit_follows_reserve = false;
            state.permit_may_settle_later = false;
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

    fn permit_plugins(&self) -> impl Iterator<Item = &Entry> {
        self.permit
            .iter()
            .filter(|e| e.plugin.as_permit().is_some())
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
        let mut waits: Vec<(PluginName, Duration)> = Vec::new();
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
                waits.push((e.name, timeout.min(MAX_PERMIT_TIMEOUT)));
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

    /// The first step of the binding cycle: waits for the verdict of a Reserve and
    /// Permit left to it ([`crate::framework::unsettled_permit`]), reported as the
    /// scheduling cycle would have (Reserve's failure, Permit's rejection or error);
    /// a Wait parks the pod as [`Self::run_permit_plugins`] does. Success at once
    /// when nothing was left.
    pub async fn settle_permit(
        &self,
        state: &mut CycleState,
        pod: &Arc<Pod>,
        node: &Arc<str>,
    ) -> Status {
        let Some(unsettled) = state.read::<UnsettledPermit>().cloned() else {
            return Status::success();
        };
        state.delete::<UnsettledPermit>();
        let Some(verdict) = unsettled.take() else {
            return Status::success();
        };
        let Some(name) = self.permit_plugins().next().map(|e| e.name) else {
            return Status::error("a Permit verdict was left to the binding cycle, but the profile has no Permit plugin");
        };
        match verdict.await {
            Verdict::ReserveFailed(s) if s.is_rejected() => s.with_plugin(&name),
            Verdict::ReserveFailed(s) => {
                wrap(format!("running Reserve plugin {name:?}: {}", s.message())).with_plugin(&name)
            }
            Verdict::Permit(s, _) if s.is_success() => s,
            Verdict::Permit(s, _) if s.is_rejected() => s.with_plugin(&name),
            Verdict::Permit(s, timeout) if s.is_wait() => {
                let waits = vec![(name, timeout.min(MAX_PERMIT_TIMEOUT))];
                self.handle
                    .waiting_pods
                    .add(pod.clone(), node.clone(), waits, Instant::now());
                Status::success()
            }
            Verdict::Permit(s, _) => {
                wrap(format!("running Permit plugin {name:?}: {}", s.message())).with_plugin(&name)
            }
        }
    }

    /// Blocks the binding cycle until a waiting pod is allowed or rejected.
    pub async fn wait_on_permit(&self, pod: &Pod) -> Status {
        let s = self.handle.waiting_pods.wait(&pod.uid).await;
        if s.is_success() || s.is_rejected() {
            return s;
        }
        let plugin = s.plugin();
        let mut out = wrap(format!("waiting on permit for pod: {}", s.message()));
        out.set_plugin(plugin);
        out
    }

    pub fn will_wait_on_permit(&self, pod: &Pod) -> bool {
        self.handle.waiting_pods.get(&pod.uid).is_some()
    }

    // ---- binding cycle -------------------------------------------------------

    /// Upstream `RunPreBindPreFlights`: asks each PreBind plugin whether it has work
    /// for the pod; those that say Skip are left out of PreBind. Success when one
    /// has, Skip when none has, an error as soon as one fails.
    pub fn run_pre_bind_pre_flights(
        &self,
        state: &mut CycleState,
        pod: &Pod,
        node: &str,
    ) -> Status {
        let mut result = Status::skip();
        let mut skip = crate::framework::cycle_state::PluginSet::default();
        for (i, e) in self.pre_bind.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            let s = p.pre_bind_pre_flight(state, pod, node);
            match s.code() {
                Code::Success => result = Status::success(),
                Code::Skip => skip.insert(i),
                Code::Error => {
                    return wrap(format!(
                        "running PreBindPreFlight {:?}: {}",
                        e.name,
                        s.message()
                    ))
                    .with_plugin(&e.name)
                }
                other => {
                    return wrap(format!(
                        "PreBindPreFlight {} returned {other:?}, which is unsupported. It is supposed to return Success, Skip, or Error status",
                        e.name
                    ))
                    .with_plugin(&e.name)
                }
            }
        }
        state.skip_pre_bind_plugins = skip;
        result
    }

    pub async fn run_pre_bind_plugins(
        &self,
        state: &CycleState,
        pod: &Arc<Pod>,
        node: &str,
    ) -> Status {
        for (i, e) in self.pre_bind.iter().enumerate() {
            let Some(p) = e.plugin.as_pre_bind() else {
                continue;
            };
            if state.skip_pre_bind_plugins.contains(i) {
                continue;
            }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::framework::interface::{Plugin, PreBindPlugin};
    use crate::framework::{BoxFuture, Handle};

    /// A PreBind plugin whose pre-flight answers `answer` and which counts PreBinds.
    struct Flight {
        answer: Mutex<Status>,
        pre_binds: AtomicUsize,
    }
    impl Plugin for Flight {
        fn name(&self) -> &str {
            "Flight"
        }
        fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
            Some(self)
        }
    }
    impl PreBindPlugin for Flight {
        fn pre_bind_pre_flight(&self, _s: &CycleState, _p: &Pod, _n: &str) -> Status {
            self.answer.lock().unwrap().clone()
        }
        fn pre_bind<'a>(
            &'a self,
            _s: &'a CycleState,
            _p: &'a Arc<Pod>,
            _n: &'a str,
        ) -> BoxFuture<'a, Status> {
            self.pre_binds.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Status::success() })
        }
    }

    #[test]
    fn pre_flights_decide_which_pre_binds_run() {
        let flight = Arc::new(Flight {
            answer: Mutex::new(Status::skip()),
            pre_binds: AtomicUsize::new(0),
        });
        let mut registry = crate::plugins::in_tree_registry();
        let f = flight.clone();
        registry.register(
            "Flight",
            Arc::new(move |_a, _h: &Arc<Handle>| Ok(f.clone() as Arc<dyn Plugin>)),
        );
        let config = crate::config::SchedulerConfig::from_yaml(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{name: Flight}]\n",
            "config",
        )
        .unwrap();
        let handle = Arc::new(Handle::new(
            Arc::new(crate::framework::waiting_pods::WaitingPods::default()),
            Arc::new(crate::testing::NoopClient),
        ));
        let fw = Framework::new(&config.profiles[0], &registry, handle).unwrap();
        let pod = crate::testing::pod("p").build();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();

        // Every PreBind plugin (VolumeBinding with no claims too) says Skip: nothing runs.
        let mut state = CycleState::new();
        assert!(fw.run_pre_bind_pre_flights(&mut state, &pod, "n").is_skip());
        assert!(rt
            .block_on(fw.run_pre_bind_plugins(&state, &pod, "n"))
            .is_success());
        assert_eq!(flight.pre_binds.load(Ordering::SeqCst), 0);

        *flight.answer.lock().unwrap() = Status::success();
        let mut state = CycleState::new();
        assert!(fw
            .run_pre_bind_pre_flights(&mut state, &pod, "n")
            .is_success());
        assert!(rt
            .block_on(fw.run_pre_bind_plugins(&state, &pod, "n"))
            .is_success());
        assert_eq!(flight.pre_binds.load(Ordering::SeqCst), 1);

        *flight.answer.lock().unwrap() = Status::error("no volumes");
        let s = fw.run_pre_bind_pre_flights(&mut CycleState::new(), &pod, "n");
        assert_eq!(s.code(), Code::Error);
        assert!(
            s.message()
                .contains("running PreBindPreFlight \"Flight\": no volumes"),
            "{}",
            s.message()
        );

        *flight.answer.lock().unwrap() = Status::unschedulable("nope");
        let s = fw.run_pre_bind_pre_flights(&mut CycleState::new(), &pod, "n");
        assert!(
            s.message().contains("which is unsupported"),
            "{}",
            s.message()
        );
    }
}
