//! A real Kubernetes control plane for end-to-end tests: etcd, kube-apiserver and,
//! when asked, kube-controller-manager and kube-scheduler, started by the project's
//! `scripts/control-plane.sh` from the user's binaries (`$SWITCHYARD_K8S_BIN`, or
//! `$KUBEBUILDER_ASSETS` as controller-runtime's envtest has them), or by another
//! `control-plane.sh` in `$K8S_CONTROL_PLANE_DIR`. The binaries are never copied into
//! the project.
//!
//! Every control plane gets its own state directory and its own five ports, so tests
//! run side by side; it is stopped (SIGKILL, data removed) when the value is dropped,
//! also when the test panics. When the script is absent, [`ControlPlane::start`]
//! fails the test saying what is missing: a control-plane test never passes by
//! skipping. `scripts/test.sh` leaves these test binaries out of the run (and lists
//! them as not run, with the reason) when no control plane is available.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

/// Where `control-plane.sh` is: `$K8S_CONTROL_PLANE_DIR`, else the project's
/// `scripts/`.
pub fn control_plane_dir() -> PathBuf {
    match std::env::var_os("K8S_CONTROL_PLANE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => crate::workspace_root().join("scripts"),
    }
}

/// The user's Kubernetes binary `name` (`kube-scheduler`, ...) from
/// `$SWITCHYARD_K8S_BIN` or `$KUBEBUILDER_ASSETS`, as `scripts/control-plane.sh`
/// finds them.
pub fn k8s_binary(name: &str) -> Option<PathBuf> {
    ["SWITCHYARD_K8S_BIN", "KUBEBUILDER_ASSETS"]
        .iter()
        .filter_map(std::env::var_os)
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

/// `kubectl` from `$SWITCHYARD_K8S_BIN`, `$KUBEBUILDER_ASSETS` (envtest ships it) or
/// the PATH, if any.
pub fn kubectl_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    k8s_binary("kubectl").or_else(|| {
        std::env::split_paths(&path)
            .map(|d| d.join("kubectl"))
            .find(|p| p.is_file())
    })
}

/// What to start besides etcd and the API server.
#[derive(Clone, Copy, Debug, Default)]
pub struct Components {
    pub controller_manager: bool,
    pub scheduler: bool,
}

pub struct ControlPlane {
    script: PathBuf,
    state_dir: PathBuf,
    port_base: u16,
    /// The admin kubeconfig (system:masters).
    pub kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
}

static STARTED: AtomicU32 = AtomicU32::new(0);

fn ports_free(base: u16) -> bool {
    (0..5).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok())
}

/// A base with five free ports, different for each process and each call, in
/// 20000..45000 (below the ephemeral range).
fn pick_port_base() -> u16 {
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(STARTED.fetch_add(1, Ordering::Relaxed).wrapping_mul(97))
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let mut slot = seed % 2500;
    for _ in 0..2500 {
        let base = 20_000 + (slot as u16) * 10;
        if ports_free(base) {
            return base;
        }
        slot = (slot + 1) % 2500;
    }
    panic!("no five free ports on 127.0.0.1 in 20000..45000");
}

