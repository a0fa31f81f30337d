//! A hostile sidecar at the stream level (tests/fixtures/hostile_sidecar.py, real
//! gRPC over a Unix socket): flooding a stream with replies to no call, a reply over
//! the 64 MiB message limit, and answering forever without ever answering the call.
//! Under both failure policies the run must end by itself with its report, its error
//! naming the plugin, the stream and the limit, memory bounded, and the pods of
//! another profile placed exactly as in a run without the sidecar.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use switchyard::remote::sidecar::{exec_command, Listen, SidecarProcess};
use switchyard_e2e::{binary, python, run_with_deadline, sidecar_socket, workspace_root};

/// The run's own limit; a hostile sidecar must not bring it near.
const TIMEOUT_SECS: u64 = 90;
/// Peak memory allowed to the scheduler process (the 65 MiB reply is refused
/// before it is decoded).
const PEAK_MIB: f64 = 600.0;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Nodes in two pools, default-profile pods for the general pool and `hostile`-profile
/// pods for the other, so the hostile plugin's outcome cannot move the first ones.
fn cluster(dir: &Path) -> PathBuf {
    let mut y = String::new();
    for i in 0..4 {
        y += &format!("---\n{{apiVersion: v1, kind: Node, metadata: {{name: general-{i}, labels: {{pool: general}}}}, status: {{allocatable: {{cpu: \"{}\", memory: 16Gi, pods: \"20\"}}}}}}\n", 2 + i);
    }
    for i in 0..2 {
        y += &format!("---\n{{apiVersion: v1, kind: Node, metadata: {{name: hostile-{i}, labels: {{pool: hostile}}}}, status: {{allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"20\"}}}}}}\n");
    }
    for i in 0..24 {
        y += &format!("---\n{{apiVersion: v1, kind: Pod, metadata: {{name: p-{i}}}, spec: {{nodeSelector: {{pool: general}}, containers: [{{name: c, resources: {{requests: {{cpu: {}m, memory: {}Mi}}}}}}]}}}}\n", 100 + 50 * (i % 5), 256 * (1 + i % 3));
    }
    for i in 0..6 {
        y += &format!("---\n{{apiVersion: v1, kind: Pod, metadata: {{name: h-{i}}}, spec: {{schedulerName: hostile, nodeSelector: {{pool: hostile}}, containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}}}\n");
    }
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, y).expect("write cluster");
    path
}

fn simulate(dir: &Path, config: Option<&Path>) -> (Value, Duration) {
    let mut cmd = Command::new(binary("switchyard"));
    cmd.args(["simulate", "--no-progress", "-o", "json", "--timeout"])
        .arg(TIMEOUT_SECS.to_string())
        .arg("--cluster")
        .arg(cluster(dir));
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let started = Instant::now();
    let out = run_with_deadline(&mut cmd, Duration::from_secs(TIMEOUT_SECS + 30));
    let took = started.elapsed();
    (switchyard_e2e::report_output(&out), took)
}

/// tests/fixtures/hostile_sidecar.py with `env` (`NAME=value ...`), listening on
/// `socket`.
fn hostile_sidecar(env: &str, socket: &Path) -> SidecarProcess {
    let script = workspace_root().join("tests/fixtures/hostile_sidecar.py");
    SidecarProcess::start(
        &format!(
            "{env} {}",
            exec_command(&python(), &[&script.display().to_string()])
        ),
        Listen::Unix(socket.to_path_buf()),
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn placements(v: &Value, prefix: &str) -> BTreeMap<String, Value> {
    v["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["node"].clone(),
            )
        })
        .collect()
}

