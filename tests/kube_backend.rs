//! The `kubernetes` backend with the real `kube` client against the API-server
//! double (`switchyard_e2e::apiserver`, real HTTP and watch streams on 127.0.0.1):
//! initial lists, watch events, a bind answered 409, a dropped watch, `410 Gone` and
//! the relist, an unschedulable pod's status and events, and pods of other
//! schedulers left alone. Every wait is bounded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard::client::{event_channel, ClusterBackend};
use switchyard::cluster::kubernetes::{KubernetesCluster, KubernetesOptions};
use switchyard::config::SchedulerConfig;
use switchyard::framework::interface::{PermitPlugin, Plugin};
use switchyard::framework::{Code, CycleState, Handle, Registry, Status};
use switchyard::model::Pod;
use switchyard::plugins::in_tree_registry;
use switchyard::scheduler::{Options, Scheduler};
use switchyard_e2e::apiserver::{ApiServer, EVENTS, PODS};
use switchyard_e2e::wait_for;

#[path = "kube_backend/dra.rs"]
mod dra;

fn node(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                      "conditions": [{"type": "Ready", "status": "True"}]}})
}

fn pod(name: &str, scheduler: &str, cpu: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x",
                    "resources": {"requests": {"cpu": cpu}}}]},
           "status": {"phase": "Pending"}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
        p["status"]["phase"] = json!("Running");
    }
    p
}

struct Running {
    sched: Option<switchyard::scheduler::Running>,
    cluster: Arc<KubernetesCluster>,
    _runtime: tokio::runtime::Runtime,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(r) = self.sched.take() {
            r.stop();
        }
        self.cluster.stop();
    }
}

fn start(api: &ApiServer) -> Running {
    start_with(
        api,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: switchyard\n- schedulerName: switchyard-batch\n",
        &in_tree_registry(),
    )
}

fn start_with(api: &ApiServer, config: &str, registry: &Registry) -> Running {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let client = runtime.block_on(api.client());
    let cluster = Arc::new(KubernetesCluster::new(
        client,
        runtime.handle().clone(),
        KubernetesOptions::default(),
    ));
    let config = SchedulerConfig::from_yaml(config, "test").expect("config");
    let sched = Scheduler::new(
        &config,
        registry,
        cluster.clone(),
        runtime.handle().clone(),
        Options::default(),
    )
    .expect("scheduler");
    let (sink, source) = event_channel();
    cluster.start(sink);
    let running = sched.start(source);
    Running {
        sched: Some(running),
        cluster,
        _runtime: runtime,
    }
}