impl ControlPlane {
    /// Starts a control plane named `name` (its state directory under
    /// `target/k8s-tests/`); panics, naming what is missing, when there is none.
    pub fn start(name: &str, components: Components) -> ControlPlane {
        let dir = control_plane_dir();
        let script = dir.join("control-plane.sh");
        assert!(
            script.is_file(),
            "no control-plane.sh in {} (K8S_CONTROL_PLANE_DIR names a folder holding one; unset, the project's scripts/ is used)",
            dir.display()
        );
        let root = crate::workspace_root().join("target/k8s-tests");
        let state_dir = root.join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state_dir);
        std::fs::create_dir_all(&state_dir).expect("create the control plane's state dir");
        let mut last = String::new();
        for _attempt in 0..3 {
            let port_base = pick_port_base();
            // Before `start`: a kill during start-up must not leave servers behind.
            spawn_watchdog(&script, &state_dir, &root.join("bin"), port_base);
            let mut cmd = script_command(&script, &state_dir, &root.join("bin"), port_base);
            cmd.arg("start");
            if components.controller_manager {
                cmd.arg("--with-controller-manager");
            }
            if components.scheduler {
                cmd.arg("--with-scheduler");
            }
            let out = cmd.output().expect("run control-plane.sh start");
            // 3: a binary is missing; trying other ports will not find it.
            if out.status.code() == Some(3) {
                let _ = script_command(&script, &state_dir, &root.join("bin"), port_base)
                    .arg("stop")
                    .output();
                panic!(
                    "no Kubernetes control plane: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            if out.status.success() {
                let kubeconfig = state_dir.join("kubeconfig");
                let url = format!("https://127.0.0.1:{port_base}");
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .expect("runtime");
                let client = runtime.block_on(client_for(&kubeconfig));
                // /readyz can pass before the API server's bootstrap controller has
                // created the `default` namespace; every test puts objects there.
                let started = std::time::Instant::now();
                while runtime
                    .block_on(
                        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                            .get_opt("default"),
                    )
                    .ok()
                    .flatten()
                    .is_none()
                {
                    if started.elapsed() > std::time::Duration::from_secs(60) {
                        panic!("control plane {name}: no `default` namespace after 60 s");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                eprintln!(
                    "control plane {name} up at {url} (state {})",
                    state_dir.display()
                );
                return ControlPlane {
                    script,
                    state_dir,
                    port_base,
                    kubeconfig,
                    url,
                    runtime,
                    client,
                };
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // A port taken between our check and the start: try other ports.
            let _ = script_command(&script, &state_dir, &root.join("bin"), port_base)
                .arg("stop")
                .output();
        }
        panic!("control-plane.sh start failed three times:\n{last}");
    }

    /// As [`Self::start`], for a test that also runs kubectl: panics when kubectl
    /// is not installed.
    pub fn start_with_kubectl(name: &str, components: Components) -> ControlPlane {
        assert!(
            kubectl_path().is_some(),
            "kubectl not found in SWITCHYARD_K8S_BIN, KUBEBUILDER_ASSETS or the PATH: this test needs it"
        );
        Self::start(name, components)
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The admin client (system:masters).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// Runs `f` in the background on this control plane's client runtime.
    pub fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(f)
    }

    /// The PEM of the cluster CA.
    pub fn ca_file(&self) -> PathBuf {
        self.state_dir.join("pki/ca.crt")
    }

    /// A component's log.
    pub fn log(&self, component: &str) -> String {
        std::fs::read_to_string(self.state_dir.join(format!("logs/{component}.log")))
            .unwrap_or_default()
    }

    fn script_cmd(&self) -> Command {
        let bin = self
            .state_dir
            .parent()
            .unwrap_or(&self.state_dir)
            .join("bin");
        script_command(&self.script, &self.state_dir, &bin, self.port_base)
    }

    /// `control-plane.sh restart COMPONENT SECONDS_DOWN` (a crash: SIGKILL; etcd data
    /// kept). Blocks until the component is ready again.
    pub fn restart(&self, component: &str, seconds_down: u32) {
        let out = self
            .script_cmd()
            .args(["restart", component, &seconds_down.to_string()])
            .output()
            .expect("run control-plane.sh restart");
        assert!(
            out.status.success(),
            "control-plane.sh restart {component} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl` against this control plane as admin; panics when kubectl is not
    /// installed.
    pub fn kubectl_cmd(&self) -> Command {
        let k = kubectl_path().expect(
            "kubectl not found in SWITCHYARD_K8S_BIN, KUBEBUILDER_ASSETS or the PATH: this test needs it",
        );
        let mut cmd = Command::new(k);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--request-timeout=30s")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl with `args`; panics when kubectl is absent.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let mut cmd = self.kubectl_cmd();
        cmd.args(args).output().expect("run kubectl")
    }

    /// Runs kubectl with `args` and returns stdout; panics with stderr on failure.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates (or updates) every object of a JSON document (an object or a `List`)
    /// through the API, without kubectl. Server-side apply, field manager `e2e`.
    pub fn apply(&self, doc: &Value) {
        let items: Vec<Value> = match doc.get("items").and_then(Value::as_array) {
            Some(items) if doc["kind"] == "List" => items.clone(),
            _ => vec![doc.clone()],
        };
        self.block_on(async {
            for item in items {
                apply_one(&self.client, item).await;
            }
        });
    }

    /// Creates many objects concurrently (`parallel` requests in flight), for
    /// benchmark set-up: nodes, pods.
    pub fn create_many(&self, items: Vec<Value>, parallel: usize) {
        use futures_util::StreamExt;
        let client = self.client.clone();
        self.block_on(async move {
            futures_util::stream::iter(items)
                .for_each_concurrent(parallel, |item| {
                    let client = client.clone();
                    async move { apply_one(&client, item).await }
                })
                .await;
        });
    }

    /// GET of an API path as admin, as JSON (`None` on 404).
    pub fn get(&self, path: &str) -> Option<Value> {
        self.block_on(async {
            let req = http::Request::get(path).body(Vec::new()).expect("request");
            match self.client.request::<Value>(req).await {
                Ok(v) => Some(v),
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                Err(e) => panic!("GET {path}: {e}"),
            }
        })
    }

    /// The pods of a namespace, as JSON.
    pub fn pods(&self, namespace: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/pods"))
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }

    /// One pod, as JSON.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.get(&format!("/api/v1/namespaces/{namespace}/pods/{name}"))
    }

    /// `events.k8s.io/v1` events of a namespace.
    pub fn events(&self, namespace: &str) -> Vec<Value> {
        self.get(&format!(
            "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        ))
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
    }

    /// Runs Switchyard's invariant checker over what the API server holds for
    /// `namespace`: `created` are the pods as the test created them (priority given in
    /// `spec.priority`),
    /// `deleted` the keys (`namespace/name`) the test deleted itself; pods of
    /// `profiles` are Switchyard's (the default profile: every checked Filter). Panics
    /// naming each violated rule, pod and node.
    pub fn assert_invariants(
        &self,
        namespace: &str,
        created: &[Value],
        deleted: &[String],
        profiles: &[&str],
    ) {
        fn typed<T: serde::de::DeserializeOwned>(v: &[Value]) -> Vec<T> {
            v.iter()
                .map(|o| serde_json::from_value(o.clone()).expect("a typed object"))
                .collect()
        }
        let list = |path: &str| {
            self.get(path)
                .and_then(|v| v["items"].as_array().cloned())
                .unwrap_or_default()
        };
        let current = self.pods(namespace);
        let nodes = list("/api/v1/nodes");
        let events = self.events(namespace);
        let filters_of = |name: &str| {
            profiles
                .contains(&name)
                .then(|| switchyard::invariants::CHECKED_FILTERS.to_vec())
        };
        let (faults, input) = switchyard::invariants::check_api_server(
            &typed(created),
            deleted,
            &typed(&current),
            &typed(&nodes),
            &typed(&events),
            &filters_of,
        );
        assert!(
            faults.is_empty() && input.is_empty(),
            "invariants violated over the API server's objects:\n{}",
            faults
                .iter()
                .chain(&input)
                .map(|v| format!(
                    "  {}: pod {} node {}: {}",
                    v.rule,
                    v.pod.as_deref().unwrap_or("-"),
                    v.node.as_deref().unwrap_or("-"),
                    v.detail
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!(
            "invariants hold over {} created pods, {} nodes",
            created.len(),
            nodes.len()
        );
    }

    /// Plays the kubelet for terminating pods: deletes, with grace period 0, every
    /// pod of `namespace` that has a deletionTimestamp. Returns how many.
    pub fn finish_terminating(&self, namespace: &str) -> usize {
        let mut n = 0;
        for p in self.pods(namespace) {
            if p["metadata"]["deletionTimestamp"].is_string() {
                let name = p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                self.block_on(async {
                    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                        kube::Api::namespaced(self.client.clone(), namespace);
                    let dp = kube::api::DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    };
                    let _ = api.delete(&name, &dp).await;
                });
                n += 1;
            }
        }
        n
    }

    /// A token for a ServiceAccount (TokenRequest), valid `seconds`.
    pub fn service_account_token(&self, namespace: &str, name: &str, seconds: i64) -> String {
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        });
        self.block_on(async {
            let req = http::Request::post(format!(
                "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
            ))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("json"))
            .expect("request");
            let v: Value = self
                .client
                .request(req)
                .await
                .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"));
            v["status"]["token"].as_str().expect("token").to_string()
        })
    }

    /// A kubeconfig at `path` that authenticates with `token` instead of the admin
    /// certificate.
    pub fn write_token_kubeconfig(&self, path: &Path, token: &str) {
        let ca = std::fs::read(self.ca_file()).expect("read ca.crt");
        let ca_b64 = base64(&ca);
        let kc = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {}\n    certificate-authority-data: {ca_b64}\nusers:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: sa\n  context: {{cluster: local, user: sa}}\ncurrent-context: sa\n",
            self.url
        );
        std::fs::write(path, kc).expect("write kubeconfig");
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.script_cmd().arg("stop").output();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.state_dir);
        } else {
            eprintln!(
                "control plane state (logs) kept in {}",
                self.state_dir.display()
            );
        }
    }
}

/// Stops the control plane if the test process dies without running `Drop` (killed
/// by a harness timeout or by hand): a detached shell waits for this process to end,
/// then runs `control-plane.sh stop` if the state directory is still there.
fn spawn_watchdog(script: &Path, state_dir: &Path, bin_dir: &Path, port_base: u16) {
    let wait_then_stop = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; [ -d \"$K8S_STATE_DIR/run\" ] && exec bash \"$0\" stop",
        pid = std::process::id()
    );
    let mut cmd = Command::new("bash");
    // `bash -c CMD SCRIPT`: the script is CMD's $0.
    cmd.arg("-c").arg(wait_then_stop).arg(script);
    let _ = with_script_env(&mut cmd, state_dir, bin_dir, port_base)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// `bash control-plane.sh` for one control plane.
fn script_command(script: &Path, state_dir: &Path, bin_dir: &Path, port_base: u16) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script);
    with_script_env(&mut cmd, state_dir, bin_dir, port_base);
    cmd
}

/// The script's settings for one control plane: its state dir, the shared bin dir
/// (one unpacked copy for every test; unpacking concurrently is safe), its ports, and
/// SIGKILL on stop.
fn with_script_env<'c>(
    cmd: &'c mut Command,
    state_dir: &Path,
    bin_dir: &Path,
    port_base: u16,
) -> &'c mut Command {
    cmd.env("K8S_STATE_DIR", state_dir)
        .env("K8S_BIN_DIR", bin_dir)
        .env("K8S_PORT_BASE", port_base.to_string())
        .env("K8S_STOP_TIMEOUT", "0")
        .stdin(Stdio::null())
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    kube::Client::try_from(cfg).expect("client")
}

