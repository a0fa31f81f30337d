//! Permit through the whole scheduler: a test plugin parks pods at Permit until enough
//! pods of their group are waiting, then allows them all from another pod's cycle
//! (the framework handle's waiting-pods map); a group that never fills up times out,
//! is unreserved, and its pods end unschedulable with the timeout as the reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use switchyard::cluster::manifest;
use switchyard::config::SchedulerConfig;
use switchyard::framework::events::{ActionType, ClusterEventWithHint, EventResource};
use switchyard::framework::interface::{PermitPlugin, Plugin, ReservePlugin};
use switchyard::framework::{Code, CycleState, Handle, Status};
use switchyard::model::Pod;
use switchyard::plugins::in_tree_registry;
use switchyard::simulate::{self, SimulateOptions};

const NAME: &str = "TestGang";
const MIN_MEMBERS: usize = 3;
const TIMEOUT: Duration = Duration::from_millis(300);

struct TestGang {
    handle: Arc<Handle>,
    unreserved: Arc<AtomicUsize>,
}

fn group(p: &Pod) -> Option<&str> {
    p.labels().get("group")
}

impl Plugin for TestGang {
    fn name(&self) -> &str {
        NAME
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    /// Only a new pod can complete a group: a rejected group waits for one (without
    /// this, every other group's requeue would retry it at once, forever).
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        Some(vec![ClusterEventWithHint::new(
            EventResource::Pod,
            ActionType::ADD,
        )])
    }
}

impl ReservePlugin for TestGang {
    fn reserve(&self, _s: &mut CycleState, _p: &Pod, _n: &str) -> Status {
        Status::success()
    }
    fn unreserve(&self, _s: &mut CycleState, _p: &Pod, _n: &str) {
        self.unreserved.fetch_add(1, Ordering::SeqCst);
    }
}

impl PermitPlugin for TestGang {
    fn permit(&self, _s: &mut CycleState, pod: &Pod, _n: &str) -> (Status, Duration) {
        let Some(g) = group(pod) else {
            return (Status::success(), Duration::ZERO);
        };
        let waiting: Vec<_> = self
            .handle
            .waiting_pods
            .list()
            .into_iter()
            .filter(|w| group(w.pod()) == Some(g))
            .collect();
        if waiting.len() + 1 >= MIN_MEMBERS {
            for w in waiting {
                w.allow(NAME);
            }
            return (Status::success(), Duration::ZERO);
        }
        (Status::code_only(Code::Wait), TIMEOUT)
    }
}

fn pods(group: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- {{kind: Pod, apiVersion: v1, metadata: {{name: {group}-{i}, labels: {{group: {group}}}}}, spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]}}}}\n"))
        .collect()
}

#[test]
fn waiting_pods_are_allowed_together_or_time_out_and_are_unreserved() {
    let text = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {{kind: Node, apiVersion: v1, metadata: {{name: node}}, status: {{allocatable: {{cpu: '4', memory: 8Gi, pods: '20'}}}}}}\n{}{}",
        pods("full", MIN_MEMBERS),
        pods("short", MIN_MEMBERS - 1)
    );
    let mut objects = Vec::new();
    manifest::parse_str(&text, "gang.yaml", &mut objects, &mut Default::default()).unwrap();
    let config = SchedulerConfig::from_yaml(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    multiPoint:\n      enabled: [{name: TestGang}]\n",
        "config",
    )
    .unwrap();
    let unreserved = Arc::new(AtomicUsize::new(0));
    let mut registry = in_tree_registry();
    let u = unreserved.clone();
    registry.register(
        NAME,
        Arc::new(move |_args, h: &Arc<Handle>| {
            Ok(Arc::new(TestGang {
                handle: h.clone(),
                unreserved: u.clone(),
            }) as Arc<dyn Plugin>)
        }),
    );
    let report = simulate::run(
        &SimulateOptions {
            objects,
            scheduler_config: Some(config),
            timeout: Duration::from_secs(60),
            ..Default::default()
        },
        &registry,
    )
    .unwrap();
    for p in &report.pods {
        if p.name.starts_with("full-") {
            assert_eq!(p.node.as_deref(), Some("node"), "{p:?}");
        } else {
            assert!(p.node.is_none(), "{p:?}");
            assert_eq!(
                p.reason.as_deref(),
                Some("0/1 nodes are available: 1 rejected due to timeout after waiting 300ms at plugin TestGang."),
            );
        }
    }
    // Each short-group attempt that timed out was unreserved.
    assert!(unreserved.load(Ordering::SeqCst) >= MIN_MEMBERS - 1);
    assert!(report.invariants.ok);
    assert_eq!(report.summary.bound, MIN_MEMBERS);
}
