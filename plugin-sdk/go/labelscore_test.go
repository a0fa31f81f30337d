package switchyard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// byZone scores a node by its zone: zone z1 3, z2 1; pods labelled solo skip.
type byZone struct{}

func (byZone) Name() string           { return "ByZone" }
func (byZone) ScoreNodeLabel() string { return "zone" }
func (byZone) ScoreNormalization() ScoreNormalization {
	return ScoreNormalizationDefault
}
func (byZone) LabelScores(_ context.Context, c *Cycle) (map[string]int64, *Status) {
	if c.Pod.Labels["solo"] != "" {
		return nil, NewSkip()
	}
	return map[string]int64{"z2": 1, "z1": 3}, nil
}

// A LabelScorePlugin: the handshake declares PreScore, Score and the label; the
// PreScore reply carries the table (sorted); a Score call (a scheduler that scores
// nothing itself) answers from the same table.
func TestLabelScores(t *testing.T) {
	opts := DefaultOptions("unix:///unused")
	opts.GenerationWait = time.Second
	svc := newService([]Plugin{byZone{}}, opts)
	info := svc.plugins[0].info()
	if info.ScoreNodeLabel != "zone" || !info.NormalizeScore || info.ScoreNormalization != ScoreNormalizationDefault ||
		len(info.ExtensionPoints) != 2 {
		t.Fatalf("plugin info: %v", info)
	}
	s := svc.fallback
	var st replState
	za, zb, none := node(1, "a"), node(2, "b"), node(3, "c")
	za.Labels = map[string]string{"zone": "z1"}
	zb.Labels = map[string]string{"zone": "z2"}
	solo := xpod("solo", "")
	solo.Labels["solo"] = "yes"
	applyAll(t, s, &st, full(1, []*Node{za, zb, none}, nil), start(2, 1, xpod("me", "")), start(3, 2, solo))
	ctx := context.Background()
	r := s.preScore(ctx, &pb.PreScoreRequest{Plugin: "ByZone", Cycle: 1, Generation: 2})
	ls := r.GetLabelScores()
	if codeOf(r.Status) != pb.Code_SUCCESS || strings.Join(ls.GetValues(), ",") != "z1,z2" || ls.GetScores()[0] != 3 || ls.GetScores()[1] != 1 {
		t.Fatalf("PreScore: %v", r)
	}
	sc := s.score(ctx, &pb.ScoreRequest{Plugin: "ByZone", Cycle: 1, Generation: 2, Nodes: []uint32{1, 2, 3}, Normalize: true})
	if !sc.Normalized || len(sc.Scores) != 3 || sc.Scores[0] != 100 || sc.Scores[1] != 33 || sc.Scores[2] != 0 {
		t.Fatalf("Score: %v", sc)
	}
	r = s.preScore(ctx, &pb.PreScoreRequest{Plugin: "ByZone", Cycle: 2, Generation: 3})
	if codeOf(r.Status) != pb.Code_SKIP || r.LabelScores != nil {
		t.Fatalf("PreScore of a skipped pod: %v", r)
	}
}

// scoresToo is a LabelScorePlugin that has a Score of its own as well.
type scoresToo struct{ byZone }

func (scoresToo) Score(context.Context, *Cycle, *CycleState, *NodeInfo) (int64, *Status) {
	return 0, nil
}

// preFiltered is a LabelScorePlugin with a PreFilter.
type preFiltered struct{ byZone }

func (preFiltered) PreFilter(context.Context, *Cycle, *CycleState) (*PreFilterResult, *Status) {
	return nil, nil
}

type noLabel struct{ byZone }

func (noLabel) ScoreNodeLabel() string { return "" }

func TestLabelScorePluginsAreChecked(t *testing.T) {
	if err := checkPlugins([]Plugin{scoresToo{}}); err == nil || !strings.Contains(err.Error(), "drop the others") {
		t.Errorf("a label scorer with a Score: %v", err)
	}
	if err := checkPlugins([]Plugin{preFiltered{}}); err == nil || !strings.Contains(err.Error(), "has a PreFilter") {
		t.Errorf("a label scorer with a PreFilter: %v", err)
	}
	if err := checkPlugins([]Plugin{noLabel{}}); err == nil || !strings.Contains(err.Error(), "names none") {
		t.Errorf("a label scorer without a label: %v", err)
	}
	if err := checkPlugins([]Plugin{byZone{}}); err != nil {
		t.Errorf("byZone: %v", err)
	}
}