/// The API path of an object's collection, from its apiVersion and kind.
fn collection_path(item: &Value) -> String {
    let api_version = item["apiVersion"].as_str().unwrap_or("v1");
    let kind = item["kind"].as_str().unwrap_or_default();
    let plural = match kind {
        "Pod" => "pods",
        "Node" => "nodes",
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "PodDisruptionBudget" => "poddisruptionbudgets",
        "PriorityClass" => "priorityclasses",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ConfigMap" => "configmaps",
        "Lease" => "leases",
        "StorageClass" => "storageclasses",
        "PersistentVolume" => "persistentvolumes",
        "PersistentVolumeClaim" => "persistentvolumeclaims",
        "StatefulSet" => "statefulsets",
        "CSINode" => "csinodes",
        "CSIDriver" => "csidrivers",
        other => panic!("apply: no path known for kind {other}"),
    };
    let prefix = if api_version == "v1" {
        "/api/v1".to_string()
    } else {
        format!("/apis/{api_version}")
    };
    match item["metadata"]["namespace"].as_str() {
        Some(ns)
            if !matches!(
                kind,
                "Node"
                    | "Namespace"
                    | "PriorityClass"
                    | "ClusterRole"
                    | "ClusterRoleBinding"
                    | "StorageClass"
                    | "PersistentVolume"
                    | "CSINode"
                    | "CSIDriver"
            ) =>
        {
            format!("{prefix}/namespaces/{ns}/{plural}")
        }
        _ => format!("{prefix}/{plural}"),
    }
}

/// Server-side apply of one object (creates or updates it, status included for
/// nodes: a node's status is taken on create).
async fn apply_one(client: &kube::Client, item: Value) {
    let name = item["metadata"]["name"]
        .as_str()
        .expect("metadata.name")
        .to_string();
    let path = format!(
        "{}/{name}?fieldManager=e2e&force=true",
        collection_path(&item)
    );
    let req = http::Request::patch(&path)
        .header("content-type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(&item).expect("json"))
        .expect("request");
    if let Err(e) = client.request::<Value>(req).await {
        panic!("apply {path}: {e}");
    }
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How long a test may wait for one thing on a real control plane (2 shared cores,
/// other tests beside it).
pub const WAIT: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(super::base64(b"hello"), "aGVsbG8=");
        assert_eq!(super::base64(b"hi"), "aGk=");
        assert_eq!(super::base64(b"abc"), "YWJj");
    }
}
