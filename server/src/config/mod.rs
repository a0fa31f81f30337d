//! Scheduler configuration: a KubeSchedulerConfiguration (`kubescheduler.config.k8s.io/v1`)
//! file, defaulted, merged with the default profile and validated as upstream does.
//! Errors name the file and the field.

mod leader_election;
pub mod remote;
pub mod types;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use types::*;

pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
pub const KIND: &str = "KubeSchedulerConfiguration";
pub const DEFAULT_SCHEDULER_NAME: &str = crate::model::convert::DEFAULT_SCHEDULER_NAME;

/// The default profile's plugins (upstream `getDefaultPlugins`, MultiPoint only, with
/// v1.36's default feature gates: DynamicResources before DefaultPreemption, so that
/// PostFilter deallocates an idle claim before evicting anybody; NodeDeclaredFeatures
/// appended last).
pub const DEFAULT_MULTI_POINT: &[(&str, Option<i32>)] = &[
    ("SchedulingGates", None),
    ("PrioritySort", None),
    ("NodeUnschedulable", None),
    ("NodeName", None),
    ("TaintToleration", Some(3)),
    ("NodeAffinity", Some(2)),
    ("NodePorts", None),
    ("NodeResourcesFit", Some(1)),
    ("VolumeRestrictions", None),
    ("NodeVolumeLimits", None),
    ("VolumeBinding", None),
    ("VolumeZone", None),
    ("PodTopologySpread", Some(2)),
    ("InterPodAffinity", Some(2)),
    ("DynamicResources", None),
    ("DefaultPreemption", None),
    ("NodeResourcesBalancedAllocation", Some(1)),
    ("ImageLocality", Some(1)),
    ("DefaultBinder", None),
    ("NodeDeclaredFeatures", None),
];

/// Upstream plugins Switchyard does not implement (the Workload API's gang and
/// topology plugins, alpha and off in v1.36; and the in-tree volume limit plugins
/// upstream removed in favour of NodeVolumeLimits). Disabling them is accepted;
/// enabling them is an error that says so.
pub const UNSUPPORTED_UPSTREAM_PLUGINS: &[&str] = &[
    "GangScheduling",
    "TopologyPlacement",
    "PodGroupPodsCount",
    "EBSLimits",
    "GCEPDLimits",
    "AzureDiskLimits",
    "CinderLimits",
];

/// Upstream's plugins whose args have a type (`<Name>Args` in
/// `kubescheduler.config.k8s.io/v1`). Their `pluginConfig` is decoded and checked
/// whether the plugin is enabled or not (upstream `decodeNestedObjects` and
/// `validatePluginConfig`); other names' args are kept as written (out-of-tree).
pub const PLUGINS_WITH_ARGS: &[&str] = &[
    "DefaultPreemption",
    "DynamicResources",
    "InterPodAffinity",
    "NodeAffinity",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "PodTopologySpread",
    "VolumeBinding",
];

