//! Gang bookkeeping: which group a pod belongs to, how many members the group needs,
//! the members known so far, and the groups denied recently. The SDK glue in
//! `plugin.rs` feeds it the replica's pods and the waiting pods and acts on its
//! answers, so every decision here is testable without a scheduler.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use switchyard_plugin_sdk::{Pod, Status};

use crate::podgroup::PodGroup;

/// The label that makes a pod a member of a group (upstream `PodGroupLabel`).
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// minMember for a group no PodGroup manifest names.
pub const MIN_MEMBER_ANNOTATION: &str = "scheduling.x-k8s.io/min-member";

/// The group key `namespace/name` of a gang pod; `None` for every other pod.
pub fn group_key(pod: &Pod) -> Option<String> {
    let name = pod.labels.get(POD_GROUP_LABEL).filter(|n| !n.is_empty())?;
    let ns = if pod.namespace.is_empty() {
        "default"
    } else {
        &pod.namespace
    };
    Some(format!("{ns}/{name}"))
}

/// Succeeded and Failed pods no longer count as members (upstream lists pods with a
/// field selector excluding them).
fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.phase.as_str(), "Succeeded" | "Failed")
}

/// What a group needs before its pods may bind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub min_member: u32,
    /// How long members wait at Permit for the rest.
    pub timeout: Duration,
}

/// What Permit decided for a pod.
#[derive(Debug, PartialEq, Eq)]
pub enum PermitDecision {
    /// Not a gang pod.
    NotGang,
    /// The group is complete: the pod may bind, and so may these waiting siblings.
    Allow(Vec<String>),
    /// Too few members are placed: wait this long for the rest.
    Wait(Duration),
    Reject(Status),
}

/// A Wait answered this close to its end is treated as over: an Allow sent now could
/// reach the scheduler after its timer rejected the pod.
const EXPIRY_MARGIN: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Book {
    /// Gang pods seen at PreEnqueue or PreFilter, by UID: their group key. Pending pods
    /// are not in the replica, so this is the only way to know they exist.
    seen: HashMap<String, String>,
    /// The same pods by group key.
    members: HashMap<String, HashSet<String>>,
    /// Groups denied after a failure, until the instant.
    denied: HashMap<String, Instant>,
    /// The attempt whose Unreserve already ran, per pod UID.
    unreserved: HashMap<String, u64>,
    /// Pods this plugin told to wait, with the end of their wait. The scheduler does
    /// not tell the sidecar about a timeout: a timed-out pod stays in the SDK's
    /// waiting list and (assumed) in the replica until its Unreserve, which can come
    /// after a sibling's Permit. Its deadline says it is gone.
    waiting: HashMap<String, Instant>,
    /// Pods whose attempt failed (unreserved, or rejected by this plugin) and that
    /// have not started a new one: the replica may still show them assumed for a while.
    failed: HashSet<String>,
    /// When each group's first member was enqueued: the group's place in the queue.
    group_since: HashMap<String, Instant>,
    /// When each pod in no group was first keyed (upstream's InitialAttemptTimestamp:
    /// an update does not move the pod back). Bounded: forgotten all at once past
    /// `MAX_DATED_PODS`, so the same pod gets the same key until then.
    pod_since: HashMap<String, Instant>,
}

/// Pods in no group whose first enqueue is remembered.
const MAX_DATED_PODS: usize = 100_000;

impl Book {
    fn forget(&mut self, uid: &str) {
        if let Some(old) = self.seen.remove(uid) {
            if let Some(m) = self.members.get_mut(&old) {
                m.remove(uid);
                if m.is_empty() {
                    self.members.remove(&old);
                }
            }
        }
    }

    fn observe(&mut self, pod: &Pod) {
        match group_key(pod).filter(|_| !is_terminal(pod)) {
            Some(key) if self.seen.get(&pod.uid) == Some(&key) => {}
            Some(key) => {
                self.forget(&pod.uid);
                self.members
                    .entry(key.clone())
                    .or_default()
                    .insert(pod.uid.clone());
                self.seen.insert(pod.uid.clone(), key);
            }
            None => self.forget(&pod.uid),
        }
    }

    /// A new attempt of the pod: whatever happened to the last one is over.
    fn attempt(&mut self, uid: &str) {
        self.failed.remove(uid);
        self.waiting.remove(uid);
    }

