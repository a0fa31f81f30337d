//! A sidecar that misbehaves must not cost a pod: these tests run `switchyard simulate`
//! (a real process) against the real `switchyard-faulty-sidecar` process and break the
//! sidecar mid-run — absent at start, SIGKILL, hung (SIGSTOP) past the call timeout,
//! out-of-range replies — under both failure policies. Every run must still bind every
//! pod, over-commit no node, bind no pod twice and leave no pod assumed; with `Fail`
//! the plugin's Filter must have held for every pod, and the errors must be counted.
//!
//! The workload creates pods in three waves 1.5 s apart; faults are injected between
//! the first and second waves, so the second wave meets the broken sidecar.

use std::path::PathBuf;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use serde_json::Value;
use switchyard::remote::sidecar::SidecarProcess;
use switchyard_e2e::{binary, run_with_deadline, sidecar_socket, start_sidecar, workspace_root};

const NODES: usize = 8;
const REJECTED: [&str; 2] = ["node-0", "node-1"];
const PODS: u64 = 120;
/// The cluster where several pods' Filter calls go in one message (see `die_in_batch`).
const LARGE_NODES: usize = 6000;
const LARGE_PODS: u64 = 300;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Fail,
    Ignore,
}

struct Run {
    dir: PathBuf,
    socket_name: String,
}

impl Run {
    fn new(name: &str, policy: Policy) -> Run {
        Run::with(
            name,
            policy,
            NODES,
            "  - {opcode: createPods, count: 40}\n  - {opcode: sleep, duration: 1500ms}\n  - {opcode: createPods, count: 40}\n  - {opcode: sleep, duration: 1500ms}\n  - {opcode: createPods, count: 40}\n",
        )
    }