fn hostile(mode: &str, policy: &str) {
    let dir = Dir(std::env::temp_dir().join(format!(
        "switchyard-hostile-{}-{mode}-{policy}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("temp dir");

    // Without the sidecar: the default profile's placements.
    let (baseline, _) = simulate(&dir.0, None);
    let expected = placements(&baseline, "p-");
    assert!(expected.values().all(|n| n.is_string()), "{expected:?}");

    let socket = sidecar_socket(&format!("hostile-{mode}-{policy}"));
    let _sidecar = hostile_sidecar(&format!("HOSTILE_MODE={mode}"), &socket);
    // The Python sidecar takes a while to build a reply over the 64 MiB limit, longer
    // than 300 ms on a loaded machine: then calls time out before the stream reports
    // the size, and that (not timeouts) is what "huge" checks.
    let timeout = if mode == "huge" { "3s" } else { "300ms" };
    let config = dir.0.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nremotePlugins:\n- endpoint: unix://{}\n  failurePolicy: {policy}\n  timeout: {timeout}\n  startupTimeout: 10s\n  plugins: [Hostile]\nprofiles:\n- schedulerName: default-scheduler\n- schedulerName: hostile\n  plugins:\n    multiPoint:\n      enabled: [{{name: Hostile}}]\n",
            socket.display()
        ),
    )
    .expect("write config");
    let (v, took) = simulate(&dir.0, Some(&config));
    eprintln!(
        "{mode}/{policy}: {took:?}, peak {} MiB, remote {}",
        v["summary"]["peak_rss_mib"], v["remote"][0]
    );

    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    assert!(v["unsettled"].is_null(), "{}", v["unsettled"]);
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS / 2),
        "the run took {took:?}: it should settle long before its timeout"
    );
    let peak = v["summary"]["peak_rss_mib"].as_f64().unwrap_or(0.0);
    assert!(peak > 0.0 && peak < PEAK_MIB, "peak memory {peak} MiB");
    // The other profile's pods: as without the sidecar.
    assert_eq!(placements(&v, "p-"), expected);
    // The hostile plugin's pods, under the policy.
    let pods = v["pods"].as_array().expect("pods");
    for p in pods
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("h-")))
    {
        if policy == "Fail" {
            assert!(
                p["node"].is_null(),
                "bound with a failing Filter under Fail: {p}"
            );
            let reason = p["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains("remote plugin \"Hostile\""),
                "the pending reason names the plugin: {p}"
            );
        } else {
            assert!(
                p["node"].is_string(),
                "under Ignore the plugin is skipped: {p}"
            );
        }
    }
    // The error names the plugin, the stream and the limit.
    let remote = &v["remote"][0];
    assert!(remote["errors"].as_u64().unwrap_or(0) > 0, "{remote}");
    // The last call error, and why the connection was last dropped (a call after the
    // reconnect may have failed otherwise since).
    let last = format!(
        "{} / {}",
        remote["lastError"].as_str().unwrap_or_default(),
        remote["lastDisconnect"].as_str().unwrap_or_default()
    );
    match mode {
        "flood" => {
            assert!(
                last.contains("replies to no outstanding call") && last.contains("stream"),
                "{remote}"
            );
            assert!(
                remote["strayReplies"].as_u64().unwrap_or(0) > 1024,
                "{remote}"
            );
        }
        "huge" => assert!(
            last.contains("filter stream") && last.contains("67108864"),
            "{remote}"
        ),
        // Timed-out calls name the plugin and the stream; after three in a row the
        // connection is dropped as unresponsive (the endpoint's last error then,
        // when the calls after it waited for the reconnect instead of failing).
        "forever" => assert!(
            (last.contains("Hostile") && last.contains("Filter") && last.contains("timeout"))
                || last.contains("unresponsive: 3 calls in a row got no reply"),
            "{remote}"
        ),
        _ => unreachable!(),
    }
}

#[test]
fn flooding_sidecar_fail() {
    hostile("flood", "Fail");
}

#[test]
fn flooding_sidecar_ignore() {
    hostile("flood", "Ignore");
}

#[test]
fn oversized_reply_fail() {
    hostile("huge", "Fail");
}

#[test]
fn oversized_reply_ignore() {
    hostile("huge", "Ignore");
}

#[test]
fn answering_forever_fail() {
    hostile("forever", "Fail");
}

#[test]
fn answering_forever_ignore() {
    hostile("forever", "Ignore");
}

/// Nodes and pods for the poisoning tests: enough nodes (with
/// `percentageOfNodesToScore: 5`) that the scheduler sends several pods' Filter
/// calls in one `FilterBatch` message; every `every`th pod labelled `poison: "yes"`.
const POISON_NODES: usize = 2000;
const POISON_PODS: usize = 300;

fn poison_cluster(dir: &Path, every: usize) -> PathBuf {
    let mut y = String::new();
    for i in 0..POISON_NODES {
        y += &format!("---\n{{apiVersion: v1, kind: Node, metadata: {{name: n-{i}}}, status: {{allocatable: {{cpu: \"4\", memory: 16Gi, pods: \"110\"}}}}}}\n");
    }
    for i in 0..POISON_PODS {
        let (name, labels) = if i % every == 3 {
            (format!("x-{i}"), "{poison: \"yes\"}")
        } else {
            (format!("g-{i}"), "{}")
        };
        y += &format!("---\n{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, labels: {labels}}}, spec: {{containers: [{{name: c, resources: {{requests: {{cpu: {}m, memory: 256Mi}}}}}}]}}}}\n", 100 + 50 * (i % 7));
    }
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, y).expect("write cluster");
    path
}

