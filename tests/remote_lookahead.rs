//! The lookahead: while a pod is in its cycle, the scheduler sends the queue's next
//! pod's first Filter round to node-local sidecars, and uses the answer only if that
//! round names the same unchanged nodes. Checked here end to end against the real
//! TaintToleration sidecar, on a cluster where its Filter and Score decide (tainted
//! nodes, tolerating and intolerant pods, pods pinned to a few nodes whose lookahead
//! answers must be dropped): answers are used and dropped, and every placement is the
//! one the in-process plugin gives.

use std::time::Duration;

use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};
use switchyard_plugin_sdk::pb;

fn run(
    workload: &str,
    adjust: impl FnOnce(&mut switchyard::config::SchedulerConfig),
) -> simulate::Report {
    let mut config = switchyard::config::SchedulerConfig::default_config();
    adjust(&mut config);
    let opts = SimulateOptions {
        workload: Some(
            switchyard_e2e::workspace_root().join("tests/fixtures/lookahead/workload.yaml"),
        ),
        workload_name: Some(format!("Lookahead/{workload}")),
        scheduler_config: Some(config),
        seed: 7,
        timeout: Duration::from_secs(120),
        ..SimulateOptions::default()
    };
    simulate::run(&opts, &in_tree_registry()).expect("simulate")
}

/// The TaintToleration sidecar, started with the command-line flags `args`, on the
/// socket of `socket_name`; stopped when dropped.
fn start_tainttoleration(
    socket_name: &str,
    args: &[&str],
) -> switchyard::remote::sidecar::SidecarProcess {
    use switchyard::remote::sidecar::{exec_command, Listen, SidecarProcess};
    let bin = switchyard_e2e::binary("switchyard-tainttoleration");
    let cmd = exec_command(&bin.display().to_string(), args);
    let listen = Listen::Unix(switchyard_e2e::sidecar_socket(socket_name));
    SidecarProcess::start(&cmd, listen, Duration::from_secs(20)).unwrap_or_else(|e| panic!("{e}"))
}

/// The workload in process and with TaintToleration in its sidecar (started with the
/// flags `args`): both reports, and the sidecar's stats. Placements must be equal.
fn in_process_and_remote(
    workload: &str,
    args: &[&str],
) -> (simulate::Report, switchyard::simulate::report::RemoteReport) {
    let in_process = run(workload, |_| {});
    let sidecar = start_tainttoleration(&format!("lookahead-{}", workload.to_lowercase()), args);
    let remote = run(workload, |c| {
        c.rename_plugin("TaintToleration", "RemoteTaintToleration");
        let mut ep =
            switchyard::remote::EndpointConfig::new(0, &sidecar.endpoint).expect("endpoint");
        ep.timeout = Duration::from_secs(5);
        c.remote_plugins.push(ep);
    });
    drop(sidecar);
    assert!(in_process.invariants.ok && remote.invariants.ok);
    let [ep] = &remote.remote[..] else {
        panic!("one sidecar: {:?}", remote.remote);
    };
    assert_eq!(ep.errors, 0, "{ep:?}");
    // Every reply answers a call (a PreScore sent ahead of its Score included).
    assert_eq!(ep.stray_replies, 0, "{ep:?}");
    eprintln!(
        "{workload}: lookahead used {}, dropped {}, {} calls for {} pods",
        ep.lookahead_hits, ep.lookahead_misses, ep.calls, remote.summary.bound
    );
    switchyard_e2e::assert_same_placements(
        "through the sidecar",
        &switchyard_e2e::placements(&in_process),
        &switchyard_e2e::placements(&remote),
    );
    let ep = ep.clone();
    (remote, ep)
}

/// The lookahead alone: the sidecar signs no pods, so no answer is reused.
const NO_SIGNATURE: &str = "--no-signature";

#[test]
fn lookahead_answers_are_used_and_change_no_placement() {
    let (remote, ep) = in_process_and_remote("3000Nodes", &[NO_SIGNATURE]);
    assert_eq!(remote.summary.bound, 460);
    // With 3000 nodes a pod checks 991 from where the previous one stopped, past the
    // nodes that one went through: most pods' answers were sent ahead and used.
    assert!(
        ep.lookahead_hits >= 200,
        "lookahead used {} times, dropped {} ({ep:?})",
        ep.lookahead_hits,
        ep.lookahead_misses
    );
    // Each pinned pod's first round covers its 12 nodes, not the lookahead's.
    assert!(
        ep.lookahead_misses >= 50,
        "lookahead dropped {} times ({ep:?})",
        ep.lookahead_misses
    );
}

/// On 6000 nodes several pods' rounds fit before they wrap around: their Filter calls
/// go to the sidecar in FilterBatch messages, and placements stay the in-process ones.
/// A sidecar that offers no capability (as one built before them) is called one pod
/// at a time, as before, with the same placements: the batches save round trips.
#[test]
fn several_pods_per_round_trip_change_no_placement() {
    let (remote, batched) = in_process_and_remote("6000Nodes", &[NO_SIGNATURE]);
    assert_eq!(remote.summary.bound, 660);
    assert!(
        batched.lookahead_hits >= 400 && batched.lookahead_misses >= 50,
        "answers used {} times, dropped {} ({batched:?})",
        batched.lookahead_hits,
        batched.lookahead_misses
    );
    let (remote, single) =
        in_process_and_remote("6000Nodes", &["--no-optional-capabilities", NO_SIGNATURE]);
    assert_eq!(remote.summary.bound, 660);
    assert!(single.lookahead_hits >= 300, "{single:?}");
    assert!(
        single.calls >= 660,
        "one message per pod without filter-batch: {single:?}"
    );
    assert!(
        batched.calls * 10 < single.calls * 8,
        "{} round trips with batches, {} without",
        batched.calls,
        single.calls
    );
}