    /// The pod's attempt failed: it no longer counts as placed.
    fn fail(&mut self, uid: &str) {
        self.waiting.remove(uid);
        self.failed.insert(uid.to_string());
    }

    /// Whether a placed or waiting pod still holds its place at `now`.
    fn holds_place(&self, uid: &str, now: Instant) -> bool {
        !self.failed.contains(uid)
            && self
                .waiting
                .get(uid)
                .is_none_or(|&end| end > now + EXPIRY_MARGIN)
    }

    /// Whether `key` is denied at `now` (dropping an expired denial).
    fn is_denied(&mut self, key: &str, now: Instant) -> bool {
        match self.denied.get(key) {
            Some(&until) if until > now => true,
            Some(_) => {
                self.denied.remove(key);
                false
            }
            None => false,
        }
    }
}

/// The plugin's knowledge of groups. One mutex: every operation is short and none
/// calls out while holding it.
pub struct Gangs {
    pod_groups: HashMap<String, PodGroup>,
    default_timeout: Duration,
    denied_backoff: Duration,
    book: Mutex<Book>,
    /// Zero for the queue-order timestamps in sort keys.
    origin: Instant,
}

impl Gangs {
    pub fn new(
        pod_groups: HashMap<String, PodGroup>,
        default_timeout: Duration,
        denied_backoff: Duration,
    ) -> Self {
        Gangs {
            pod_groups,
            default_timeout,
            denied_backoff,
            book: Mutex::new(Book::default()),
            origin: Instant::now(),
        }
    }

    /// QueueSort, upstream's `Less` as a key: higher priority first, then the older
    /// group (or pod, for a pod in no group), then the group's (or pod's)
    /// `namespace/name`. Members of one group share everything but their name, so a
    /// gang leaves the queue together instead of interleaved with other pods.
    ///
    /// Upstream dates a group by its PodGroup's creationTimestamp; the sidecar has no
    /// API server, so a group is dated by its first member's enqueue. A pod in no group
    /// is dated by its first enqueue, as upstream's InitialAttemptTimestamp: the same
    /// pod keeps its key when it is updated or keyed again.
    pub fn sort_key(&self, pod: &Pod, now: Instant) -> Vec<u8> {
        let group = group_key(pod);
        let since = match &group {
            Some(k) => *self.book().group_since.entry(k.clone()).or_insert(now),
            None => {
                let mut book = self.book();
                if book.pod_since.len() >= MAX_DATED_PODS && !book.pod_since.contains_key(&pod.uid)
                {
                    book.pod_since.clear();
                }
                *book.pod_since.entry(pod.uid.clone()).or_insert(now)
            }
        };
        let name = group.unwrap_or_else(|| format!("{}/{}", pod.namespace, pod.name));
        let mut key = Vec::with_capacity(12 + name.len());
        // Higher priority sorts first: i32::MAX - priority is 0 for the highest.
        key.extend_from_slice(&((i32::MAX as i64 - pod.priority as i64) as u32).to_be_bytes());
        let micros = since.saturating_duration_since(self.origin).as_micros();
        key.extend_from_slice(&(micros.min(u64::MAX as u128) as u64).to_be_bytes());
        key.extend_from_slice(name.as_bytes());
        key
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // The book stays consistent across a panic elsewhere: each update is complete.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The group's minMember and timeout: from its PodGroup, else from the pod's
    /// annotation. The error is the status to answer with (UnschedulableAndUnresolvable:
    /// no node or preemption can fix a missing group).
    pub fn requirement(&self, key: &str, pod: &Pod) -> Result<Requirement, Status> {
        if let Some(pg) = self.pod_groups.get(key) {
            return Ok(Requirement {
                min_member: pg.min_member,
                timeout: pg.schedule_timeout.unwrap_or(self.default_timeout),
            });
        }
        match pod.annotations.get(MIN_MEMBER_ANNOTATION) {
            Some(v) => match v.trim().parse::<u32>() {
                Ok(min_member) => Ok(Requirement {
                    min_member,
                    timeout: self.default_timeout,
                }),
                Err(_) => Err(Status::unresolvable(format!(
                    "pod {}/{}: annotation {MIN_MEMBER_ANNOTATION}={v:?} is not a non-negative integer",
                    pod.namespace, pod.name
                ))),
            },
            None => Err(Status::unresolvable(format!("PodGroup {key} not found"))),
        }
    }

    /// PreEnqueue: remember a gang pod (or forget a pod that left its group).
    pub fn observe(&self, pod: &Pod) {
        let mut book = self.book();
        if group_key(pod).is_some() || book.seen.contains_key(&pod.uid) {
            book.observe(pod);
        }
    }

    /// PreFilter: rejects the pod while its group is denied or has fewer known members
    /// than minMember. `placed` are the replica's pods (bound or assumed).
    ///
    /// Both rejections are UnschedulableAndUnresolvable, as upstream has them since it
    /// stopped letting preemption evict pods for a group that cannot run anyway.
    pub fn pre_filter<'a>(
        &self,
        pod: &Pod,
        placed: impl IntoIterator<Item = &'a Arc<Pod>>,
        now: Instant,
    ) -> Status {
        let Some(key) = group_key(pod) else {
            return Status::success();
        };
        let req = match self.requirement(&key, pod) {
            Ok(r) => r,
            Err(s) => return s,
        };
        let mut book = self.book();
        // The pod being scheduled is a member, whether or not PreEnqueue saw it.
        book.observe(pod);
        book.attempt(&pod.uid);
        if book.is_denied(&key, now) {
            return Status::unresolvable(format!("podGroup {key} failed recently"));
        }
        let mut known: HashSet<&str> = book
            .members
            .get(&key)
            .map(|m| m.iter().map(String::as_str).collect())
            .unwrap_or_default();
        known.extend(
            placed
                .into_iter()
                .filter(|p| !is_terminal(p) && group_key(p).as_deref() == Some(key.as_str()))
                .map(|p| p.uid.as_str()),
        );
        known.insert(pod.uid.as_str());
        if known.len() < req.min_member as usize {
            return Status::unresolvable(format!(
                "pre-filter pod {} cannot find enough sibling pods, current pods number: {}, minMember of group: {}",
                pod.name,
                known.len(),
                req.min_member
            ));
        }
        Status::success()
    }

