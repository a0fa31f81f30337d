package switchyard

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Harness is a cluster loaded for a plugin's unit tests: the replica a sidecar
// would hold and the pending pods it would be asked about. Run runs a plugin's
// extension points for one of them as the sidecar does in one attempt (PreFilter,
// Filter on every node, PreScore, Score, NormalizeScore, one CycleState), so a test
// needs no scheduler, no sidecar and no hand-built state.
//
//	h, err := switchyard.HarnessFromManifests("", "testdata/cluster.yaml")
//	out, err := h.Run(ctx, &MyPlugin{}, "default/trainer-0") // or "trainer-0"
//	out.Status("node-1").CodeOf() == switchyard.Unschedulable
//	out.Feasible() // ["node-2" "node-3"]
//	out.Best()     // "node-3"
type Harness struct {
	snapshot *Snapshot
	pending  []harnessPod
}

type harnessPod struct {
	cycle   uint64
	pod     *Pod
	profile string
}

// NodeStatus is one node's Filter status in an Outcome (nil: Success).
type NodeStatus struct {
	Node   string
	Status *Status
}

// NodeScore is one feasible node's score in an Outcome.
type NodeScore struct {
	Node  string
	Score int64
}

// Outcome is what one plugin answered for one pod, point by point. A point the
// plugin does not implement leaves its field nil; points after a rejection are not
// run, as in a scheduling attempt.
type Outcome struct {
	// PreFilter's status and result (Ran: the plugin has a PreFilter).
	PreFilterRan    bool
	PreFilter       *Status
	PreFilterResult *PreFilterResult
	// Filter holds each evaluated node's status in the replica's node order (every
	// node passes when the plugin has no Filter or its PreFilter skipped).
	Filter []NodeStatus
	// PreScore's status (PreScoreRan: the plugin has a PreScore and it ran).
	PreScoreRan bool
	PreScore    *Status
	// RawScores and Scores are Score's answers for the feasible nodes before and
	// after NormalizeScore (the same without one).
	RawScores []NodeScore
	Scores    []NodeScore
	// Error ended the attempt in Score or NormalizeScore.
	Error *Status
	// State is the plugin's cycle state at the end of the attempt.
	State *CycleState
}

// Status is node's Filter status (nil for Success) and whether it was evaluated.
func (o *Outcome) Status(node string) (*Status, bool) {
	for _, s := range o.Filter {
		if s.Node == node {
			return s.Status, true
		}
	}
	return nil, false
}

// Feasible is the nodes that passed Filter, in order.
func (o *Outcome) Feasible() []string {
	var out []string
	for _, s := range o.Filter {
		if s.Status.IsSuccess() {
			out = append(out, s.Node)
		}
	}
	return out
}

// Score is node's final score.
func (o *Outcome) Score(node string) (int64, bool) {
	for _, s := range o.Scores {
		if s.Node == node {
			return s.Score, true
		}
	}
	return 0, false
}

// Best is the feasible node scored highest (the first on a tie); the feasible node
// itself when only one passed and nothing scores; "" otherwise.
func (o *Outcome) Best() string {
	best, found := NodeScore{}, false
	for _, s := range o.Scores {
		if !found || s.Score > best.Score {
			best, found = s, true
		}
	}
	if found {
		return best.Node
	}
	if f := o.Feasible(); len(f) == 1 {
		return f[0]
	}
	return ""
}

// HarnessFromManifests loads manifests (files or directories, as `switchyard
// simulate` reads them) through `switchyard snapshot`, the scheduler's own
// conversion: bin names the binary; "" means $SWITCHYARD_BIN, else switchyard on
// PATH.
func HarnessFromManifests(bin string, paths ...string) (*Harness, error) {
	if bin == "" {
		bin = os.Getenv("SWITCHYARD_BIN")
	}
	if bin == "" {
		bin = "switchyard"
	}
	args := append([]string{"snapshot", "--output", "-", "--cluster"}, paths...)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("switchyard snapshot failed: %s", strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("cannot run %s (set SWITCHYARD_BIN to the switchyard binary, or put it on PATH): %w", bin, err)
	}
	return HarnessFromBytes(stdout.Bytes())
}

// HarnessFromFile loads a message written by `switchyard snapshot --output FILE`.
func HarnessFromFile(path string) (*Harness, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return HarnessFromBytes(b)
}

// HarnessFromBytes decodes the message `switchyard snapshot` writes.
func HarnessFromBytes(b []byte) (*Harness, error) {
	req := &pb.ReplicateRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("not a snapshot message: %w", err)
	}
	return NewHarness(req)
}