const ARGS_API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// The `apiVersion`/`kind` an upstream plugin's args may carry must be its own
/// type's (`args for plugin X were not of type XArgs...` upstream).
fn check_args_type(
    path: &str,
    name: &str,
    args: &serde_json::Value,
) -> Result<(), (String, String)> {
    if !args.is_object() && !args.is_null() {
        return Err((
            path.to_string(),
            format!("Invalid value: args for plugin {name} must be a mapping of {name}Args fields"),
        ));
    }
    if let Some(v) = args.get("apiVersion") {
        if v.as_str() != Some(ARGS_API_VERSION) {
            return Err((
                format!("{path}.apiVersion"),
                format!("Invalid value: {v}: no kind \"{name}Args\" is registered for that version; use {ARGS_API_VERSION} (or leave it out)"),
            ));
        }
    }
    if let Some(k) = args.get("kind") {
        let want = format!("{name}Args");
        if k.as_str() != Some(want.as_str()) {
            return Err((
                format!("{path}.kind"),
                format!("Invalid value: {k}: args for plugin {name} were not of type {want}.kubescheduler.config.k8s.io"),
            ));
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {message}")]
    Read { file: String, message: String },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {field}: {message}")]
    Invalid {
        file: String,
        field: String,
        message: String,
    },
}

/// One profile after defaulting and merging.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    pub scheduler_name: String,
    pub percentage_of_nodes_to_score: Option<i32>,
    pub plugins: Plugins,
    /// Args by plugin name, as written (defaults are applied by each plugin).
    pub plugin_args: BTreeMap<String, serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LeaderElectionConfig {
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub resource_name: String,
    pub resource_namespace: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Where it came from, for messages.
    pub source: String,
    pub parallelism: i32,
    /// 0 = upstream's adaptive percentage.
    pub percentage_of_nodes_to_score: i32,
    pub pod_initial_backoff: Duration,
    pub pod_max_backoff: Duration,
    pub profiles: Vec<ResolvedProfile>,
    pub leader_election: LeaderElectionConfig,
    pub client_qps: f32,
    pub client_burst: i32,
    /// `clientConnection.kubeconfig`: the cluster to talk to when `--kubeconfig` does
    /// not name one (kube-scheduler takes it from its config file).
    pub client_kubeconfig: Option<std::path::PathBuf>,
    /// Sidecar endpoints serving remote plugins.
    pub remote_plugins: Vec<remote::EndpointConfig>,
}

fn rename_in(set: &mut PluginSet, from: &str, to: &str) {
    for r in set.enabled.iter_mut().chain(set.disabled.iter_mut()) {
        if r.name == from {
            r.name = to.to_string();
        }
    }
}

fn default_plugins() -> Plugins {
    Plugins {
        multi_point: PluginSet {
            enabled: DEFAULT_MULTI_POINT
                .iter()
                .map(|(n, w)| PluginRef::new(n, *w))
                .collect(),
            disabled: vec![],
        },
        ..Default::default()
    }
}

/// Upstream `mergePluginSet`: defaults minus disabled, custom entries replacing
/// same-named defaults in place, remaining custom entries appended.
fn merge_plugin_set(default: &PluginSet, custom: &PluginSet) -> PluginSet {
    let disabled: Vec<&str> = custom
        .disabled
        .iter()
        .chain(default.disabled.iter())
        .map(|p| p.name.as_str())
        .collect();
    let mut used = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !disabled.contains(&"*") {
        for d in &default.enabled {
            if disabled.contains(&d.name.as_str()) {
                continue;
            }
            match custom.enabled.iter().position(|c| c.name == d.name) {
                Some(i) => {
                    used[i] = true;
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(d.clone()),
            }
        }
    }
    for (i, c) in custom.enabled.iter().enumerate() {
        if !used[i] {
            enabled.push(c.clone());
        }
    }
    PluginSet {
        enabled,
        disabled: custom
            .disabled
            .iter()
            .chain(default.disabled.iter())
            .cloned()
            .collect(),
    }
}

fn merge_plugins(default: &Plugins, custom: Option<&Plugins>) -> Plugins {
    let Some(custom) = custom else {
        return default.clone();
    };
    let mut out = Plugins {
        multi_point: merge_plugin_set(&default.multi_point, &custom.multi_point),
        ..Default::default()
    };
    for ep in ExtensionPoint::ALL {
        *out.get_mut(ep) = merge_plugin_set(default.get(ep), custom.get(ep));
    }
    out
}

/// Parses a Go duration string (`15s`, `1m30s`, `500ms`) as `time.ParseDuration` does:
/// exact integer nanoseconds, `None` beyond Go's range (about 292 years) as Go refuses
/// it, and `None` for a negative duration, which no setting here accepts.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    const MAX: u128 = i64::MAX as u128;
    let mut rest = s.trim();
    if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int = &rest[..int_end];
        rest = &rest[int_end..];
        let mut frac = "";
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            frac = &r[..end];
            rest = &r[end..];
        }
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_end] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" | "µs" | "μs" => 1_000,
            "ns" => 1,
            _ => return None,
        };
        rest = &rest[unit_end..];
        let mut whole: u128 = 0;
        for d in int.bytes() {
            whole = whole * 10 + u128::from(d - b'0');
            if whole > MAX {
                return None;
            }
        }
        let mut nanos = whole * unit;
        // The fraction, exact to the nanosecond and truncated as Go truncates it.
        let mut scale = unit;
        for d in frac.bytes() {
            if scale < 10 {
                break;
            }
            scale /= 10;
            nanos += u128::from(d - b'0') * scale;
        }
        total += nanos;
        if total > MAX {
            return None;
        }
    }
    let total = u64::try_from(total).ok()?;
    Some(Duration::from_nanos(total))
}

