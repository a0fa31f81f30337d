//! `switchyard run` as real processes against the API-server double: leader election
//! on a Lease between replicas (acquire, stand by, SIGTERM releases and a standby
//! takes over at once, SIGKILL leaves the lease to expire, a stolen lease stops the
//! leader), /readyz, and which replica bound what (the `reportingInstance` of its
//! Scheduled events). Every wait is bounded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::apiserver::{ApiServer, EVENTS, LEASES};
use switchyard_e2e::process::SwitchyardRun as Replica;
use switchyard_e2e::wait_for;

const LEASE_SECONDS: u64 = 2;

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "switchyard", "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": "100m"}}}]},
           "status": {"phase": "Pending"}})
}

/// `switchyard run` with the test's configuration and kubeconfig.
fn replica(dir: &Path, name: &str) -> Replica {
    Replica::start(
        dir,
        name,
        &dir.join("config.yaml"),
        &dir.join("kubeconfig"),
        &[],
    )
}

fn holder(api: &ApiServer) -> String {
    api.get(LEASES, "default", "switchyard")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn bound_by(api: &ApiServer, pod: &str) -> Option<String> {
    api.list(EVENTS)
        .into_iter()
        .find(|e| e["reason"] == "Scheduled" && e["regarding"]["name"] == pod)
        .and_then(|e| e["reportingInstance"].as_str().map(str::to_string))
}

fn setup(name: &str) -> (ApiServer, PathBuf) {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    for n in ["node-a", "node-b"] {
        api.apply(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
        );
    }
    let dir = std::env::temp_dir().join(format!("switchyard-le-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("kubeconfig"), api.kubeconfig()).expect("kubeconfig");
    std::fs::write(
        dir.join("config.yaml"),
        format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n  leaseDuration: {LEASE_SECONDS}s\n  renewDeadline: 1500ms\n  retryPeriod: 200ms\n  resourceName: switchyard\n  resourceNamespace: default\nprofiles:\n- schedulerName: switchyard\n"),
    )
    .expect("config");
    (api, dir)
}

#[test]
fn one_leader_schedules_and_a_standby_takes_over() {
    let (api, dir) = setup("takeover");
    let mut a = replica(&dir, "a");
    wait_for("a leads", Duration::from_secs(20), || holder(&api) == "a");
    api.apply(pod("p-1"));
    wait_for("p-1 bound", Duration::from_secs(20), || {
        api.node_of("p-1").is_some()
    });
    wait_for("p-1's event", Duration::from_secs(10), || {
        bound_by(&api, "p-1").is_some()
    });
    assert_eq!(bound_by(&api, "p-1").as_deref(), Some("a"));

    // The standby: ready (cache synced) but not leading, binds nothing.
    let mut b = replica(&dir, "b");
    wait_for("b ready", Duration::from_secs(20), || {
        b.get("/readyz") == 200
    });
    assert_eq!(b.get("/livez"), 200);
    api.apply(pod("p-2"));
    wait_for("p-2 bound", Duration::from_secs(20), || {
        bound_by(&api, "p-2").is_some()
    });
    assert_eq!(
        bound_by(&api, "p-2").as_deref(),
        Some("a"),
        "only the leader binds"
    );
    assert_eq!(holder(&api), "a");

    // SIGTERM: a finishes, releases the lease, exits 0; b takes over well before
    // the lease would have expired.
    a.signal("-TERM");
    let released = Instant::now();
    assert_eq!(
        a.wait_exit(Duration::from_secs(20)),
        Some(0),
        "clean exit after SIGTERM"
    );
    wait_for("b leads", Duration::from_secs(10), || holder(&api) == "b");
    assert!(
        released.elapsed() < Duration::from_secs(LEASE_SECONDS + 1),
        "a released the lease, so b did not wait for it to expire"
    );
    api.apply(pod("p-3"));
    wait_for("p-3 bound by b", Duration::from_secs(20), || {
        bound_by(&api, "p-3").is_some()
    });
    assert_eq!(bound_by(&api, "p-3").as_deref(), Some("b"));

    // SIGKILL: nothing released. c waits for the lease to expire, then leads.
    b.signal("-KILL");
    let _ = b.wait_exit(Duration::from_secs(10));
    let killed = Instant::now();
    let _c = replica(&dir, "c");
    wait_for("c leads", Duration::from_secs(20), || holder(&api) == "c");
    assert!(
        killed.elapsed() >= Duration::from_secs(LEASE_SECONDS) - Duration::from_millis(300),
        "c waited for b's lease to expire ({:?})",
        killed.elapsed()
    );
    api.apply(pod("p-4"));
    wait_for("p-4 bound by c", Duration::from_secs(20), || {
        bound_by(&api, "p-4").is_some()
    });
    assert_eq!(bound_by(&api, "p-4").as_deref(), Some("c"));
    let lease = api.get(LEASES, "default", "switchyard").expect("lease");
    assert_eq!(lease["spec"]["leaseTransitions"], json!(2), "{lease}");
    // The test's lease is named as in deploy/ (switchyard), so the Role applies.
    api.assert_a_careful_client();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_leader_whose_lease_is_taken_stops() {
    let (api, dir) = setup("stolen");
    let mut a = replica(&dir, "a");
    wait_for("a leads", Duration::from_secs(20), || holder(&api) == "a");
    // Another holder writes the lease (as after a partition): a must stop at its next
    // renewal rather than schedule beside it.
    let mut lease = api.get(LEASES, "default", "switchyard").expect("lease");
    lease["spec"]["holderIdentity"] = json!("intruder");
    api.apply(lease);
    assert_eq!(
        a.wait_exit(Duration::from_secs(10)),
        Some(1),
        "lost lease: exit 1"
    );
    let log = std::fs::read_to_string(dir.join("a.log")).unwrap_or_default();
    assert!(log.contains("leader election lost"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of the sample `series` (name and labels, exactly as exposed).
fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn metrics_count_what_happened() {
    let (api, dir) = setup("metrics");
    // With a sidecar, for the remote-path metrics.
    let quota = switchyard_e2e::start_sidecar("switchyard-quota", "metrics-quota", &[]);
    std::fs::write(
        dir.join("config.yaml"),
        format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: true\n  leaseDuration: {LEASE_SECONDS}s\n  renewDeadline: 1500ms\n  retryPeriod: 200ms\n  resourceName: switchyard\n  resourceNamespace: default\nremotePlugins:\n- endpoint: {}\n  plugins: [TenantQuota]\nprofiles:\n- schedulerName: switchyard\n  plugins:\n    multiPoint:\n      enabled: [{{name: TenantQuota}}]\n", quota.endpoint),
    )
    .expect("config");
    let a = replica(&dir, "a");
    wait_for("a leads", Duration::from_secs(20), || holder(&api) == "a");
    for i in 0..3 {
        api.apply(pod(&format!("m-{i}")));
    }
    let mut huge = pod("huge");
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("64");
    api.apply(huge);
    wait_for("three bound", Duration::from_secs(20), || {
        (0..3).all(|i| api.node_of(&format!("m-{i}")).is_some())
    });
    let page = |a: &Replica| a.fetch("/metrics");
    wait_for("huge unschedulable", Duration::from_secs(20), || {
        metric(
            &page(&a).1,
            "scheduler_pending_pods{queue=\"unschedulable\"}",
        ) == Some(1.0)
    });
    let (code, body) = page(&a);
    assert_eq!(code, 200);
    let m = |s: &str| -> f64 {
        match metric(&body, s) {
            Some(v) => v,
            None => panic!("no {s} in\n{body}"),
        }
    };
    assert_eq!(
        m("scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"switchyard\"}"),
        3.0
    );
    assert!(
        m("scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"switchyard\"}")
            >= 1.0
    );
    assert_eq!(m("scheduler_pod_scheduling_attempts_count"), 3.0);
    assert_eq!(
        m("scheduler_pod_scheduling_attempts_bucket{le=\"1\"}"),
        3.0,
        "each bound at its first attempt"
    );
    assert!(m("scheduler_scheduling_attempt_duration_seconds_count{result=\"scheduled\",profile=\"switchyard\"}") == 3.0);
    assert!(m("scheduler_scheduling_algorithm_duration_seconds_count") >= 4.0);
    assert!(m("scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Filter\",status=\"Success\",profile=\"switchyard\"}") >= 4.0);
    assert_eq!(m("scheduler_framework_extension_point_duration_seconds_count{extension_point=\"Bind\",status=\"Success\",profile=\"switchyard\"}"), 3.0);
    assert_eq!(
        m("scheduler_unschedulable_pods{plugin=\"NodeResourcesFit\",profile=\"switchyard\"}"),
        1.0
    );
    assert_eq!(
        m("scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnschedulablePodAdd\"}"),
        4.0
    );
    assert_eq!(
        m("scheduler_permit_wait_duration_seconds_count{result=\"success\"}"),
        3.0
    );
    assert!(body.contains("# TYPE scheduler_schedule_attempts_total counter"));
    // The sidecar path: every attempt called TenantQuota.
    let ep = &quota.endpoint;
    assert!(
        m(&format!(
            "switchyard_remote_calls_total{{endpoint=\"{ep}\"}}"
        )) >= 4.0
    );
    assert_eq!(
        m(&format!("switchyard_remote_connected{{endpoint=\"{ep}\"}}")),
        1.0
    );
    assert!(
        m(&format!(
            "switchyard_remote_call_duration_seconds_count{{endpoint=\"{ep}\"}}"
        )) >= 4.0
    );
    assert!(
        m(&format!(
            "switchyard_remote_sent_bytes_total{{endpoint=\"{ep}\"}}"
        )) > 0.0
    );
    assert!(metric(
        &body,
        &format!("switchyard_remote_replication_lag_generations{{endpoint=\"{ep}\"}}")
    )
    .is_some());
    assert_eq!(
        a.get("/readyz"),
        200,
        "ready: cache synced and the Fail-policy sidecar connected"
    );
    assert!(body.contains("# TYPE scheduler_pending_pods gauge"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_leader_renews_with_one_request_per_period() {
    let (api, dir) = setup("renewals");
    let _a = replica(&dir, "a");
    wait_for("a leads", Duration::from_secs(20), || holder(&api) == "a");
    let lease_calls = |method: &str| {
        api.calls()
            .iter()
            .filter(|c| c.method == method && c.path.contains("/leases/switchyard"))
            .count()
    };
    let (gets, puts) = (lease_calls("GET"), lease_calls("PUT"));
    // Six retry periods of 200 ms.
    std::thread::sleep(Duration::from_millis(1300));
    let renewals = lease_calls("PUT") - puts;
    assert!(renewals >= 4, "{renewals} renewals in 1.3 s");
    // As client-go's leader: the Lease it last wrote is updated without a read.
    assert_eq!(lease_calls("GET"), gets, "no read per renewal");
    assert_eq!(holder(&api), "a");
    api.assert_a_careful_client();
    let _ = std::fs::remove_dir_all(&dir);
}
