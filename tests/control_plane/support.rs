//! What the control-plane tests share: objects, configurations, and reading back
//! events, conditions and leases.

use super::*;

pub fn node(name: &str, cpu: &str) -> Value {
    let res = json!({"cpu": cpu, "memory": "16Gi", "pods": "110"});
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"capacity": res, "allocatable": res,
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

pub fn pod(name: &str, scheduler: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 30,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": cpu}}}]}})
}

pub fn with_priority(mut p: Value, priority: i32) -> Value {
    p["spec"]["priority"] = json!(priority);
    p
}

/// A working folder for a test's configuration, kubeconfigs and logs, inside the
/// control plane's state dir (kept with it when the test fails).
pub fn work_dir(cp: &ControlPlane) -> PathBuf {
    let d = cp.state_dir().join("switchyard");
    std::fs::create_dir_all(&d).expect("work dir");
    d
}

/// A configuration with the `switchyard` profile, client limits as the control
/// plane's kube-scheduler has them, and leader election as given (`None`: off).
pub fn write_config(dir: &Path, leader_election: Option<&str>) -> PathBuf {
    let le = match leader_election {
        None => "leaderElection:\n  leaderElect: false\n".to_string(),
        Some(ns) => format!(
            "leaderElection:\n  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 500ms\n  resourceName: switchyard\n  resourceNamespace: {ns}\n"
        ),
    };
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 5000\n  burst: 5000\n{le}profiles:\n- schedulerName: switchyard\n"),
    )
    .expect("config");
    path
}

pub fn node_of(p: &Value) -> Option<String> {
    p["spec"]["nodeName"].as_str().map(str::to_string)
}

pub fn condition<'a>(p: &'a Value, ty: &str) -> Option<&'a Value> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

/// Events (`kubectl get events -o json`, the core/v1 view of them) for a pod.
pub fn kubectl_events(cp: &ControlPlane, pod: &str) -> Vec<Value> {
    let out = cp.kubectl_ok(&[
        "get",
        "events",
        "-n",
        "default",
        "-o",
        "json",
        "--field-selector",
        &format!("involvedObject.name={pod}"),
    ]);
    serde_json::from_str::<Value>(&out)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

pub fn has_event(events: &[Value], reason: &str) -> bool {
    events.iter().any(|e| e["reason"] == reason)
}

/// kube-scheduler v1.26's FailedScheduling message as the newest upstream words it
/// (Switchyard follows the newest): v1.26 ends a message whose preemption part
/// already ends in a period with a second one ("...for incoming pod.."); v1.36
/// prints one.
pub fn as_newest_upstream(v126: &str) -> String {
    match v126.strip_suffix("..") {
        Some(m) => format!("{m}."),
        None => v126.to_string(),
    }
}

/// The message of a pod's PodScheduled=False condition once it has one.
pub fn wait_unschedulable(cp: &ControlPlane, name: &str) -> Value {
    let mut cond = Value::Null;
    wait_for(&format!("{name} PodScheduled=False"), WAIT, || {
        cond = cp
            .pod("default", name)
            .and_then(|p| condition(&p, "PodScheduled").cloned())
            .unwrap_or(Value::Null);
        cond["status"] == "False"
    });
    cond
}

/// deploy/rbac.yaml's documents as JSON (kubectl converts).
pub fn deploy_rbac(cp: &ControlPlane) -> Vec<Value> {
    let path = switchyard_e2e::workspace_root().join("deploy/rbac.yaml");
    let out = cp.kubectl_ok(&[
        "create",
        "--dry-run=client",
        "-o",
        "json",
        "-f",
        &path.display().to_string(),
    ]);
    // One JSON object per document, one after the other.
    serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl json"))
        .collect()
}

/// Starts `switchyard run` as the `switchyard` ServiceAccount of deploy/rbac.yaml
/// (a TokenRequest token, not the admin certificate).
pub fn run_as_service_account(cp: &ControlPlane, dir: &Path, name: &str) -> SwitchyardRun {
    let token = cp.service_account_token("switchyard-system", "switchyard", 3600);
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    cp.write_token_kubeconfig(&kubeconfig, &token);
    let config = write_config(dir, Some("switchyard-system"));
    SwitchyardRun::start(dir, name, &config, &kubeconfig, &[])
}

pub fn lease_holder(cp: &ControlPlane, namespace: &str) -> String {
    cp.get(&format!(
        "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/switchyard"
    ))
    .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    .unwrap_or_default()
}

/// How many pods of `default` are bound.
pub fn bound_count(cp: &ControlPlane) -> usize {
    cp.pods("default")
        .iter()
        .filter(|p| node_of(p).is_some())
        .count()
}

/// Scheduled events per pod and per reporting instance; panics if a pod has two
/// (bound twice).
pub fn scheduled_events(cp: &ControlPlane) -> HashMap<String, String> {
    let mut by_pod = HashMap::new();
    for e in cp.events("default") {
        if e["reason"] != "Scheduled" {
            continue;
        }
        let pod = e["regarding"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let by = e["reportingInstance"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(first) = by_pod.insert(pod.clone(), by.clone()) {
            panic!("{pod} has two Scheduled events (by {first} and {by}): bound twice");
        }
    }
    by_pod
}

pub fn many_pods(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| pod(&format!("{prefix}-{i}"), "switchyard", "10m"))
        .collect()
}