impl SchedulerConfig {
    /// Renames an enabled plugin in every profile and extension point, in place (same
    /// order and weight): serves a built-in from a sidecar without moving it.
    pub fn rename_plugin(&mut self, from: &str, to: &str) {
        for p in &mut self.profiles {
            let plugins = &mut p.plugins;
            rename_in(&mut plugins.multi_point, from, to);
            for ep in ExtensionPoint::ALL {
                rename_in(plugins.get_mut(ep), from, to);
            }
        }
    }

    /// Enables `name` at multiPoint (weight 1) in every profile that does not mention
    /// it anywhere: how plugins of sidecars given on the command line join. It is
    /// disabled at queueSort, so the profile keeps its one QueueSort; a configuration
    /// file names a sidecar under `queueSort` to sort by it.
    pub fn enable_everywhere(&mut self, name: &str) {
        for p in &mut self.profiles {
            let plugins = &mut p.plugins;
            let mentioned = std::iter::once(&plugins.multi_point)
                .chain(ExtensionPoint::ALL.iter().map(|ep| plugins.get(*ep)))
                .any(|s| s.enabled.iter().chain(&s.disabled).any(|r| r.name == name));
            if !mentioned {
                plugins.multi_point.enabled.push(PluginRef::new(name, None));
                plugins.queue_sort.disabled.push(PluginRef::new(name, None));
            }
        }
    }

    /// The configuration used when no file is given: one `default-scheduler` profile
    /// with the default plugins.
    pub fn default_config() -> Self {
        Self::resolve(
            KubeSchedulerConfiguration {
                api_version: API_VERSION.into(),
                kind: KIND.into(),
                parallelism: None,
                leader_election: None,
                client_connection: None,
                enable_profiling: None,
                enable_contention_profiling: None,
                percentage_of_nodes_to_score: None,
                pod_initial_backoff_seconds: None,
                pod_max_backoff_seconds: None,
                profiles: vec![],
                extenders: vec![],
                delay_cache_until_active: None,
                remote_plugins: vec![],
            },
            "<default>",
        )
        .unwrap_or_else(unreachable_default)
    }

