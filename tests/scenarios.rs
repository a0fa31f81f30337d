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
    let sidecar = Sidecar::start();
    let endpoint = sidecar.endpoint.clone();
    let remote_trials: Vec<Trial> = files
        .iter()
        .map(|f| {
            let f = f.clone();
            let endpoint = endpoint.clone();
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
                let adjust = |c: &mut switchyard::config::SchedulerConfig| {
                    switchyard_e2e::scenario::swap_plugin(
                        c,
                        "TaintToleration",
                        "RemoteTaintToleration",
                    );
                    c.remote_plugins.push(switchyard::remote::EndpointConfig {
                        index: 0,
                        endpoint: endpoint.clone(),
                        timeout: std::time::Duration::from_secs(5),
                        failure_policy: switchyard::remote::FailurePolicy::Fail,
                        plugins: vec![],
                        startup_timeout: std::time::Duration::from_secs(10),
                    });
                };
                switchyard_e2e::scenario::run_file_with(&f, &adjust).map_err(Failed::from)
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
    let conclusion = libtest_mimic::run(&args, trials);
    drop(sidecar);
    conclusion.exit();
}

/// The TaintToleration sidecar, on a socket of its own, killed when dropped.
struct Sidecar {
    child: std::process::Child,
    dir: PathBuf,
    endpoint: String,
}

impl Sidecar {
    fn start() -> Sidecar {
        let dir = std::env::temp_dir().join(format!("switchyard-scenarios-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let sock = dir.join("taint.sock");
        let endpoint = format!("unix://{}", sock.display());
        let child =
            std::process::Command::new(switchyard_e2e::binary("switchyard-tainttoleration"))
                .args(["--listen", &endpoint])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("start the TaintToleration sidecar");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !sock.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            sock.exists(),
            "the sidecar did not create {}",
            sock.display()
        );
        Sidecar {
            child,
            dir,
            endpoint,
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
