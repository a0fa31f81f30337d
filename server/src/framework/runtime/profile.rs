//! Building a profile (upstream `NewFramework`): instantiate the enabled plugins,
//! fill each extension point from its own list and multiPoint
//! (`updatePluginList`, `expandMultiPointPlugins`), check the queue sort and bind
//! plugins, and compute score weights.

use super::*;
use crate::config::types::{PluginSet as ConfiguredPlugins, Plugins};
use crate::config::ResolvedProfile;

/// Plugin instances by name, one per enabled plugin of the profile.
type Instances = HashMap<String, Arc<dyn Plugin>>;

/// Why a profile could not be built, worded as upstream `NewFramework` words it.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("plugin {name:?} does not exist; known plugins: {known}; {sidecars}. A plugin a sidecar serves is known once the sidecar is reached: add its endpoint to remotePlugins in the configuration, or pass --plugin-endpoint ENDPOINT or --sidecar CMD to simulate")]
    UnknownPlugin {
        name: String,
        known: String,
        /// The sidecars reached and their plugins, or that none was.
        sidecars: String,
    },
    #[error("initializing plugin {name:?}: {source}")]
    Init {
        name: String,
        #[source]
        source: InvalidArgs,
    },
    #[error("{interface} {name:?} does not exist")]
    NotInstantiated {
        name: String,
        interface: &'static str,
    },
    #[error("plugin {name:?} does not extend {interface} plugin")]
    DoesNotExtend {
        name: String,
        interface: &'static str,
    },
    #[error("plugin {name:?} already registered as {interface:?}")]
    Duplicate {
        name: String,
        interface: &'static str,
    },
    #[error("only one queue sort plugin required for profile with scheduler name {scheduler_name:?}, but got {got}")]
    QueueSortCount { scheduler_name: String, got: usize },
    #[error(
        "at least one bind plugin is needed for profile with scheduler name {scheduler_name:?}"
    )]
    NoBind { scheduler_name: String },
    #[error("score plugin {name:?} has a negative weight {weight}: weights must be 1 or more (0 means 1)")]
    NegativeWeight { name: String, weight: i32 },
    #[error("total score of Score plugins could overflow")]
    ScoreOverflow,
}

