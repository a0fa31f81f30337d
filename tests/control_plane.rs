//! `switchyard run` against a real Kubernetes v1.26 control plane (etcd,
//! kube-apiserver and, where a test needs them, kube-controller-manager and
//! kube-scheduler) from the user's binaries (`scripts/control-plane.sh`): binding,
//! events, status, preemption, least privilege with the ServiceAccount's own token,
//! leader election on a real Lease, and API server and etcd faults. Each test starts
//! its own control plane on its own ports and stops it at the end; each fails, saying
//! what is missing, when the control plane (or kubectl, where it is used) is absent
//! (`scripts/test.sh` then leaves this binary out and lists it as not run).
//!
//! There is no kubelet: bound pods stay Pending, and a deleted pod that has a node
//! stays Terminating until its kubelet would confirm it. Where a test needs that, it
//! plays the kubelet's part ([`ControlPlane::finish_terminating`]) and says so.

#[path = "control_plane/support.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::*;

use serde_json::{json, Value};
use switchyard_e2e::controlplane::{Components, ControlPlane, WAIT};
use switchyard_e2e::process::SwitchyardRun;
use switchyard_e2e::wait_for;

#[test]
fn binds_records_events_and_reports_unschedulable_pods_as_kube_scheduler() {
    // kube-scheduler runs beside Switchyard: the oracle for the unschedulable
    // message, and the owner of the default-scheduler pods Switchyard must not touch.
    let cp = ControlPlane::start_with_kubectl(
        "binding",
        Components {
            scheduler: true,
            ..Components::default()
        },
    );
    let dir = work_dir(&cp);
    cp.apply(&node("node-a", "2"));
    cp.apply(&node("node-b", "2"));
    let mut created = Vec::new();
    let mut create = |p: Value| {
        cp.apply(&p);
        created.push(p);
    };
    // Placed already (as by a kubelet): 1.5 of each node's 2 CPUs are taken.
    for n in ["node-a", "node-b"] {
        let mut filler = pod(&format!("filler-{n}"), "nobody", "1500m");
        filler["spec"]["nodeName"] = json!(n);
        create(filler);
    }
    for i in 0..4 {
        create(pod(&format!("p-{i}"), "switchyard", "100m"));
    }
    // Nobody's: no scheduler has this name.
    create(pod("orphan", "nobody", "100m"));
    // Fits a node's allocatable but no node's free CPU, once for each scheduler,
    // with no lower-priority pod to preempt.
    create(pod("huge", "switchyard", "1"));
    create(pod("huge-upstream", "default-scheduler", "1"));

    let config = write_config(&dir, None);
    let sy = SwitchyardRun::start(&dir, "sy", &config, &cp.kubeconfig, &[]);

    wait_for("p-0..3 bound", WAIT, || {
        (0..4).all(|i| {
            cp.pod("default", &format!("p-{i}"))
                .and_then(|p| node_of(&p))
                .is_some()
        })
    });
    // 0.5 CPU free per node: at most five 100m pods on one.
    let mut per_node: HashMap<String, u32> = HashMap::new();
    for i in 0..4 {
        let p = cp.pod("default", &format!("p-{i}")).expect("pod");
        *per_node.entry(node_of(&p).expect("node")).or_default() += 1;
        // Bound pods carry no PodScheduled=False.
        assert_ne!(
            condition(&p, "PodScheduled").map(|c| c["status"].clone()),
            Some(json!("False")),
            "{p}"
        );
    }
    assert!(per_node.values().all(|n| *n <= 5), "{per_node:?}");

    // Scheduled events, visible through kubectl, named as client-go names them.
    wait_for("Scheduled events", WAIT, || {
        (0..4).all(|i| has_event(&kubectl_events(&cp, &format!("p-{i}")), "Scheduled"))
    });
    for i in 0..4 {
        let name = format!("p-{i}");
        let events = kubectl_events(&cp, &name);
        let e = events
            .iter()
            .find(|e| e["reason"] == "Scheduled")
            .expect("Scheduled");
        let node = node_of(&cp.pod("default", &name).expect("pod")).expect("node");
        assert_eq!(
            e["message"],
            json!(format!("Successfully assigned default/{name} to {node}")),
            "{e}"
        );
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["reportingComponent"], "switchyard", "{e}");
        let ev_name = e["metadata"]["name"].as_str().unwrap_or_default();
        let suffix = ev_name.strip_prefix(&format!("{name}.")).unwrap_or("");
        assert!(
            !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_hexdigit()),
            "event name {ev_name}: expected <pod>.<hex nanoseconds>"
        );
    }

    // The unschedulable pod: PodScheduled=False with kube-scheduler's reason and
    // message (kube-scheduler decided the same pod beside it), a FailedScheduling
    // event with that message, and no nomination (nothing to preempt).
    let ours = wait_unschedulable(&cp, "huge");
    let theirs = wait_unschedulable(&cp, "huge-upstream");
    assert_eq!(ours["reason"], "Unschedulable", "{ours}");
    assert_eq!(ours["reason"], theirs["reason"]);
    assert_eq!(
        ours["message"],
        json!(as_newest_upstream(
            theirs["message"].as_str().unwrap_or_default()
        )),
        "Switchyard's message differs from kube-scheduler's"
    );
    assert_eq!(
        ours["message"],
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    wait_for("huge's FailedScheduling event", WAIT, || {
        has_event(&kubectl_events(&cp, "huge"), "FailedScheduling")
    });
    let failed = kubectl_events(&cp, "huge")
        .into_iter()
        .find(|e| e["reason"] == "FailedScheduling")
        .expect("FailedScheduling");
    assert_eq!(failed["type"], "Warning");
    assert_eq!(failed["message"], ours["message"], "{failed}");
    let huge = cp.pod("default", "huge").expect("huge");
    assert!(huge["status"]["nominatedNodeName"].is_null(), "{huge}");
    assert!(node_of(&huge).is_none());

    // Other schedulers' pods: untouched (no node, no status, no event from us).
    let orphan = cp.pod("default", "orphan").expect("orphan");
    assert!(node_of(&orphan).is_none(), "{orphan}");
    assert!(condition(&orphan, "PodScheduled").is_none(), "{orphan}");
    assert!(kubectl_events(&cp, "orphan").is_empty());
    let upstream_events = kubectl_events(&cp, "huge-upstream");
    assert!(
        upstream_events
            .iter()
            .all(|e| e["reportingComponent"] != "switchyard"),
        "{upstream_events:#?}"
    );
    // No API request of ours was refused.
    let (_, metrics) = sy.fetch("/metrics");
    assert!(
        !metrics.contains("switchyard_api_errors_total{"),
        "refused requests:\n{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("switchyard_api_errors_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The real API server took the bindings and events in protobuf, as it takes
    // kube-scheduler's: no fall back to JSON.
    assert!(
        !sy.log_text().contains("refused protobuf"),
        "{}",
        sy.log_text()
    );
    cp.assert_invariants("default", &created, &[], &["switchyard"]);
}

#[test]
fn preempts_marks_and_deletes_victims_then_binds_the_preemptor() {
    let cp = ControlPlane::start("preemption", Components::default());
    let dir = work_dir(&cp);
    cp.apply(&node("node-a", "2"));
    let config = write_config(&dir, None);
    let _sy = SwitchyardRun::start(&dir, "sy", &config, &cp.kubeconfig, &[]);
    let mut created = Vec::new();
    for i in 0..2 {
        created.push(with_priority(pod(&format!("v-{i}"), "switchyard", "1"), 0));
        cp.apply(created.last().expect("pod"));
    }
    wait_for("victims bound", WAIT, || {
        (0..2).all(|i| {
            cp.pod("default", &format!("v-{i}"))
                .and_then(|p| node_of(&p))
                .is_some()
        })
    });
    let victim_uids: Vec<String> = (0..2)
        .map(|i| {
            cp.pod("default", &format!("v-{i}")).expect("victim")["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    created.push(with_priority(pod("vip", "switchyard", "2"), 1000));
    cp.apply(created.last().expect("pod"));

    // The victims: DisruptionTarget, then deleted (Terminating: no kubelet here).
    wait_for("victims marked and terminating", WAIT, || {
        (0..2).all(|i| {
            cp.pod("default", &format!("v-{i}")).is_some_and(|p| {
                p["metadata"]["deletionTimestamp"].is_string()
                    && condition(&p, "DisruptionTarget").is_some_and(|c| {
                        c["status"] == "True" && c["reason"] == "PreemptionByScheduler"
                    })
            })
        })
    });
    // The preemptor: nominated to the node (its status patch and the victims'
    // deletion go out concurrently, as upstream's), not bound while the victims are
    // there.
    wait_for("vip nominated to node-a", WAIT, || {
        cp.pod("default", "vip")
            .is_some_and(|p| p["status"]["nominatedNodeName"] == "node-a")
    });
    let vip = cp.pod("default", "vip").expect("vip");
    assert!(
        node_of(&vip).is_none(),
        "bound before its victims left: {vip}"
    );
    let cond = wait_unschedulable(&cp, "vip");
    assert_eq!(cond["reason"], "Unschedulable", "{cond}");
    // Preempted events on the victims.
    wait_for("Preempted events", WAIT, || {
        let events = cp.events("default");
        (0..2).all(|i| {
            events
                .iter()
                .any(|e| e["reason"] == "Preempted" && e["regarding"]["name"] == format!("v-{i}"))
        })
    });

    // Playing the kubelet: the victims' containers have stopped.
    eprintln!("playing the kubelet: finishing the victims' deletion");
    assert_eq!(cp.finish_terminating("default"), 2);
    wait_for("vip bound once its victims are gone", WAIT, || {
        cp.pod("default", "vip")
            .and_then(|p| node_of(&p))
            .as_deref()
            == Some("node-a")
    });
    for (i, uid) in victim_uids.iter().enumerate() {
        let gone = cp.pod("default", &format!("v-{i}"));
        assert!(gone.is_none(), "victim v-{i} ({uid}) still there: {gone:?}");
    }
    wait_for("vip's Scheduled event", WAIT, || {
        cp.events("default")
            .iter()
            .any(|e| e["reason"] == "Scheduled" && e["regarding"]["name"] == "vip")
    });
    // Victims of lower priority only, none lost, nothing over-committed.
    cp.assert_invariants("default", &created, &[], &["switchyard"]);
}

#[test]
fn runs_with_least_privilege_from_deploy_rbac() {
    let cp = ControlPlane::start_with_kubectl("rbac", Components::default());
    let dir = work_dir(&cp);
    cp.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "switchyard-system"}}));
    let rbac = deploy_rbac(&cp);
    for doc in &rbac {
        cp.apply(doc);
    }
    cp.apply(&node("node-a", "2"));
    for i in 0..2 {
        cp.apply(&with_priority(
            pod(&format!("low-{i}"), "switchyard", "1"),
            0,
        ));
    }
    cp.apply(&pod("huge", "switchyard", "64"));

    // Every call it makes is allowed: it leads (Lease get/create/update), binds
    // (pods/binding), records events, patches status (huge), and preempts (patch
    // DisruptionTarget, delete).
    let mut sy = run_as_service_account(&cp, &dir, "sy");
    wait_for("low-* bound", WAIT, || {
        (0..2).all(|i| {
            cp.pod("default", &format!("low-{i}"))
                .and_then(|p| node_of(&p))
                .is_some()
        })
    });
    wait_unschedulable(&cp, "huge");
    cp.apply(&with_priority(pod("vip", "switchyard", "1"), 1000));
    wait_for("a victim terminating", WAIT, || {
        cp.pods("default")
            .iter()
            .any(|p| p["metadata"]["deletionTimestamp"].is_string())
    });
    eprintln!("playing the kubelet: finishing the victim's deletion");
    cp.finish_terminating("default");
    wait_for("vip bound", WAIT, || {
        cp.pod("default", "vip").and_then(|p| node_of(&p)).is_some()
    });
    wait_for("events recorded", WAIT, || {
        let ev = cp.events("default");
        ["Scheduled", "FailedScheduling", "Preempted"]
            .iter()
            .all(|r| ev.iter().any(|e| e["reason"] == *r))
    });
    let lease = cp
        .get("/apis/coordination.k8s.io/v1/namespaces/switchyard-system/leases/switchyard")
        .expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "sy", "{lease}");
    let refused = sy.refused_api_calls();
    assert!(
        refused.is_empty(),
        "refused with deploy/rbac.yaml: {refused:?}"
    );
    let log = sy.log_text();
    assert!(!log.contains("forbidden"), "{log}");
    sy.signal("-TERM");
    assert_eq!(sy.wait_exit(WAIT), Some(0), "{}", sy.log_text());

    // One rule less (pods/binding create): a clear error naming verb and resource.
    let mut role = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "switchyard-scheduler")
        .cloned()
        .expect("ClusterRole in deploy/rbac.yaml");
    let rules: Vec<Value> = role["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            !r["resources"]
                .as_array()
                .is_some_and(|a| a.contains(&json!("pods/binding")))
        })
        .collect();
    role["rules"] = json!(rules);
    cp.block_on(async {
        let req = http::Request::put(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/switchyard-scheduler",
        )
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&role).expect("json"))
        .expect("request");
        cp.client()
            .request::<Value>(req)
            .await
            .expect("replace ClusterRole");
    });
    let sy2 = run_as_service_account(&cp, &dir, "sy2");
    // node-a is full (low-*, vip): room for the next pod.
    cp.apply(&node("node-b", "2"));
    cp.apply(&pod("after", "switchyard", "100m"));
    wait_for("the refused binding logged", WAIT, || {
        sy2.log_text().contains("pods/binding")
    });
    let log = sy2.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("refused create pods/binding"))
        .unwrap_or_else(|| panic!("no warning naming the verb and resource:\n{log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("cannot create resource \"pods/binding\"")
            || line.contains("cannot create resource \"pods\""),
        "the API server's reason: {line}"
    );
    assert!(
        !line.contains('\u{1b}'),
        "no colour codes in a log file: {line}"
    );
    wait_for("the error counted", WAIT, || {
        sy2.fetch("/metrics").1.contains(
            "switchyard_api_errors_total{verb=\"create\",resource=\"pods/binding\",code=\"403\"}",
        )
    });
    let after = cp.pod("default", "after").expect("after");
    assert!(node_of(&after).is_none(), "{after}");
}