    /// Permit: the pod may bind once the group's placed members (bound or assumed in
    /// the replica, or waiting at Permit) plus itself reach minMember; then its waiting
    /// siblings may bind too. Otherwise it waits. Members whose attempt failed or whose
    /// wait ran out do not count, though the replica may still show them.
    pub fn permit<'a>(
        &self,
        pod: &Pod,
        placed: impl IntoIterator<Item = &'a Arc<Pod>>,
        waiting: &[Arc<Pod>],
        now: Instant,
    ) -> PermitDecision {
        let Some(key) = group_key(pod) else {
            return PermitDecision::NotGang;
        };
        let req = match self.requirement(&key, pod) {
            Ok(r) => r,
            // Upstream answers Unschedulable here ("PodGroup not found").
            Err(s) => return PermitDecision::Reject(Status::unschedulable(s.message())),
        };
        let mut book = self.book();
        book.attempt(&pod.uid);
        // The group failed after this pod passed PreFilter: its siblings were released,
        // so waiting would only hold the node until the timeout.
        if book.is_denied(&key, now) {
            return PermitDecision::Reject(Status::unschedulable(format!(
                "podGroup {key} failed recently"
            )));
        }
        let live = |p: &&Arc<Pod>| {
            p.uid != pod.uid
                && !is_terminal(p)
                && group_key(p).as_deref() == Some(key.as_str())
                && book.holds_place(&p.uid, now)
        };
        let siblings: Vec<String> = waiting.iter().filter(live).map(|p| p.uid.clone()).collect();
        // A waiting pod is assumed, so it is normally in the replica too: count UIDs once.
        let mut assigned: HashSet<&str> = siblings.iter().map(String::as_str).collect();
        assigned.extend(
            placed
                .into_iter()
                .filter(live)
                .filter(|p| !p.node_name.is_empty())
                .map(|p| p.uid.as_str()),
        );
        if assigned.len() + 1 >= req.min_member as usize {
            for uid in &siblings {
                book.waiting.remove(uid);
            }
            PermitDecision::Allow(siblings)
        } else {
            book.waiting.insert(pod.uid.clone(), now + req.timeout);
            PermitDecision::Wait(req.timeout)
        }
    }

    /// Unreserve of attempt `cycle`: the group failed (a member was rejected, timed out
    /// or failed after Reserve), so its waiting members are released (the UIDs
    /// returned, to reject), none of them counts as placed any more, and the group is
    /// denied for the backoff. A repeated call for the same attempt changes nothing, and
    /// one while the denial lasts does not extend it.
    pub fn unreserve(
        &self,
        pod: &Pod,
        cycle: u64,
        waiting: &[Arc<Pod>],
        now: Instant,
    ) -> Vec<String> {
        let Some(key) = group_key(pod) else {
            return Vec::new();
        };
        if self.requirement(&key, pod).is_err() {
            return Vec::new();
        }
        let mut book = self.book();
        if book.unreserved.get(&pod.uid) == Some(&cycle) {
            return Vec::new();
        }
        book.unreserved.insert(pod.uid.clone(), cycle);
        book.fail(&pod.uid);
        if !self.denied_backoff.is_zero() && !book.is_denied(&key, now) {
            book.denied.insert(key.clone(), now + self.denied_backoff);
        }
        let reject: Vec<String> = waiting
            .iter()
            .filter(|p| p.uid != pod.uid && group_key(p).as_deref() == Some(key.as_str()))
            .map(|p| p.uid.clone())
            .collect();
        for uid in &reject {
            book.fail(uid);
        }
        reject
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);
    const BACKOFF: Duration = Duration::from_secs(3);

    fn pod(uid: &str, group: Option<&str>, node: &str) -> Arc<Pod> {
        let mut p = Pod {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("pod-{uid}"),
            node_name: node.into(),
            ..Default::default()
        };
        if let Some(g) = group {
            p.labels.insert(POD_GROUP_LABEL.into(), g.into());
        }
        Arc::new(p)
    }

    fn annotated(uid: &str, group: &str, min: &str) -> Arc<Pod> {
        let mut p = (*pod(uid, Some(group), "")).clone();
        p.annotations
            .insert(MIN_MEMBER_ANNOTATION.into(), min.into());
        Arc::new(p)
    }

    #[test]
    fn a_pod_in_no_group_keeps_its_first_enqueue_date() {
        let g = gangs();
        let t0 = Instant::now();
        let first = g.sort_key(&pod("s", None, ""), t0);
        let again = g.sort_key(&pod("s", None, ""), t0 + Duration::from_secs(3));
        assert_eq!(
            first, again,
            "keyed again (an update), the pod keeps its place"
        );
        let other = g.sort_key(&pod("t", None, ""), t0 + Duration::from_secs(1));
        assert!(first < other, "the pod enqueued first goes first");
    }

    #[test]
    fn sort_key_orders_by_priority_then_group_age_then_name() {
        let g = gangs();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let with_prio = |p: Arc<Pod>, prio: i32| {
            let mut p = (*p).clone();
            p.priority = prio;
            p
        };
        // The group is dated by its first member; a later member shares the date.
        let a1 = g.sort_key(&pod("a1", Some("job"), ""), t0);
        let solo = g.sort_key(&pod("s", None, ""), t1);
        let a2 = g.sort_key(&pod("a2", Some("job"), ""), t1 + Duration::from_secs(5));
        assert_eq!(a1, a2, "members of one group share a key");
        assert!(a1 < solo, "the older group goes first");
        let urgent = g.sort_key(&with_prio(pod("u", None, ""), 100), t1);
        assert!(urgent < a1, "higher priority first");
        let low = g.sort_key(&with_prio(pod("l", None, ""), -5), t0);
        assert!(solo < low, "negative priority after zero");
        // Same priority and date: by name.
        let b = g.sort_key(&pod("x", Some("b-job"), ""), t1);
        let c = g.sort_key(&pod("y", Some("c-job"), ""), t1);
        assert!(b < c);
    }

    fn gangs() -> Gangs {
        let groups = [
            PodGroup {
                namespace: "ns".into(),
                name: "job".into(),
                min_member: 3,
                schedule_timeout: None,
            },
            PodGroup {
                namespace: "ns".into(),
                name: "slow".into(),
                min_member: 2,
                schedule_timeout: Some(Duration::from_secs(60)),
            },
        ]
        .into_iter()
        .map(|g| (g.key(), g))
        .collect();
        Gangs::new(groups, TIMEOUT, BACKOFF)
    }

    #[test]
    fn min_member_comes_from_the_pod_group_before_the_annotation() {
        let g = gangs();
        // The PodGroup wins over the annotation.
        let p = annotated("a", "job", "7");
        assert_eq!(
            g.requirement("ns/job", &p),
            Ok(Requirement {
                min_member: 3,
                timeout: TIMEOUT
            })
        );
        assert_eq!(
            g.requirement("ns/slow", &pod("b", Some("slow"), "")),
            Ok(Requirement {
                min_member: 2,
                timeout: Duration::from_secs(60)
            })
        );
        // No PodGroup: the annotation.
        let p = annotated("c", "adhoc", " 4 ");
        assert_eq!(g.requirement("ns/adhoc", &p).map(|r| r.min_member), Ok(4));
        let s = g
            .requirement("ns/adhoc", &annotated("d", "adhoc", "four"))
            .unwrap_err();
        assert_eq!(
            s.code,
            switchyard_plugin_sdk::Code::UnschedulableAndUnresolvable
        );
        assert!(
            s.message().contains(MIN_MEMBER_ANNOTATION),
            "{}",
            s.message()
        );
        // Neither.
        let s = g.pre_filter(&pod("e", Some("ghost"), ""), [], Instant::now());
        assert_eq!(
            s.code,
            switchyard_plugin_sdk::Code::UnschedulableAndUnresolvable
        );
        assert_eq!(s.message(), "PodGroup ns/ghost not found");
    }

    #[test]
    fn pods_without_the_label_pass_everywhere() {
        let g = gangs();
        let now = Instant::now();
        let p = pod("x", None, "");
        assert!(g.pre_filter(&p, [], now).is_success());
        assert_eq!(g.permit(&p, [], &[], now), PermitDecision::NotGang);
        assert!(g
            .unreserve(&p, 1, &[pod("w", Some("job"), "n")], now)
            .is_empty());
        g.observe(&p);
        assert!(g.book().seen.is_empty());
    }

    #[test]
    fn pre_filter_counts_seen_and_placed_members() {
        let g = gangs();
        let now = Instant::now();
        let a = pod("a", Some("job"), "");
        g.observe(&a);
        let s = g.pre_filter(&a, [], now);
        assert_eq!(
            s.code,
            switchyard_plugin_sdk::Code::UnschedulableAndUnresolvable
        );
        assert_eq!(
            s.message(),
            "pre-filter pod pod-a cannot find enough sibling pods, current pods number: 1, minMember of group: 3"
        );
        // A bound member in the replica that PreEnqueue never saw counts; pods of other
        // groups, other namespaces and finished pods do not.
        let bound = pod("b", Some("job"), "n1");
        let other = pod("o", Some("slow"), "n1");
        let mut elsewhere = (*pod("e", Some("job"), "n1")).clone();
        elsewhere.namespace = "other".into();
        let mut done = (*pod("d", Some("job"), "n1")).clone();
        done.phase = "Succeeded".into();
        let placed = [bound.clone(), other, Arc::new(elsewhere), Arc::new(done)];
        let s = g.pre_filter(&a, &placed, now);
        assert!(
            s.message().contains("current pods number: 2"),
            "{}",
            s.message()
        );
        // A pod seen at PreEnqueue and also placed counts once.
        g.observe(&bound);
        let s = g.pre_filter(&a, &placed, now);
        assert!(
            s.message().contains("current pods number: 2"),
            "{}",
            s.message()
        );
        // A third sibling arrives: enough.
        g.observe(&pod("c", Some("job"), ""));
        assert!(g.pre_filter(&a, &placed, now).is_success());
        // A pod relabelled out of the group stops counting.
        g.observe(&pod("c", None, ""));
        assert!(!g.pre_filter(&a, &placed, now).is_success());
    }

    #[test]
    fn pre_filter_counts_the_pod_itself_without_pre_enqueue() {
        let g = gangs();
        let p = annotated("solo", "adhoc", "1");
        assert!(g.pre_filter(&p, [], Instant::now()).is_success());
        assert_eq!(
            g.book().seen.get("solo").map(String::as_str),
            Some("ns/adhoc")
        );
    }

    #[test]
    fn permit_waits_then_allows_every_waiting_sibling() {
        let g = gangs();
        let now = Instant::now();
        let a = pod("a", Some("job"), "n1");
        let b = pod("b", Some("job"), "n2");
        let c = pod("c", Some("job"), "n1");
        let stranger = pod("s", Some("slow"), "n1");
        // First member: nothing placed yet.
        assert_eq!(g.permit(&a, [], &[], now), PermitDecision::Wait(TIMEOUT));
        // Second: a is assumed (in the replica) and waiting; still short of 3.
        assert_eq!(
            g.permit(&b, [&a, &stranger], std::slice::from_ref(&a), now),
            PermitDecision::Wait(TIMEOUT)
        );
        // Third: a and b placed and waiting; the pod itself in the replica is not
        // counted twice. Allows a and b, not the other group's waiting pod.
        let waiting = [a.clone(), b.clone(), stranger.clone()];
        assert_eq!(
            g.permit(&c, [&a, &b, &c, &stranger], &waiting, now),
            PermitDecision::Allow(vec!["a".into(), "b".into()])
        );
        // Waiting siblings count even if the replica lags behind.
        assert_eq!(
            g.permit(&c, [], &waiting, now),
            PermitDecision::Allow(vec!["a".into(), "b".into()])
        );
        // The group's own timeout.
        let s1 = pod("s1", Some("slow"), "n1");
        assert_eq!(
            g.permit(&s1, [], &[], now),
            PermitDecision::Wait(Duration::from_secs(60))
        );
        // Bound members (no longer waiting) count too; a pending pod in the list does not.
        let pending = pod("p", Some("job"), "");
        assert_eq!(
            g.permit(&c, [&a, &pending], &[], now),
            PermitDecision::Wait(TIMEOUT)
        );
        assert_eq!(
            g.permit(&c, [&a, &b], &[], now),
            PermitDecision::Allow(Vec::new())
        );
        // Unknown group.
        match g.permit(&pod("g", Some("ghost"), "n1"), [], &[], now) {
            PermitDecision::Reject(s) => {
                assert_eq!(s.code, switchyard_plugin_sdk::Code::Unschedulable);
                assert_eq!(s.message(), "PodGroup ns/ghost not found");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unreserve_rejects_waiting_siblings_once_and_denies_the_group() {
        let g = gangs();
        let now = Instant::now();
        let a = pod("a", Some("job"), "n1");
        let b = pod("b", Some("job"), "n1");
        let other = pod("o", Some("slow"), "n1");
        let waiting = [a.clone(), b.clone(), other];
        // The pod itself may still be listed as waiting (a timeout): not rejected again.
        assert_eq!(g.unreserve(&a, 7, &waiting, now), vec!["b".to_string()]);
        // The same attempt again: nothing.
        assert!(g.unreserve(&a, 7, &waiting, now).is_empty());
        let until = g.book().denied["ns/job"];
        assert_eq!(until, now + BACKOFF);
        // A sibling's Unreserve during the denial does not extend it.
        g.unreserve(&b, 8, &[], now + Duration::from_secs(1));
        assert_eq!(g.book().denied["ns/job"], until);
        // Another pod of a group with no PodGroup and no annotation: ignored.
        assert!(g
            .unreserve(&pod("g", Some("ghost"), "n1"), 1, &waiting, now)
            .is_empty());
    }

    #[test]
    fn denied_groups_are_rejected_at_pre_filter_until_the_backoff_ends() {
        let g = gangs();
        let now = Instant::now();
        let members: Vec<Arc<Pod>> = ["a", "b", "c"]
            .iter()
            .map(|u| pod(u, Some("job"), ""))
            .collect();
        for p in &members {
            g.observe(p);
        }
        assert!(g.pre_filter(&members[0], [], now).is_success());
        g.unreserve(&members[0], 1, &[], now);
        let s = g.pre_filter(&members[1], [], now + Duration::from_secs(1));
        assert_eq!(
            s.code,
            switchyard_plugin_sdk::Code::UnschedulableAndUnresolvable
        );
        assert_eq!(s.message(), "podGroup ns/job failed recently");
        // Other groups are not affected.
        assert!(g
            .pre_filter(&annotated("x", "adhoc", "1"), [], now)
            .is_success());
        // After the backoff the group is tried again, and the expired entry is dropped.
        assert!(g.pre_filter(&members[1], [], now + BACKOFF).is_success());
        assert!(g.book().denied.is_empty());
        // A later failure denies it again.
        g.unreserve(&members[1], 2, &[], now + BACKOFF);
        assert!(!g.pre_filter(&members[2], [], now + BACKOFF).is_success());
    }

    #[test]
    fn zero_backoff_never_denies() {
        let g = Gangs::new(gangs().pod_groups, TIMEOUT, Duration::ZERO);
        let now = Instant::now();
        let members: Vec<Arc<Pod>> = ["a", "b", "c"]
            .iter()
            .map(|u| pod(u, Some("job"), ""))
            .collect();
        for p in &members {
            g.observe(p);
        }
        g.unreserve(&members[0], 1, &[], now);
        assert!(g.pre_filter(&members[1], [], now).is_success());
    }

    #[test]
    fn members_whose_wait_ran_out_do_not_count() {
        let g = gangs();
        let t0 = Instant::now();
        let a = pod("a", Some("job"), "n1");
        let b = pod("b", Some("job"), "n1");
        let c = pod("c", Some("job"), "n2");
        assert_eq!(g.permit(&a, [], &[], t0), PermitDecision::Wait(TIMEOUT));
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            g.permit(&b, [&a], std::slice::from_ref(&a), later),
            PermitDecision::Wait(TIMEOUT)
        );
        // At t0 + 10 s the scheduler has timed a out, but its Unreserve has not come
        // yet: the replica and the SDK still list it. Only b holds its place.
        let waiting = [a.clone(), b.clone()];
        assert_eq!(
            g.permit(&c, [&a, &b], &waiting, t0 + TIMEOUT),
            PermitDecision::Wait(TIMEOUT)
        );
        // Just before a's end, within the margin, it no longer counts either.
        let g = gangs();
        g.permit(&a, [], &[], t0);
        g.permit(&b, [&a], std::slice::from_ref(&a), t0);
        let edge = t0 + TIMEOUT - EXPIRY_MARGIN / 2;
        assert_eq!(
            g.permit(&c, [&a, &b], &waiting, edge),
            PermitDecision::Wait(TIMEOUT)
        );
        // Well before it, all three are there.
        let g = gangs();
        g.permit(&a, [], &[], t0);
        g.permit(&b, [&a], std::slice::from_ref(&a), t0);
        assert_eq!(
            g.permit(&c, [&a, &b], &waiting, later),
            PermitDecision::Allow(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn released_members_do_not_count_until_they_try_again() {
        // No denial, to see the counting alone.
        let g = Gangs::new(gangs().pod_groups, TIMEOUT, Duration::ZERO);
        let now = Instant::now();
        let a = pod("a", Some("job"), "n1");
        let b = pod("b", Some("job"), "n1");
        let c = pod("c", Some("job"), "n2");
        g.permit(&a, [], &[], now);
        g.permit(&b, [&a], std::slice::from_ref(&a), now);
        // a fails (another plugin rejected it, say); Unreserve releases b.
        assert_eq!(
            g.unreserve(&a, 1, &[a.clone(), b.clone()], now),
            vec!["b".to_string()]
        );
        // The replica still shows both assumed; neither counts.
        assert_eq!(
            g.permit(&c, [&a, &b], &[], now),
            PermitDecision::Wait(TIMEOUT)
        );
        // a and b start new attempts (PreFilter, or Permit without it) and are placed
        // again: they count.
        assert!(g.pre_filter(&a, [&b, &c], now).is_success());
        assert_eq!(g.permit(&b, [&a], &[], now), PermitDecision::Wait(TIMEOUT));
        assert_eq!(
            g.permit(&c, [&a, &b], std::slice::from_ref(&b), now),
            PermitDecision::Allow(vec!["b".into()])
        );
    }

    #[test]
    fn permit_rejects_members_of_a_denied_group() {
        let g = gangs();
        let now = Instant::now();
        let a = pod("a", Some("job"), "n1");
        g.unreserve(&a, 1, &[], now);
        match g.permit(&pod("b", Some("job"), "n1"), [], &[], now) {
            PermitDecision::Reject(s) => {
                assert_eq!(s.code, switchyard_plugin_sdk::Code::Unschedulable);
                assert_eq!(s.message(), "podGroup ns/job failed recently");
            }
            other => panic!("{other:?}"),
        }
    }
}