/// Alike pods (KEP-5598 signatures): the sidecar signs tolerations, so pods with the
/// same tolerations are answered from earlier answers on unchanged nodes, and only
/// the first pods of each kind and the pinned ones' new nodes are called for. The
/// tainted, tolerating, intolerant and pinned pods of these clusters still land
/// exactly where the in-process plugin puts them.
#[test]
fn alike_pods_reuse_answers_and_change_no_placement() {
    for (workload, pods) in [("3000Nodes", 460), ("6000Nodes", 660)] {
        let (remote, ep) = in_process_and_remote(workload, &[]);
        assert_eq!(remote.summary.bound, pods);
        assert!(
            ep.alike_reused as usize >= pods,
            "{workload}: reused {} times for {pods} pods ({ep:?})",
            ep.alike_reused
        );
        assert!(
            (ep.calls as usize) * 4 < pods,
            "{workload}: {} calls for {pods} pods ({ep:?})",
            ep.calls
        );
    }
}

/// Without the lookahead (not node-local) each pod's PreScore goes out right ahead of
/// its batched Score, whose reply the scheduler reads; the PreScore's own reply is
/// owed and expected, never a stray, and placements stay the in-process ones.
#[test]
fn pre_score_sent_ahead_of_score_leaves_no_stray_reply() {
    let (remote, ep) = in_process_and_remote("3000Nodes", &["--no-lookahead"]);
    assert_eq!(remote.summary.bound, 460);
    assert_eq!(ep.lookahead_hits, 0, "{ep:?}");
}

/// The contract side: a node-local plugin's calls may name a generation after their
/// cycle's start, and are answered from the replica at that generation.
#[test]
fn node_local_calls_may_name_a_later_generation() {
    let sidecar = switchyard_e2e::start_sidecar("switchyard-tainttoleration", "later-gen", &[]);
    let path = sidecar
        .endpoint
        .strip_prefix("unix://")
        .expect("a unix endpoint")
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let channel = switchyard_proto::connect_unix(
            tonic::transport::Endpoint::from_static("http://sidecar"),
            path.into(),
        )
        .await
        .expect("connect");
        let mut client = pb::plugin_client::PluginClient::new(channel);
        let hs = client
            .handshake(pb::HandshakeRequest {
                protocol_versions: vec!["v1".into()],
                scheduler: "lookahead-test".into(),
                capabilities: Vec::new(),
            })
            .await
            .expect("handshake")
            .into_inner();
        assert!(hs.plugins.iter().all(|p| p.node_local), "{:?}", hs.plugins);

        let node = |id: u32, name: &str, taint: bool| pb::Node {
            id,
            name: name.into(),
            taints: if taint {
                vec![pb::Taint {
                    key: "dedicated".into(),
                    value: "gpu".into(),
                    effect: "NoSchedule".into(),
                }]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let replicate = |generation, kind| pb::ReplicateRequest {
            generation,
            kind: Some(kind),
            ack: generation == 3,
            more: Vec::new(),
        };
        use pb::replicate_request::Kind;
        // 1: two clean nodes. 2: the cycle. 3: node b tainted after the cycle began.
        let msgs = vec![
            replicate(
                1,
                Kind::Delta(pb::SnapshotDelta {
                    full: true,
                    upsert_nodes: vec![node(1, "a", false), node(2, "b", false)],
                    ..Default::default()
                }),
            ),
            replicate(
                2,
                Kind::CycleStart(pb::CycleStart {
                    cycle: 5,
                    pod: Some(pb::Pod {
                        uid: "p".into(),
                        name: "p".into(),
                        namespace: "default".into(),
                        ..Default::default()
                    }),
                    profile: "default-scheduler".into(),
                }),
            ),
            replicate(
                3,
                Kind::Delta(pb::SnapshotDelta {
                    upsert_nodes: vec![node(2, "b", true)],
                    ..Default::default()
                }),
            ),
        ];
        let mut acks = client
            .replicate(tokio_stream::iter(msgs))
            .await
            .expect("replicate")
            .into_inner();
        let ack = acks.message().await.expect("ack").expect("an ack");
        assert_eq!(ack.applied_generation, 3);

        let filter = |request_id, generation| pb::FilterRequest {
            request_id,
            plugin: "RemoteTaintToleration".into(),
            cycle: 5,
            generation,
            nodes: vec![1, 2],
            ..Default::default()
        };
        let mut replies = client
            .filter(tokio_stream::iter(vec![filter(1, 3), filter(2, 1)]))
            .await
            .expect("filter")
            .into_inner();
        // Generation 3, after the cycle's start: answered at 3, where b is tainted.
        let r = replies.message().await.unwrap().unwrap();
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!((r.request_id, r.generation, r.evaluated), (1, 3, 2));
        let failed: Vec<u32> = r.failures.iter().map(|f| f.index).collect();
        assert_eq!(failed, [1], "{:?}", r.failures);
        // Generation 1, before the cycle began: refused.
        let r = replies.message().await.unwrap().unwrap();
        let e = r.error.expect("an error for a generation before the cycle");
        assert!(
            e.reasons.join(" ").contains("started at generation 2"),
            "{e:?}"
        );
    });
}
