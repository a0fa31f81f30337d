//! Scenario files: Kubernetes manifests in, expected placements out.
//!
//! A scenario is a multi-document YAML file. One document is the scenario itself:
//!
//! ```yaml
//! kind: Scenario
//! description: why kube-scheduler decides this way
//! config: {...}          # optional KubeSchedulerConfiguration
//! seeds: 3               # optional: run with this many tie-break seeds
//! sidecars: [switchyard-quota]  # optional: sidecars to start: binaries of this
//!                         # workspace (examples/NAME for a cargo example) or Python
//!                         # scripts (a path ending in .py, from the workspace root);
//!                         # the plugins they serve are enabled at multiPoint
//! expect:
//!   placements: {default/web: node-a, default/db: [node-b, node-c]}
//!   unschedulable: {default/big: "0/3 nodes are available: 3 Insufficient cpu."}
//!   evicted: {default/victim: default/preemptor}
//!   nominated: {default/preemptor: node-a}
//!   claims: {default/data-web-0: pv-a, default/scratch: provisioned, default/x: Pending}
//! ```
//!
//! Every other document is a manifest for the embedded cluster. Every pod the scheduler
//! handles must appear in `placements` or `unschedulable`, so a scenario states its
//! whole outcome.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use switchyard::cluster::manifest::{self, Skipped};
use switchyard::config::SchedulerConfig;
use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

#[derive(Deserialize)]
#[serde(untagged)]
pub enum NodeChoice {
    One(String),
    Any(Vec<String>),
}

impl NodeChoice {
    fn allows(&self, node: &str) -> bool {
        match self {
            NodeChoice::One(n) => n == node,
            NodeChoice::Any(v) => v.iter().any(|n| n == node),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default)]
    pub placements: BTreeMap<String, NodeChoice>,
    #[serde(default)]
    pub unschedulable: BTreeMap<String, String>,
    /// victim -> preemptor
    #[serde(default)]
    pub evicted: BTreeMap<String, String>,
    #[serde(default)]
    pub nominated: BTreeMap<String, String>,
    /// claim -> its end state: a volume name (bound to it; a list: to one of them),
    /// `provisioned` (bound to a volume provisioned for it) or `Pending`.
    #[serde(default)]
    pub claims: BTreeMap<String, NodeChoice>,
    /// ResourceClaim (`namespace/name`, or `namespace/pod:entry` for a claim made from
    /// the pod's template) -> its allocated devices (`request: driver/pool/device`;
    /// empty: not allocated).
    #[serde(default, rename = "resourceClaims")]
    pub resource_claims: BTreeMap<String, Vec<String>>,
    /// pod -> substrings that must appear, in this order, in its recorded events
    /// (`Reason: message`): shows what happened on the way to the final state.
    #[serde(default)]
    pub events: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    #[serde(default, rename = "apiVersion")]
    pub api_version: Option<String>,
    pub kind: String,
    pub description: String,
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    #[serde(default)]
    pub seeds: Option<u64>,
    /// Sidecar binaries to start for the run (their plugins are enabled everywhere).
    #[serde(default)]
    pub sidecars: Vec<String>,
    pub expect: Expect,
}

/// Runs one scenario file; `Err` explains every mismatch.
pub fn run_file(path: &Path) -> Result<(), String> {
    run_file_with(path, &|_| {})
}