    /// Reads a configuration file of at most `max_bytes` (`--max-input-bytes`).
    pub fn load(path: &Path, max_bytes: u64) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        // The same size limit as manifests (--max-input-bytes).
        let text =
            crate::model::input::read_input(path, max_bytes).map_err(|e| ConfigError::Read {
                file: file.clone(),
                message: e.message,
            })?;
        Self::from_yaml(&text, &file)
    }

    pub fn from_yaml(text: &str, file: &str) -> Result<Self, ConfigError> {
        let raw: KubeSchedulerConfiguration =
            crate::yaml::from_str(text).map_err(|e| ConfigError::Parse {
                file: file.to_string(),
                message: e.to_string(),
            })?;
        Self::resolve(raw, file)
    }

    fn resolve(raw: KubeSchedulerConfiguration, file: &str) -> Result<Self, ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        if raw.api_version != API_VERSION {
            return Err(invalid(
                "apiVersion",
                format!(
                    "Unsupported value: {:?}: supported values: \"{API_VERSION}\"",
                    raw.api_version
                ),
            ));
        }
        if raw.kind != KIND {
            return Err(invalid(
                "kind",
                format!(
                    "Unsupported value: {:?}: supported values: \"{KIND}\"",
                    raw.kind
                ),
            ));
        }
        if !raw.extenders.is_empty() {
            return Err(invalid(
                "extenders",
                "HTTP extenders are not supported: run the extender's logic as a sidecar plugin (see docs/writing-plugins.md)".into(),
            ));
        }
        let parallelism = raw.parallelism.unwrap_or(16);
        if parallelism <= 0 {
            return Err(invalid(
                "parallelism",
                format!(
                    "Invalid value: {parallelism}: should be an integer value greater than zero"
                ),
            ));
        }
        let pct = raw.percentage_of_nodes_to_score.unwrap_or(0);
        if !(0..=100).contains(&pct) {
            return Err(invalid(
                "percentageOfNodesToScore",
                format!("Invalid value: {pct}: not in valid range [0-100]"),
            ));
        }
        let initial = raw.pod_initial_backoff_seconds.unwrap_or(1);
        if initial <= 0 {
            return Err(invalid(
                "podInitialBackoffSeconds",
                format!("Invalid value: {initial}: must be greater than 0"),
            ));
        }
        let max = raw.pod_max_backoff_seconds.unwrap_or(10);
        if max < initial {
            return Err(invalid(
                "podMaxBackoffSeconds",
                format!("Invalid value: {max}: must be greater than or equal to PodInitialBackoffSeconds"),
            ));
        }

        let leader_election = leader_election::resolve(raw.leader_election.as_ref())
            .map_err(|(field, message)| invalid(&field, message))?;
        let cc = raw.client_connection.as_ref();
        let client_qps = cc.and_then(|c| c.qps).filter(|q| *q != 0.0).unwrap_or(50.0);
        if let Some(b) = cc.and_then(|c| c.burst).filter(|b| *b < 0) {
            return Err(invalid(
                "clientConnection.burst",
                format!("Invalid value: {b}: must be non-negative"),
            ));
        }
        let client_burst = cc.and_then(|c| c.burst).filter(|b| *b != 0).unwrap_or(100);
        let client_kubeconfig = cc
            .and_then(|c| c.kubeconfig.as_deref())
            .filter(|k| !k.is_empty())
            .map(std::path::PathBuf::from);

        let mut remote_plugins = Vec::new();
        for (i, r) in raw.remote_plugins.iter().enumerate() {
            let path = format!("remotePlugins[{i}]");
            remote_plugins.push(
                remote::EndpointConfig::resolve(i, r)
                    .map_err(|e| invalid(&format!("{path}.{}", e.field), e.message))?,
            );
        }
        let mut raw_profiles = raw.profiles;
        if raw_profiles.is_empty() {
            raw_profiles.push(Profile::default());
        }
        let single = raw_profiles.len() == 1;
        let defaults = default_plugins();
        let mut profiles: Vec<ResolvedProfile> = Vec::new();
        for (i, p) in raw_profiles.into_iter().enumerate() {
            let path = format!("profiles[{i}]");
            let scheduler_name = match p.scheduler_name {
                Some(n) if !n.is_empty() => n,
                None if single => DEFAULT_SCHEDULER_NAME.to_string(),
                _ => return Err(invalid(
                    &format!("{path}.schedulerName"),
                    "Required value: every profile needs a schedulerName when there are several"
                        .into(),
                )),
            };
            if let Some(j) = profiles
                .iter()
                .position(|q| q.scheduler_name == scheduler_name)
            {
                return Err(invalid(
                    &format!("{path}.schedulerName"),
                    format!(
                        "Duplicate value: {scheduler_name:?} (also profiles[{j}].schedulerName)"
                    ),
                ));
            }
            if let Some(pp) = p.percentage_of_nodes_to_score {
                if !(0..=100).contains(&pp) {
                    return Err(invalid(
                        &format!("{path}.percentageOfNodesToScore"),
                        format!("Invalid value: {pp}: not in valid range [0-100]"),
                    ));
                }
            }
            if let Some(custom) = &p.plugins {
                for ep in ExtensionPoint::ALL
                    .iter()
                    .map(|ep| (ep.field(), custom.get(*ep)))
                    .chain(std::iter::once(("multiPoint", &custom.multi_point)))
                {
                    let (field, set) = ep;
                    for (j, r) in set.enabled.iter().enumerate() {
                        let f = format!("{path}.plugins.{field}.enabled[{j}]");
                        if r.name.is_empty() {
                            return Err(invalid(&format!("{f}.name"), "Required value".into()));
                        }
                        if let Some(w) = r.weight {
                            if w < 0 {
                                return Err(invalid(
                                    &format!("{f}.weight"),
                                    format!("Invalid value: {w}: a score weight must be positive (0 means the default, 1)"),
                                ));
                            }
                            if i64::from(w) > i64::MAX / 10 / 100 {
                                return Err(invalid(
                                    &format!("{f}.weight"),
                                    format!("Invalid value: {w}: too large; the total score could overflow"),
                                ));
                            }
                        }
                        if UNSUPPORTED_UPSTREAM_PLUGINS.contains(&r.name.as_str()) {
                            return Err(invalid(
                                &f,
                                format!("plugin {:?} is an upstream plugin Switchyard does not implement (Switchyard models no dynamic resources, and the in-tree volume limit plugins are NodeVolumeLimits now); remove it", r.name),
                            ));
                        }
                    }
                }
            }
            let mut plugin_args = BTreeMap::new();
            for (j, pc) in p.plugin_config.iter().enumerate() {
                if plugin_args.contains_key(&pc.name) {
                    return Err(invalid(
                        &format!("{path}.pluginConfig[{j}]"),
                        format!("Duplicate value: {:?}", pc.name),
                    ));
                }
                if UNSUPPORTED_UPSTREAM_PLUGINS.contains(&pc.name.as_str()) {
                    return Err(invalid(
                        &format!("{path}.pluginConfig[{j}].name"),
                        format!("plugin {:?} is an upstream plugin Switchyard does not implement; remove its pluginConfig", pc.name),
                    ));
                }
                if PLUGINS_WITH_ARGS.contains(&pc.name.as_str()) {
                    if let Some(a) = &pc.args {
                        check_args_type(&format!("{path}.pluginConfig[{j}].args"), &pc.name, a)
                            .map_err(|(field, message)| invalid(&field, message))?;
                    }
                }
                let args = pc
                    .args
                    .clone()
                    .filter(|a| !a.is_null())
                    .unwrap_or(serde_json::Value::Object(Default::default()));
                plugin_args.insert(pc.name.clone(), strip_type_meta(args));
            }
            profiles.push(ResolvedProfile {
                scheduler_name,
                percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
                plugins: merge_plugins(&defaults, p.plugins.as_ref()),
                plugin_args,
            });
        }
        // Every profile must sort the queue the same way.
        let qs = |p: &ResolvedProfile| p.plugins.queue_sort.clone();
        if let Some(first) = profiles.first().map(qs) {
            for (i, p) in profiles.iter().enumerate().skip(1) {
                if qs(p) != first {
                    return Err(invalid(
                        &format!("profiles[{i}].plugins.queueSort"),
                        "must be the same for all profiles".into(),
                    ));
                }
            }
        }
        Ok(SchedulerConfig {
            source: file.to_string(),
            parallelism,
            percentage_of_nodes_to_score: pct,
            pod_initial_backoff: Duration::from_secs(initial as u64),
            pod_max_backoff: Duration::from_secs(max as u64),
            profiles,
            leader_election,
            client_qps,
            client_burst,
            client_kubeconfig,
            remote_plugins,
        })
    }
}