impl Framework {
    /// Builds a profile as upstream `NewFramework` does: instantiate every enabled
    /// plugin, fill each extension point from its own list and multiPoint, check the
    /// queue sort and bind plugins, and compute score weights.
    pub fn new(
        profile: &ResolvedProfile,
        registry: &Registry,
        handle: Arc<Handle>,
    ) -> Result<Framework, ProfileError> {
        let plugins = &profile.plugins;
        let instances = instantiate_plugins(profile, registry, &handle)?;
        let mut lists: HashMap<ExtensionPoint, Vec<Entry>> = HashMap::new();
        for ep in ExtensionPoint::ALL {
            let specific = update_plugin_list(plugins.get(ep), &instances, ep)?;
            let list = expand_multi_point_plugins(plugins, &instances, ep, specific)?;
            lists.insert(ep, list);
        }
        let mut take = |ep| lists.remove(&ep).unwrap_or_default();

        let mut queue_sort = take(ExtensionPoint::QueueSort);
        if queue_sort.len() != 1 {
            return Err(ProfileError::QueueSortCount {
                scheduler_name: profile.scheduler_name.clone(),
                got: queue_sort.len(),
            });
        }
        let bind = take(ExtensionPoint::Bind);
        if bind.is_empty() {
            return Err(ProfileError::NoBind {
                scheduler_name: profile.scheduler_name.clone(),
            });
        }
        let score = score_weights(plugins, take(ExtensionPoint::Score))?;

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
        let enqueue_extensions = enqueue_extensions(
            pre_enqueue
                .iter()
                .chain(pre_filter.iter())
                .chain(filter.iter())
                .chain(reserve.iter())
                .chain(permit.iter()),
        );

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
            cycle_hooks: cycle_hooks(&instances),
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
}

/// One instance of every plugin enabled anywhere in the profile, built by its
/// registered factory with its `pluginConfig` args.
fn instantiate_plugins(
    profile: &ResolvedProfile,
    registry: &Registry,
    handle: &Arc<Handle>,
) -> Result<Instances, ProfileError> {
    let mut instances = Instances::new();
    for name in profile.plugins.all_enabled() {
        let factory = registry
            .get(name)
            .ok_or_else(|| ProfileError::UnknownPlugin {
                name: name.to_string(),
                known: registry.names().collect::<Vec<_>>().join(", "),
                sidecars: match registry.sources() {
                    [] => "no sidecar was reached".into(),
                    s => format!("sidecars reached: {}", s.join("; ")),
                },
            })?;
        let args = profile.plugin_args.get(name);
        let p = factory(args, handle).map_err(|source| ProfileError::Init {
            name: name.to_string(),
            source,
        })?;
        instances.insert(name.to_string(), p);
    }
    // Args of an upstream plugin that is not enabled are still checked, as
    // kube-scheduler decodes and validates every pluginConfig entry it has a type
    // for: a typo waiting for the day the plugin is enabled is found now.
    for (name, args) in &profile.plugin_args {
        if instances.contains_key(name)
            || !crate::config::PLUGINS_WITH_ARGS.contains(&name.as_str())
        {
            continue;
        }
        if let Some(factory) = registry.get(name) {
            factory(Some(args), handle).map_err(|source| ProfileError::Init {
                name: name.to_string(),
                source,
            })?;
        }
    }
    Ok(instances)
}

/// Whether `p` implements extension point `ep`.
fn implements(p: &Arc<dyn Plugin>, ep: ExtensionPoint) -> bool {
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
}

/// The plugins enabled for `ep` itself, in order (upstream `updatePluginList`): each
/// must implement the point and appear once.
fn update_plugin_list(
    set: &ConfiguredPlugins,
    instances: &Instances,
    ep: ExtensionPoint,
) -> Result<Vec<Entry>, ProfileError> {
    let mut specific: Vec<Entry> = Vec::new();
    for r in &set.enabled {
        let p = instances
            .get(&r.name)
            .ok_or_else(|| ProfileError::NotInstantiated {
                name: r.name.to_string(),
                interface: ep.interface(),
            })?;
        if !implements(p, ep) {
            return Err(ProfileError::DoesNotExtend {
                name: r.name.to_string(),
                interface: ep.interface(),
            });
        }
        if specific.iter().any(|e| *e.name == *r.name) {
            return Err(ProfileError::Duplicate {
                name: r.name.to_string(),
                interface: ep.interface(),
            });
        }
        specific.push(Entry {
            name: r.name.as_str().into(),
            plugin: p.clone(),
        });
    }
    Ok(specific)
}

/// `ep`'s final list with multiPoint merged in (upstream `expandMultiPointPlugins`):
/// point-specific plugins that override a multiPoint one first, then multiPoint
/// plugins that implement the point and are not disabled for it, then the other
/// point-specific ones. `disabled: "*"` keeps the point-specific list alone.
fn expand_multi_point_plugins(
    plugins: &Plugins,
    instances: &Instances,
    ep: ExtensionPoint,
    specific: Vec<Entry>,
) -> Result<Vec<Entry>, ProfileError> {
    let set = plugins.get(ep);
    let disabled: HashSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
    if disabled.contains("*") {
        return Ok(specific);
    }
    let mut overrides: Vec<&str> = Vec::new();
    let mut multi: Vec<Entry> = Vec::new();
    for r in &plugins.multi_point.enabled {
        let p = instances
            .get(&r.name)
            .ok_or_else(|| ProfileError::NotInstantiated {
                name: r.name.to_string(),
                interface: ep.interface(),
            })?;
        if !implements(p, ep) || disabled.contains(r.name.as_str()) {
            continue;
        }
        if specific.iter().any(|e| *e.name == *r.name) {
            overrides.push(&r.name);
            continue;
        }
        if multi.iter().any(|e| *e.name == *r.name) {
            return Err(ProfileError::Duplicate {
                name: r.name.to_string(),
                interface: ep.interface(),
            });
        }
        multi.push(Entry {
            name: r.name.as_str().into(),
            plugin: p.clone(),
        });
    }
    let (first, rest): (Vec<Entry>, Vec<Entry>) = specific
        .into_iter()
        .partition(|e| overrides.contains(&&*e.name));
    let mut out = first;
    out.extend(multi);
    out.extend(rest);
    Ok(out)
}

/// Score weights: the first mention wins (a score-specific weight beats
/// multiPoint's); zero or unset means 1; the weighted maximum must not overflow.
fn score_weights(plugins: &Plugins, entries: Vec<Entry>) -> Result<Vec<ScoreEntry>, ProfileError> {
    let weight_sources: Vec<&PluginRef> = plugins
        .score
        .enabled
        .iter()
        .chain(plugins.multi_point.enabled.iter())
        .collect();
    let mut score = Vec::with_capacity(entries.len());
    let mut total: i64 = 0;
    for e in entries {
        let w = weight_sources
            .iter()
            .find(|r| *r.name == *e.name)
            .and_then(|r| r.weight)
            .unwrap_or(0);
        if w < 0 {
            return Err(ProfileError::NegativeWeight {
                name: e.name.to_string(),
                weight: w,
            });
        }
        let weight = if w == 0 { 1 } else { i64::from(w) };
        if weight * MAX_NODE_SCORE > i64::MAX - total {
            return Err(ProfileError::ScoreOverflow);
        }
        total += weight * MAX_NODE_SCORE;
        score.push(ScoreEntry { entry: e, weight });
    }
    Ok(score)
}

/// The events each plugin that can reject a pod registered (upstream
/// `EnqueueExtensions`), once per plugin; all events when it registered none.
fn enqueue_extensions<'a>(
    rejecting: impl Iterator<Item = &'a Entry>,
) -> Vec<(PluginName, Vec<ClusterEventWithHint>)> {
    let mut out: Vec<(PluginName, Vec<ClusterEventWithHint>)> = Vec::new();
    for e in rejecting {
        if out.iter().any(|(n, _)| *n == e.name) {
            continue;
        }
        let events = e
            .plugin
            .events_to_register()
            .unwrap_or_else(crate::framework::events::unroll_wildcard_resource);
        out.push((e.name, events));
    }
    out
}

