//! Shared helpers for Switchyard's scenario and end-to-end tests: locating the built
//! binaries, running them with a deadline, and running scenario files.

pub mod apiserver;
pub mod controlplane;
pub mod otlp;
pub mod process;
pub mod scenario;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root (the folder holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A binary built from this workspace, next to the running test's target directory.
/// The test command builds every binary first (`cargo build --workspace --bins`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // A test: target/<profile>/deps/<test> -> target/<profile>/<name>; a binary of
    // this crate: target/<profile>/<bin> -> its sibling.
    let here = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let dir = if here.ends_with("deps") {
        here.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        here
    };
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --workspace --bins` first (the test command does)",
        path.display()
    );
    path
}

/// The Python with the Python sidecar's dependencies: `SWITCHYARD_PYTHON` (the test
/// command sets it), else `target/pyenv` when `scripts/pyenv.sh` made it, else python3.
pub fn python() -> String {
    if let Ok(p) = std::env::var("SWITCHYARD_PYTHON") {
        return p;
    }
    let venv = workspace_root().join("target/pyenv/bin/python3");
    if venv.exists() {
        return venv.display().to_string();
    }
    "python3".into()
}

/// Where a run put each pod: `namespace/name` → its node (`None`: pending).
pub type Placements = BTreeMap<String, Option<String>>;

/// The placements of a simulation report.
pub fn placements(r: &switchyard::simulate::Report) -> Placements {
    r.pods
        .iter()
        .map(|p| (format!("{}/{}", p.namespace, p.name), p.node.clone()))
        .collect()
}

/// Panics, naming up to five pods, unless `b` places every pod as `a` does; `what`
/// says which run `b` is.
pub fn assert_same_placements(what: &str, a: &Placements, b: &Placements) {
    let differ: Vec<_> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .take(5)
        .collect();
    assert!(
        differ.is_empty(),
        "{what}: placements differ, e.g. {differ:?}"
    );
    assert_eq!(a.len(), b.len(), "{what}: not the same pods");
}

/// The sidecar at `endpoint` serving `plugin`, added to every profile, with calls
/// timing out after `timeout`.
pub fn added_sidecar(
    endpoint: &str,
    plugin: &str,
    timeout: Duration,
) -> switchyard::remote::EndpointConfig {
    let mut ep = switchyard::remote::EndpointConfig::new(0, endpoint).expect("endpoint");
    ep.plugins = vec![plugin.into()];
    ep.auto_enable = true;
    ep.timeout = timeout;
    ep
}

/// Builds example `name` of the Go SDK (`plugin-sdk/go/examples/<name>`) into
/// `target/go-examples/<name>` and returns the binary: GOPATH mode over Debian's
/// `/usr/share/gocode` (offline, as `plugin-sdk/go/test.sh` builds), or module mode
/// when those packages are absent. Panics saying what to install when `go` is
/// missing (the test command installs it).
pub fn go_example(name: &str) -> PathBuf {
    let root = workspace_root();
    let out_dir = root.join("target/go-examples");
    let out = out_dir.join(name);
    let module = "github.com/switchyard-sched/switchyard/plugin-sdk/go";
    let sdk = root.join("plugin-sdk/go");
    let mut cmd = Command::new("go");
    cmd.args(["build", "-o"])
        .arg(&out)
        .arg(format!("./examples/{name}"));
    if Path::new("/usr/share/gocode/src/google.golang.org/grpc").is_dir() {
        // The SDK linked at its import path in a GOPATH of its own.
        let gopath = out_dir.join("gopath");
        let link = gopath.join("src").join(module);
        std::fs::create_dir_all(link.parent().unwrap_or(&gopath)).expect("create the GOPATH");
        if !link.exists() {
            std::os::unix::fs::symlink(&sdk, &link).expect("link the Go SDK into the GOPATH");
        }
        cmd.current_dir(&link)
            .env("GO111MODULE", "off")
            .env("GOPATH", format!("{}:/usr/share/gocode", gopath.display()))
            .env("GOFLAGS", "");
    } else {
        cmd.current_dir(&sdk);
    }
    let done = match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run go ({e}): install golang-go golang-google-grpc-dev golang-google-protobuf-dev \
             (scripts/test.sh installs them when run as root)"
        ),
    };
    assert!(
        done.status.success(),
        "go build ./examples/{name} failed:\n{}",
        String::from_utf8_lossy(&done.stderr)
    );
    out
}

/// The Unix socket [`start_sidecar`] gives a sidecar named `socket_name`.
pub fn sidecar_socket(socket_name: &str) -> PathBuf {
    switchyard::remote::sidecar::socket_dir().join(format!("{socket_name}.sock"))
}

/// Starts a sidecar binary of this workspace, with `env` set, on
/// [`sidecar_socket`]`(socket_name)` and waits for it to listen; it is stopped when the
/// value is dropped.
pub fn start_sidecar(
    binary_name: &str,
    socket_name: &str,
    env: &[(&str, &str)],
) -> switchyard::remote::sidecar::SidecarProcess {
    use switchyard::remote::sidecar::{Listen, SidecarProcess};
    let env: String = env.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
    let exec =
        switchyard::remote::sidecar::exec_command(&binary(binary_name).display().to_string(), &[]);
    let cmd = format!("{env}{exec}");
    let listen = Listen::Unix(sidecar_socket(socket_name));
    SidecarProcess::start(&cmd, listen, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a command to completion, killing it after `limit`. Output is drained while it
/// runs (a full pipe would otherwise stall the child). Panics with the output when the
/// command does not finish in time.
pub fn run_with_deadline(cmd: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn test process");
    let mut out_pipe = child.stdout.take().expect("stdout");
    let mut err_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out_reader.join().unwrap_or_default();
                let stderr = err_reader.join().unwrap_or_default();
                panic!(
                    "process did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("waiting for process: {e}"),
        }
    };
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// Polls `f` every 20 ms until it holds; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A one-worker runtime and a listener on 127.0.0.1 (port chosen by the system), for
/// the servers tests run in-process (API-server double, OTLP receiver).
pub fn local_server() -> (
    tokio::runtime::Runtime,
    tokio::net::TcpListener,
    std::net::SocketAddr,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("addr");
    (runtime, listener, addr)
}

/// The JSON report a `switchyard simulate -o json` run printed. Exit status 4 (pods
/// left pending after a scheduler or plugin error) is accepted exactly when the
/// summary counts such pods, and 0 exactly when it counts none; anything else panics
/// with the output.
pub fn report_output(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON document ({e}, {}):\n{stdout}\n{stderr}",
            out.status
        )
    });
    let errors = v["summary"]["scheduler_errors"].as_u64();
    match out.status.code() {
        Some(0) => assert_eq!(errors, Some(0), "exit 0 with pods pending after errors"),
        Some(4) => assert!(
            errors.is_some_and(|n| n > 0),
            "exit 4 without pods pending after errors: {}",
            v["summary"]
        ),
        _ => panic!("command failed ({}):\n{stderr}\n{stdout}", out.status),
    }
    v
}

/// The JSON document a successful command printed, or a panic with its output (the
/// exit status, stderr and stdout) when it failed or printed something else.
pub fn json_output(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "command failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{stdout}\n{stderr}"))
}
