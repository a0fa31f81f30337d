//! KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`) as serde types.
//! Unknown fields are errors, as upstream's strict decoding makes them.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i32>,
}

impl PluginRef {
    pub fn new(name: &str, weight: Option<i32>) -> Self {
        PluginRef {
            name: name.to_string(),
            weight,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// The extension points a profile configures, in upstream's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExtensionPoint {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl ExtensionPoint {
    pub const ALL: [ExtensionPoint; 12] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
    ];

    /// The field name in `plugins:` (`preFilter`, ...).
    pub fn field(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "preEnqueue",
            ExtensionPoint::QueueSort => "queueSort",
            ExtensionPoint::PreFilter => "preFilter",
            ExtensionPoint::Filter => "filter",
            ExtensionPoint::PostFilter => "postFilter",
            ExtensionPoint::PreScore => "preScore",
            ExtensionPoint::Score => "score",
            ExtensionPoint::Reserve => "reserve",
            ExtensionPoint::Permit => "permit",
            ExtensionPoint::PreBind => "preBind",
            ExtensionPoint::Bind => "bind",
            ExtensionPoint::PostBind => "postBind",
        }
    }

    /// The interface name upstream messages use (`FilterPlugin`, ...).
    pub fn interface(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "PreEnqueuePlugin",
            ExtensionPoint::QueueSort => "QueueSortPlugin",
            ExtensionPoint::PreFilter => "PreFilterPlugin",
            ExtensionPoint::Filter => "FilterPlugin",
            ExtensionPoint::PostFilter => "PostFilterPlugin",
            ExtensionPoint::PreScore => "PreScorePlugin",
            ExtensionPoint::Score => "ScorePlugin",
            ExtensionPoint::Reserve => "ReservePlugin",
            ExtensionPoint::Permit => "PermitPlugin",
            ExtensionPoint::PreBind => "PreBindPlugin",
            ExtensionPoint::Bind => "BindPlugin",
            ExtensionPoint::PostBind => "PostBindPlugin",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

impl Plugins {
    pub fn get(&self, ep: ExtensionPoint) -> &PluginSet {
        match ep {
            ExtensionPoint::PreEnqueue => &self.pre_enqueue,
            ExtensionPoint::QueueSort => &self.queue_sort,
            ExtensionPoint::PreFilter => &self.pre_filter,
            ExtensionPoint::Filter => &self.filter,
            ExtensionPoint::PostFilter => &self.post_filter,
            ExtensionPoint::PreScore => &self.pre_score,
            ExtensionPoint::Score => &self.score,
            ExtensionPoint::Reserve => &self.reserve,
            ExtensionPoint::Permit => &self.permit,
            ExtensionPoint::PreBind => &self.pre_bind,
            ExtensionPoint::Bind => &self.bind,
            ExtensionPoint::PostBind => &self.post_bind,
        }
    }

    pub fn get_mut(&mut self, ep: ExtensionPoint) -> &mut PluginSet {
        match ep {
            ExtensionPoint::PreEnqueue => &mut self.pre_enqueue,
            ExtensionPoint::QueueSort => &mut self.queue_sort,
            ExtensionPoint::PreFilter => &mut self.pre_filter,
            ExtensionPoint::Filter => &mut self.filter,
            ExtensionPoint::PostFilter => &mut self.post_filter,
            ExtensionPoint::PreScore => &mut self.pre_score,
            ExtensionPoint::Score => &mut self.score,
            ExtensionPoint::Reserve => &mut self.reserve,
            ExtensionPoint::Permit => &mut self.permit,
            ExtensionPoint::PreBind => &mut self.pre_bind,
            ExtensionPoint::Bind => &mut self.bind,
            ExtensionPoint::PostBind => &mut self.post_bind,
        }
    }

    /// Every plugin name enabled anywhere (extension points and multiPoint).
    pub fn all_enabled(&self) -> Vec<&str> {
        let mut v: Vec<&str> = ExtensionPoint::ALL
            .iter()
            .flat_map(|ep| self.get(*ep).enabled.iter())
            .chain(self.multi_point.enabled.iter())
            .map(|p| p.name.as_str())
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default)]
    pub plugins: Option<Plugins>,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// `leaderElection`; accepted and kept for the Kubernetes backend.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    #[serde(default)]
    pub leader_elect: Option<bool>,
    #[serde(default)]
    pub lease_duration: Option<String>,
    #[serde(default)]
    pub renew_deadline: Option<String>,
    #[serde(default)]
    pub retry_period: Option<String>,
    #[serde(default)]
    pub resource_lock: Option<String>,
    #[serde(default)]
    pub resource_name: Option<String>,
    #[serde(default)]
    pub resource_namespace: Option<String>,
}

/// `clientConnection`; accepted and kept for the Kubernetes backend.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    #[serde(default)]
    pub kubeconfig: Option<String>,
    #[serde(default)]
    pub accept_content_types: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub qps: Option<f32>,
    #[serde(default)]
    pub burst: Option<i32>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub parallelism: Option<i32>,
    #[serde(default)]
    pub leader_election: Option<LeaderElection>,
    #[serde(default)]
    pub client_connection: Option<ClientConnection>,
    #[serde(default)]
    pub enable_profiling: Option<bool>,
    #[serde(default)]
    pub enable_contention_profiling: Option<bool>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default)]
    pub pod_initial_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub profiles: Vec<Profile>,
    #[serde(default)]
    pub extenders: Vec<serde_json::Value>,
    #[serde(default)]
    pub delay_cache_until_active: Option<bool>,
    /// Switchyard's extension: sidecars serving plugins over gRPC.
    #[serde(default)]
    pub remote_plugins: Vec<RemotePluginEndpoint>,
}