/// Sidecar connections to tell about attempt boundaries, once each.
fn cycle_hooks(instances: &Instances) -> Vec<Arc<dyn CycleHooks>> {
    let mut hooks: Vec<Arc<dyn CycleHooks>> = Vec::new();
    for p in instances.values() {
        if let Some(h) = p.cycle_hooks() {
            if !hooks.iter().any(|x| x.key() == h.key()) {
                hooks.push(h);
            }
        }
    }
    hooks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SchedulerConfig;

    fn build(yaml: &str) -> Result<Framework, ProfileError> {
        let config = SchedulerConfig::from_yaml(yaml, "test.yaml").expect("config");
        let handle = Arc::new(Handle::new(
            Arc::new(crate::framework::waiting_pods::WaitingPods::default()),
            Arc::new(crate::testing::NoopClient),
        ));
        Framework::new(
            &config.profiles[0],
            &crate::plugins::in_tree_registry(),
            handle,
        )
    }

    #[test]
    fn args_of_a_disabled_upstream_plugin_are_still_checked() {
        let base = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: a\n  plugins:\n    multiPoint:\n      disabled: [{name: InterPodAffinity}]\n";
        let e = build(&format!(
            "{base}  pluginConfig: [{{name: InterPodAffinity, args: {{hardPodAffinityWeight: 101}}}}]\n"
        ))
        .err()
        .expect("refused")
        .to_string();
        assert!(
            e.contains("InterPodAffinity") && e.contains("hardPodAffinityWeight"),
            "{e}"
        );
        let e = build(&format!(
            "{base}  pluginConfig: [{{name: InterPodAffinity, args: {{hardPodAffinityWeigth: 1}}}}]\n"
        ))
        .err()
        .expect("refused")
        .to_string();
        assert!(e.contains("hardPodAffinityWeigth"), "{e}");
        build(&format!(
            "{base}  pluginConfig: [{{name: InterPodAffinity, args: {{hardPodAffinityWeight: 5}}}}]\n"
        ))
        .expect("valid args of a disabled plugin are fine");
    }
}
