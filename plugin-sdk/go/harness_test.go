package switchyard

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// probe rejects nodes labelled bad, scores by the node's score label normalised to
// 100 over the highest; PreFilter keeps zone=a nodes for pods labelled zonal, skips
// pods labelled skip, rejects pods labelled reject.
type probe struct{}

type probeState struct{ notes []string }

func (s *probeState) Clone() StateData { return &probeState{append([]string(nil), s.notes...)} }

func (probe) Name() string                           { return "Probe" }
func (probe) ScoreNormalization() ScoreNormalization { return ScoreNormalizationDefault }

func (probe) PreFilter(_ context.Context, c *Cycle, state *CycleState) (*PreFilterResult, *Status) {
	state.Write(&probeState{[]string{c.Pod.Name}})
	l := c.Pod.Labels
	if _, ok := l["reject"]; ok {
		return nil, NewUnresolvable("rejected at PreFilter")
	}
	if _, ok := l["skip"]; ok {
		return nil, NewSkip()
	}
	if _, ok := l["zonal"]; ok {
		var names []string
		for _, n := range c.Snapshot.Nodes() {
			if n.Node.Labels["zone"] == "a" {
				names = append(names, n.Name())
			}
		}
		return &PreFilterResult{NodeNames: names}, nil
	}
	return nil, nil
}

func (probe) Filter(_ context.Context, _ *Cycle, state *CycleState, n *NodeInfo) *Status {
	if state.Read() == nil {
		return Errorf("no PreFilter state")
	}
	if _, ok := n.Node.Labels["bad"]; ok {
		return NewUnschedulable("bad node")
	}
	return nil
}

func (probe) PreScore(_ context.Context, _ *Cycle, state *CycleState, nodes []*NodeInfo) *Status {
	s := state.Read().(*probeState)
	s.notes = append(s.notes, strconv.Itoa(len(nodes))+" feasible")
	return nil
}

func (probe) Score(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) (int64, *Status) {
	v, _ := strconv.ParseInt(n.Node.Labels["score"], 10, 64)
	return v, nil
}

func probeHarness(t *testing.T) *Harness {
	t.Helper()
	nodes := []*pb.Node{
		{Id: 1, Name: "a1", Labels: map[string]string{"zone": "a", "score": "10"}},
		{Id: 2, Name: "a2", Labels: map[string]string{"zone": "a", "score": "40"}},
		{Id: 3, Name: "b1", Labels: map[string]string{"zone": "b", "score": "80"}},
		{Id: 4, Name: "bad", Labels: map[string]string{"zone": "a", "bad": "", "score": "99"}},
	}
	req := &pb.ReplicateRequest{
		Generation: 1,
		Kind:       &pb.ReplicateRequest_Delta{Delta: &pb.SnapshotDelta{Full: true, UpsertNodes: nodes}},
	}
	for i, l := range []string{"any", "zonal", "skip", "reject"} {
		req.More = append(req.More, &pb.ReplicateRequest{Kind: &pb.ReplicateRequest_CycleStart{CycleStart: &pb.CycleStart{
			Cycle: uint64(i + 1), Profile: "default-scheduler",
			Pod: &pb.Pod{Uid: l, Name: l, Namespace: "ns", Labels: map[string]string{l: ""}},
		}}})
	}
	h, err := NewHarness(req)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHarnessRunsThePointsInOrderWithOneState(t *testing.T) {
	h := probeHarness(t)
	if got := h.Pending(); !reflect.DeepEqual(got, []string{"ns/any", "ns/zonal", "ns/skip", "ns/reject"}) {
		t.Fatalf("pending %v", got)
	}
	out, err := h.Run(context.Background(), probe{}, "ns/any")
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Feasible(); !reflect.DeepEqual(got, []string{"a1", "a2", "b1"}) {
		t.Fatalf("feasible %v", got)
	}
	if st, _ := out.Status("bad"); st.CodeOf() != Unschedulable {
		t.Fatalf("bad: %v", st)
	}
	if b1, _ := out.Score("b1"); b1 != 100 {
		t.Fatalf("b1 normalised to %d", b1)
	}
	if a2, _ := out.Score("a2"); a2 != 50 {
		t.Fatalf("a2 normalised to %d", a2)
	}
	if out.RawScores[2].Score != 80 || out.Best() != "b1" {
		t.Fatalf("raw %v best %q", out.RawScores, out.Best())
	}
	if notes := out.State.Read().(*probeState).notes; !reflect.DeepEqual(notes, []string{"any", "3 feasible"}) {
		t.Fatalf("state %v", notes)
	}
}

func TestHarnessPreFilterNarrowsSkipsAndRejects(t *testing.T) {
	h := probeHarness(t)
	ctx := context.Background()
	zonal, _ := h.Run(ctx, probe{}, "ns/zonal")
	var evaluated []string
	for _, s := range zonal.Filter {
		evaluated = append(evaluated, s.Node)
	}
	if !reflect.DeepEqual(evaluated, []string{"a1", "a2", "bad"}) || zonal.Best() != "a2" {
		t.Fatalf("zonal: evaluated %v best %q", evaluated, zonal.Best())
	}
	if skip, _ := h.Run(ctx, probe{}, "ns/skip"); len(skip.Feasible()) != 4 {
		t.Fatalf("skip: Filter ran: %v", skip.Feasible())
	}
	reject, _ := h.Run(ctx, probe{}, "ns/reject")
	if reject.PreFilter.CodeOf() != UnschedulableAndUnresolvable || reject.Filter != nil || reject.Scores != nil {
		t.Fatalf("reject: %+v", reject)
	}
	if _, err := h.Run(ctx, probe{}, "ns/nobody"); err == nil || !strings.Contains(err.Error(), "ns/any") {
		t.Fatalf("unknown pod: %v", err)
	}
	if _, err := HarnessFromManifests("/nonexistent/switchyard", "x.yaml"); err == nil || !strings.Contains(err.Error(), "SWITCHYARD_BIN") {
		t.Fatalf("missing binary: %v", err)
	}
}
