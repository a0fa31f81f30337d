//! DefaultPreemption (PostFilter): when a pod fits nowhere, evict lower-priority pods
//! from the best node (see [`crate::preemption`]) and nominate that node for it.
//!
//! Victims are deleted off the scheduling thread (upstream's async preemption, on by
//! default since 1.33). Until the deletions are under way the preemptor is held back at
//! PreEnqueue so it cannot preempt a second time.

use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::client::{EventType, PodEvent, PodStatusUpdate};
use crate::framework::events::{ActionType, ClusterEventWithHint, EventResource, QueueingHint};
use crate::framework::interface::{
    NodeToStatus, NominatingInfo, Plugin, PostFilterContext, PostFilterPlugin, PostFilterResult,
    PreEnqueuePlugin,
};
use crate::framework::{Handle, PluginFactory, Status};
use crate::model::{Pod, Uid};
use crate::plugins::helper::decode_args;
use crate::preemption::{eligible_to_preempt, Evaluator, Outcome};
use crate::rand::SplitMix64;

pub const NAME: &str = "DefaultPreemption";
pub const MSG_WAITING: &str = "waiting for the preemption for this pod to be finished";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default = "ten")]
    min_candidate_nodes_percentage: i32,
    #[serde(default = "hundred")]
    min_candidate_nodes_absolute: i32,
}

fn ten() -> i32 {
    10
}
fn hundred() -> i32 {
    100
}

