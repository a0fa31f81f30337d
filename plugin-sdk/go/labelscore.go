package switchyard

import (
	"context"
	"sort"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// LabelScorePlugin scores a node by the value of one of its labels alone (a
// topology domain: rack, zone, GPU island), from a table computed once per attempt.
// The SDK serves it as the plugin's PreScore and Score (so it must implement
// neither), normalised as its ScoreNormalizationPlugin says (none without one: raw
// scores must then be in 0..100). A scheduler that knows score_node_label sends that
// PreScore as the cycle starts, while its own Filter runs, and scores the feasible
// nodes itself from the table, with no Score call: one round trip that overlaps the
// scheduler's work, and no per-node work in the sidecar.
type LabelScorePlugin interface {
	Plugin
	// ScoreNodeLabel is the node label whose value a node's score depends on.
	ScoreNodeLabel() string
	// LabelScores gives the raw score of each label value for c.Pod (values not
	// listed, and nodes without the label, score 0). It reads no node list: the
	// nodes that pass Filter are not known yet when the scheduler asks. A Skip
	// status skips Score for the pod.
	LabelScores(ctx context.Context, c *Cycle) (map[string]int64, *Status)
}

// labelTable is a LabelScorePlugin's cycle state: this attempt's table.
type labelTable map[string]int64

// Clone shares the table: nothing changes it after PreScore.
func (t labelTable) Clone() StateData { return t }

// labelScorer serves a LabelScorePlugin as PreScore and Score.
type labelScorer struct{ p LabelScorePlugin }

func (l labelScorer) Name() string { return l.p.Name() }

func (l labelScorer) PreScore(ctx context.Context, c *Cycle, state *CycleState, _ []*NodeInfo) *Status {
	t, st := l.p.LabelScores(ctx, c)
	if !st.IsSuccess() {
		return st
	}
	state.Write(labelTable(t))
	return nil
}

func (l labelScorer) Score(_ context.Context, _ *Cycle, state *CycleState, node *NodeInfo) (int64, *Status) {
	t, ok := state.Read().(labelTable)
	if !ok {
		return 0, Errorf("plugin %q: Score before its PreScore in this cycle", l.p.Name())
	}
	return t[node.Node.GetLabels()[l.p.ScoreNodeLabel()]], nil
}

// labelScoresReply is the table PreScore kept, for its reply (values sorted: the
// same table is the same message).
func labelScoresReply(state *CycleState) *pb.LabelScores {
	t, ok := state.Read().(labelTable)
	if !ok {
		return nil
	}
	out := &pb.LabelScores{Values: make([]string, 0, len(t))}
	for v := range t {
		out.Values = append(out.Values, v)
	}
	sort.Strings(out.Values)
	for _, v := range out.Values {
		out.Scores = append(out.Scores, t[v])
	}
	return out
}
