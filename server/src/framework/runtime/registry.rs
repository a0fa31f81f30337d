//! What plugins reach outside their own calls ([`Handle`], upstream
//! `framework.Handle`) and the plugin [`Registry`] profiles are built from (upstream
//! `runtime.Registry`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::client::{BoxFuture, ClusterClient};
use crate::framework::interface::Plugin;
use crate::framework::waiting_pods::WaitingPods;
use crate::model::Pod;

/// What plugins may reach outside their own calls (upstream `framework.Handle`).
pub struct Handle {
    pub waiting_pods: Arc<WaitingPods>,
    pub client: Arc<dyn ClusterClient>,
    /// Storage objects and the volume assume cache, shared by every profile.
    pub volumes: Arc<crate::framework::volumes::VolumeStore>,
    /// DRA objects and the claim tracker, shared by every profile.
    pub dra: Arc<crate::framework::dra::DraStore>,
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
            crate::framework::volumes::VolumeStore::new(),
        )
    }

    /// A handle whose plugins read `volumes` (the scheduler's shared store).
    pub fn with_volumes(
        waiting_pods: Arc<WaitingPods>,
        client: Arc<dyn ClusterClient>,
        volumes: Arc<crate::framework::volumes::VolumeStore>,
    ) -> Self {
        Self::with_stores(
            waiting_pods,
            client,
            volumes,
            crate::framework::dra::DraStore::new(),
        )
    }

    /// A handle whose plugins read the scheduler's shared volume and DRA stores.
    pub fn with_stores(
        waiting_pods: Arc<WaitingPods>,
        client: Arc<dyn ClusterClient>,
        volumes: Arc<crate::framework::volumes::VolumeStore>,
        dra: Arc<crate::framework::dra::DraStore>,
    ) -> Self {
        Handle {
            waiting_pods,
            client,
            volumes,
            dra,
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

/// A plugin's `pluginConfig` args refused by its factory; the message names the field
/// as upstream's args validation does.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidArgs(pub String);

impl From<String> for InvalidArgs {
    fn from(message: String) -> Self {
        InvalidArgs(message)
    }
}

impl From<&str> for InvalidArgs {
    fn from(message: &str) -> Self {
        InvalidArgs(message.to_string())
    }
}

/// Builds a plugin from its args (already parsed YAML, `None` when not configured).
pub type PluginFactory = Arc<
    dyn Fn(Option<&serde_json::Value>, &Arc<Handle>) -> Result<Arc<dyn Plugin>, InvalidArgs>
        + Send
        + Sync,
>;

/// Plugin factories by name: the built-in ones plus any a caller adds (remote plugins).
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
    /// Where plugins beyond the built-in ones came from (the sidecars reached, with
    /// the plugins each serves), for the error naming a plugin nobody serves.
    sources: Vec<String>,
}

impl Registry {
    /// Notes where some of the registered plugins come from (e.g. a sidecar's
    /// endpoint and its plugins).
    pub fn add_source(&mut self, source: String) {
        self.sources.push(source);
    }

    pub fn sources(&self) -> &[String] {
        &self.sources
    }

    pub fn register(&mut self, name: &str, factory: PluginFactory) {
        self.factories.insert(name.to_string(), factory);
    }

    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(|s| s.as_str())
    }

    pub(super) fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }
}