/// Runs a scenario file after `adjust` rewrites its configuration.
pub fn run_file_with(path: &Path, adjust: &dyn Fn(&mut SchedulerConfig)) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = path.display().to_string();
    let docs: Vec<serde_json::Value> =
        switchyard::yaml::from_multiple(&text).map_err(|e| format!("{file}: {e}"))?;
    let mut scenario: Option<Scenario> = None;
    for d in &docs {
        if d.get("kind").and_then(|k| k.as_str()) == Some("Scenario") {
            let s: Scenario =
                serde_json::from_value(d.clone()).map_err(|e| format!("{file}: Scenario: {e}"))?;
            scenario = Some(s);
        }
    }
    let scenario = scenario.ok_or_else(|| format!("{file}: no `kind: Scenario` document"))?;
    let mut objects = Vec::new();
    let mut skipped = Skipped::default();
    manifest::parse_str(&text, &file, &mut objects, &mut skipped).map_err(|e| e.to_string())?;
    if let Some((src, kind)) = skipped.0.iter().find(|(_, k)| k != "Scenario") {
        return Err(format!(
            "{src}: kind {kind} is not loaded by the embedded cluster"
        ));
    }
    let config = match &scenario.config {
        Some(c) => {
            let yaml = serde_json::to_string(c).map_err(|e| e.to_string())?;
            Some(
                SchedulerConfig::from_yaml(&yaml, &format!("{file} (config)"))
                    .map_err(|e| e.to_string())?,
            )
        }
        None => None,
    };
    let mut config = config.unwrap_or_else(SchedulerConfig::default_config);
    adjust(&mut config);
    // Sidecars live until the run ends; a socket per run, as runs go in parallel.
    let mut sidecars = Vec::new();
    for bin in &scenario.sidecars {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let socket_name = format!("{}-{run}", bin.replace(['/', '.'], "-"));
        let sidecar = if bin.ends_with(".py") {
            let script = crate::workspace_root().join(bin).display().to_string();
            switchyard::remote::sidecar::SidecarProcess::start(
                &switchyard::remote::sidecar::exec_command(&crate::python(), &[&script]),
                switchyard::remote::sidecar::Listen::Unix(crate::sidecar_socket(&socket_name)),
                std::time::Duration::from_secs(30),
            )
            .map_err(|e| format!("{file}: sidecar {bin}: {e}"))?
        } else {
            crate::start_sidecar(bin, &socket_name, &[])
        };
        let index = config.remote_plugins.len();
        let mut ep = switchyard::remote::EndpointConfig::new(index, &sidecar.endpoint)
            .map_err(|e| format!("{file}: sidecar {bin}: {e}"))?;
        ep.auto_enable = true;
        ep.timeout = std::time::Duration::from_secs(5);
        config.remote_plugins.push(ep);
        sidecars.push(sidecar);
    }
    let config = Some(config);
    // Pods the manifests already bind are the cluster's state, not outcomes.
    let prebound: Vec<String> = objects
        .iter()
        .filter_map(|o| match &o.object {
            manifest::Object::Pod(p)
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() =>
            {
                Some(format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    p.metadata.name.as_deref().unwrap_or("")
                ))
            }
            _ => None,
        })
        .collect();
    let seeds = scenario.seeds.unwrap_or(1).max(1);
    for seed in 0..seeds {
        let opts = SimulateOptions {
            objects: objects.clone(),
            scheduler_config: config.clone(),
            seed: 0x5eed + seed,
            timeout: std::time::Duration::from_secs(60),
            events: true,
            ..SimulateOptions::default()
        };
        let report =
            simulate::run(&opts, &in_tree_registry()).map_err(|e| format!("{file}: {e}"))?;
        check(&scenario.expect, &report, &prebound)
            .map_err(|e| format!("{file} (seed {seed}):\n{e}"))?;
    }
    drop(sidecars);
    Ok(())
}