/// A run against the hostile sidecar poisoning the labelled pods as `mode` says
/// (`reject`: the good sidecar), under `Fail`: the report and stderr.
fn poison_run(dir: &Path, mode: &str, timeout: &str, every: usize) -> (Value, String, Duration) {
    let socket = sidecar_socket(&format!("poison-{mode}"));
    let _sidecar = hostile_sidecar(
        &format!("HOSTILE_MODE={mode} HOSTILE_POISON=poison=yes"),
        &socket,
    );
    let config = dir.join(format!("config-{mode}.yaml"));
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 5\nremotePlugins:\n- endpoint: unix://{}\n  failurePolicy: Fail\n  timeout: {timeout}\n  startupTimeout: 10s\n  plugins: [Hostile]\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{{name: Hostile}}]\n",
            socket.display()
        ),
    )
    .expect("write config");
    let mut cmd = Command::new(binary("switchyard"));
    cmd.args(["simulate", "--no-progress", "-o", "json", "--timeout"])
        .arg(TIMEOUT_SECS.to_string())
        .arg("--cluster")
        .arg(poison_cluster(dir, every))
        .arg("--config")
        .arg(&config);
    let started = Instant::now();
    let out = run_with_deadline(&mut cmd, Duration::from_secs(TIMEOUT_SECS + 30));
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (switchyard_e2e::report_output(&out), stderr, took)
}

/// Blast radius of batching: a sidecar that misbehaves only for the labelled pods
/// (at the stream level, as `mode` says) must not cost the pods batched with them.
/// Under `Fail` every other pod ends placed, as with a good sidecar that rejects the
/// labelled ones; the run ends by itself with its report; stderr stays short.
/// Every `every`th pod is poisoned (each of their attempts costs the sidecar's
/// misbehaviour: a timeout, a 65 MiB reply built in Python).
fn poisoned(mode: &str, timeout: &str, every: usize) {
    let dir =
        Dir(std::env::temp_dir().join(format!("switchyard-poison-{}-{mode}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("temp dir");

    let (good, _, _) = poison_run(&dir.0, "reject", timeout, every);
    let good_remote = &good["remote"][0];
    assert!(
        good_remote["lookaheadHits"].as_u64().unwrap_or(0) > 0,
        "pods' Filter calls went out ahead, several per message: {good_remote}"
    );
    let expected = placements(&good, "g-");
    assert!(expected.values().all(|n| n.is_string()), "{expected:?}");

    let (v, stderr, took) = poison_run(&dir.0, mode, timeout, every);
    let remote = &v["remote"][0];
    eprintln!(
        "poison {mode}: {took:?}, {} stderr lines, remote {remote}",
        stderr.lines().count()
    );
    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    assert!(v["unsettled"].is_null(), "{}", v["unsettled"]);
    assert!(
        took < Duration::from_secs(TIMEOUT_SECS / 2),
        "the run took {took:?}: it should settle long before its timeout"
    );
    let placed = placements(&v, "g-");
    let pending: Vec<_> = placed.iter().filter(|(_, n)| !n.is_string()).collect();
    assert!(
        pending.is_empty(),
        "pods the sidecar answers correctly end placed: {} pending, e.g. {:?}",
        pending.len(),
        pending.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(placed.len(), expected.len());
    for p in v["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.starts_with("x-")))
    {
        assert!(p["node"].is_null(), "a poisoned pod bound under Fail: {p}");
        let reason = p["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("remote plugin \"Hostile\""),
            "the pending reason names the plugin: {p}"
        );
    }
    assert!(remote["errors"].as_u64().unwrap_or(0) > 0, "{remote}");
    let lines = stderr.lines().count();
    assert!(lines < 300, "{lines} lines on stderr:\n{stderr}");
}

#[test]
fn poisoned_pods_flooding_fail_alone() {
    poisoned("flood", "1s", 20);
}

#[test]
fn poisoned_pods_oversized_reply_fail_alone() {
    poisoned("huge", "3s", 50);
}

#[test]
fn poisoned_pods_closing_the_stream_fail_alone() {
    poisoned("close", "1s", 20);
}

#[test]
fn poisoned_pods_never_answered_fail_alone() {
    poisoned("forever", "500ms", 20);
}