#[test]
fn schedules_through_the_api_server_and_follows_its_watches() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node("node-a", "2"));
    api.apply(node("node-b", "2"));
    // Placed by someone else: counts against node-a.
    api.apply(pod(
        "kubelet-pod",
        "default-scheduler",
        "1500m",
        Some("node-a"),
    ));
    api.apply(pod("other", "default-scheduler", "100m", None));
    for i in 0..3 {
        api.apply(pod(&format!("p-{i}"), "switchyard", "500m", None));
    }
    let _s = start(&api);

    // The initial list: all three bound, none over-committing node-a (0.5 CPU left).
    wait_for("initial pods bound", Duration::from_secs(20), || {
        (0..3).all(|i| api.node_of(&format!("p-{i}")).is_some())
    });
    let on_a = (0..3)
        .filter(|i| api.node_of(&format!("p-{i}")).as_deref() == Some("node-a"))
        .count();
    assert!(on_a <= 1, "node-a has room for one 500m pod, got {on_a}");
    assert_eq!(
        api.node_of("other"),
        None,
        "another scheduler's pod is not ours"
    );

    // A watch event: a new pod, whose first bind the server refuses (409).
    api.conflict_next_bind();
    api.apply(pod("late", "switchyard", "100m", None));
    wait_for(
        "the conflicted pod bound on retry",
        Duration::from_secs(20),
        || api.node_of("late").is_some(),
    );
    let binds = api
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.contains("/pods/late/binding"))
        .count();
    assert!(
        binds >= 2,
        "the 409 made the scheduler retry: {binds} binds"
    );

    // The watches drop and the history is compacted: the watcher gets 410 Gone and
    // lists again; the pod created meanwhile is still found and bound.
    let pod_lists = || {
        api.calls()
            .iter()
            .filter(|c| {
                c.method == "GET"
                    && c.path.starts_with("/api/v1/pods?")
                    && !c.path.contains("watch=true")
            })
            .count()
    };
    // A watch being re-opened at the moment of the drop can miss it: drop again.
    let mut last_drop = std::time::Instant::now() - Duration::from_secs(1);
    wait_for("a relist after 410 Gone", Duration::from_secs(30), || {
        if last_drop.elapsed() > Duration::from_millis(500) {
            api.compact();
            api.drop_watches();
            last_drop = std::time::Instant::now();
        }
        pod_lists() >= 2
    });
    api.apply(pod("after-gone", "switchyard", "100m", None));
    wait_for(
        "the pod created after the relist bound",
        Duration::from_secs(30),
        || api.node_of("after-gone").is_some(),
    );

    // A second profile in the same process.
    api.apply(pod("batch", "switchyard-batch", "100m", None));
    wait_for(
        "the second profile's pod bound",
        Duration::from_secs(20),
        || api.node_of("batch").is_some(),
    );

    // Deleted while its binding is on the way: the bind gets 404, the scheduler
    // forgets the assumed pod (its CPU is free again) and does not retry.
    api.delete_on_bind("doomed");
    api.apply(pod("doomed", "switchyard", "200m", None));
    wait_for("doomed gone", Duration::from_secs(20), || {
        api.get(PODS, "default", "doomed").is_none()
            && api
                .calls()
                .iter()
                .any(|c| c.path.contains("/pods/doomed/binding"))
    });
    // node-b's CPU the doomed pod was assumed on must be free: a pod needing all
    // of what is left on the emptier node still fits.
    std::thread::sleep(Duration::from_millis(300));
    let used = |n: &str| -> f64 {
        let mut m = 0.0;
        for name in [
            "kubelet-pod",
            "p-0",
            "p-1",
            "p-2",
            "late",
            "after-gone",
            "batch",
        ] {
            if api.node_of(name).as_deref() == Some(n) {
                m += match name {
                    "kubelet-pod" => 1.5,
                    "p-0" | "p-1" | "p-2" => 0.5,
                    _ => 0.1,
                };
            }
        }
        m
    };
    let (free_node, free) = if used("node-a") < used("node-b") {
        ("node-a", 2.0 - used("node-a"))
    } else {
        ("node-b", 2.0 - used("node-b"))
    };
    let millis = ((free * 1000.0).round() as i64).to_string() + "m";
    api.apply(pod("fills", "switchyard", &millis, None));
    wait_for(
        "a pod using the doomed pod's share bound",
        Duration::from_secs(20),
        || api.node_of("fills").as_deref() == Some(free_node),
    );
    let doomed_binds = api
        .calls()
        .iter()
        .filter(|c| c.path.contains("/pods/doomed/binding"))
        .count();
    assert_eq!(doomed_binds, 1, "a deleted pod is not retried");

    // From here the server takes JSON only (415 for protobuf), as a proxy or an
    // old server may: the backend falls back.
    let refused_at = api.calls().len();
    api.refuse_protobuf();
    // Too big for any node: PodScheduled=False, a FailedScheduling event.
    api.apply(pod("huge", "switchyard", "64", None));
    wait_for("huge marked unschedulable", Duration::from_secs(20), || {
        api.get(PODS, "default", "huge").is_some_and(|p| {
            p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "PodScheduled"
                        && c["status"] == "False"
                        && c["reason"] == "Unschedulable"
                })
        })
    });
    let cond =
        api.get(PODS, "default", "huge").unwrap()["status"]["conditions"][0]["message"].clone();
    assert!(
        cond.as_str()
            .unwrap_or("")
            .starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{cond}"
    );
    wait_for("events recorded", Duration::from_secs(10), || {
        let evs = api.list(EVENTS);
        evs.iter()
            .any(|e| e["reason"] == "FailedScheduling" && e["regarding"]["name"] == "huge")
            && evs
                .iter()
                .any(|e| e["reason"] == "Scheduled" && e["regarding"]["name"] == "p-0")
    });
    assert_eq!(api.node_of("other"), None);
    // Bindings and events go in protobuf, which the double decodes by upstream's
    // field numbers (the bindings and events above prove it read them right);
    // once the server refused the media type (415), the scheduler fell back to
    // JSON once and wrote JSON from then on.
    let is_write = |c: &switchyard_e2e::apiserver::Call| {
        c.method == "POST" && (c.path.contains("/binding") || c.path.contains("/events"))
    };
    let protobuf = |c: &&switchyard_e2e::apiserver::Call| {
        c.content_type.as_deref() == Some("application/vnd.kubernetes.protobuf")
    };
    let calls = api.calls();
    let before: Vec<_> = calls[..refused_at].iter().filter(|c| is_write(c)).collect();
    assert!(
        before.len() >= 6 && before.iter().all(protobuf),
        "{before:#?}"
    );
    let writes: Vec<_> = calls[refused_at..]
        .iter()
        .filter(|c| is_write(c))
        .cloned()
        .collect();
    // Writes already on the way when the first 415 came back may still be protobuf.
    let in_flight = switchyard::cluster::kubernetes::MAX_WRITES_IN_FLIGHT
        + switchyard::cluster::kubernetes::MAX_EVENTS_IN_FLIGHT;
    assert!(
        writes.first().is_some_and(|c| protobuf(&c))
            && writes.last().is_some_and(|c| !protobuf(&c))
            && writes.iter().filter(|c| protobuf(c)).count() <= in_flight,
        "{writes:#?}"
    );
    api.assert_a_careful_client();
}

