//! Volumes against a real control plane (`scripts/control-plane.sh` from the user's
//! binaries) with its kube-controller-manager, whose PV controller binds claims
//! and whose StatefulSet controller creates pods and their claims:
//!
//! * a StatefulSet with static local PVs on specific nodes ends with every pod on its
//!   PV's node (VolumeBinding's PreBind writes each PV's claimRef; the PV controller
//!   binds the claims);
//! * a WaitForFirstConsumer class served by a small provisioner in this test (it
//!   watches for the selected-node annotation the scheduler writes and creates a PV
//!   pinned to that node) ends with every claim Bound and every pod next to its volume;
//! * a pod whose claim is missing stays pending with kube-scheduler's message;
//! * all of it as the ServiceAccount of `deploy/rbac.yaml`, with no call refused.
//!
//! There is no kubelet: bound pods stay Pending, which is all these tests need.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_e2e::controlplane::{Components, ControlPlane, WAIT};
use switchyard_e2e::process::SwitchyardRun;
use switchyard_e2e::wait_for;

const PROVISIONER: &str = "e2e.switchyard.dev/local";

fn node(name: &str) -> Value {
    let res = json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
           "status": {"capacity": res, "allocatable": res,
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn hostname_affinity(node: &str) -> Value {
    json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}})
}

fn local_pv(name: &str, node: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
           "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class, "local": {"path": format!("/mnt/{name}")},
                    "nodeAffinity": hostname_affinity(node)}})
}

fn claim(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}})
}

fn pod_with_claim(name: &str, claim: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": "switchyard",
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}})
}

fn write_config(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: switchyard\n",
    )
    .expect("config");
    path
}

/// The node a PV's hostname affinity pins it to.
fn pv_node(pv: &Value) -> Option<String> {
    pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
        [0]
    .as_str()
    .map(str::to_string)
}

/// The node a pod is bound to and the node its claim's volume lives on.
fn pod_and_volume_node(cp: &ControlPlane, pod: &str, claim: &str) -> Option<(String, String)> {
    let p = cp.pod("default", pod)?;
    let node = p["spec"]["nodeName"].as_str()?.to_string();
    let c = cp.get(&format!(
        "/api/v1/namespaces/default/persistentvolumeclaims/{claim}"
    ))?;
    if c["status"]["phase"] != "Bound" {
        return None;
    }
    let pv = cp.get(&format!(
        "/api/v1/persistentvolumes/{}",
        c["spec"]["volumeName"].as_str()?
    ))?;
    Some((node, pv_node(&pv)?))
}