#[test]
fn a_standby_takes_over_a_killed_leader_on_a_real_lease() {
    let cp = ControlPlane::start("leader", Components::default());
    let dir = work_dir(&cp);
    for n in ["node-a", "node-b", "node-c"] {
        cp.apply(&node(n, "64"));
    }
    let config = write_config(&dir, Some("default"));
    let mut a = SwitchyardRun::start(&dir, "a", &config, &cp.kubeconfig, &[]);
    wait_for("a leads", WAIT, || lease_holder(&cp, "default") == "a");
    let b = SwitchyardRun::start(&dir, "b", &config, &cp.kubeconfig, &[]);
    wait_for("b ready (standing by)", WAIT, || b.get("/readyz") == 200);
    assert_eq!(lease_holder(&cp, "default"), "a");

    // Pods arrive while a leads; a is killed in the middle of binding them.
    // 3 nodes × 110 pods hold 330.
    let total = 300;
    let created = many_pods("p", total);
    let creator = {
        let pods = created.clone();
        let kubeconfig = cp.kubeconfig.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .expect("config");
                let client = kube::Client::try_from(cfg).expect("client");
                let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                    kube::Api::namespaced(client, "default");
                for p in pods {
                    let p = serde_json::from_value(p).expect("pod");
                    api.create(&Default::default(), &p)
                        .await
                        .expect("create pod");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        })
    };
    wait_for("a binding", WAIT, || bound_count(&cp) >= 50);
    a.signal("-KILL");
    let killed = Instant::now();
    let _ = a.wait_exit(WAIT);
    let at_kill = bound_count(&cp);
    // a's last renewal, as the Lease holds it (b cannot have taken it yet: a renewed
    // within its 3 s renew deadline, and the lease lasts 4 s).
    let lease = |field: &str| {
        cp.get("/apis/coordination.k8s.io/v1/namespaces/default/leases/switchyard")
            .map(|l| {
                (
                    l["spec"]["holderIdentity"].clone(),
                    l["spec"][field].clone(),
                )
            })
            .unwrap_or_default()
    };
    let (holder, a_renewed) = lease("renewTime");
    assert_eq!(holder, "a", "the lease changed hands at once");
    wait_for("b leads", WAIT, || lease_holder(&cp, "default") == "b");
    let took_over = killed.elapsed();
    let (_, b_acquired) = lease("acquireTime");
    let time = |v: &Value| -> k8s_openapi::jiff::Timestamp {
        v.as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not a time: {v}"))
    };
    let waited = time(&b_acquired).duration_since(time(&a_renewed));
    assert!(
        waited >= k8s_openapi::jiff::SignedDuration::from_millis(3990),
        "b took the lease {waited:?} after a's last renewal, before the 4 s lease expired"
    );
    creator.join().expect("pods created");
    wait_for("every pod bound", Duration::from_secs(120), || {
        bound_count(&cp) == total
    });
    eprintln!("{at_kill} bound by a before the kill; b took over after {took_over:?}");
    assert!(at_kill < total, "a bound everything before it was killed");
    // None bound twice: one Scheduled event per pod at most, and no binding of b's
    // refused (the API server refuses a second binding of a pod). Events trail the
    // bindings: wait until b's stop growing.
    let mut last = usize::MAX;
    wait_for("b's Scheduled events recorded", WAIT, || {
        std::thread::sleep(Duration::from_millis(500));
        let n = scheduled_events(&cp).values().filter(|r| *r == "b").count();
        let settled = n == last && n > 0;
        last = n;
        settled
    });
    assert!(
        last + at_kill <= total + 32,
        "b bound {last}, a had bound {at_kill} at the kill (at most 32 writes in flight)"
    );
    let (_, metrics) = b.fetch("/metrics");
    assert!(
        !metrics.contains("switchyard_api_errors_total{verb=\"create\",resource=\"pods/binding\""),
        "b had a binding refused:\n{metrics}"
    );
    let lease = cp
        .get("/apis/coordination.k8s.io/v1/namespaces/default/leases/switchyard")
        .expect("lease");
    assert_eq!(lease["spec"]["leaseTransitions"], json!(1), "{lease}");
    cp.assert_invariants("default", &created, &[], &["switchyard"]);
}