    /// `nodes` nodes (two of them rejected by the sidecar) and the workload's ops.
    fn with(name: &str, policy: Policy, node_count: usize, ops: &str) -> Run {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-faults-{}-{name}-{policy:?}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let socket_name = format!("faulty-{name}-{policy:?}");
        let socket = sidecar_socket(&socket_name);
        let mut nodes = String::new();
        for i in 0..node_count {
            let label = if REJECTED.contains(&format!("node-{i}").as_str()) {
                ", labels: {faults.switchyard.dev/reject: \"true\"}"
            } else {
                ""
            };
            nodes.push_str(&format!(
                "---\n{{apiVersion: v1, kind: Node, metadata: {{name: node-{i}{label}}}, status: {{allocatable: {{cpu: \"4\", memory: 32Gi, pods: \"110\"}}}}}}\n"
            ));
        }
        std::fs::write(dir.join("nodes.yaml"), nodes).expect("write nodes");
        // Templates must live in the workload's folder: copy it there.
        let template = dir.join("pod-default.yaml");
        std::fs::copy(
            workspace_root().join("examples/workloads/templates/pod-default.yaml"),
            &template,
        )
        .expect("copy template");
        std::fs::write(
            dir.join("workload.yaml"),
            format!(
                "- name: Faults\n  defaultPodTemplatePath: {}\n  workloadTemplate:\n{ops}  workloads:\n  - name: waves\n",
                template.display()
            ),
        )
        .expect("write workload");
        let policy = format!("{policy:?}");
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nremotePlugins:\n- endpoint: unix://{}\n  failurePolicy: {policy}\n  timeout: 300ms\n  startupTimeout: 2s\n  plugins: [FaultyFilter]\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{{name: FaultyFilter}}]\n",
                socket.display()
            ),
        )
        .expect("write config");
        Run { dir, socket_name }
    }

    fn start_sidecar(&self, mode: &str) -> SidecarProcess {
        start_sidecar(
            "switchyard-faulty-sidecar",
            &self.socket_name,
            &[("FAULTY_MODE", mode)],
        )
    }

    /// Starts the simulation in the background; `finish` waits for its report.
    fn simulate(&self) -> std::thread::JoinHandle<std::process::Output> {
        let mut cmd = Command::new(binary("switchyard"));
        cmd.args(["simulate", "--no-progress", "-o", "json", "--timeout", "60"])
            .arg("--cluster")
            .arg(self.dir.join("nodes.yaml"))
            .arg("--workload")
            .arg(self.dir.join("workload.yaml"))
            .arg("--config")
            .arg(self.dir.join("config.yaml"));
        std::thread::spawn(move || run_with_deadline(&mut cmd, Duration::from_secs(90)))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The report, after checking what every run must satisfy.
fn finish(sim: std::thread::JoinHandle<std::process::Output>, policy: Policy) -> Value {
    finish_with(sim, policy, PODS)
}

fn finish_with(
    sim: std::thread::JoinHandle<std::process::Output>,
    policy: Policy,
    pods: u64,
) -> Value {
    let out = sim.join().expect("simulation thread");
    let v = switchyard_e2e::report_output(&out);
    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    assert_eq!(v["invariants"]["assumedPods"], 0);
    assert_eq!(
        v["summary"]["bound"], pods,
        "every pod bound: {}",
        v["summary"]
    );
    if policy == Policy::Fail {
        let on_rejected: Vec<&Value> = v["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .filter(|p| REJECTED.iter().any(|n| p["node"] == *n))
            .collect();
        assert!(
            on_rejected.is_empty(),
            "with failurePolicy Fail the sidecar's Filter holds for every pod: {on_rejected:?}"
        );
    } else {
        // A pod on a node the plugin rejects got there only because its Filter was
        // skipped, and the report says so for that pod.
        for p in v["pods"].as_array().expect("pods") {
            if REJECTED.iter().any(|n| p["node"] == *n) {
                let skipped = p["skippedPlugins"].as_str().unwrap_or_default();
                assert!(
                    skipped.contains("Filter skipped under failurePolicy Ignore")
                        && skipped.contains("FaultyFilter"),
                    "a pod placed without the Filter's say is reported: {p}"
                );
            }
        }
    }
    v
}

fn remote(v: &Value) -> &Value {
    &v["remote"][0]
}

fn errors(v: &Value) -> u64 {
    remote(v)["errors"].as_u64().unwrap_or(0)
}

fn absent_at_start(policy: Policy) {
    let run = Run::new("absent", policy);
    let sim = run.simulate();
    // The scheduler gives up waiting for the handshake after startupTimeout (2 s) and
    // starts without it. Fail: pods wait for the sidecar, which comes 1 s later;
    // Ignore: nothing waits, and the sidecar never comes.
    let sidecar = (policy == Policy::Fail).then(|| {
        sleep(Duration::from_millis(3000));
        run.start_sidecar("ok")
    });
    let v = finish(sim, policy);
    assert!(
        errors(&v) > 0,
        "the missing sidecar was noticed: {}",
        remote(&v)
    );
    if policy == Policy::Ignore {
        // The sidecar never came: every placement was made without its Filter.
        assert_eq!(
            v["summary"]["skipped_plugin_pods"], PODS,
            "{}",
            v["summary"]
        );
    }
    drop(sidecar);
}

fn killed_mid_run(policy: Policy) {
    let run = Run::new("killed", policy);
    let sidecar = run.start_sidecar("ok");
    let sim = run.simulate();
    sleep(Duration::from_millis(700));
    sidecar.signal("KILL");
    sleep(Duration::from_millis(1800));
    let back = run.start_sidecar("ok");
    let v = finish(sim, policy);
    assert!(errors(&v) > 0, "{}", remote(&v));
    // With Ignore the run may finish before the restarted sidecar is back.
    assert!(
        policy == Policy::Ignore || remote(&v)["reconnects"].as_u64().unwrap_or(0) >= 1,
        "reconnected to the restarted sidecar: {}",
        remote(&v)
    );
    drop(back);
}

fn hung_past_timeout(policy: Policy) {
    let run = Run::new("hung", policy);
    let sidecar = run.start_sidecar("ok");
    let sim = run.simulate();
    sleep(Duration::from_millis(700));
    sidecar.signal("STOP");
    sleep(Duration::from_millis(2000));
    sidecar.signal("CONT");
    let v = finish(sim, policy);
    assert!(errors(&v) > 0, "timeouts were counted: {}", remote(&v));
}

/// A Fail sidecar that dies for good mid-run (`signal`: KILL, its socket gone; or
/// STOP, never continued, its socket open and silent): the run ends by itself, well
/// before --timeout, with its report: what was bound, and every other pod pending
/// with the sidecar named as the reason. Returns the time from the signal to the
/// run's end (docs/reliability.md states it; the bound here is that plus slack).
fn dies_for_good_fail_ends_with_a_report(signal: &str) -> Duration {
    let run = Run::new(&format!("dead-{}", signal.to_lowercase()), Policy::Fail);
    let sidecar = run.start_sidecar("ok");
    let sim = run.simulate();
    sleep(Duration::from_millis(700));
    sidecar.signal(signal);
    let died = std::time::Instant::now();
    let out = sim.join().expect("simulation thread");
    let took = died.elapsed();
    if signal == "STOP" {
        sidecar.signal("CONT");
    }
    eprintln!("SIG{signal}: the run ended {took:?} after the sidecar died");
    let v = switchyard_e2e::report_output(&out);
    assert_eq!(out.status.code(), Some(4), "pods pending after an error");
    assert!(
        took < Duration::from_secs(20),
        "the run ended by itself, about 12 s after (docs/reliability.md), not at --timeout 60: {took:?}"
    );
    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    let pods = v["pods"].as_array().expect("pods");
    let pending: Vec<&Value> = pods.iter().filter(|p| p["node"].is_null()).collect();
    assert!(
        !pending.is_empty(),
        "the sidecar died before the last wave: {}",
        v["summary"]
    );
    assert_eq!(
        v["summary"]["scheduler_errors"],
        pending.len(),
        "every pending pod is pending after the sidecar's error: {}",
        v["summary"]
    );
    for p in &pending {
        let reason = p["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("FaultyFilter") && reason.contains("sidecar"),
            "a pending pod names the sidecar as its reason: {p}"
        );
    }
    took
}

/// Stopped for good (SIGSTOP): after a few timed-out calls the scheduler drops the
/// connection as unresponsive, so the remaining pods fail at once instead of each
/// waiting out the timeout.
#[test]
fn sidecar_stopped_for_good_fail_ends_with_a_report() {
    dies_for_good_fail_ends_with_a_report("STOP");
}

/// Killed for good (SIGKILL): every call and reconnect fails at once.
#[test]
fn sidecar_killed_for_good_fail_ends_with_a_report() {
    dies_for_good_fail_ends_with_a_report("KILL");
}

/// A Fail sidecar that never comes: the pods cannot even pass PreEnqueue (the
/// scheduler assumes every extension point of a sidecar it never reached). The run
/// ends by itself with its report, nothing bound, and every pod pending with the
/// sidecar's error as its recorded reason (no "pod without a reason" violation).
#[test]
fn sidecar_never_comes_fail_ends_with_every_pod_s_reason() {
    let run = Run::new("never", Policy::Fail);
    let out = run.simulate().join().expect("simulation thread");
    let v = switchyard_e2e::report_output(&out);
    assert_eq!(
        out.status.code(),
        Some(4),
        "pods pending after errors: exit 4"
    );
    // Each pod's attempts fail, but the log says it once and then counts.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.lines().count() < 50,
        "a dead sidecar's failures are logged once, then counted:\n{stderr}"
    );
    assert_eq!(v["invariants"]["ok"], true, "{}", v["invariants"]);
    assert_eq!(v["summary"]["bound"], 0, "{}", v["summary"]);
    assert_eq!(v["summary"]["scheduler_errors"], PODS, "{}", v["summary"]);
    let pods = v["pods"].as_array().expect("pods");
    assert_eq!(pods.len() as u64, PODS);
    for p in pods {
        let reason = p["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("FaultyFilter") && reason.contains("not connected"),
            "a pending pod names the sidecar as its reason: {p}"
        );
    }
}

fn garbage_replies(policy: Policy) {
    let run = Run::new("garbage", policy);
    let _sidecar = run.start_sidecar("bad-score");
    let v = finish(run.simulate(), policy);
    assert!(
        errors(&v) > 0,
        "out-of-range scores were rejected: {}",
        remote(&v)
    );
    if policy == Policy::Ignore {
        let skipped = v["pods"]
            .as_array()
            .expect("pods")
            .iter()
            .filter(|p| {
                p["skippedPlugins"]
                    .as_str()
                    .is_some_and(|s| s.contains("Score skipped under failurePolicy Ignore"))
            })
            .count();
        assert!(
            skipped > 0,
            "skipped Score calls reported per pod: {}",
            v["summary"]
        );
    }
}

/// The sidecar aborts in the middle of a Filter while the scheduler has several pods'
/// Filter calls out in one message (6000 nodes, a node-local plugin): every call of
/// that batch fails under the policy, the scheduler reconnects to the restarted
/// sidecar, and every pod ends bound once, none on a node the plugin rejects (Fail).
fn died_with_a_batch_in_flight(policy: Policy) {
    let run = Run::with(
        "batch",
        policy,
        LARGE_NODES,
        &format!("  - {{opcode: createPods, count: {LARGE_PODS}}}\n"),
    );
    let mut sidecar = run.start_sidecar("die-in-batch");
    let sim = run.simulate();
    // It dies after about 100 pods' worth of nodes filtered; restarted here.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !sidecar.exited() && std::time::Instant::now() < deadline {
        sleep(Duration::from_millis(20));
    }
    assert!(sidecar.exited(), "the sidecar died as planned");
    sleep(Duration::from_millis(300));
    let back = run.start_sidecar("ok");
    let v = finish_with(sim, policy, LARGE_PODS);
    let r = remote(&v);
    assert!(errors(&v) > 0, "the lost batch was counted: {r}");
    assert!(
        r["lookaheadHits"].as_u64().unwrap_or(0) > 0,
        "answers were sent ahead: {r}"
    );
    assert!(
        policy == Policy::Ignore || r["reconnects"].as_u64().unwrap_or(0) >= 1,
        "reconnected to the restarted sidecar: {r}"
    );
    drop(back);
}

#[test]
fn sidecar_died_with_a_batch_in_flight_fail() {
    died_with_a_batch_in_flight(Policy::Fail);
}

#[test]
fn sidecar_died_with_a_batch_in_flight_ignore() {
    died_with_a_batch_in_flight(Policy::Ignore);
}

#[test]
fn sidecar_absent_at_start_fail() {
    absent_at_start(Policy::Fail);
}

#[test]
fn sidecar_absent_at_start_ignore() {
    absent_at_start(Policy::Ignore);
}

#[test]
fn sidecar_killed_mid_run_fail() {
    killed_mid_run(Policy::Fail);
}

#[test]
fn sidecar_killed_mid_run_ignore() {
    killed_mid_run(Policy::Ignore);
}

#[test]
fn sidecar_hung_past_timeout_fail() {
    hung_past_timeout(Policy::Fail);
}

#[test]
fn sidecar_hung_past_timeout_ignore() {
    hung_past_timeout(Policy::Ignore);
}

#[test]
fn sidecar_garbage_replies_fail() {
    garbage_replies(Policy::Fail);
}

#[test]
fn sidecar_garbage_replies_ignore() {
    garbage_replies(Policy::Ignore);
}