/// One sidecar endpoint (`remotePlugins[]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemotePluginEndpoint {
    /// `unix:///path.sock` (default for sidecars), `http://host:port`, or
    /// `https://host:port` with `tls`.
    pub endpoint: String,
    /// Per-call timeout (Go duration, default `1s`).
    #[serde(default)]
    pub timeout: Option<String>,
    /// `Fail` (default) or `Ignore`, as admission webhooks have it.
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// The plugins the sidecar serves, so profiles can name them while it is down at
    /// start; the handshake is the authority once it answers.
    #[serde(default)]
    pub plugins: Vec<String>,
    /// How long start-up waits for the first handshake (Go duration, default `10s`).
    #[serde(default)]
    pub startup_timeout: Option<String>,
    /// TLS for `https://` endpoints.
    #[serde(default)]
    pub tls: Option<RemotePluginTls>,
    /// Most pods whose Filter rounds go to a node-local sidecar in one message
    /// (1..=64, default 16; 1: one pod ahead at a time, as with older sidecars).
    #[serde(default)]
    pub max_batch_pods: Option<u32>,
    /// Reuse the answers of plugins that declare pod signatures for alike pods on
    /// unchanged nodes (default true; false calls for every pod, to compare).
    #[serde(default)]
    pub reuse_alike_pods: Option<bool>,
    /// Await the sidecar's Reserve and Permit verdict in the binding cycle instead
    /// of the scheduling cycle (default false): the next pod's cycle starts without
    /// waiting for the round trip. A failed Reserve or a rejection then frees the
    /// node after later pods may have seen it taken, as a Permit Wait that ends in a
    /// rejection does. Applies when the sidecar's plugin is the profile's last
    /// Reserve plugin and only Permit plugin; meant for gang plugins whose Reserve
    /// does not fail and whose Permit mostly waits.
    #[serde(default)]
    pub permit_in_binding_cycle: Option<bool>,
}

/// TLS settings of an `https://` sidecar endpoint (PEM files, read at every connect so
/// rotated certificates are picked up on reconnect).
#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemotePluginTls {
    /// The CA that signed the sidecar's certificate (required).
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Client certificate and key, for sidecars that require mutual TLS.
    #[serde(default)]
    pub cert_file: Option<String>,
    #[serde(default)]
    pub key_file: Option<String>,
    /// The name to verify in the sidecar's certificate (default: the endpoint's host).
    #[serde(default)]
    pub server_name: Option<String>,
}