/// Breaks `component` (`apiserver` or `etcd`) for `seconds_down` while pods are being
/// scheduled, then checks that watches resumed and the cache converged: pods and a
/// node created after the fault are used, every pod ends bound or with
/// PodScheduled=False, none is bound twice, and Switchyard never exited.
fn survives(component: &str, seconds_down: u32) {
    let cp = ControlPlane::start(&format!("fault-{component}"), Components::default());
    let dir = work_dir(&cp);
    for n in ["node-a", "node-b"] {
        cp.apply(&node(n, "64"));
    }
    // No leader election: an outage longer than the renew deadline would end
    // leading, and the process with it, as kube-scheduler exits (tested above).
    let config = write_config(&dir, None);
    let mut sy = SwitchyardRun::start(&dir, "sy", &config, &cp.kubeconfig, &[]);
    wait_for("sy ready", WAIT, || sy.get("/readyz") == 200);
    let mut created = many_pods("before", 300);
    cp.create_many(created.clone(), 8);
    created.push(pod("huge", "switchyard", "640"));
    cp.apply(created.last().expect("huge"));
    eprintln!("{component} down for {seconds_down}s (crash: SIGKILL)");
    cp.restart(component, seconds_down);
    // After the fault: new pods, and a node only they fit on (watches resumed).
    let mut zoned = node("node-new", "4");
    zoned["metadata"]["labels"]["zone"] = json!("new");
    cp.apply(&zoned);
    let mut after = many_pods("after", 20);
    for p in &mut after {
        p["spec"]["nodeSelector"] = json!({"zone": "new"});
    }
    created.extend(after.iter().cloned());
    cp.create_many(after, 4);
    wait_for("every pod bound but huge", Duration::from_secs(120), || {
        bound_count(&cp) == 320
    });
    for p in cp.pods("default") {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        if name.starts_with("after-") {
            assert_eq!(node_of(&p).as_deref(), Some("node-new"), "{name}");
        }
    }
    let cond = wait_unschedulable(&cp, "huge");
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.contains("Insufficient cpu")),
        "{cond}"
    );
    let by = scheduled_events(&cp);
    assert!(by.len() <= 320);
    assert!(sy.running(), "switchyard exited:\n{}", sy.log_text());
    if component == "apiserver" {
        // Its watches broke (etcd's short outage is hidden by the API server).
        let log = sy.log_text();
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && (l.contains("watch") || l.contains("refused"))),
            "the fault left no warning:\n{log}"
        );
    }
    cp.assert_invariants("default", &created, &[], &["switchyard"]);
}

