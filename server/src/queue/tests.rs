use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::FakeClock;
use crate::framework::events::{EVENT_ASSIGNED_POD_ADD, EVENT_NODE_ADD};
use crate::testing::{default_framework, node, pod};

fn queue() -> (SchedulingQueue, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let mut profiles = HashMap::new();
    profiles.insert(Arc::from("default-scheduler"), default_framework());
    let q = SchedulingQueue::new(
        profiles,
        clock.clone(),
        Duration::from_secs(1),
        Duration::from_secs(10),
    );
    (q, clock)
}

fn rejected_by(mut p: QueuedPodInfo, plugin: &str) -> QueuedPodInfo {
    p.unschedulable_plugins = HashSet::from([crate::framework::PluginName::new(plugin)]);
    p
}

#[test]
fn pops_by_priority_then_arrival() {
    let (q, clock) = queue();
    q.add(pod("low").priority(1).build());
    clock.step(Duration::from_millis(1));
    q.add(pod("high").priority(9).build());
    clock.step(Duration::from_millis(1));
    q.add(pod("low2").priority(1).build());
    let order: Vec<String> = std::iter::from_fn(|| q.try_pop())
        .map(|p| p.pod.name.to_string())
        .collect();
    assert_eq!(order, ["high", "low", "low2"]);
}

#[test]
fn gated_pods_wait_until_their_gates_go() {
    let (q, _) = queue();
    let gated = pod("g").gate("example.com/quota").build();
    assert_eq!(q.add(gated.clone()), Placement::Unschedulable);
    assert!(q.try_pop().is_none());
    assert_eq!(q.pending().gated, 1);
    // An unrelated update keeps it gated.
    let relabelled = pod("g").gate("example.com/quota").label("a", "b").build();
    q.update(&gated, relabelled.clone(), |_| false);
    assert!(q.try_pop().is_none());
    // A cluster event never moves a gated pod.
    q.move_all_to_active_or_backoff(
        EVENT_NODE_ADD,
        None,
        Some(EventObject::Node(node("n").build())),
        None,
    );
    assert!(q.try_pop().is_none());
    let ungated = pod("g").label("a", "b").build();
    q.update(&relabelled, ungated, |_| false);
    assert_eq!(
        q.try_pop().map(|p| p.pod.name.to_string()),
        Some("g".into())
    );
}

/// The event thread checks that a pod is not assumed, then updates the queue; the
/// pod's cycle may assume it and finish with it (`done`) in between. The queue asks
/// again under its lock, so the pod is not queued a second time.
#[test]
fn an_update_racing_the_pods_cycle_does_not_queue_it_again() {
    let (q, _) = queue();
    let p = pod("p").build();
    q.add(p.clone());
    let popped = q.try_pop().expect("queued");
    assert_eq!(popped.pod.name.as_ref(), "p");
    // The cycle assumed the pod and is done with it; its binding is under way.
    q.done(&popped.pod.uid);
    let nominated = pod("p").nominated("n1").build();
    q.update(&p, nominated.clone(), |uid| uid == p.uid.as_ref());
    assert!(q.try_pop().is_none(), "an assumed pod is not queued again");
    assert_eq!(q.pending().active, 0);
    // A pod the cache does not hold is queued by its update, as upstream's `Update` does.
    q.update(&p, nominated, |_| false);
    assert_eq!(
        q.try_pop().map(|p| p.pod.name.to_string()),
        Some("p".into())
    );
}

