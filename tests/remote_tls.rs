//! TLS sidecar endpoints, end to end: the TaintToleration sidecar (Rust SDK) and the
//! EnergyAware sidecar (Python) serve on `https://127.0.0.1:PORT` with mutual TLS (they
//! require a client certificate from the test CA), `switchyard simulate` connects
//! through `remotePlugins[].tls` and the sidecar's filter keeps every pod off node-1.
//! The Rust sidecar refuses a scheduler without a client certificate, and `--probe`
//! checks its gRPC health over TLS and over a Unix socket (the Python sidecar's probe
//! is checked by its self-test).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use switchyard::remote::sidecar::{exec_command, Listen, SidecarProcess};
use switchyard_e2e::{binary, python, run_with_deadline, start_sidecar, workspace_root};

const PODS: usize = 12;

fn fixture(name: &str) -> String {
    workspace_root()
        .join("tests/fixtures/tls")
        .join(name)
        .display()
        .to_string()
}

/// The TaintToleration sidecar on https://127.0.0.1:PORT, requiring client
/// certificates signed by the test CA.
fn tls_sidecar() -> (SidecarProcess, u16) {
    tls_sidecar_running(&exec_command(
        &binary("switchyard-tainttoleration").display().to_string(),
        &[],
    ))
}

/// `exec` (a shell command) serving on https://127.0.0.1:PORT as [`tls_sidecar`].
fn tls_sidecar_running(exec: &str) -> (SidecarProcess, u16) {
    let Ok(Listen::Tcp(port)) = Listen::free_tcp() else {
        panic!("no free port");
    };
    let cmd = format!(
        "SWITCHYARD_PLUGIN_LISTEN='https://127.0.0.1:{port}' SWITCHYARD_PLUGIN_TLS_CERT='{}' SWITCHYARD_PLUGIN_TLS_KEY='{}' SWITCHYARD_PLUGIN_TLS_CLIENT_CA='{}' {exec}",
        fixture("server.crt"),
        fixture("server.key"),
        fixture("ca.crt"),
    );
    let p = SidecarProcess::start(&cmd, Listen::Tcp(port), Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    (p, port)
}

struct Run {
    dir: PathBuf,
}

/// The profile of the TaintToleration runs: the sidecar's RemoteTaintToleration
/// instead of the built-in.
const TAINT_PLUGINS: &str = "  plugins: [RemoteTaintToleration]\n";
const TAINT_PROFILE: &str =
    "      disabled: [{name: TaintToleration}]\n      enabled: [{name: RemoteTaintToleration}]\n";

impl Run {
    /// A cluster of three nodes, node-1 tainted and labelled as draining, and PODS pods
    /// without tolerations; `endpoint_plugins` and `profile` are the lines of the
    /// remote plugin entry and of the profile's multiPoint.
    fn new(name: &str, port: u16, tls: &str, endpoint_plugins: &str, profile: &str) -> Run {
        let dir =
            std::env::temp_dir().join(format!("switchyard-tls-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut cluster = String::new();
        for i in 0..3 {
            let (taint, labels) = if i == 1 {
                (
                    ", taints: [{key: dedicated, value: gpu, effect: NoSchedule}]",
                    ", labels: {energy.switchyard.dev/draining: \"true\"}",
                )
            } else {
                ("", "")
            };
            cluster.push_str(&format!(
                "---\n{{apiVersion: v1, kind: Node, metadata: {{name: node-{i}{labels}}}, spec: {{unschedulable: false{taint}}}, status: {{allocatable: {{cpu: \"8\", memory: 32Gi, pods: \"110\"}}}}}}\n"
            ));
        }
        for i in 0..PODS {
            cluster.push_str(&format!(
                "---\n{{apiVersion: v1, kind: Pod, metadata: {{name: p-{i}}}, spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}}}\n"
            ));
        }
        std::fs::write(dir.join("cluster.yaml"), cluster).expect("write cluster");
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nremotePlugins:\n- endpoint: https://127.0.0.1:{port}\n  timeout: 2s\n  startupTimeout: 5s\n{endpoint_plugins}  tls:\n{tls}\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n{profile}"
            ),
        )
        .expect("write config");
        Run { dir }
    }

    fn simulate(&self, timeout_seconds: &str) -> (Option<Value>, String) {
        let out = run_with_deadline(
            Command::new(binary("switchyard"))
                .current_dir(workspace_root())
                .args([
                    "simulate",
                    "--output-format",
                    "json",
                    "--timeout",
                    timeout_seconds,
                ])
                .arg("--cluster")
                .arg(self.dir.join("cluster.yaml"))
                .arg("--config")
                .arg(self.dir.join("config.yaml")),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        (serde_json::from_slice(&out.stdout).ok(), stderr)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn mutual_tls_endpoint_schedules_through_the_sidecar() {
    let (_sidecar, port) = tls_sidecar();
    let run = Run::new("mtls", port, &mutual_tls(), TAINT_PLUGINS, TAINT_PROFILE);
    assert_schedules_around_node_1(&run);
}

/// The Python sidecar serves the same contract over mutual TLS.
#[test]
fn python_sidecar_serves_mutual_tls() {
    let script = workspace_root().join("plugins/python-energy/sidecar.py");
    let (_sidecar, port) =
        tls_sidecar_running(&exec_command(&python(), &[&script.display().to_string()]));
    let profile =
        "      disabled: [{name: TaintToleration}]\n      enabled: [{name: EnergyAware}]\n";
    let run = Run::new("python-mtls", port, &mutual_tls(), "", profile);
    assert_schedules_around_node_1(&run);
}

/// remotePlugins[].tls with the test CA and the scheduler's client certificate.
fn mutual_tls() -> String {
    format!(
        "    caFile: {}\n    certFile: {}\n    keyFile: {}\n    serverName: localhost",
        fixture("ca.crt"),
        fixture("client.crt"),
        fixture("client.key")
    )
}

/// Every pod bound, none on node-1 (which only the sidecar's filter rejects), and the
/// calls went to the sidecar.
fn assert_schedules_around_node_1(run: &Run) {
    let (report, stderr) = run.simulate("30");
    let report = report.unwrap_or_else(|| panic!("no JSON report; stderr:\n{stderr}"));
    let pods = report["pods"].as_array().expect("pods");
    let placed: Vec<&str> = pods.iter().filter_map(|p| p["node"].as_str()).collect();
    assert_eq!(placed.len(), PODS, "every pod bound: {report}");
    assert!(
        !placed.contains(&"node-1"),
        "the sidecar's filter keeps pods off node-1: {placed:?}"
    );
    let calls: u64 = report["remote"]
        .as_array()
        .expect("remote")
        .iter()
        .filter_map(|r| r["calls"].as_u64())
        .sum();
    // Alike pods after the first are answered from kept answers: fewer calls than pods.
    assert!(calls > 0, "calls went over TLS: {calls}");
}

#[test]
fn sidecar_refuses_a_scheduler_without_a_client_certificate() {
    let (_sidecar, port) = tls_sidecar();
    let tls = format!("    caFile: {}", fixture("ca.crt"));
    let run = Run::new("no-client-cert", port, &tls, TAINT_PLUGINS, TAINT_PROFILE);
    let (report, stderr) = run.simulate("3");
    // No handshake: the plugin fails every attempt (policy Fail), nothing binds.
    if let Some(r) = &report {
        let placed = r["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["node"].as_str().is_some())
            .count();
        assert_eq!(placed, 0, "{r}");
    }
    assert!(
        stderr.contains(&format!("https://127.0.0.1:{port}"))
            && stderr.contains("RemoteTaintToleration")
            && (stderr.contains("CertificateRequired")
                || stderr.contains("requires a client certificate (mutual TLS), set tls.certFile")),
        "the errors name the endpoint, the plugin and the TLS cause:\n{stderr}"
    );
}

#[test]
fn probe_checks_health_over_tls_and_unix_sockets() {
    let (_sidecar, port) = tls_sidecar();
    let probe = |listen: &str, ca: &str| {
        run_with_deadline(
            Command::new(binary("switchyard-tainttoleration"))
                .args(["--probe", "--listen", listen])
                .env("SWITCHYARD_PLUGIN_TLS_CERT", fixture("server.crt"))
                .env("SWITCHYARD_PLUGIN_TLS_KEY", fixture("server.key"))
                .env("SWITCHYARD_PLUGIN_TLS_CLIENT_CA", fixture(ca)),
            Duration::from_secs(20),
        )
    };
    let https = format!("https://127.0.0.1:{port}");
    let ok = probe(&https, "ca.crt");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // A CA that did not sign the sidecar's certificate: the probe must not pass.
    let bad = probe(&https, "other-ca.crt");
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let unix = start_sidecar("switchyard-tainttoleration", "tls-probe-unix", &[]);
    let ok = probe(&unix.endpoint, "ca.crt");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    drop(unix);
    let gone = probe(
        &format!(
            "unix://{}",
            switchyard_e2e::sidecar_socket("tls-probe-unix").display()
        ),
        "ca.crt",
    );
    assert_eq!(
        gone.status.code(),
        Some(1),
        "a stopped sidecar fails its probe"
    );
}

/// The conformance kit over mutual TLS: with the CA and a client certificate every
/// clause the sidecar exercises passes; without the client certificate the sidecar
/// refuses the kit, which fails H1 naming the connection, and exits 1.
#[test]
fn conformance_kit_checks_a_sidecar_over_mutual_tls() {
    let (_sidecar, port) = tls_sidecar();
    let endpoint = format!("https://127.0.0.1:{port}");
    let kit = |extra: &[&str]| {
        let mut cmd = Command::new(binary("switchyard"));
        cmd.args(["conformance", &endpoint, "--output-format", "json"])
            .args([
                "--tls-ca",
                &fixture("ca.crt"),
                "--tls-server-name",
                "localhost",
            ])
            .args(extra);
        run_with_deadline(&mut cmd, Duration::from_secs(60))
    };
    let out = kit(&[
        "--tls-cert",
        &fixture("client.crt"),
        "--tls-key",
        &fixture("client.key"),
    ]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let verdict = |r: &Value, c: &str| {
        r["outcomes"]
            .as_array()
            .and_then(|o| o.iter().find(|x| x["clause"] == c))
            .map(|x| x["verdict"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    for c in ["H1", "R1", "F1", "F8", "SC1", "L2", "HL1"] {
        assert_eq!(verdict(&report, c), "pass", "{c}: {report:#}");
    }
    let refused = kit(&[]);
    assert_eq!(refused.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&refused.stdout).expect("json report");
    assert_eq!(verdict(&report, "H1"), "fail", "{report:#}");
}