#[test]
fn survives_an_api_server_restart() {
    survives("apiserver", 2);
}

#[test]
fn survives_etcd_down_and_back() {
    survives("etcd", 5);
}

#[test]
fn deploy_manifests_pass_a_server_side_dry_run() {
    let cp = ControlPlane::start_with_kubectl("deploy", Components::default());
    let deploy = switchyard_e2e::workspace_root().join("deploy");
    // A dry run creates nothing, so the namespaces the manifests go into must exist.
    for ns in ["switchyard-system", "switchyard-demo"] {
        cp.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    let out = cp.kubectl_ok(&[
        "apply",
        "--dry-run=server",
        "-k",
        &deploy.display().to_string(),
    ]);
    eprintln!("{out}");
    let objects: HashSet<&str> = out.lines().collect();
    assert!(objects.len() >= 8, "{out}");
    assert!(out.contains("deployment.apps/switchyard"), "{out}");
    let out = cp.kubectl_ok(&[
        "apply",
        "--dry-run=server",
        "-f",
        &deploy.join("examples").display().to_string(),
    ]);
    assert!(out.contains("pod/"), "{out}");
    // And the server refuses what it should: the check can fail.
    let bad = cp.state_dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n  namespace: switchyard-system\n",
    )
    .expect("write");
    let out = cp.kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        &bad.display().to_string(),
    ]);
    assert!(!out.status.success());
}

