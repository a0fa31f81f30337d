//! `/metrics` on `switchyard run`'s secure port, against a real Kubernetes v1.26
//! control plane (`scripts/control-plane.sh` from the user's binaries): HTTPS with a
//! self-signed certificate, the bearer token checked with a TokenReview and its user
//! with a SubjectAccessReview, as kube-scheduler's secure serving does. The scheduler
//! runs as the `switchyard` ServiceAccount of deploy/rbac.yaml (so its
//! tokenreviews/subjectaccessreviews grants are what is tested), scrapers are
//! ServiceAccounts with and without deploy/metrics-reader.yaml's ClusterRole.
//! Fails, saying what is missing, without the control plane or curl (`scripts/test.sh`
//! leaves it out and lists it as not run without a control plane). Every wait is
//! bounded.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use switchyard_e2e::controlplane::{Components, ControlPlane, WAIT};
use switchyard_e2e::process::SwitchyardRun;
use switchyard_e2e::wait_for;

/// Status and body of `GET https://127.0.0.1:port/path` (certificate not verified:
/// it is self-signed), with `token` as bearer if given; (0, "") if unreachable.
fn curl(port: u16, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = cmd
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Every document of a YAML file under deploy/, as JSON.
fn deploy_docs(file: &str) -> Vec<Value> {
    let path = switchyard_e2e::workspace_root().join("deploy").join(file);
    let text = std::fs::read_to_string(&path).expect("read deploy file");
    switchyard::yaml::from_multiple(&text).expect("deploy yaml")
}

fn service_account(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": name, "namespace": namespace}})
}

fn write_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: switchyard\n",
    )
    .expect("config");
    path
}

#[test]
fn metrics_need_a_token_allowed_to_get_metrics_health_is_open() {
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed (Debian package `curl`): this test needs it"
    );
    let cp = ControlPlane::start("metrics-auth", Components::default());
    let dir = cp.state_dir().join("switchyard");
    std::fs::create_dir_all(&dir).expect("work dir");

    cp.apply(&json!({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": "switchyard-system"}}));
    for doc in deploy_docs("rbac.yaml")
        .iter()
        .chain(&deploy_docs("metrics-reader.yaml"))
    {
        cp.apply(doc);
    }
    cp.apply(&service_account("default", "scraper"));
    cp.apply(&service_account("default", "nobody"));
    cp.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "scraper-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "switchyard-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": "default"}],
    }));
    // Something to schedule, so the page has a sample of the attempts counter.
    let res = json!({"cpu": "2", "memory": "4Gi", "pods": "110"});
    cp.apply(
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
                     "status": {"capacity": res, "allocatable": res,
                                "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    cp.apply(&json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "p", "namespace": "default"},
                     "spec": {"schedulerName": "switchyard",
                              "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}));

    // The scheduler as the deploy/ ServiceAccount: its own token, not the admin's.
    let kubeconfig = dir.join("switchyard.kubeconfig");
    let token = cp.service_account_token("switchyard-system", "switchyard", 3600);
    cp.write_token_kubeconfig(&kubeconfig, &token);
    let config = write_config(&dir);
    let sy = SwitchyardRun::start_secure(&dir, "sy", &config, &kubeconfig, &[]);
    let port = sy.health;

    wait_for("/healthz over HTTPS without a token", WAIT, || {
        curl(port, "/healthz", None).0 == 200
    });
    wait_for("/readyz 200 without a token", WAIT, || {
        curl(port, "/readyz", None).0 == 200
    });
    assert_eq!(curl(port, "/livez", None).0, 200);
    wait_for("p bound", WAIT, || {
        cp.pod("default", "p")
            .is_some_and(|p| p["spec"]["nodeName"] == "node-a")
    });

    // Plain HTTP is not served on the secure port.
    assert_ne!(
        sy.get("/healthz"),
        200,
        "plain HTTP answered on the HTTPS port"
    );

    // No token: system:anonymous, which RBAC does not allow (403, as upstream).
    let (code, body) = curl(port, "/metrics", None);
    assert_eq!(code, 403, "anonymous scrape: {body}");
    assert!(
        body.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    assert!(!body.contains("scheduler_"), "{body}");

    // A token the API server does not know: 401.
    let (code, body) = curl(port, "/metrics", Some("not-a-token"));
    assert_eq!(code, 401, "bad token: {body}");

    // A valid token without the metrics-reader role: 403 naming the user.
    let nobody = cp.service_account_token("default", "nobody", 600);
    let (code, body) = curl(port, "/metrics", Some(&nobody));
    assert_eq!(code, 403, "token without the role: {body}");
    assert!(
        body.contains(
            r#"User \"system:serviceaccount:default:nobody\" cannot get path \"/metrics\""#
        ),
        "{body}"
    );

    // A token bound to switchyard-metrics-reader: the page, unchanged.
    let scraper = cp.service_account_token("default", "scraper", 600);
    let (code, body) = curl(port, "/metrics", Some(&scraper));
    assert_eq!(code, 200, "token with the role: {body}\n{}", sy.log_text());
    assert!(
        body.contains(
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="switchyard"} 1"#
        ),
        "{body}"
    );
    // Cached answers give the same result (a scrape every few seconds).
    for _ in 0..3 {
        assert_eq!(curl(port, "/metrics", Some(&scraper)).0, 200);
        assert_eq!(curl(port, "/metrics", Some(&nobody)).0, 403);
    }
    // The probe paths stay open to any token, too.
    assert_eq!(curl(port, "/healthz", Some(&nobody)).0, 200);
    assert_eq!(curl(port, "/readyz", Some("not-a-token")).0, 200);

    let log = sy.log_text();
    assert!(!log.contains("cannot authenticate"), "{log}");
    assert!(!log.contains("cannot authorize"), "{log}");
}
