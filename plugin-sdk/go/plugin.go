package switchyard

import (
	"context"
	"time"
)

// Cycle is one scheduling attempt as a call sees it. It is valid for the duration
// of the call: do not keep it (or its Snapshot) afterwards.
type Cycle struct {
	// ID is the scheduler's attempt number (unique per scheduler process).
	ID uint64
	// Pod is the pod being scheduled.
	Pod *Pod
	// Profile is the scheduler profile (schedulerName) scheduling it.
	Profile string
	// Snapshot is the replica at the generation the call is evaluated at: the
	// cycle's start, or for a node-local plugin possibly later (see NodeLocalPlugin).
	Snapshot *Snapshot
}

// Plugin is the base of every plugin. The SDK detects the extension points a plugin
// implements with type assertions against the interfaces below (as kube-scheduler's
// framework does) and declares them at handshake, so implementing a method is all it
// takes to take part in that point.
type Plugin interface {
	// Name is the plugin's name, unique in the sidecar; profiles enable it by name.
	Name() string
}

// EventsPlugin names the cluster events that may make a pod this plugin rejected
// schedulable (upstream's EventsToRegister), so the scheduler does not retry such
// pods on every change. A plugin without it (or returning none) is requeued by every
// event. Resource and action names are listed in proto/README.md, "Cluster events";
// Serve refuses others.
type EventsPlugin interface {
	Plugin
	Events() []*ClusterEvent
}

// NodeLocalPlugin declares, when NodeLocal returns true, that the plugin's Filter,
// PreScore, Score and NormalizeScore depend only on the pod and the nodes a call
// names (each node and its pods), never on other nodes, and that it has no
// PreFilter. The scheduler then sends the next pods' Filter calls ahead of their
// cycles (lookahead, FilterBatch), hiding most of the round trip, and the SDK
// answers such a plugin's calls at the generation they name, which may be after the
// cycle's start. A wrong true gives wrong placements; Serve refuses it together with
// a PreFilter.
type NodeLocalPlugin interface {
	Plugin
	NodeLocal() bool
}

// SignaturePlugin declares the pod fields Filter and Score read, when their answers
// for a pod and a node depend only on those fields and on the Node object itself:
// not on the pods on that node or any other, nor on other nodes, nor on any other
// field of the pod (upstream's pod signatures, KEP-5598). The scheduler then answers
// a later pod whose listed fields are equal, on a node whose Node object has not
// changed, from an earlier answer without calling; with a standard
// ScoreNormalizationPlugin it reuses scores too. []PodField{PodFieldNone} declares
// that no field of the pod is read (every pod alike); an empty list declares
// nothing (no reuse). A wrong list gives wrong placements. Serve refuses it without
// NodeLocal, and unknown fields.
type SignaturePlugin interface {
	Plugin
	Signature() []PodField
}

// SignatureNodePodsPlugin widens a SignaturePlugin's promise: Filter and Score also
// read the pods on the node asked about (never other nodes'), and PreFilter, if any,
// leaves the same state for pods whose signed fields are equal (a quota keyed by a
// label: PreFilter notes the tenant, Filter reads the node's count from an index).
// NodeLocal is then not needed; the scheduler keeps an answer only while the node
// and its pods are unchanged, and asks a round only for its changed nodes.
// SignatureLabelKeys signs the values of a few pod label keys instead of every label
// (PodFieldLabels; workloads often give each pod a label of its own), with
// []PodField{PodFieldNone} as the Signature when no other field is read; keys need
// SignatureNodePods true and NodeLocal false.
type SignatureNodePodsPlugin interface {
	SignaturePlugin
	SignatureNodePods() bool
	SignatureLabelKeys() []string
}

// PreFilterPodOnlyPlugin declares, with SignatureNodePods true, that PreFilter's
// verdict and state depend only on the pod's signed fields, never on nodes or other
// pods (a quota's PreFilter noting the tenant). The plugin is then node-local with a
// PreFilter: the SDK answers its calls at the generation they name, and the scheduler
// sends the queued pods' PreFilter and first Filter round ahead of their attempts,
// which hides the round trip. A wrong true gives wrong placements.
type PreFilterPodOnlyPlugin interface {
	SignatureNodePodsPlugin
	PreFilterPodOnly() bool
}

// ScoreNormalizationPlugin declares that a Score plugin's scores are normalised by
// one of upstream's standard NormalizeScores (ScoreNormalizationDefault or
// ScoreNormalizationDefaultReverse, see NormalizeScores). The SDK applies it, and a
// scheduler reusing raw scores for alike pods applies it too, so the plugin must not
// implement ScoreExtensions as well (Serve refuses both, and a standard one without
// Score). ScoreNormalizationCustom is the same as not implementing this interface.
type ScoreNormalizationPlugin interface {
	Plugin
	ScoreNormalization() ScoreNormalization
}

// PreEnqueuePlugin gates a pod before it enters the active queue: anything but
// Success (nil) holds it back (UnschedulableAndUnresolvable: it waits in the
// unschedulable pool).
type PreEnqueuePlugin interface {
	Plugin
	PreEnqueue(ctx context.Context, pod *Pod) *Status
}