/// A pod placed while its profile's remote plugin was down under `failurePolicy:
/// Ignore` is bound (the plugin is skipped), and a Warning event with reason
/// `RemotePluginIgnored` says which call was skipped, before its `Scheduled` event,
/// so nobody takes the placement for the plugin's decision.
#[test]
fn a_skipped_remote_plugin_is_recorded_as_an_event() {
    let cp = ControlPlane::start_with_kubectl("ignored", Components::default());
    let dir = work_dir(&cp);
    cp.apply(&node("node-a", "2"));
    cp.apply(&pod("needs-gpu", "switchyard", "100m"));
    let socket = dir.join("nobody-serves-this.sock");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\nremotePlugins:\n- endpoint: unix://{}\n  failurePolicy: Ignore\n  timeout: 300ms\n  startupTimeout: 1s\n  plugins: [GpuFilter]\nprofiles:\n- schedulerName: switchyard\n  plugins:\n    multiPoint:\n      enabled: [{{name: GpuFilter}}]\n",
            socket.display()
        ),
    )
    .expect("config");
    let _sy = SwitchyardRun::start(&dir, "sy", &config, &cp.kubeconfig, &[]);
    wait_for("needs-gpu bound", WAIT, || {
        cp.pod("default", "needs-gpu")
            .and_then(|p| node_of(&p))
            .is_some()
    });
    let mut events = Vec::new();
    wait_for("RemotePluginIgnored and Scheduled events", WAIT, || {
        events = kubectl_events(&cp, "needs-gpu");
        has_event(&events, "RemotePluginIgnored") && has_event(&events, "Scheduled")
    });
    let ignored = events
        .iter()
        .find(|e| e["reason"] == "RemotePluginIgnored")
        .expect("event");
    assert_eq!(ignored["type"], "Warning", "{ignored}");
    let message = ignored["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Filter skipped under failurePolicy Ignore")
            && message.contains("GpuFilter"),
        "{message}"
    );
}
