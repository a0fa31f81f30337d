//! End to end: starts the built `switchyard-quota` and speaks the plugin protocol to it
//! as the scheduler does (handshake, replicated snapshot, cycle, PreFilter, Filter
//! batches with what-if deltas), so the SDK's fork-and-AddPod/RemovePod path runs
//! against the real plugin.

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchyard_proto::v1 as pb;
use switchyard_proto::v1::plugin_client::PluginClient;
use tonic::transport::Channel;

const TENANT: &str = "quota.switchyard.dev/tenant";
const LIMIT: &str = "quota.switchyard.dev/pods-per-tenant";

/// The sidecar process; killed when the test ends, however it ends.
struct Sidecar(Child);

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start() -> (Sidecar, PluginClient<Channel>) {
    // A free port (the sidecar binds it right after; a clash would only fail the test).
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_switchyard-quota"))
        .args(["--listen", &format!("http://127.0.0.1:{port}")])
        .env_remove("SWITCHYARD_PLUGIN_LISTEN")
        .stdout(Stdio::null())
        .spawn()
        .expect("start switchyard-quota");
    let sidecar = Sidecar(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match PluginClient::connect(format!("http://127.0.0.1:{port}")).await {
            Ok(c) => return (sidecar, c),
            Err(e) if Instant::now() > deadline => panic!("sidecar never listened: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn labels(kv: &[(&str, &str)]) -> HashMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn node(id: u32, name: &str, limit: Option<&str>) -> pb::Node {
    pb::Node {
        id,
        name: name.into(),
        labels: limit.map(|l| labels(&[(LIMIT, l)])).unwrap_or_default(),
        ..Default::default()
    }
}

fn pod(uid: &str, tenant: Option<&str>, node: &str) -> pb::Pod {
    pb::Pod {
        uid: uid.into(),
        name: uid.into(),
        namespace: "default".into(),
        labels: tenant.map(|t| labels(&[(TENANT, t)])).unwrap_or_default(),
        node_name: node.into(),
        ..Default::default()
    }
}

fn code(s: &Option<pb::Status>) -> pb::Code {
    s.as_ref()
        .and_then(|s| pb::Code::try_from(s.code).ok())
        .unwrap_or(pb::Code::Success)
}

#[tokio::test(flavor = "current_thread")]
async fn dry_run_deltas_go_through_add_pod_and_remove_pod() {
    let (_sidecar, mut client) = start().await;

    let hs = client
        .handshake(pb::HandshakeRequest {
            protocol_versions: vec!["v1".into()],
            scheduler: "quota-test".into(),
            capabilities: Vec::new(),
        })
        .await
        .expect("handshake")
        .into_inner();
    let [info] = &hs.plugins[..] else {
        panic!("expected one plugin: {:?}", hs.plugins);
    };
    assert_eq!(info.name, "TenantQuota");
    assert!(info.pre_filter_extensions);
    for p in [pb::ExtensionPoint::PreFilter, pb::ExtensionPoint::Filter] {
        assert!(info.extension_points.contains(&(p as i32)), "{p:?}");
    }
    assert!(!info.events.is_empty());

    // Generation 1: the cluster. 2: a cycle for an acme pod. 3: one for a pod
    // without a tenant.
    let delta = pb::SnapshotDelta {
        full: true,
        upsert_nodes: vec![
            node(1, "a", Some("1")),
            node(2, "b", Some("2")),
            node(3, "free", None),
            node(4, "bad", Some("lots")),
            node(5, "zero", Some("0")),
        ],
        upsert_pods: vec![
            pod("v1", Some("acme"), "a"),
            pod("o1", Some("other"), "a"),
            pod("v2", Some("acme"), "b"),
            pod("o2", Some("other"), "b"),
            pod("v3", Some("acme"), "free"),
            pod("v4", Some("acme"), "free"),
        ],
        ..Default::default()
    };
    let msgs = vec![
        pb::ReplicateRequest {
            generation: 1,
            kind: Some(pb::replicate_request::Kind::Delta(delta)),
            ack: false,
            more: Vec::new(),
        },
        pb::ReplicateRequest {
            generation: 2,
            kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle: 10,
                pod: Some(pod("p", Some("acme"), "")),
                profile: "default-scheduler".into(),
            })),
            ack: false,
            more: Vec::new(),
        },
        pb::ReplicateRequest {
            generation: 3,
            kind: Some(pb::replicate_request::Kind::CycleStart(pb::CycleStart {
                cycle: 11,
                pod: Some(pod("n", None, "")),
                profile: "default-scheduler".into(),
            })),
            ack: true,
            more: Vec::new(),
        },
    ];
    let mut acks = client
        .replicate(tokio_stream::iter(msgs))
        .await
        .expect("replicate")
        .into_inner();
    let ack = acks.message().await.expect("ack").expect("an ack");
    assert_eq!(ack.applied_generation, 3);

    let pre_filter = |request_id, cycle, generation| pb::PreFilterRequest {
        request_id,
        plugin: "TenantQuota".into(),
        cycle,
        generation,
        ..Default::default()
    };
    let mut replies = client
        .pre_filter(tokio_stream::iter(vec![
            pre_filter(1, 10, 2),
            pre_filter(2, 11, 3),
        ]))
        .await
        .expect("pre_filter")
        .into_inner();
    let r = replies.message().await.unwrap().unwrap();
    assert_eq!((r.request_id, code(&r.status)), (1, pb::Code::Success));
    assert!(!r.has_node_names);
    let r = replies.message().await.unwrap().unwrap();
    assert_eq!((r.request_id, code(&r.status)), (2, pb::Code::Skip));

    // Node a holds 1 acme pod of 1, b 1 of 2; free is unlimited, bad has a bad limit,
    // zero admits none. Items 5.. repeat nodes with what-if deltas.
    let req = pb::FilterRequest {
        request_id: 3,
        plugin: "TenantQuota".into(),
        cycle: 10,
        generation: 2,
        nodes: vec![1, 2, 3, 4, 5, 1, 1, 1, 2, 2],
        deltas: vec![
            // Preemption dry run: evict the acme pod from a.
            pb::NodeDelta {
                index: 5,
                remove_pods: vec!["v1".into()],
                ..Default::default()
            },
            // ... then put it back (reprieve).
            pb::NodeDelta {
                index: 6,
                remove_pods: vec!["v1".into()],
                add_pods: vec!["v1".into()],
                ..Default::default()
            },
            // Evicting another tenant's pod does not help.
            pb::NodeDelta {
                index: 7,
                remove_pods: vec!["o1".into()],
                ..Default::default()
            },
            // A nominated acme pod fills b.
            pb::NodeDelta {
                index: 8,
                add_pod_objects: vec![pod("nom", Some("acme"), "")],
                ..Default::default()
            },
            // A nominated pod of another tenant does not.
            pb::NodeDelta {
                index: 9,
                add_pod_objects: vec![pod("nom2", Some("other"), "")],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let mut replies = client
        .filter(tokio_stream::iter(vec![req]))
        .await
        .expect("filter")
        .into_inner();
    let r = replies.message().await.unwrap().unwrap();
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(r.evaluated, 10);
    let failures: HashMap<u32, pb::Status> = r
        .failures
        .into_iter()
        .map(|f| (f.index, f.status.unwrap_or_default()))
        .collect();
    let mut failed: Vec<u32> = failures.keys().copied().collect();
    failed.sort();
    assert_eq!(failed, [0, 3, 4, 6, 7, 8], "{failures:?}");
    let exceeded = vec!["node(s) exceeded the pod quota of tenant acme".to_string()];
    for i in [0, 6, 7, 8] {
        assert_eq!(
            failures[&i].code,
            pb::Code::Unschedulable as i32,
            "item {i}"
        );
        assert_eq!(failures[&i].reasons, exceeded, "item {i}");
    }
    assert_eq!(
        failures[&3].code,
        pb::Code::UnschedulableAndUnresolvable as i32
    );
    assert!(
        failures[&3].reasons[0].contains(LIMIT) && failures[&3].reasons[0].contains("\"lots\""),
        "{:?}",
        failures[&3]
    );
    assert_eq!(
        failures[&4].code,
        pb::Code::UnschedulableAndUnresolvable as i32
    );
    assert_eq!(failures[&4].reasons, exceeded);
}