#[test]
fn unschedulable_pods_move_only_on_events_their_plugins_registered() {
    let (q, clock) = queue();
    q.add(pod("p").cpu(8000).build());
    let p = q.try_pop().unwrap();
    assert_eq!(
        q.add_unschedulable_if_not_present(rejected_by(p, "NodeResourcesFit")),
        Placement::Unschedulable
    );
    // A pod being bound elsewhere does not free resources: NodeResourcesFit ignores it.
    q.move_all_to_active_or_backoff(
        EVENT_ASSIGNED_POD_ADD,
        None,
        Some(EventObject::Pod(pod("x").node("n").build())),
        None,
    );
    assert_eq!(q.pending().unschedulable, 1);
    // A node too small for the pod does not help either (queueing hint).
    let small = node("small").cpu(1000).build();
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, Some(EventObject::Node(small)), None);
    assert_eq!(q.pending().unschedulable, 1);
    // A big enough node does; the pod waits out its backoff first.
    let big = node("big").cpu(16000).build();
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, None, Some(EventObject::Node(big)), None);
    let pc = q.pending();
    assert_eq!((pc.unschedulable, pc.backoff), (0, 1));
    // activeQ is empty, so the backing-off pod is popped early (PopFromBackoffQ).
    clock.step(Duration::from_millis(10));
    assert_eq!(q.try_pop().map(|p| p.attempts), Some(2));
}

#[test]
fn events_during_an_attempt_are_replayed_when_it_fails() {
    let (q, _) = queue();
    q.add(pod("p").cpu(8000).build());
    let p = q.try_pop().unwrap();
    // While the pod is being scheduled, a big node arrives.
    q.move_all_to_active_or_backoff(
        EVENT_NODE_ADD,
        None,
        Some(EventObject::Node(node("big").cpu(16000).build())),
        None,
    );
    let placement = q.add_unschedulable_if_not_present(rejected_by(p, "NodeResourcesFit"));
    assert_eq!(placement, Placement::Backoff);
}

#[test]
fn backoff_doubles_up_to_the_cap_and_errors_back_off_too() {
    let (q, _) = queue();
    let secs: Vec<u64> = (1..=6).map(|c| q.backoff_duration(c).as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
    q.add(pod("e").build());
    let p = q.try_pop().unwrap();
    // No plugins: an error. It goes to the error backoff heap, not popped early.
    assert_eq!(q.add_unschedulable_if_not_present(p), Placement::Backoff);
    assert!(q.try_pop().is_none());
}

#[test]
fn retries_after_errors_are_counted_while_they_run() {
    let (q, clock) = queue();
    q.add(pod("e").build());
    q.add(pod("fresh").build());
    let p = q.try_pop().unwrap();
    assert_eq!(q.errored_retrying(), 0, "a first attempt is no retry");
    q.add_unschedulable_if_not_present(p);
    assert_eq!(q.pending().errored, 1);
    // The fresh pod's attempt is no retry after an error.
    let fresh = q.try_pop().unwrap();
    assert_eq!(q.errored_retrying(), 0);
    q.done(&fresh.pod.uid);
    clock.step(Duration::from_secs(2));
    let p = q.try_pop().unwrap();
    let n = q.pending();
    assert_eq!((n.in_flight, q.errored_retrying(), n.errored), (1, 1, 0));
    q.done(&p.pod.uid);
    assert_eq!(q.errored_retrying(), 0);
}

#[test]
fn leftover_unschedulable_pods_are_retried_after_five_minutes() {
    let (q, clock) = queue();
    q.add(pod("p").cpu(8000).build());
    let p = q.try_pop().unwrap();
    q.add_unschedulable_if_not_present(rejected_by(p, "NodeResourcesFit"));
    clock.step(Duration::from_secs(299));
    q.flush_unschedulable_leftover();
    assert_eq!(q.pending().unschedulable, 1);
    clock.step(Duration::from_secs(2));
    q.flush_unschedulable_leftover();
    assert_eq!(q.pending().unschedulable, 0);
    assert!(q.try_pop().is_some());
}

#[test]
fn deleting_a_pod_removes_it_everywhere() {
    let (q, _) = queue();
    let a = pod("a").build();
    q.add(a.clone());
    q.set_nominated(a.clone(), Some("n1".into()));
    q.delete(&a);
    assert!(q.try_pop().is_none());
    assert!(q.nominated_pods().is_empty());
}