fn check(expect: &Expect, report: &simulate::Report, prebound: &[String]) -> Result<(), String> {
    let mut problems = Vec::new();
    if !report.invariants.ok {
        problems.push(format!("invariants violated: {:?}", report.invariants));
    }
    for p in &report.pods {
        let key = format!("{}/{}", p.namespace, p.name);
        if prebound.contains(&key) && !expect.placements.contains_key(&key) {
            continue;
        }
        match (
            &p.node,
            expect.placements.get(&key),
            expect.unschedulable.get(&key),
        ) {
            (Some(node), Some(choice), _) if choice.allows(node) => {}
            (Some(node), Some(_), _) => problems.push(format!(
                "{key}: placed on {node}, expected {}",
                describe(expect.placements.get(&key))
            )),
            (Some(node), None, Some(_)) => {
                problems.push(format!("{key}: placed on {node}, expected unschedulable"))
            }
            (Some(node), None, None) => problems.push(format!(
                "{key}: placed on {node}, but the scenario does not expect this pod"
            )),
            (None, _, Some(msg)) => {
                let got = p.reason.clone().unwrap_or_default();
                if got != *msg {
                    problems.push(format!(
                        "{key}: unschedulable with\n    got:  {got}\n    want: {msg}"
                    ));
                }
            }
            (None, Some(_), None) => problems.push(format!(
                "{key}: not placed ({}), expected {}",
                p.reason.as_deref().unwrap_or("no reason"),
                describe(expect.placements.get(&key))
            )),
            (None, None, None) => {
                if p.reason.is_some() {
                    problems.push(format!(
                        "{key}: unschedulable ({}), but the scenario does not expect this pod",
                        p.reason.as_deref().unwrap_or("")
                    ));
                }
            }
        }
        if let Some(wanted) = expect.events.get(&key) {
            let mut it = p.events.iter();
            for w in wanted {
                if !it.any(|e| e.contains(w.as_str())) {
                    problems.push(format!(
                        "{key}: no event containing {w:?} (in order) among {:?}",
                        p.events
                    ));
                    break;
                }
            }
        }
        if let Some(want) = expect.nominated.get(&key) {
            // "" means: no nominated node.
            let want = (!want.is_empty()).then_some(want.as_str());
            if p.nominated_node.as_deref() != want {
                problems.push(format!(
                    "{key}: nominated {:?}, expected {want:?}",
                    p.nominated_node
                ));
            }
        }
    }
    for (claim, want) in &expect.claims {
        let Some(c) = report.claims.iter().find(|c| c.claim == *claim) else {
            problems.push(format!(
                "{claim}: expected a claim, but there is no such claim"
            ));
            continue;
        };
        let got = match (c.phase, &c.volume, c.provisioned) {
            ("Bound", _, true) => "provisioned".to_string(),
            ("Bound", Some(v), false) => v.clone(),
            (phase, _, _) => phase.to_string(),
        };
        if !want.allows(&got) {
            problems.push(format!(
                "{claim}: {got}{}, expected {}",
                c.volume
                    .as_deref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default(),
                describe(Some(want))
            ));
        }
    }
    for (claim, want) in &expect.resource_claims {
        let Some(c) = report
            .resource_claims
            .iter()
            .find(|c| c.claim == *claim || c.pod_claim.as_deref() == Some(claim.as_str()))
        else {
            problems.push(format!(
                "{claim}: expected a ResourceClaim, but there is no such claim"
            ));
            continue;
        };
        if c.devices != *want {
            problems.push(format!(
                "{claim}: allocated {:?}, expected {want:?}",
                c.devices
            ));
        }
    }
    let reported: Vec<String> = report
        .pods
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect();
    for key in expect.placements.keys().chain(expect.unschedulable.keys()) {
        if !reported.contains(key) && !expect.evicted.contains_key(key) {
            problems.push(format!(
                "{key}: expected in the report, but there is no such pod"
            ));
        }
    }
    let evicted: BTreeMap<String, String> = report
        .evicted
        .iter()
        .map(|e| (format!("{}/{}", e.namespace, e.name), e.preemptor.clone()))
        .collect();
    if evicted != expect.evicted {
        problems.push(format!(
            "evicted {evicted:?}, expected {:?}",
            expect.evicted
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn describe(c: Option<&NodeChoice>) -> String {
    match c {
        Some(NodeChoice::One(n)) => n.clone(),
        Some(NodeChoice::Any(v)) => format!("one of {v:?}"),
        None => "nothing".into(),
    }
}
