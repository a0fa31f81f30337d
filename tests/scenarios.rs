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
    let trials = files
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
    libtest_mimic::run(&args, trials).exit();
}