/// The test's provisioner: for every claim of its class that carries the scheduler's
/// selected-node annotation and has no volume, a PV on that node, pre-bound to it.
async fn provision_loop(client: kube::Client) {
    use k8s_openapi::api::core::v1 as core;
    use kube::api::{Api, PostParams};
    let claims: Api<core::PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<core::PersistentVolume> = Api::all(client);
    loop {
        if let Ok(list) = claims.list(&Default::default()).await {
            for c in list.items {
                let spec = c.spec.clone().unwrap_or_default();
                let selected = c
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
                    .cloned();
                let (Some(node), None, Some("wffc-dynamic")) = (
                    selected,
                    spec.volume_name.as_deref(),
                    spec.storage_class_name.as_deref(),
                ) else {
                    continue;
                };
                let uid = c.metadata.uid.clone().unwrap_or_default();
                let pv: core::PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": format!("pvc-{uid}"),
                                 "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": "wffc-dynamic",
                             "persistentVolumeReclaimPolicy": "Delete",
                             "local": {"path": format!("/mnt/pvc-{uid}")},
                             "nodeAffinity": hostname_affinity(&node),
                             "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                          "namespace": "default",
                                          "name": c.metadata.name.clone().unwrap_or_default(),
                                          "uid": uid}}
                }))
                .expect("pv");
                let _ = pvs.create(&PostParams::default(), &pv).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn statefulset_static_pvs_wffc_provisioning_and_a_missing_claim() {
    let cp = ControlPlane::start(
        "volumes",
        Components {
            controller_manager: true,
            scheduler: false,
        },
    );
    let dir = cp.state_dir().join("switchyard");
    std::fs::create_dir_all(&dir).expect("work dir");
    for n in ["n1", "n2", "n3"] {
        cp.apply(&node(n));
    }
    // Static local PVs, one per node; the StatefulSet's three claims must each end on
    // its PV's node.
    cp.apply(
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-static"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    cp.apply(
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "wffc-dynamic"}, "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer"}),
    );
    for n in ["n1", "n2", "n3"] {
        cp.apply(&local_pv(&format!("local-{n}"), n, "local-static"));
    }
    cp.apply(&json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"replicas": 3, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"schedulerName": "switchyard",
                                       "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"},
                     "spec": {"storageClassName": "local-static", "accessModes": ["ReadWriteOnce"],
                              "resources": {"requests": {"storage": "1Gi"}}}}]}}));
    for i in 0..2 {
        cp.apply(&claim(&format!("dyn-{i}"), "wffc-dynamic"));
        cp.apply(&pod_with_claim(&format!("dyn-{i}"), &format!("dyn-{i}")));
    }
    cp.apply(&pod_with_claim("missing-claim", "nope"));

    let provisioner = cp.spawn(provision_loop(cp.client()));
    // As the ServiceAccount of deploy/rbac.yaml: its rules must allow every watch and
    // every write the volume plugins make.
    cp.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "switchyard-system"}}));
    let rbac = std::fs::read_to_string(switchyard_e2e::workspace_root().join("deploy/rbac.yaml"))
        .expect("deploy/rbac.yaml");
    let docs: Vec<Value> = switchyard::yaml::from_multiple(&rbac).expect("rbac yaml");
    for d in docs.iter().filter(|d| d.is_object()) {
        cp.apply(d);
    }
    let token = cp.service_account_token("switchyard-system", "switchyard", 3600);
    let kubeconfig = dir.join("sa.kubeconfig");
    cp.write_token_kubeconfig(&kubeconfig, &token);
    let config = write_config(&dir);
    let sy = SwitchyardRun::start(&dir, "sy", &config, &kubeconfig, &[]);

    wait_for("db-0..2 bound next to their local PVs", WAIT, || {
        (0..3).all(|i| {
            pod_and_volume_node(&cp, &format!("db-{i}"), &format!("data-db-{i}")).is_some()
        })
    });
    let mut nodes = Vec::new();
    for i in 0..3 {
        let (pod_node, pv_node) =
            pod_and_volume_node(&cp, &format!("db-{i}"), &format!("data-db-{i}")).expect("bound");
        assert_eq!(pod_node, pv_node, "db-{i} is not on its volume's node");
        nodes.push(pod_node);
    }
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3"], "one local PV per node");

    wait_for("dyn-0..1 bound, claims provisioned and Bound", WAIT, || {
        (0..2).all(|i| pod_and_volume_node(&cp, &format!("dyn-{i}"), &format!("dyn-{i}")).is_some())
    });
    for i in 0..2 {
        let (pod_node, pv_node) =
            pod_and_volume_node(&cp, &format!("dyn-{i}"), &format!("dyn-{i}")).expect("bound");
        assert_eq!(pod_node, pv_node, "dyn-{i} is not next to its volume");
        let c = cp
            .get(&format!(
                "/api/v1/namespaces/default/persistentvolumeclaims/dyn-{i}"
            ))
            .expect("claim");
        assert_eq!(
            c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
            json!(pod_node),
            "the scheduler's selected node: {c}"
        );
    }

    let want = "0/3 nodes are available: persistentvolumeclaim \"nope\" not found.";
    wait_for(
        "missing-claim pending with kube-scheduler's message",
        WAIT,
        || {
            cp.events("default").iter().any(|e| {
                e["reason"] == "FailedScheduling"
                    && e["regarding"]["name"] == "missing-claim"
                    && e["note"].as_str().is_some_and(|n| n.starts_with(want))
            })
        },
    );
    let p = cp.pod("default", "missing-claim").expect("pod");
    assert!(p["spec"]["nodeName"].is_null(), "{p}");
    let cond = p["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled").cloned())
        .expect("PodScheduled");
    assert_eq!(cond["status"], "False", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(want)),
        "{cond}"
    );
    let refused = sy.refused_api_calls();
    assert!(
        refused.is_empty(),
        "refused with deploy/rbac.yaml: {refused:?}"
    );
    provisioner.abort();
    drop(sy);
}
