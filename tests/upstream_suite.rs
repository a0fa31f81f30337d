//! kube-scheduler's own benchmark suite, as written (`benchmarks/upstream/`, copied
//! unchanged from kubernetes/kubernetes): every workload of every configuration
//! loads, or is refused for a feature Switchyard does not have (naming it) or a
//! template the copy lacks; and each configuration's smallest workload runs to the
//! end with every pod bound or pending with a reason and the invariants holding.

use std::path::{Path, PathBuf};
use std::time::Duration;

use switchyard::model::input::DEFAULT_MAX_INPUT_BYTES;
use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, workload, SimulateOptions};

/// Why a workload may be refused: a feature Switchyard does not have yet, or a
/// template missing from the copy (listed in benchmarks/upstream/README.md).
const ALLOWED_REFUSALS: &[&str] = &[
    "Dynamic Resource Allocation",
    "Workload API",
    "the workload turns on InPlacePodVerticalScalingSchedulerPreemption",
    // Missing from the copy: volumes' pvc.yaml and pv-aws.yaml, starvation's
    // victim-affinity-pod.yaml.
    "templates/pvc.yaml: No such file",
    "templates/victim-affinity-pod.yaml: No such file",
];

fn configs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("performance-config") && n.ends_with(".yaml"))
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &switchyard_e2e::workspace_root().join("benchmarks/upstream/scheduler_perf"),
        &mut out,
    );
    out.sort();
    out
}

/// The sum of a workload's numeric params: upstream's sizes grow with them.
fn size(file: &Path, name: &str) -> f64 {
    let text = std::fs::read_to_string(file).expect("config");
    let cases: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
    let (case, wl) = name.split_once('/').expect("Case/Workload");
    cases
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == case)
        .flat_map(|c| c["workloads"].as_array().cloned().unwrap_or_default())
        .filter(|w| w["name"] == wl)
        .flat_map(|w| {
            w["params"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_f64()).collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .sum()
}

#[test]
fn every_upstream_workload_loads_or_is_refused_naming_why() {
    let configs = configs();
    assert!(configs.len() >= 20, "the copy is there: {configs:?}");
    let (mut loaded, mut refused, mut wrong) = (0, 0, Vec::new());
    for f in &configs {
        for entry in workload::list_workloads(f, DEFAULT_MAX_INPUT_BYTES).expect("list") {
            let name = entry.name;
            match workload::load(f, Some(&name), DEFAULT_MAX_INPUT_BYTES, None) {
                Ok(_) => loaded += 1,
                Err(e) if ALLOWED_REFUSALS.iter().any(|a| e.to_string().contains(a)) => {
                    refused += 1
                }
                Err(e) => wrong.push(format!("{name}: {e}")),
            }
        }
    }
    eprintln!("{loaded} workloads load, {refused} refused for a missing feature or template");
    assert!(
        wrong.is_empty(),
        "refused for another reason:\n{}",
        wrong.join("\n")
    );
    assert!(loaded >= 190, "{loaded} load");
}

#[test]
fn each_configurations_smallest_workload_runs_to_the_end() {
    let mut failures = Vec::new();
    for f in configs() {
        let names: Vec<String> = workload::list_workloads(&f, DEFAULT_MAX_INPUT_BYTES)
            .expect("list")
            .into_iter()
            .map(|e| e.name)
            .collect();
        let smallest = names
            .iter()
            .filter(|n| workload::load(&f, Some(n), DEFAULT_MAX_INPUT_BYTES, None).is_ok())
            .min_by(|a, b| size(&f, a).total_cmp(&size(&f, b)));
        let Some(name) = smallest else {
            continue; // every workload needs a feature Switchyard lacks (DRA, Workload API)
        };
        let opts = SimulateOptions {
            workload: Some(f.clone()),
            workload_name: Some(name.clone()),
            timeout: Duration::from_secs(300),
            ..SimulateOptions::default()
        };
        match simulate::run(&opts, &in_tree_registry()) {
            Ok(r) if r.invariants.ok && r.invariants.accounted && r.unsettled.is_none() => {
                eprintln!(
                    "{name}: {} bound, {} pending",
                    r.summary.bound, r.summary.unschedulable
                )
            }
            Ok(r) => failures.push(format!(
                "{name}: invariants {:?}, unsettled {:?}",
                r.invariants, r.unsettled
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
