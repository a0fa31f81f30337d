//! Runs every scenario under `tests/scenarios/` (one test per file): Kubernetes
//! manifests in, the placements and FailedScheduling messages kube-scheduler would
//! produce out. See `src/scenario.rs` for the format.

use std::path::{Path, PathBuf};

use libtest_mimic::{Arguments, Failed, Trial};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "yaml") {
            out.push(p);
        }
    }
}

fn main() {
    let args = Arguments::from_args();
    let root = switchyard_e2e::workspace_root().join("tests/scenarios");
    let mut files = Vec::new();
    collect(&root, &mut files);
    assert!(
        !files.is_empty(),
        "no scenarios found under {}",
        root.display()
    );
    // Every scenario runs twice: in process, and with TaintToleration served by the
    // sidecar built from plugins/tainttoleration (same placements, same messages).
    // A sidecar holds one scheduler's replica (a new Replicate stream starts it over),
    // so each run gets its own: runs go in parallel.
    let remote_trials: Vec<Trial> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = f.clone();
            let name = format!(
                "sidecar::{}",
                f.strip_prefix(&root)
                    .unwrap_or(&f)
                    .with_extension("")
                    .display()
                    .to_string()
                    .replace('/', "::")
            );
            Trial::test(name, move || {
                let sidecar = switchyard_e2e::start_sidecar(
                    "switchyard-tainttoleration",
                    &format!("taint-{i}"),
                    &[],
                );
                let endpoint = sidecar.endpoint.clone();
                let adjust = |c: &mut switchyard::config::SchedulerConfig| {
                    c.rename_plugin("TaintToleration", "RemoteTaintToleration");
                    let mut ep = switchyard::remote::EndpointConfig::new(0, &endpoint)
                        .expect("sidecar endpoint");
                    ep.timeout = std::time::Duration::from_secs(5);
                    c.remote_plugins.push(ep);
                };
                let result = switchyard_e2e::scenario::run_file_with(&f, &adjust);
                drop(sidecar);
                result.map_err(Failed::from)
            })
        })
        .collect();
    let mut trials: Vec<Trial> = files
        .into_iter()
        .map(|f| {
            let name = f
                .strip_prefix(&root)
                .unwrap_or(&f)
                .with_extension("")
                .display()
                .to_string()
                .replace('/', "::");
            Trial::test(name, move || {
                switchyard_e2e::scenario::run_file(&f).map_err(Failed::from)
            })
        })
        .collect();
    trials.extend(remote_trials);
    libtest_mimic::run(&args, trials).exit();
}