#[test]
fn preemption_nominates_marks_and_deletes_the_victim() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node("only", "1"));
    let mut low = pod("low", "switchyard", "1", Some("only"));
    low["spec"]["priority"] = json!(0);
    api.apply(low);
    let _s = start(&api);
    let pod_watches = |api: &ApiServer| {
        api.calls()
            .iter()
            .filter(|c| c.path.starts_with("/api/v1/pods?") && c.path.contains("watch=true"))
            .count()
    };
    wait_for("the pod watch open", Duration::from_secs(20), || {
        pod_watches(&api) >= 1
    });
    // Watches resume after a dropped connection (from their last resourceVersion).
    api.drop_watches();
    let mut high = pod("high", "switchyard", "1", None);
    high["spec"]["priority"] = json!(1000);
    api.apply(high);

    // The victim is marked DisruptionTarget, then deleted with its UID; the
    // preemptor is nominated, then bound once the victim is gone.
    wait_for("victim deleted", Duration::from_secs(20), || {
        api.get(PODS, "default", "low").is_none()
    });
    wait_for("preemptor bound", Duration::from_secs(20), || {
        api.node_of("high").as_deref() == Some("only")
    });
    let calls = api.calls();
    let marked = calls.iter().position(|c| {
        c.method == "PATCH"
            && c.path
                .starts_with("/api/v1/namespaces/default/pods/low/status")
    });
    let deleted = calls.iter().position(|c| {
        c.method == "DELETE" && c.path.starts_with("/api/v1/namespaces/default/pods/low")
    });
    assert!(
        matches!((marked, deleted), (Some(m), Some(d)) if m < d),
        "DisruptionTarget patch before the delete: {calls:?}"
    );
    assert!(
        calls.iter().any(|c| c.method == "PATCH"
            && c.path
                .starts_with("/api/v1/namespaces/default/pods/high/status")),
        "the preemptor's nominatedNodeName is written"
    );
    wait_for("Preempted event", Duration::from_secs(10), || {
        api.list(EVENTS)
            .iter()
            .any(|e| e["reason"] == "Preempted" && e["regarding"]["name"] == "low")
    });
    assert!(pod_watches(&api) >= 2, "the pod watch was resumed");
    api.assert_a_careful_client();
}