// NewHarness builds a harness from the message itself: its full snapshot, then a
// pending pod per CycleStart in More.
func NewHarness(req *pb.ReplicateRequest) (*Harness, error) {
	d := req.GetDelta()
	if d == nil || !d.GetFull() {
		return nil, fmt.Errorf("not a snapshot message: it does not start with a full snapshot")
	}
	s := NewSnapshot()
	g := req.GetGeneration()
	if g == 0 {
		g = 1
	}
	if err := s.apply(g, d); err != nil {
		return nil, err
	}
	h := &Harness{snapshot: s}
	for _, m := range req.GetMore() {
		if c := m.GetCycleStart(); c != nil && c.GetPod() != nil {
			h.pending = append(h.pending, harnessPod{c.GetCycle(), c.GetPod(), c.GetProfile()})
		}
	}
	return h, nil
}

// Snapshot is the replica the plugin's calls see.
func (h *Harness) Snapshot() *Snapshot { return h.snapshot }

// Pending is the pending pods, as namespace/name.
func (h *Harness) Pending() []string {
	out := make([]string, len(h.pending))
	for i, p := range h.pending {
		out[i] = podKey(p.pod)
	}
	return out
}

func podKey(p *Pod) string {
	ns := p.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + p.GetName()
}

// Pod is pending pod name (namespace/name, or a name in default), or nil.
func (h *Harness) Pod(name string) *Pod {
	if p := h.find(name); p != nil {
		return p.pod
	}
	return nil
}

func (h *Harness) find(name string) *harnessPod {
	if !strings.Contains(name, "/") {
		name = "default/" + name
	}
	for i := range h.pending {
		if podKey(h.pending[i].pod) == name {
			return &h.pending[i]
		}
	}
	return nil
}

// Run runs p's extension points for pending pod name as the sidecar does in one
// attempt over every node; p's indexes (IndexesPlugin) are declared first.
func (h *Harness) Run(ctx context.Context, p Plugin, name string) (*Outcome, error) {
	hp := h.find(name)
	if hp == nil {
		return nil, fmt.Errorf("no pending pod %q (pending: %s)", name, strings.Join(h.Pending(), ", "))
	}
	if ip, ok := p.(IndexesPlugin); ok {
		for _, i := range ip.Indexes() {
			h.snapshot.DeclareIndex(i)
		}
	}
	r := register(p)
	c := &Cycle{ID: hp.cycle, Pod: hp.pod, Profile: hp.profile, Snapshot: h.snapshot}
	return runCycle(ctx, r, c), nil
}

// runCycle is one attempt of one plugin, in the order and by the rules of the
// sidecar's service.
func runCycle(ctx context.Context, r *registered, c *Cycle) *Outcome {
	out := &Outcome{State: &CycleState{}}
	var only map[string]bool
	filter := r.filter != nil
	if r.preFilter != nil {
		out.PreFilterRan = true
		res, st := r.preFilter.PreFilter(ctx, c, out.State)
		out.PreFilter, out.PreFilterResult = st, res
		switch {
		case st.CodeOf() == Skip:
			filter = false
		case !st.IsSuccess():
			return out
		}
		if res != nil && res.NodeNames != nil {
			only = map[string]bool{}
			for _, n := range res.NodeNames {
				only[n] = true
			}
		}
	}
	var feasible []*NodeInfo
	for _, n := range c.Snapshot.Nodes() {
		if only != nil && !only[n.Name()] {
			continue
		}
		var st *Status
		if filter {
			st = r.filter.Filter(ctx, c, out.State, n)
		}
		out.Filter = append(out.Filter, NodeStatus{n.Name(), st})
		if st.IsSuccess() {
			feasible = append(feasible, n)
		}
	}
	if len(feasible) == 0 {
		return out
	}
	if r.preScore != nil {
		out.PreScoreRan = true
		out.PreScore = r.preScore.PreScore(ctx, c, out.State, feasible)
		if !out.PreScore.IsSuccess() {
			return out
		}
	}
	if r.score == nil {
		return out
	}
	raw := make([]int64, len(feasible))
	for i, n := range feasible {
		v, st := r.score.Score(ctx, c, out.State, n)
		if !st.IsSuccess() {
			out.Error = st
			return out
		}
		raw[i] = v
	}
	scores := append([]int64(nil), raw...)
	if r.normalizes() {
		if st := r.normalizeInPlace(ctx, c, out.State, scores); !st.IsSuccess() {
			out.Error = st
		}
	}
	for i, n := range feasible {
		out.RawScores = append(out.RawScores, NodeScore{n.Name(), raw[i]})
		out.Scores = append(out.Scores, NodeScore{n.Name(), scores[i]})
	}
	return out
}
