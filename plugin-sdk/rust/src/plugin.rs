//! The traits a sidecar plugin implements: [`Plugin`] plus one per extension point,
//! with kube-scheduler's meaning. Every call inside a scheduling attempt gets the
//! [`Cycle`]: the pod, the replicated snapshot at the attempt's generation, and the
//! profile.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::snapshot::{NodeInfo, Snapshot};
use crate::state::CycleState;
use crate::status::Status;
use crate::waiting::Handle;
use crate::{pb, Pod};

/// One scheduling attempt, as a call sees it.
pub struct Cycle<'a> {
    /// The scheduler's attempt number (unique per scheduler process).
    pub id: u64,
    /// The pod being scheduled.
    pub pod: &'a Arc<Pod>,
    /// The scheduler profile (schedulerName) scheduling it.
    pub profile: &'a str,
    /// The replicated snapshot, at the attempt's generation.
    pub snapshot: &'a Snapshot,
}

/// The base of every plugin: its name, the extension points it implements (the
/// `as_*` methods, `Some(self)` for each), and the cluster events that may make a
/// pod it rejected schedulable.
pub trait Plugin: Send + Sync + 'static {
    fn name(&self) -> &str;

    /// Events that should requeue pods this plugin rejected. Empty means every event.
    fn events(&self) -> Vec<pb::ClusterEvent> {
        Vec::new()
    }

    /// Indexes of the replica this plugin reads (pods by label or namespace per
    /// node, nodes by label): the SDK keeps them current as deltas arrive, so a
    /// cluster-wide count is a look-up in the cycle, not a scan of every pod.
    fn indexes(&self) -> Vec<crate::Index> {
        Vec::new()
    }

    /// Declare `true` when Filter, PreScore, Score and NormalizeScore depend only on
    /// the pod and the nodes they are asked about (each node and its pods), never on
    /// other nodes, and the plugin has no PreFilter. The scheduler can then send the
    /// next pod's Filter while the current pod is still in its cycle, which hides the
    /// round trip. A wrong `true` gives wrong answers; `serve` refuses it together
    /// with a PreFilter.
    fn node_local(&self) -> bool {
        false
    }

    /// The pod fields Filter and Score read, when their answers depend only on those
    /// and on the Node object itself: not on the pods on any node (upstream's pod
    /// signatures, KEP-5598). The scheduler then reuses an answer for every later pod
    /// whose listed fields are equal, on a node whose Node object is unchanged,
    /// without calling; with a standard [`ScorePlugin::score_normalization`] it reuses
    /// scores too. `vec![pb::PodField::None]` for a plugin that reads no field of the pod
    /// (every pod alike). Empty (the default): no reuse. A wrong list gives wrong
    /// placements; `serve` refuses a list without `node_local` or
    /// [`signature_node_pods`](Self::signature_node_pods).
    fn signature(&self) -> Vec<pb::PodField> {
        Vec::new()
    }

    /// Declare `true`, with a [`signature`](Self::signature), when Filter and Score
    /// also read the pods on the node they are asked about (never other nodes'), and
    /// PreFilter, if any, leaves the same state for pods whose signed fields are
    /// equal: a quota keyed by a pod label whose Filter reads the node's count from
    /// an [index](Self::indexes). The scheduler then reuses an answer while the
    /// node's pods and Node object are unchanged and asks only for the nodes of a
    /// round that changed; `node_local` is not needed.
    fn signature_node_pods(&self) -> bool {
        false
    }

    /// Pod label keys Filter and Score read, signed by value: narrower than
    /// `pb::PodField::Labels`, which signs every label (workloads often give each pod
    /// a label of its own). Only with
    /// [`signature_node_pods`](Self::signature_node_pods) and without `node_local`;
    /// list `pb::PodField::None` in [`signature`](Self::signature) when no other field
    /// is read.
    fn signature_label_keys(&self) -> Vec<String> {
        Vec::new()
    }

    /// Declare `true`, with [`signature_node_pods`](Self::signature_node_pods), when
    /// PreFilter's verdict and state depend only on the pod's signed fields (never on
    /// nodes or other pods): the quota's PreFilter, which notes the pod's tenant. The
    /// plugin is then node-local with a PreFilter, and the scheduler sends the queued
    /// pods' PreFilter and first Filter round ahead of their attempts (lookahead),
    /// which hides the round trip. A wrong `true` gives wrong placements.
    fn pre_filter_pod_only(&self) -> bool {
        false
    }

    /// Whether the plugin's calls may be answered at the generation they name rather
    /// than the one their cycle started at: a node-local plugin, or one whose
    /// PreFilter reads only the pod ([`pre_filter_pod_only`](Self::pre_filter_pod_only)).
    fn answers_at_named_generation(&self) -> bool {
        self.node_local() || (self.signature_node_pods() && self.pre_filter_pod_only())
    }

    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
    /// PreScore and Score by one node label (instead of `as_pre_score` and
    /// `as_score`, which `serve` refuses beside it).
    fn as_label_score(&self) -> Option<&dyn LabelScorePlugin> {
        None
    }
}

/// Gates a pod before it enters the active queue: anything but Success holds it back.
pub trait PreEnqueuePlugin: Plugin {
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}

/// Orders the queue by a key computed once per pod at enqueue: smaller keys first
/// (bytewise), equal keys in enqueue order.
pub trait QueueSortPlugin: Plugin {
    fn sort_key(&self, pod: &Pod) -> Vec<u8>;
}

