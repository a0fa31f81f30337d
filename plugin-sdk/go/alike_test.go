package switchyard

import (
	"context"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// alike declares the alike-pod fields it is built with; its Filter rejects nodes
// labelled ok=no.
type alike struct {
	name  string
	local bool
	sig   []PodField
	kind  ScoreNormalization
}

func (a alike) Name() string                           { return a.name }
func (a alike) NodeLocal() bool                        { return a.local }
func (a alike) Signature() []PodField                  { return a.sig }
func (a alike) ScoreNormalization() ScoreNormalization { return a.kind }
func (alike) Filter(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) *Status {
	if n.Node.Labels["ok"] == "no" {
		return NewUnschedulable("not ok")
	}
	return nil
}

// alikeScore adds a Score: the node's "score" label, raw.
type alikeScore struct{ alike }

func (alikeScore) Score(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) (int64, *Status) {
	v, err := strconv.ParseInt(n.Node.Labels["score"], 10, 64)
	if err != nil {
		return 0, Errorf("node %s: %v", n.Name(), err)
	}
	return v, nil
}

// ownNorm adds the plugin's own NormalizeScore (100 minus the raw score), unlike
// either standard one on the scores used here.
type ownNorm struct{ alikeScore }

func (ownNorm) NormalizeScore(_ context.Context, _ *Cycle, _ *CycleState, scores []int64) *Status {
	for i := range scores {
		scores[i] = 100 - scores[i]
	}
	return nil
}

func scoring(name string, sig []PodField, kind ScoreNormalization) alikeScore {
	return alikeScore{alike{name: name, local: true, sig: sig, kind: kind}}
}

// dial serves svc on an in-memory connection, so declarations go through the
// regenerated messages and the SDK's codec as the scheduler would see them.
func dial(t *testing.T, svc *service) pb.PluginClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StatsHandler(connTagger{svc}), grpc.CustomCodec(codec{})) //nolint:staticcheck
	pb.RegisterPluginServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.Dial("bufnet", grpc.WithInsecure(),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewPluginClient(conn)
}