/// Plugin args may carry `apiVersion`/`kind` (e.g. `kind: NodeResourcesFitArgs`); the
/// plugins' own decoders do not expect them.
fn strip_type_meta(mut v: serde_json::Value) -> serde_json::Value {
    if let serde_json::Value::Object(m) = &mut v {
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}

#[cold]
fn unreachable_default(e: ConfigError) -> SchedulerConfig {
    // The built-in default is a constant; failing to resolve it is a programming error
    // caught by the unit tests below, never by users.
    panic!("built-in default configuration is invalid: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<SchedulerConfig, ConfigError> {
        SchedulerConfig::from_yaml(yaml, "test.yaml")
    }

    #[test]
    fn default_config_resolves() {
        let c = SchedulerConfig::default_config();
        assert_eq!(c.profiles.len(), 1);
        assert_eq!(c.profiles[0].scheduler_name, "default-scheduler");
        assert_eq!(c.pod_initial_backoff, Duration::from_secs(1));
        assert_eq!(c.pod_max_backoff, Duration::from_secs(10));
        assert_eq!(
            c.profiles[0].plugins.multi_point.enabled.len(),
            DEFAULT_MULTI_POINT.len()
        );
    }

    #[test]
    fn merges_custom_weights_in_place_and_disables() {
        let c = load(
            r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: ImageLocality
        weight: 5
      disabled:
      - name: NodePorts
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#,
        )
        .unwrap();
        let mp = &c.profiles[0].plugins.multi_point.enabled;
        assert!(!mp.iter().any(|p| p.name == "NodePorts"));
        let il = mp.iter().position(|p| p.name == "ImageLocality").unwrap();
        assert_eq!(mp[il].weight, Some(5));
        // Kept at its default position, before DefaultBinder (NodeDeclaredFeatures is
        // appended after it, as v1.36 does).
        assert_eq!(mp[mp.len() - 2].name, "DefaultBinder");
        assert_eq!(mp.last().unwrap().name, "NodeDeclaredFeatures");
        assert!(c.profiles[0].plugin_args.contains_key("NodeResourcesFit"));
    }

    #[test]
    fn clear_errors_for_bad_input() {
        let base = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
        let e = load(&format!("{base}percentageOfNodesToScore: 101\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "test.yaml: percentageOfNodesToScore: Invalid value: 101: not in valid range [0-100]"
        );
        let e = load(&format!("{base}bogus: 1\n")).unwrap_err().to_string();
        assert!(e.starts_with("test.yaml: ") && e.contains("bogus"), "{e}");
        let e = load(&format!("{base}profiles:\n- schedulerName: a\n  plugins:\n    score:\n      enabled:\n      - name: ImageLocality\n        weight: -1\n")).unwrap_err().to_string();
        assert!(
            e.contains("profiles[0].plugins.score.enabled[0].weight: Invalid value: -1"),
            "{e}"
        );
        let e = load(&format!(
            "{base}profiles:\n- schedulerName: a\n- schedulerName: a\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("profiles[1].schedulerName: Duplicate value"),
            "{e}"
        );
        let e = load(&format!("{base}profiles:\n- {{}}\n- schedulerName: b\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("profiles[0].schedulerName: Required value"),
            "{e}"
        );
        let e = load("apiVersion: v1\nkind: KubeSchedulerConfiguration\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("apiVersion: Unsupported value"), "{e}");
        let e = load(&format!(
            "{base}podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("podMaxBackoffSeconds"), "{e}");
        // component-base's checks of leader election and the client connection.
        for (yaml, want) in [
            (
                "leaderElection: {leaseDuration: 5s, renewDeadline: 10s}\n",
                "leaderElection.leaseDuration: Invalid value: \"10s\": LeaseDuration must be greater than RenewDeadline",
            ),
            (
                "leaderElection: {retryPeriod: 0s}\n",
                "leaderElection.retryPeriod: Invalid value: \"0s\": must be greater than zero",
            ),
            (
                "leaderElection: {resourceName: ''}\n",
                "leaderElection.resourceName: Invalid value: \"\": resourceName is required",
            ),
            (
                "clientConnection: {burst: -1}\n",
                "clientConnection.burst: Invalid value: -1: must be non-negative",
            ),
        ] {
            let e = load(&format!("{base}{yaml}")).unwrap_err().to_string();
            assert!(e.ends_with(want), "{yaml}: {e}");
        }
        // Not electing: the durations are not checked, as upstream.
        load(&format!(
            "{base}leaderElection: {{leaderElect: false, leaseDuration: 1s, renewDeadline: 10s}}\n"
        ))
        .unwrap();
        // Args typed for another plugin, or another version, are refused as upstream
        // refuses them; so is a pluginConfig of an upstream plugin Switchyard lacks.
        for (yaml, want) in [
            (
                "pluginConfig: [{name: NodeResourcesFit, args: {kind: InterPodAffinityArgs}}]",
                "profiles[0].pluginConfig[0].args.kind: Invalid value: \"InterPodAffinityArgs\": args for plugin NodeResourcesFit were not of type NodeResourcesFitArgs.kubescheduler.config.k8s.io",
            ),
            (
                "pluginConfig: [{name: PodTopologySpread, args: {apiVersion: kubescheduler.config.k8s.io/v1beta3}}]",
                "profiles[0].pluginConfig[0].args.apiVersion: Invalid value: \"kubescheduler.config.k8s.io/v1beta3\": no kind \"PodTopologySpreadArgs\" is registered for that version; use kubescheduler.config.k8s.io/v1 (or leave it out)",
            ),
            (
                "pluginConfig: [{name: GangScheduling, args: {}}]",
                "profiles[0].pluginConfig[0].name: plugin \"GangScheduling\" is an upstream plugin Switchyard does not implement; remove its pluginConfig",
            ),
        ] {
            let e = load(&format!("{base}profiles:\n- schedulerName: a\n  {yaml}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.ends_with(want), "{yaml}: {e}");
        }
        // Out-of-tree plugins' args are theirs: kept as written.
        let c = load(&format!("{base}profiles:\n- schedulerName: a\n  pluginConfig: [{{name: TenantQuota, args: {{kind: Whatever, limit: 3}}}}]\n")).unwrap();
        assert_eq!(c.profiles[0].plugin_args["TenantQuota"]["limit"], 3);
        // The Workload API's plugins (alpha in v1.36) are named as not implemented.
        let e = load(&format!("{base}profiles:\n- schedulerName: a\n  plugins:\n    multiPoint:\n      enabled: [{{name: GangScheduling}}]\n")).unwrap_err().to_string();
        assert!(
            e.contains("plugins.multiPoint.enabled[0]") && e.contains("GangScheduling"),
            "{e}"
        );
    }

    #[test]
    fn the_client_connection_names_the_kubeconfig() {
        let c = load("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection: {kubeconfig: /etc/kubernetes/scheduler.conf}\n").unwrap();
        assert_eq!(
            c.client_kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/kubernetes/scheduler.conf"))
        );
        assert!(SchedulerConfig::default_config()
            .client_kubeconfig
            .is_none());
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration(".5ms"), Some(Duration::from_micros(500)));
        assert_eq!(
            parse_go_duration("2562047h"),
            Some(Duration::from_secs(2562047 * 3600))
        );
        // Beyond Go's int64 nanoseconds: refused, not a panic.
        for bad in [
            "2562048h",
            "9223372036854775808ns",
            "1e300s",
            "99999999999999999999999999999h",
            "-1s",
            "1",
            ".s",
            "1x",
        ] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("abc"), None);
    }
}