impl Default for Args {
    fn default() -> Self {
        Args {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

/// Preemptions under way: preemptor UID -> the last victim once its deletion started.
type Preempting = Arc<Mutex<FxHashMap<Uid, Option<Uid>>>>;

pub struct DefaultPreemption {
    handle: Arc<Handle>,
    percentage: i64,
    absolute: i64,
    rng: Mutex<SplitMix64>,
    preempting: Preempting,
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &str {
        NAME
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn events_to_register(&self) -> Option<Vec<ClusterEventWithHint>> {
        // Requeueing after victims go is left to the plugins that rejected the pod.
        Some(vec![ClusterEventWithHint::with_hint(
            EventResource::AssignedPod,
            ActionType::DELETE,
            |_, _, _| QueueingHint::QueueSkip,
        )])
    }
}

impl PreEnqueuePlugin for DefaultPreemption {
    /// Upstream `IsPodRunningPreemption`: held back while its victims' deletion has not
    /// started, or the last victim still runs untouched.
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let last = match self.preempting.lock() {
            Ok(m) => match m.get(&pod.uid) {
                None => return Status::success(),
                Some(last) => last.clone(),
            },
            Err(_) => return Status::success(),
        };
        let running = match last {
            None => true,
            Some(uid) => self
                .handle
                .services()
                .and_then(|s| s.pod(&uid))
                .is_some_and(|v| v.deletion_timestamp.is_none()),
        };
        if running {
            Status::unresolvable(MSG_WAITING)
        } else {
            Status::success()
        }
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        ctx: PostFilterContext<'_>,
        pod: &Arc<Pod>,
        statuses: &NodeToStatus,
    ) -> (Option<PostFilterResult>, Status) {
        if let Err(msg) = eligible_to_preempt(pod, ctx.snapshot, statuses) {
            return (None, Status::unschedulable(format!("preemption: {msg}")));
        }
        let offset = match self.rng.lock() {
            Ok(mut r) => r.next_u64(),
            Err(_) => 0,
        };
        let ev = Evaluator {
            framework: ctx.framework,
            snapshot: ctx.snapshot,
            nominated: ctx.nominated,
            min_candidate_nodes_percentage: self.percentage,
            min_candidate_nodes_absolute: self.absolute,
        };
        let span = if ctx.state.trace.sampled {
            tracing::info_span!(
                "preemption",
                candidates = tracing::field::Empty,
                node = tracing::field::Empty,
                victims = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let _in_span = span.enter();
        match ev.preempt(ctx.state, pod, statuses, offset) {
            Err(s) => (None, Status::error(format!("preemption: {}", s.message()))),
            Ok(Outcome::NoCandidates(msg)) => (
                Some(PostFilterResult {
                    nominating_info: NominatingInfo::Override(None),
                }),
                Status::unschedulable(format!("preemption: {msg}")),
            ),
            Ok(Outcome::Chosen(c)) => {
                if !span.is_disabled() {
                    let victims: Vec<String> = c.victims.iter().map(|v| v.key()).collect();
                    span.record("node", &*c.node);
                    span.record("victims", victims.join(",").as_str());
                }
                let lower_nominated: Vec<Arc<Pod>> = ctx
                    .nominated
                    .get(&c.node)
                    .map(|v| {
                        v.iter()
                            .filter(|p| p.priority < pod.priority())
                            .map(|p| p.pod.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                self.actuate(pod.clone(), c.node.clone(), c.victims, lower_nominated);
                (
                    Some(PostFilterResult {
                        nominating_info: NominatingInfo::Override(Some(c.node)),
                    }),
                    Status::success(),
                )
            }
        }
    }
}

impl DefaultPreemption {
    /// Deletes the victims in the background (upstream `prepareCandidateAsync`): first
    /// clears lower-priority nominations on the node, then evicts; a victim waiting at
    /// Permit is preempted in memory instead.
    fn actuate(
        &self,
        preemptor: Arc<Pod>,
        node: Arc<str>,
        victims: Vec<Arc<Pod>>,
        lower_nominated: Vec<Arc<Pod>>,
    ) {
        let Some(services) = self.handle.services() else {
            tracing::error!(pod = %preemptor.key(), "preemption outside a running scheduler: victims not evicted");
            return;
        };
        let to_evict: Vec<Arc<Pod>> = victims
            .iter()
            .filter(|v| v.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if to_evict.is_empty() {
            return;
        }
        services.record_preemption(victims.len());
        if let Ok(mut m) = self.preempting.lock() {
            m.insert(preemptor.uid.clone(), None);
        }
        let handle = self.handle.clone();
        let preempting = self.preempting.clone();
        let svc = services.clone();
        services.spawn(Box::pin(async move {
            let mut failed = false;
            for p in &lower_nominated {
                let update = PodStatusUpdate {
                    condition: None,
                    nominated_node_name: Some(None),
                };
                if let Err(e) = handle.client.update_pod_status(p, update).await {
                    tracing::warn!(pod = %p.key(), error = %e, "clearing nominated node");
                    failed = true;
                }
            }
            let last = to_evict.len() - 1;
            for (i, v) in to_evict.iter().enumerate() {
                if i == last {
                    if let Ok(mut m) = preempting.lock() {
                        m.insert(preemptor.uid.clone(), Some(v.uid.clone()));
                    }
                }
                if let Err(e) = evict(&handle, &preemptor, &node, v).await {
                    tracing::warn!(victim = %v.key(), error = %e, "evicting preemption victim");
                    failed = true;
                    break;
                }
            }
            if let Ok(mut m) = preempting.lock() {
                m.remove(&preemptor.uid);
            }
            // A pod stuck behind a failed preemption retries now.
            if failed {
                svc.activate(std::slice::from_ref(&preemptor));
            }
        }));
    }
}

/// Upstream `PreemptPod`: in memory for a pod waiting at Permit, else through the
/// backend (DisruptionTarget condition, then deletion), with a `Preempted` event.
async fn evict(
    handle: &Handle,
    preemptor: &Pod,
    node: &str,
    victim: &Arc<Pod>,
) -> Result<(), String> {
    let mut message = format!("Preempted by pod {} on node {}", preemptor.uid, node);
    let in_memory = handle
        .waiting_pods
        .get(&victim.uid)
        .is_some_and(|wp| wp.preempt(NAME, "preempted"));
    if in_memory {
        message.push_str(" (in kube-scheduler memory).");
    } else {
        match handle.client.delete_pod(victim, preemptor).await {
            Ok(()) => {}
            Err(crate::client::ClientError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
    }
    handle.client.record_event(PodEvent::new(
        victim,
        EventType::Normal,
        "Preempted",
        "Preempting",
        message,
    ));
    Ok(())
}

pub fn factory() -> PluginFactory {
    Arc::new(|args, h: &Arc<Handle>| {
        let a: Args = decode_args(args)?;
        if !(0..=100).contains(&a.min_candidate_nodes_percentage) {
            return Err(format!(
                "minCandidateNodesPercentage: Invalid value: {}: not in valid range [0, 100]",
                a.min_candidate_nodes_percentage
            )
            .into());
        }
        if a.min_candidate_nodes_absolute < 0 {
            return Err(format!(
                "minCandidateNodesAbsolute: Invalid value: {}: not in valid range [0, inf)",
                a.min_candidate_nodes_absolute
            )
            .into());
        }
        if a.min_candidate_nodes_percentage == 0 && a.min_candidate_nodes_absolute == 0 {
            return Err("minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute".into());
        }
        Ok(Arc::new(DefaultPreemption {
            handle: h.clone(),
            percentage: i64::from(a.min_candidate_nodes_percentage),
            absolute: i64::from(a.min_candidate_nodes_absolute),
            rng: Mutex::new(SplitMix64(0x9e37_79b9_7f4a_7c15)),
            preempting: Arc::default(),
        }) as Arc<dyn Plugin>)
    })
}