/// A Permit plugin that parks every pod until the test allows it.
struct Hold;
impl Plugin for Hold {
    fn name(&self) -> &str {
        "Hold"
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}
impl PermitPlugin for Hold {
    fn permit(&self, _s: &mut CycleState, _p: &Pod, _n: &str) -> (Status, Duration) {
        (Status::code_only(Code::Wait), Duration::from_secs(30))
    }
}

#[test]
fn a_pod_waiting_in_permit_is_nominated_to_its_node_until_bound() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node("only", "2"));
    let handle: Arc<std::sync::OnceLock<Arc<Handle>>> = Arc::default();
    let mut registry = in_tree_registry();
    let h = handle.clone();
    registry.register(
        "Hold",
        Arc::new(move |_a, hd: &Arc<Handle>| {
            let _ = h.set(hd.clone());
            Ok(Arc::new(Hold) as Arc<dyn Plugin>)
        }),
    );
    let _s = start_with(
        &api,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: switchyard\n- schedulerName: switchyard-hold\n  plugins:\n    permit:\n      enabled: [{name: Hold}]\n",
        &registry,
    );
    api.apply(pod("plain", "switchyard", "100m", None));
    api.apply(pod("held", "switchyard-hold", "100m", None));
    // KEP-5278: the binding cycle writes the chosen node before it waits in Permit.
    wait_for(
        "held nominated while it waits",
        Duration::from_secs(20),
        || {
            api.get(PODS, "default", "held")
                .is_some_and(|p| p["status"]["nominatedNodeName"] == "only")
        },
    );
    assert!(api.node_of("held").is_none(), "still waiting in Permit");
    let waiting = handle.get().expect("Hold built").waiting_pods.list();
    assert_eq!(waiting.len(), 1);
    waiting[0].allow("Hold");
    wait_for("held bound", Duration::from_secs(20), || {
        api.node_of("held").as_deref() == Some("only")
    });
    let held = api.get(PODS, "default", "held").expect("held");
    assert!(
        held["status"]["nominatedNodeName"].is_null(),
        "the binding clears the nomination: {held}"
    );
    // A pod with no Permit wait and no PreBind work gets no status write at all.
    wait_for("plain bound", Duration::from_secs(20), || {
        api.node_of("plain").is_some()
    });
    assert!(
        !api.calls().iter().any(|c| c.method == "PATCH"
            && c.path
                .starts_with("/api/v1/namespaces/default/pods/plain/status")),
        "no nomination written for a pod bound at once"
    );
    api.assert_a_careful_client();
}