/// What PreFilter returns: a status, and optionally the only nodes worth evaluating.
#[derive(Clone, Debug, Default)]
pub struct PreFilterResult {
    pub status: Status,
    pub node_names: Option<Vec<String>>,
}

impl From<Status> for PreFilterResult {
    fn from(status: Status) -> Self {
        PreFilterResult {
            status,
            node_names: None,
        }
    }
}

/// Computes the attempt's state once. Plugins whose Filter depends on the pods on a
/// node also implement `add_pod`/`remove_pod` (and return true from
/// `has_extensions`): the SDK calls them on a fork of the state when the scheduler
/// asks "what if these pods were added or removed" (nominated pods, preemption).
pub trait PreFilterPlugin: Plugin {
    fn pre_filter(&self, cycle: &Cycle, state: &mut CycleState) -> PreFilterResult;

    fn has_extensions(&self) -> bool {
        false
    }
    fn add_pod(
        &self,
        _cycle: &Cycle,
        _state: &mut CycleState,
        _pod: &Arc<Pod>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
    fn remove_pod(
        &self,
        _cycle: &Cycle,
        _state: &mut CycleState,
        _pod: &Arc<Pod>,
        _node: &NodeInfo,
    ) -> Status {
        Status::success()
    }
}

/// Whether the pod fits one node. Called for a batch of nodes in parallel: keep it
/// free of locks.
pub trait FilterPlugin: Plugin {
    fn filter(&self, cycle: &Cycle, state: &CycleState, node: &NodeInfo) -> Status;
}

/// Runs when no node fits. May nominate a node (return its name).
pub trait PostFilterPlugin: Plugin {
    fn post_filter(
        &self,
        cycle: &Cycle,
        state: &mut CycleState,
        node_statuses: &HashMap<String, Status>,
    ) -> (Status, Option<String>);
}

/// Runs once over the feasible nodes before Score. Skip skips Score for the pod.
pub trait PreScorePlugin: Plugin {
    fn pre_score(&self, cycle: &Cycle, state: &mut CycleState, nodes: &[&NodeInfo]) -> Status;
}

/// A score per feasible node; with `normalize`, rescaled to 0..=100 over all nodes.
pub trait ScorePlugin: Plugin {
    fn score(&self, cycle: &Cycle, state: &CycleState, node: &NodeInfo) -> Result<i64, Status>;

    /// Whether [`normalize`](Self::normalize) is implemented.
    fn has_normalize(&self) -> bool {
        false
    }
    fn normalize(&self, _cycle: &Cycle, _state: &CycleState, _scores: &mut [i64]) -> Status {
        Status::success()
    }

    /// One of upstream's standard NormalizeScores instead of [`normalize`](Self::normalize):
    /// the SDK applies it (`switchyard_proto::normalize_scores`), and a scheduler that
    /// reuses raw scores for alike pods can apply it too. `Custom` (the default) means
    /// `normalize` when `has_normalize`, else none.
    fn score_normalization(&self) -> pb::ScoreNormalization {
        pb::ScoreNormalization::Custom
    }
}

/// Scores a node by the value of one of its labels alone (a topology domain: rack,
/// zone, GPU island), from a table computed once per attempt: the SDK serves it as
/// PreScore and Score. A scheduler that knows `score_node_label` sends that PreScore
/// as the cycle starts, while Filter runs, and scores the nodes itself from the
/// table, with no Score call: one round trip that overlaps the scheduler's own work,
/// and no per-node work here.
pub trait LabelScorePlugin: Plugin {
    /// The node label whose value a node's score depends on.
    fn score_node_label(&self) -> &str;

    /// The raw score of each label value for the cycle's pod (values not listed, and
    /// nodes without the label, score 0). It reads no node list: the nodes that
    /// passed Filter are not known yet when the scheduler asks. A Skip status skips
    /// Score for the pod.
    fn label_scores(&self, cycle: &Cycle) -> Result<HashMap<String, i64>, Status>;

    /// How raw scores are normalised over the feasible nodes: `Default` or
    /// `DefaultReverse` (upstream's DefaultNormalizeScore), or `Custom` for none
    /// (the raw scores are in 0..=100 already).
    fn score_normalization(&self) -> pb::ScoreNormalization {
        pb::ScoreNormalization::Custom
    }
}

/// Reserve claims what the pod will use on the chosen node; Unreserve gives it back
/// when a later step fails. Unreserve must be idempotent.
pub trait ReservePlugin: Plugin {
    fn reserve(&self, cycle: &Cycle, state: &mut CycleState, node: &str) -> Status;
    fn unreserve(&self, cycle: &Cycle, state: &mut CycleState, node: &str);
}

/// Approves, rejects, or holds the pod before binding. A Wait status with a timeout
/// parks the pod until [`Handle::allow`] or [`Handle::reject`] decides, or the timeout
/// rejects it.
pub trait PermitPlugin: Plugin {
    fn permit(
        &self,
        cycle: &Cycle,
        state: &mut CycleState,
        node: &str,
        handle: &Handle,
    ) -> (Status, Duration);
}

pub trait PreBindPlugin: Plugin {
    fn pre_bind(&self, cycle: &Cycle, state: &CycleState, node: &str) -> Status;
}

/// Binds the pod. Skip passes it to the next bind plugin.
pub trait BindPlugin: Plugin {
    fn bind(&self, cycle: &Cycle, state: &CycleState, node: &str) -> Status;
}

pub trait PostBindPlugin: Plugin {
    fn post_bind(&self, cycle: &Cycle, state: &CycleState, node: &str);
}