func TestHandshakeDeclaresAlikePods(t *testing.T) {
	plugins := []Plugin{
		scoring("Zone", []PodField{PodFieldNone}, ScoreNormalizationDefault),
		scoring("Taints", []PodField{PodFieldTolerations, PodFieldLabels}, ScoreNormalizationDefaultReverse),
		ownNorm{scoring("Own", []PodField{PodFieldRequests}, ScoreNormalizationCustom)},
		alike{name: "FilterOnly", local: true, sig: []PodField{PodFieldNodeSelector}},
		local{},
	}
	if err := checkPlugins(plugins); err != nil {
		t.Fatalf("valid declarations refused: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := dial(t, newService(plugins, DefaultOptions("unix:///unused"))).
		Handshake(ctx, &pb.HandshakeRequest{ProtocolVersions: []string{"v1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		sig       []PodField
		kind      ScoreNormalization
		normalize bool
	}{
		{[]PodField{PodFieldNone}, ScoreNormalizationDefault, true},
		{[]PodField{PodFieldTolerations, PodFieldLabels}, ScoreNormalizationDefaultReverse, true},
		{[]PodField{PodFieldRequests}, ScoreNormalizationCustom, true},
		{[]PodField{PodFieldNodeSelector}, ScoreNormalizationCustom, false},
		{nil, ScoreNormalizationCustom, false},
	}
	if len(hs.Plugins) != len(want) {
		t.Fatalf("handshake: %v", hs)
	}
	for i, w := range want {
		info := hs.Plugins[i]
		if !reflect.DeepEqual(info.Signature, w.sig) || info.ScoreNormalization != w.kind || info.NormalizeScore != w.normalize {
			t.Errorf("%s: signature %v, score_normalization %v, normalize_score %v; want %v, %v, %v",
				info.Name, info.Signature, info.ScoreNormalization, info.NormalizeScore, w.sig, w.kind, w.normalize)
		}
	}
}

// nodePods declares alike pods whose answers read the node's pods (a quota).
type nodePods struct {
	alike
	pods bool
	keys []string
}

func (n nodePods) SignatureNodePods() bool      { return n.pods }
func (n nodePods) SignatureLabelKeys() []string { return n.keys }

// A quota-like plugin (not NodeLocal) may sign with SignatureNodePods, and its
// label keys reach the handshake.
func TestHandshakeDeclaresSignatureNodePods(t *testing.T) {
	q := nodePods{alike: alike{name: "Quota", sig: []PodField{PodFieldNone}}, pods: true, keys: []string{"team"}}
	if err := checkPlugins([]Plugin{q}); err != nil {
		t.Fatalf("a quota declaring node pods is refused: %v", err)
	}
	info := register(q).info()
	if !info.SignatureNodePods || !reflect.DeepEqual(info.SignatureLabelKeys, []string{"team"}) || info.NodeLocal {
		t.Fatalf("handshake: %+v", info)
	}
}

// podOnly declares a PreFilter that reads only the pod (PreFilterPodOnlyPlugin).
type podOnly struct{ nodePods }

func (podOnly) PreFilterPodOnly() bool { return true }

// PreFilterPodOnly reaches the handshake with SignatureNodePods, and lets the
// plugin's calls be answered at the generation they name; without it, Serve refuses.
func TestHandshakeDeclaresPreFilterPodOnly(t *testing.T) {
	q := podOnly{nodePods{alike: alike{name: "Quota", sig: []PodField{PodFieldNone}}, pods: true, keys: []string{"team"}}}
	if err := checkPlugins([]Plugin{q}); err != nil {
		t.Fatalf("refused: %v", err)
	}
	r := register(q)
	if info := r.info(); !info.PreFilterPodOnly || info.NodeLocal || !r.answersAtNamedGeneration() {
		t.Fatalf("handshake: %+v", info)
	}
	if r := register(q.nodePods); r.info().PreFilterPodOnly || r.answersAtNamedGeneration() {
		t.Fatalf("declared without PreFilterPodOnly: %+v", r.info())
	}
	bad := podOnly{nodePods{alike: alike{name: "PodOnlyLocal", sig: []PodField{PodFieldNone}, local: true}}}
	if err := checkPlugins([]Plugin{bad}); err == nil || !strings.Contains(err.Error(), `"PodOnlyLocal" declares PreFilterPodOnly without SignatureNodePods`) {
		t.Fatalf("got %v", err)
	}
}

func TestServeRefusesBadAlikeDeclarations(t *testing.T) {
	for _, c := range []struct {
		plugin Plugin
		want   string
	}{
		{scoring("Unknown", []PodField{PodFieldLabels, PodField(42)}, ScoreNormalizationCustom), `"Unknown": its Signature lists 42`},
		{scoring("Unspecified", []PodField{pb.PodField_POD_FIELD_UNSPECIFIED}, ScoreNormalizationCustom), `"Unspecified": its Signature lists POD_FIELD_UNSPECIFIED`},
		{scoring("NoneAndMore", []PodField{PodFieldNone, PodFieldLabels}, ScoreNormalizationCustom), `"NoneAndMore": its Signature lists PodFieldNone with other fields`},
		{alike{name: "NotLocal", sig: []PodField{PodFieldNone}}, `"NotLocal" declares a Signature but not NodeLocal`},
		{scoring("BadKind", nil, ScoreNormalization(9)), `"BadKind": unknown ScoreNormalization 9`},
		{alike{name: "NoScore", local: true, kind: ScoreNormalizationDefault}, `"NoScore" declares ScoreNormalization SCORE_NORMALIZATION_DEFAULT but has no Score`},
		{ownNorm{scoring("Both", nil, ScoreNormalizationDefaultReverse)}, `"Both" declares ScoreNormalization SCORE_NORMALIZATION_DEFAULT_REVERSE and implements NormalizeScore`},
		{nodePods{alike: alike{name: "PodsNoSig"}, pods: true}, `"PodsNoSig" declares SignatureNodePods without a Signature`},
		{nodePods{alike: alike{name: "KeysNoPods", sig: []PodField{PodFieldNone}, local: true}, keys: []string{"team"}}, `"KeysNoPods" declares SignatureLabelKeys without SignatureNodePods`},
		{nodePods{alike: alike{name: "KeysLocal", sig: []PodField{PodFieldNone}, local: true}, pods: true, keys: []string{"team"}}, `"KeysLocal" declares SignatureLabelKeys without SignatureNodePods, or with NodeLocal`},
	} {
		err := checkPlugins([]Plugin{c.plugin})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.plugin.Name(), err, c.want)
		}
	}
	// Serve refuses before it listens (with ctx already done it would return nil).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	opts := DefaultOptions("unix://" + filepath.Join(t.TempDir(), "s.sock"))
	if err := Serve(ctx, opts, alike{name: "NotLocal", sig: []PodField{PodFieldNone}}); err == nil || !strings.Contains(err.Error(), "not NodeLocal") {
		t.Fatalf("Serve: %v", err)
	}
}

func TestNormalizeScores(t *testing.T) {
	const max, min = math.MaxInt64, math.MinInt64
	// Expected values computed with switchyard_proto::normalize_scores' arithmetic
	// (i128, truncating division, wrapping cast, saturating reverse).
	for _, c := range []struct {
		in, def, rev []int64
	}{
		{[]int64{10, 5, 0, 3}, []int64{100, 50, 0, 30}, []int64{0, 50, 100, 70}},
		{[]int64{3, 1, 2}, []int64{100, 33, 66}, []int64{0, 67, 34}}, // truncated
		{[]int64{-1, 3}, []int64{-33, 100}, []int64{133, 0}},         // toward zero, not floor
		{[]int64{0, 0}, []int64{0, 0}, []int64{100, 100}},            // highest 0
		{[]int64{-5, 0}, []int64{-5, 0}, []int64{100, 100}},          // left alone
		{[]int64{-3, -1}, []int64{-3, -1}, []int64{100, 100}},        // highest below 0
		{[]int64{}, []int64{}, []int64{}},
		{[]int64{max, max / 2}, []int64{100, 49}, []int64{0, 51}},                             // 100*s needs 128 bits
		{[]int64{min, 1}, []int64{0, 100}, []int64{100, 0}},                                   // quotient wraps
		{[]int64{-92233720368547758, 1}, []int64{-9223372036854775800, 100}, []int64{max, 0}}, // saturates
		{[]int64{-92233720368547759, 1}, []int64{9223372036854775716, 100}, []int64{-9223372036854775616, 0}},
	} {
		for _, k := range []struct {
			kind ScoreNormalization
			want []int64
		}{{ScoreNormalizationDefault, c.def}, {ScoreNormalizationDefaultReverse, c.rev}} {
			got := append([]int64{}, c.in...)
			if !NormalizeScores(k.kind, got) || !reflect.DeepEqual(got, k.want) {
				t.Errorf("%v %v: got %v, want %v", k.kind, c.in, got, k.want)
			}
		}
	}
	s := []int64{7, 3}
	if NormalizeScores(ScoreNormalizationCustom, s) || s[0] != 7 || s[1] != 3 {
		t.Fatalf("custom: %v", s)
	}
}

func TestRawAndNormalizedScores(t *testing.T) {
	plugins := []Plugin{
		scoring("Default", []PodField{PodFieldNone}, ScoreNormalizationDefault),
		scoring("Reverse", []PodField{PodFieldNone}, ScoreNormalizationDefaultReverse),
		ownNorm{scoring("Own", []PodField{PodFieldNone}, ScoreNormalizationCustom)},
		scoring("Plain", nil, ScoreNormalizationCustom), // no NormalizeScore at all
	}
	if err := checkPlugins(plugins); err != nil {
		t.Fatal(err)
	}
	svc := newService(plugins, DefaultOptions("unix:///unused"))
	s := svc.fallback
	var nodes []*Node
	for i, v := range []string{"10", "5", "0", "3", "1", "2", "0", "0"} {
		nodes = append(nodes, &Node{Id: uint32(i + 1), Name: fmt.Sprint("n", i+1), Labels: map[string]string{"score": v}})
	}
	nodes = append(nodes, &Node{Id: 9, Name: "n9", Labels: map[string]string{"score": "99", "ok": "no"}})
	var rs replState
	applyAll(t, s, &rs, full(1, nodes, nil), start(2, 1, xpod("me", "")))
	ctx := context.Background()

	type answer struct {
		scores     []int64
		normalized bool
	}
	check := func(what string, got, want answer, st *pb.Status) {
		t.Helper()
		if codeOf(st) != pb.Code_SUCCESS || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %v (%v), want %v", what, got, st, want)
		}
	}
	for _, c := range []struct {
		plugin     string
		nodes      []uint32
		normalized []int64 // nil: the raw scores are final
	}{
		{"Default", []uint32{1, 2, 3}, []int64{100, 50, 0}},
		{"Default", []uint32{4, 5, 6}, []int64{100, 33, 66}},
		{"Default", []uint32{7, 8}, []int64{0, 0}},
		{"Reverse", []uint32{1, 2, 3}, []int64{0, 50, 100}},
		{"Reverse", []uint32{4, 5, 6}, []int64{0, 67, 34}},
		{"Reverse", []uint32{7, 8}, []int64{100, 100}},
		{"Own", []uint32{1, 2, 3}, []int64{90, 95, 100}},
		{"Plain", []uint32{1, 2, 3}, nil},
	} {
		raw := answer{make([]int64, len(c.nodes)), false}
		for i, id := range c.nodes {
			raw.scores[i], _ = strconv.ParseInt(nodes[id-1].Labels["score"], 10, 64)
		}
		final := answer{c.normalized, true}
		if c.normalized == nil {
			// Without a NormalizeScore the raw scores are final, even when raw ones
			// are asked for.
			raw.normalized, final = true, answer{raw.scores, true}
		}
		name := fmt.Sprintf("%s %v", c.plugin, c.nodes)

		r := s.score(ctx, &pb.ScoreRequest{Plugin: c.plugin, Cycle: 1, Generation: 2, Nodes: c.nodes, Normalize: true})
		check(name+": Score normalize", answer{r.Scores, r.Normalized}, final, r.Status)
		r = s.score(ctx, &pb.ScoreRequest{Plugin: c.plugin, Cycle: 1, Generation: 2, Nodes: c.nodes})
		check(name+": Score raw", answer{r.Scores, r.Normalized}, raw, r.Status)
		if c.normalized != nil {
			n := s.normalizeScore(ctx, &pb.NormalizeScoreRequest{Plugin: c.plugin, Cycle: 1, Generation: 2, Nodes: c.nodes, Scores: r.Scores})
			check(name+": NormalizeScore", answer{n.Scores, n.Normalized}, final, n.Status)
		}

		// Score ahead over the same nodes: node 9 fails the Filter and is not scored.
		batch := append([]uint32{9}, c.nodes...)
		for _, rawScores := range []bool{false, true} {
			f := s.filter(ctx, &pb.FilterRequest{Plugin: c.plugin, Cycle: 1, Generation: 2, Nodes: batch,
				ScoreFirst: uint32(len(c.nodes)), RawScores: rawScores})
			if f.Error != nil || f.Score == nil || len(f.Failures) != 1 {
				t.Fatalf("%s: score ahead (raw %v): %v", name, rawScores, f)
			}
			want := final
			if rawScores {
				want = raw
			}
			check(fmt.Sprintf("%s: score ahead raw_scores=%v", name, rawScores), answer{f.Score.Scores, f.Score.Normalized}, want, f.Score.Status)
		}
	}
	if r := s.normalizeScore(ctx, &pb.NormalizeScoreRequest{Plugin: "Plain", Cycle: 1, Generation: 2}); codeOf(r.Status) != pb.Code_ERROR {
		t.Fatalf("NormalizeScore of a plugin without one: %v", r)
	}
}