// QueueSortPlugin orders the scheduling queue by a key computed once per pod when
// it is enqueued (and again when it is updated): smaller keys (bytewise) are popped
// first, equal keys in enqueue order. The key must depend only on the pod.
type QueueSortPlugin interface {
	Plugin
	SortKey(ctx context.Context, pod *Pod) []byte
}

// PreFilterResult optionally narrows the nodes worth evaluating.
type PreFilterResult struct {
	// NodeNames, when not nil, are the only nodes Filter needs to evaluate. They
	// must be node names of the replica.
	NodeNames []string
}

// PreFilterPlugin computes the attempt's state once, before Filter. Skip skips the
// plugin's Filter for the cycle; an Unschedulable status ends the cycle's filtering.
type PreFilterPlugin interface {
	Plugin
	PreFilter(ctx context.Context, c *Cycle, state *CycleState) (*PreFilterResult, *Status)
}

// PreFilterExtensions is implemented by a PreFilter plugin whose Filter depends on
// the pods on a node. For what-if evaluations (nominated pods, preemption dry runs)
// the SDK forks the cycle state (CycleState.Clone), calls RemovePod and AddPod on the
// fork for each pod of the item's delta (removals first, as upstream), and runs
// Filter with the fork on a copy of the node with those pods removed and added. node
// is that copy as it is after the change. Implementing both methods declares
// pre_filter_extensions at handshake.
type PreFilterExtensions interface {
	AddPod(ctx context.Context, c *Cycle, state *CycleState, pod *Pod, node *NodeInfo) *Status
	RemovePod(ctx context.Context, c *Cycle, state *CycleState, pod *Pod, node *NodeInfo) *Status
}

// FilterPlugin decides whether the pod fits one node. Large batches are evaluated
// on several goroutines at once: Filter must be safe for concurrent use and must
// only read state.
type FilterPlugin interface {
	Plugin
	Filter(ctx context.Context, c *Cycle, state *CycleState, node *NodeInfo) *Status
}

// PostFilterResult may nominate a node for the pod.
type PostFilterResult struct {
	// NominatedNodeName is the node to nominate ("" leaves the nomination alone).
	NominatedNodeName string
}

// PostFilterPlugin runs when no node fits (upstream's preemption lives here).
// nodeStatuses holds the statuses of the nodes that failed Filter, by node name.
type PostFilterPlugin interface {
	Plugin
	PostFilter(ctx context.Context, c *Cycle, state *CycleState, nodeStatuses map[string]*Status) (*PostFilterResult, *Status)
}

// PreScorePlugin runs once over the feasible nodes before Score. Skip skips the
// plugin's Score for the pod.
type PreScorePlugin interface {
	Plugin
	PreScore(ctx context.Context, c *Cycle, state *CycleState, nodes []*NodeInfo) *Status
}

// ScorePlugin scores one feasible node. Without a normalisation, scores must be in
// 0..100 (MinNodeScore..MaxNodeScore); with ScoreExtensions or a standard
// ScoreNormalizationPlugin they may be any int64 and the normalisation brings them
// into 0..100. Like Filter, Score may run concurrently
// and must only read state.
type ScorePlugin interface {
	Plugin
	Score(ctx context.Context, c *Cycle, state *CycleState, node *NodeInfo) (int64, *Status)
}

// ScoreExtensions is implemented by a Score plugin that normalises its scores over
// all feasible nodes: scores are in the order of the nodes scored, to be rewritten
// in place to 0..100. Implementing it (or a standard ScoreNormalizationPlugin)
// declares normalize_score at handshake.
type ScoreExtensions interface {
	NormalizeScore(ctx context.Context, c *Cycle, state *CycleState, scores []int64) *Status
}

// ReservePlugin claims what the pod will use on the chosen node; Unreserve gives it
// back when a later step fails. Unreserve may be called whether or not Reserve ran
// or succeeded, so it must be idempotent and best-effort.
type ReservePlugin interface {
	Plugin
	Reserve(ctx context.Context, c *Cycle, state *CycleState, nodeName string) *Status
	Unreserve(ctx context.Context, c *Cycle, state *CycleState, nodeName string)
}

// PermitPlugin approves (nil), rejects, or holds the pod before binding. A Wait
// status with a timeout > 0 parks the pod until the plugin calls Handle.Allow or
// Handle.Reject for it (from any goroutine, at any later time; keep h), or the
// timeout rejects it. A Wait with a zero timeout is sent as an Error.
type PermitPlugin interface {
	Plugin
	Permit(ctx context.Context, c *Cycle, state *CycleState, nodeName string, h *Handle) (*Status, time.Duration)
}

// PreBindPlugin runs before the pod is bound.
type PreBindPlugin interface {
	Plugin
	PreBind(ctx context.Context, c *Cycle, state *CycleState, nodeName string) *Status
}

// BindPlugin binds the pod. Skip passes it to the next bind plugin.
type BindPlugin interface {
	Plugin
	Bind(ctx context.Context, c *Cycle, state *CycleState, nodeName string) *Status
}

// PostBindPlugin is told that the pod was bound (informational).
type PostBindPlugin interface {
	Plugin
	PostBind(ctx context.Context, c *Cycle, state *CycleState, nodeName string)
}