#[test]
fn a_pod_that_fails_the_same_way_again_writes_no_more() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node("only", "2"));
    api.apply(pod("filler", "switchyard", "1500m", Some("only")));
    for i in 0..3 {
        api.apply(pod(&format!("tiny-{i}"), "switchyard", "10m", Some("only")));
    }
    let s = start(&api);
    let attempts = || {
        s.sched
            .as_ref()
            .map_or(0, |r| r.scheduler().stats.attempts())
    };
    api.apply(pod("big", "switchyard", "1", None));
    wait_for("big unschedulable", Duration::from_secs(20), || {
        api.get(PODS, "default", "big").is_some_and(|p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["reason"] == "Unschedulable"))
        })
    });
    // Each deleted pod on the node retries it (NodeResourcesFit's hint), with the
    // same outcome: still 470m free of the 1 CPU it asks.
    for i in 0..3 {
        let before = attempts();
        assert!(api.delete(PODS, "default", &format!("tiny-{i}")));
        wait_for("another attempt", Duration::from_secs(30), || {
            attempts() > before
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(api.node_of("big").is_none());
    let calls = api.calls();
    let status_patches = calls
        .iter()
        .filter(|c| {
            c.method == "PATCH"
                && c.path
                    .starts_with("/api/v1/namespaces/default/pods/big/status")
        })
        .count();
    assert_eq!(
        status_patches, 1,
        "the same condition is written once: {calls:?}"
    );
    // One Event, its series counting the attempts (client-go's recorder: created,
    // then series.count 2 patched; later ones counted until the series ends).
    let events: Vec<Value> = api
        .list(EVENTS)
        .into_iter()
        .filter(|e| e["regarding"]["name"] == "big" && e["reason"] == "FailedScheduling")
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["series"]["count"], 2, "{events:#?}");
    let event_writes = calls
        .iter()
        .filter(|c| {
            c.path
                .starts_with("/apis/events.k8s.io/v1/namespaces/default/events")
        })
        .filter(|c| c.method == "POST" || c.method == "PATCH")
        .count();
    assert_eq!(event_writes, 2, "{calls:?}");
    assert!(attempts() >= 4);
    api.assert_a_careful_client();
}

#[test]
fn a_binding_the_role_does_not_allow_fails_naming_verb_and_resource() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    api.apply(node("only", "2"));
    // deploy/rbac.yaml without the binding rule, enforced as a server enforces it.
    let rules: Vec<_> = switchyard_e2e::apiserver::deploy_rules()
        .into_iter()
        .filter(|r| !r.resources.iter().any(|x| x == "pods/binding"))
        .collect();
    api.enforce_rbac(rules);
    let _s = start(&api);
    api.apply(pod("p", "switchyard", "100m", None));
    wait_for(
        "the refusal recorded on the pod",
        Duration::from_secs(20),
        || {
            api.get(PODS, "default", "p").is_some_and(|p| {
                p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter().any(|c| {
                        c["reason"] == "SchedulerError"
                            && c["message"].as_str().is_some_and(|m| {
                                m.contains("forbidden")
                                    && m.contains("create resource \"pods/binding\"")
                            })
                    })
                })
            })
        },
    );
    assert!(api.node_of("p").is_none());
    let refused = api
        .calls()
        .iter()
        .filter(|c| c.method == "POST" && c.path.contains("/pods/p/binding"))
        .count();
    assert!(refused >= 1);
}

/// Requests per bound pod, as kube-scheduler v1.36 makes them for pods bound at
/// their first attempt: one `pods/binding` and one `Scheduled` event each, nothing
/// else per pod (no status patch, no re-list), whatever the number of pods.
#[test]
fn a_pod_bound_at_once_costs_two_writes() {
    let api = ApiServer::start();
    api.apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}));
    for n in 0..4 {
        api.apply(node(&format!("node-{n}"), "16"));
    }
    let _s = start(&api);
    wait_for("watches open", Duration::from_secs(20), || {
        api.calls()
            .iter()
            .any(|c| c.path.starts_with("/api/v1/pods?") && c.path.contains("watch=true"))
    });
    let before = api.calls().len();
    const PODS_N: usize = 60;
    for i in 0..PODS_N {
        api.apply(pod(&format!("w-{i}"), "switchyard", "100m", None));
    }
    wait_for("all bound", Duration::from_secs(30), || {
        (0..PODS_N).all(|i| api.node_of(&format!("w-{i}")).is_some())
    });
    wait_for("all events", Duration::from_secs(10), || {
        api.list(EVENTS)
            .iter()
            .filter(|e| e["reason"] == "Scheduled")
            .count()
            == PODS_N
    });
    std::thread::sleep(Duration::from_millis(300));
    let calls = api.calls();
    let after = &calls[before..];
    let count = |f: &dyn Fn(&switchyard_e2e::apiserver::Call) -> bool| {
        after.iter().filter(|c| f(c)).count()
    };
    let bindings = count(&|c| c.method == "POST" && c.path.ends_with("/binding"));
    let events = count(&|c| c.method == "POST" && c.path.contains("/events"));
    let others = count(&|c| {
        c.method != "GET" && !c.path.ends_with("/binding") && !c.path.contains("/events")
    });
    let lists = count(&|c| c.method == "GET" && !c.path.contains("watch=true"));
    eprintln!(
        "{PODS_N} pods: {bindings} bindings, {events} events, {others} other writes, {lists} lists"
    );
    assert_eq!(
        (bindings, events, others, lists),
        (PODS_N, PODS_N, 0, 0),
        "{after:#?}"
    );
    api.assert_a_careful_client();
}
