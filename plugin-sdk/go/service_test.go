package switchyard

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// teamQuota admits at most two pods of team "x" per node, counted at PreFilter and
// kept current on what-if forks by AddPod/RemovePod.
type teamQuota struct {
	mu      sync.Mutex
	removed []string // pods RemovePod saw, to check the fork
	h       *Handle
}

func (*teamQuota) Name() string { return "TeamQuota" }

func (*teamQuota) PreFilter(_ context.Context, c *Cycle, st *CycleState) (*PreFilterResult, *Status) {
	s := &counts{m: map[string]int{}}
	for _, n := range c.Snapshot.Nodes() {
		for _, p := range n.Pods {
			if p.Labels["team"] == "x" {
				s.m[n.Name()]++
			}
		}
	}
	st.Write(s)
	return nil, nil
}

func (q *teamQuota) AddPod(_ context.Context, _ *Cycle, st *CycleState, p *Pod, n *NodeInfo) *Status {
	if p.Labels["team"] == "x" {
		st.Read().(*counts).m[n.Name()]++
	}
	return nil
}

func (q *teamQuota) RemovePod(_ context.Context, _ *Cycle, st *CycleState, p *Pod, n *NodeInfo) *Status {
	q.mu.Lock()
	q.removed = append(q.removed, p.Uid)
	q.mu.Unlock()
	if p.Labels["team"] == "x" {
		st.Read().(*counts).m[n.Name()]--
	}
	return nil
}

func (*teamQuota) Filter(_ context.Context, c *Cycle, st *CycleState, n *NodeInfo) *Status {
	if n.Node.Labels["panic"] == "yes" {
		panic("boom")
	}
	s, ok := st.Read().(*counts)
	if !ok {
		return Errorf("no state")
	}
	if s.m[n.Name()] >= 2 {
		return NewUnschedulable("team quota")
	}
	return nil
}

func (*teamQuota) Score(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) (int64, *Status) {
	return int64(len(n.Pods)) * 1000, nil
}

func (*teamQuota) NormalizeScore(_ context.Context, _ *Cycle, _ *CycleState, scores []int64) *Status {
	var max int64
	for _, s := range scores {
		if s > max {
			max = s
		}
	}
	for i := range scores {
		if max > 0 {
			scores[i] = scores[i] * 100 / max
		}
	}
	return nil
}

func (q *teamQuota) Permit(_ context.Context, _ *Cycle, _ *CycleState, _ string, h *Handle) (*Status, time.Duration) {
	q.mu.Lock()
	q.h = h
	q.mu.Unlock()
	return NewWait(), time.Second
}

// local is node-local: it answers at later generations too.
type local struct{}

func (local) Name() string    { return "Local" }
func (local) NodeLocal() bool { return true }
func (local) Filter(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) *Status {
	if n.Node.Labels["ok"] != "yes" {
		return NewUnschedulable("not ok")
	}
	return nil
}

func xpod(uid, node string) *Pod {
	return &Pod{Uid: uid, Name: uid, NodeName: node, Labels: map[string]string{"team": "x"}}
}

func testService(t *testing.T, wait time.Duration) (*service, *teamQuota, *session) {
	t.Helper()
	q := &teamQuota{}
	opts := DefaultOptions("unix:///unused")
	opts.GenerationWait = wait
	svc := newService([]Plugin{q, local{}}, opts)
	return svc, q, svc.fallback
}

func applyAll(t *testing.T, s *session, st *replState, msgs ...*pb.ReplicateRequest) {
	t.Helper()
	for _, m := range msgs {
		if err := s.apply(m, st); err != nil {
			t.Fatalf("apply %d: %v", m.Generation, err)
		}
	}
}

func full(g uint64, nodes []*Node, pods []*Pod) *pb.ReplicateRequest {
	return &pb.ReplicateRequest{Generation: g, Kind: &pb.ReplicateRequest_Delta{Delta: &pb.SnapshotDelta{Full: true, UpsertNodes: nodes, UpsertPods: pods}}}
}

func delta(g uint64, d *pb.SnapshotDelta) *pb.ReplicateRequest {
	return &pb.ReplicateRequest{Generation: g, Kind: &pb.ReplicateRequest_Delta{Delta: d}}
}

func start(g, cycle uint64, p *Pod) *pb.ReplicateRequest {
	return &pb.ReplicateRequest{Generation: g, Kind: &pb.ReplicateRequest_CycleStart{CycleStart: &pb.CycleStart{Cycle: cycle, Pod: p}}}
}

func end(g, cycle uint64) *pb.ReplicateRequest {
	return &pb.ReplicateRequest{Generation: g, Kind: &pb.ReplicateRequest_CycleEnd{CycleEnd: &pb.CycleEnd{Cycle: cycle}}}
}

func codeOf(s *pb.Status) pb.Code { return s.GetCode() }

func TestReplicateChecksFirstMessageAndGaps(t *testing.T) {
	_, _, s := testService(t, time.Second)
	var st replState
	if err := s.apply(delta(1, &pb.SnapshotDelta{}), &st); err == nil || !strings.Contains(err.Error(), "full snapshot") {
		t.Fatalf("first message not full: %v", err)
	}
	applyAll(t, s, &st, full(1, []*Node{node(1, "a")}, nil))
	if err := s.apply(delta(3, &pb.SnapshotDelta{}), &st); err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("gap: %v", err)
	}
	if err := s.apply(&pb.ReplicateRequest{Generation: 2}, &st); err == nil {
		t.Fatal("an empty message was applied")
	}
	// A full snapshot starts over at any generation and drops every cycle (R6).
	applyAll(t, s, &st, start(2, 7, xpod("q", "")), full(1, []*Node{node(1, "a")}, nil))
	if _, st := s.cycle(context.Background(), 7, 2, false); st == nil {
		t.Fatal("a cycle survived a full snapshot")
	}
}

func TestWhatIfDeltasForkTheState(t *testing.T) {
	_, q, s := testService(t, time.Second)
	var st replState
	applyAll(t, s, &st,
		full(1, []*Node{node(1, "a"), node(2, "b")}, []*Pod{xpod("p1", "a"), xpod("p2", "a")}),
		start(2, 1, xpod("me", "")))
	ctx := context.Background()
	pf := s.preFilter(ctx, &pb.PreFilterRequest{RequestId: 1, Plugin: "TeamQuota", Cycle: 1, Generation: 2})
	if codeOf(pf.Status) != pb.Code_SUCCESS || pf.Generation != 2 {
		t.Fatalf("PreFilter: %v", pf)
	}
	req := &pb.FilterRequest{RequestId: 2, Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1, 1, 2, 2},
		Deltas: []*pb.NodeDelta{
			{Index: 1, RemovePods: []string{"p1"}},                                          // a: 2-1 fits
			{Index: 2, AddPods: []string{"p1", "p2"}},                                       // b: 0+2 full
			{Index: 3, AddPodObjects: []*Pod{xpod("n1", "")}, RemovePods: []string{"nope"}}, // not on b
		}}
	r := s.filter(ctx, req)
	if r.Error != nil || r.Evaluated != 4 || r.Generation != 2 || r.RequestId != 2 {
		t.Fatalf("Filter: %v", r)
	}
	got := map[uint32]pb.Code{}
	for _, f := range r.Failures {
		got[f.Index] = f.Status.Code
	}
	want := map[uint32]pb.Code{0: pb.Code_UNSCHEDULABLE, 2: pb.Code_UNSCHEDULABLE, 3: pb.Code_ERROR}
	if len(got) != len(want) {
		t.Fatalf("failures %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("failures %v, want %v", got, want)
		}
	}
	if len(q.removed) != 1 || q.removed[0] != "p1" {
		t.Fatalf("RemovePod saw %v", q.removed)
	}
	// The cycle's own state and the replica are untouched by the forks.
	r = s.filter(ctx, &pb.FilterRequest{RequestId: 3, Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1, 2}})
	if len(r.Failures) != 1 || r.Failures[0].Index != 0 {
		t.Fatalf("after the forks: %v", r.Failures)
	}
	if len(s.replica.Node(1).Pods) != 2 || len(s.replica.Node(2).Pods) != 0 {
		t.Fatal("a what-if delta changed the replica")
	}
}

func TestGroupFailures(t *testing.T) {
	st := func(c pb.Code, reasons ...string) *pb.Status { return &pb.Status{Code: c, Reasons: reasons} }
	failures := []*pb.NodeStatus{
		{Index: 0, Status: st(pb.Code_UNSCHEDULABLE, "busy", "no gpu")},
		{Index: 1, Status: st(pb.Code_UNSCHEDULABLE, "no gpu")},
		{Index: 2, Status: st(pb.Code_UNSCHEDULABLE, "busy", "no gpu")},
		{Index: 3, Status: st(pb.Code_UNSCHEDULABLE_AND_UNRESOLVABLE, "no gpu")},
		{Index: 4, Status: st(pb.Code_ERROR)},
		{Index: 5, Status: st(pb.Code_UNSCHEDULABLE, "no gpu")},
		{Index: 6, Status: st(pb.Code_ERROR)},
		// Joined naively these would collide with each other or with the above.
		{Index: 7, Status: st(pb.Code_ERROR, "")},
		{Index: 8, Status: st(pb.Code_UNSCHEDULABLE, "busy\x00no gpu")},
	}
	got := ""
	for _, g := range groupFailures(failures) {
		got += fmt.Sprintf("%v%q%v ", g.GetStatus().GetCode(), g.GetStatus().GetReasons(), g.GetIndices())
	}
	want := `UNSCHEDULABLE["busy" "no gpu"][0 2] UNSCHEDULABLE["no gpu"][1 5] ` +
		`UNSCHEDULABLE_AND_UNRESOLVABLE["no gpu"][3] ERROR[][4 6] ERROR[""][7] UNSCHEDULABLE["busy\x00no gpu"][8] `
	if got != want {
		t.Fatalf("groups %s, want %s", got, want)
	}
	if groups := groupFailures(nil); len(groups) != 0 {
		t.Fatalf("no failures: %v", groups)
	}

	// Through FilterBatch: each call answers as the scheduler asked.
	_, _, s := testService(t, time.Second)
	var rs replState
	applyAll(t, s, &rs,
		full(1, []*Node{node(1, "a"), node(2, "b"), {Id: 3, Name: "c", Labels: map[string]string{"ok": "yes"}}}, nil),
		start(2, 1, xpod("me", "")))
	call := func(id uint64, group bool) *pb.FilterRequest {
		return &pb.FilterRequest{RequestId: id, Plugin: "Local", Cycle: 1, Generation: 2, Nodes: []uint32{1, 3, 2}, GroupFailures: group}
	}
	r := s.filterMany(context.Background(), &pb.FilterBatchRequest{Calls: []*pb.FilterRequest{call(1, true), call(2, false)}})
	if len(r.Replies) != 2 {
		t.Fatalf("replies: %v", r)
	}
	for _, c := range []struct {
		reply            *pb.FilterResponse
		groups, failures string
	}{
		{r.Replies[0], `UNSCHEDULABLE["not ok"][0 2] `, ``},
		{r.Replies[1], ``, `0:UNSCHEDULABLE["not ok"] 2:UNSCHEDULABLE["not ok"] `},
	} {
		groups, failures := "", ""
		for _, g := range c.reply.FailureGroups {
			groups += fmt.Sprintf("%v%q%v ", g.Status.Code, g.Status.Reasons, g.Indices)
		}
		for _, f := range c.reply.Failures {
			failures += fmt.Sprintf("%d:%v%q ", f.Index, f.Status.Code, f.Status.Reasons)
		}
		if c.reply.Error != nil || c.reply.Evaluated != 3 || groups != c.groups || failures != c.failures {
			t.Fatalf("reply %d: groups %s failures %s, want %s %s (%v)", c.reply.RequestId, groups, failures, c.groups, c.failures, c.reply)
		}
	}
}

func TestMalformedCallsAreErrorStatuses(t *testing.T) {
	_, _, s := testService(t, 50*time.Millisecond)
	var st replState
	applyAll(t, s, &st, full(1, []*Node{node(1, "a"), {Id: 2, Name: "boom", Labels: map[string]string{"panic": "yes"}}}, nil), start(2, 1, xpod("me", "")))
	ctx := context.Background()
	s.preFilter(ctx, &pb.PreFilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2})
	for name, req := range map[string]*pb.FilterRequest{
		"unknown node":     {Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{9}},
		"delta index":      {Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1}, Deltas: []*pb.NodeDelta{{Index: 5}}},
		"nil delta":        {Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1}, Deltas: []*pb.NodeDelta{nil}},
		"unknown plugin":   {Plugin: "Nope", Cycle: 1, Generation: 2},
		"ended cycle":      {Plugin: "TeamQuota", Cycle: 9, Generation: 2},
		"wrong generation": {Plugin: "TeamQuota", Cycle: 1, Generation: 1},
		"never reached":    {Plugin: "TeamQuota", Cycle: 1, Generation: 99},
	} {
		if r := s.filter(ctx, req); codeOf(r.Error) != pb.Code_ERROR {
			t.Errorf("%s: %v", name, r)
		}
	}
	// A panicking plugin fails that item, not the sidecar.
	r := s.filter(ctx, &pb.FilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1, 2}})
	if r.Error != nil || len(r.Failures) != 1 || r.Failures[0].Status.Code != pb.Code_ERROR || !strings.Contains(r.Failures[0].Status.Reasons[0], "panicked") {
		t.Fatalf("panic: %v", r)
	}
	// Points the plugin lacks are Errors.
	if r := s.preEnqueue(ctx, &pb.PreEnqueueRequest{Plugin: "TeamQuota"}); codeOf(r.Status) != pb.Code_ERROR {
		t.Fatalf("PreEnqueue: %v", r)
	}
	if r := s.cycleCall(ctx, &pb.CycleRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2}, pointBind); codeOf(r.Status) != pb.Code_ERROR || r.Generation != 2 {
		t.Fatalf("Bind: %v", r)
	}
	if r := s.normalizeScore(ctx, &pb.NormalizeScoreRequest{Plugin: "Local", Cycle: 1, Generation: 2}); codeOf(r.Status) != pb.Code_ERROR {
		t.Fatalf("NormalizeScore: %v", r)
	}
}

func TestGenerationsAreWaitedForAndPinned(t *testing.T) {
	_, _, s := testService(t, 2*time.Second)
	var st replState
	applyAll(t, s, &st, full(1, []*Node{node(1, "a")}, nil), start(2, 1, xpod("me", "")))
	ctx := context.Background()
	// A call naming a generation not applied yet waits for it (C1).
	done := make(chan *pb.FilterResponse)
	go func() {
		done <- s.filter(ctx, &pb.FilterRequest{Plugin: "Local", Cycle: 3, Generation: 3, Nodes: []uint32{1}})
	}()
	time.Sleep(20 * time.Millisecond)
	applyAll(t, s, &st, start(3, 3, xpod("next", "")))
	if r := <-done; r.Error != nil || r.Generation != 3 {
		t.Fatalf("waited call: %v", r)
	}
	// The replica moves on: a node-local plugin answers cycle 1 at the later
	// generation (C2), the others refuse it.
	applyAll(t, s, &st, delta(4, &pb.SnapshotDelta{UpsertNodes: []*Node{{Id: 1, Name: "a", Labels: map[string]string{"ok": "yes"}}}}))
	if r := s.filter(ctx, &pb.FilterRequest{Plugin: "Local", Cycle: 1, Generation: 4, Nodes: []uint32{1}}); r.Error != nil || len(r.Failures) != 0 || r.Generation != 4 {
		t.Fatalf("node-local at a later generation: %v", r)
	}
	if r := s.filter(ctx, &pb.FilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 4, Nodes: []uint32{1}}); r.Error == nil {
		t.Fatal("a plugin that is not node-local answered at a later generation")
	}
	if r := s.filter(ctx, &pb.FilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1}}); r.Error == nil {
		t.Fatal("a plugin that is not node-local answered from a replica that moved on")
	}
	// CycleEnd drops the cycle (C3).
	applyAll(t, s, &st, end(5, 1))
	if r := s.filter(ctx, &pb.FilterRequest{Plugin: "Local", Cycle: 1, Generation: 5, Nodes: []uint32{1}}); r.Error == nil {
		t.Fatal("an ended cycle was answered")
	}
}

func TestScoreAheadAndNormalize(t *testing.T) {
	_, _, s := testService(t, time.Second)
	var st replState
	applyAll(t, s, &st, full(1, []*Node{node(1, "a"), node(2, "b"), node(3, "c")},
		[]*Pod{xpod("p1", "a"), xpod("p2", "a"), {Uid: "p3", NodeName: "b"}}), start(2, 1, xpod("me", "")))
	ctx := context.Background()
	s.preFilter(ctx, &pb.PreFilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2})
	r := s.filter(ctx, &pb.FilterRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{1, 2, 3}, ScoreFirst: 2})
	if r.Score == nil || !r.Score.Normalized || len(r.Score.Scores) != 2 || r.Score.Scores[0] != 100 || r.Score.Scores[1] != 0 {
		t.Fatalf("score ahead over b, c: %v", r.Score)
	}
	sc := s.score(ctx, &pb.ScoreRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{2, 3}, Normalize: true})
	if !sc.Normalized || sc.Scores[0] != r.Score.Scores[0] || sc.Scores[1] != r.Score.Scores[1] {
		t.Fatalf("Score with normalize %v differs from score ahead %v", sc, r.Score)
	}
	raw := s.score(ctx, &pb.ScoreRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{2, 3}})
	if raw.Normalized || raw.Scores[0] != 1000 {
		t.Fatalf("raw scores: %v", raw)
	}
	n := s.normalizeScore(ctx, &pb.NormalizeScoreRequest{Plugin: "TeamQuota", Cycle: 1, Generation: 2, Nodes: []uint32{2, 3}, Scores: raw.Scores})
	if !n.Normalized || n.Scores[0] != 100 || n.Scores[1] != 0 {
		t.Fatalf("NormalizeScore: %v", n)
	}
}

// TestOverGRPC runs the service on an in-memory connection: handshake, a batched
// Replicate with acks, Filter, FilterBatch, and a Permit Wait followed by a decision
// on the same stream.
func TestOverGRPC(t *testing.T) {
	q := &teamQuota{}
	svc := newService([]Plugin{q, local{}}, DefaultOptions("unix:///unused"))
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StatsHandler(connTagger{svc}), grpc.CustomCodec(codec{})) //nolint:staticcheck
	pb.RegisterPluginServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, "bufnet", grpc.WithInsecure(),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return lis.Dial() }),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewPluginClient(conn)
	hs, err := c.Handshake(ctx, &pb.HandshakeRequest{ProtocolVersions: []string{"v1"}, Capabilities: []string{"filter-batch", "something-new"}})
	if err != nil || hs.ProtocolVersion != "v1" || len(hs.Capabilities) != 1 || hs.Capabilities[0] != "filter-batch" || len(hs.Plugins) != 2 {
		t.Fatalf("handshake: %v %v", hs, err)
	}
	if info := hs.Plugins[0]; !info.PreFilterExtensions || !info.NormalizeScore || info.NodeLocal {
		t.Fatalf("TeamQuota info: %v", info)
	}
	if _, err := c.Handshake(ctx, &pb.HandshakeRequest{ProtocolVersions: []string{"v0"}}); err == nil {
		t.Fatal("handshake without v1 succeeded")
	}
	rs, err := c.Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := full(1, []*Node{node(1, "a")}, nil)
	first.Ack = true
	second := start(2, 1, xpod("me", ""))
	second.Ack = true
	first.More = []*pb.ReplicateRequest{second}
	if err := rs.Send(first); err != nil {
		t.Fatal(err)
	}
	for _, g := range []uint64{1, 2} {
		if a, err := rs.Recv(); err != nil || a.AppliedGeneration != g {
			t.Fatalf("ack %d: %v %v", g, a, err)
		}
	}
	fs, _ := c.Filter(ctx)
	_ = fs.Send(&pb.FilterRequest{RequestId: 11, Plugin: "Local", Cycle: 1, Generation: 2, Nodes: []uint32{1, 1}})
	if r, err := fs.Recv(); err != nil || r.RequestId != 11 || r.Evaluated != 2 || len(r.Failures) != 2 {
		t.Fatalf("Filter: %v %v", r, err)
	}
	fb, _ := c.FilterBatch(ctx)
	_ = fb.Send(&pb.FilterBatchRequest{RequestId: 5, Calls: []*pb.FilterRequest{
		{RequestId: 12, Plugin: "Local", Cycle: 1, Generation: 2, Nodes: []uint32{1}},
		{RequestId: 13, Plugin: "Local", Cycle: 99, Generation: 2, Nodes: []uint32{1}},
	}})
	if r, err := fb.Recv(); err != nil || r.RequestId != 5 || len(r.Replies) != 2 || r.Replies[0].RequestId != 12 || r.Replies[1].Error == nil {
		t.Fatalf("FilterBatch: %v %v", r, err)
	}
	ps, _ := c.Permit(ctx)
	_ = ps.Send(&pb.CycleRequest{RequestId: 21, Plugin: "TeamQuota", Cycle: 1, Generation: 2, NodeName: "a"})
	r, err := ps.Recv()
	if err != nil || r.RequestId != 21 || r.Status.Code != pb.Code_WAIT || r.TimeoutMillis != 1000 {
		t.Fatalf("Permit: %v %v", r, err)
	}
	q.mu.Lock()
	h := q.h
	q.mu.Unlock()
	if pods := h.WaitingPods("TeamQuota"); len(pods) != 1 || pods[0].Uid != "me" {
		t.Fatalf("waiting: %v", pods)
	}
	if !h.Allow("TeamQuota", "me") || h.Allow("TeamQuota", "me") {
		t.Fatal("Allow should succeed once")
	}
	if d, err := ps.Recv(); err != nil || d.RequestId != 0 || d.Decision.GetPodUid() != "me" || !d.Decision.GetAllow() {
		t.Fatalf("decision: %v %v", d, err)
	}
	// A gap ends the Replicate stream with an error.
	_ = rs.Send(delta(9, &pb.SnapshotDelta{}))
	if _, err := rs.Recv(); err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("gap: %v", err)
	}
}

// filter-after-pre-filter: a Filter sent right behind its cycle's PreFilter waits
// for the PreFilter's outcome (even when it arrives first) and fails unless the
// PreFilter succeeded.
func TestFilterAfterPreFilterWaitsForItsOutcome(t *testing.T) {
	_, _, s := testService(t, time.Second)
	var st replState
	applyAll(t, s, &st,
		full(1, []*Node{node(1, "a"), node(2, "b")}, []*Pod{xpod("p1", "a"), xpod("p2", "a")}),
		start(2, 1, xpod("me", "")))
	ctx := context.Background()
	done := make(chan *pb.FilterResponse)
	go func() {
		done <- s.filter(ctx, &pb.FilterRequest{RequestId: 2, Plugin: "TeamQuota", Cycle: 1, Generation: 2,
			Nodes: []uint32{1, 2}, AfterPreFilter: true})
	}()
	select {
	case r := <-done:
		t.Fatalf("the Filter did not wait for its PreFilter: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if pf := s.preFilter(ctx, &pb.PreFilterRequest{RequestId: 1, Plugin: "TeamQuota", Cycle: 1, Generation: 2}); codeOf(pf.Status) != pb.Code_SUCCESS {
		t.Fatalf("PreFilter: %v", pf)
	}
	r := <-done
	if r.Error != nil || len(r.Failures) != 1 || r.Failures[0].Index != 0 {
		t.Fatalf("Filter behind the PreFilter: %v", r)
	}
	// A PreFilter that fails (Local has none): the Filter behind it fails too.
	applyAll(t, s, &st, start(3, 2, xpod("other", "")))
	if pf := s.preFilter(ctx, &pb.PreFilterRequest{RequestId: 3, Plugin: "Local", Cycle: 2, Generation: 3}); codeOf(pf.Status) != pb.Code_ERROR {
		t.Fatalf("PreFilter of a plugin without one: %v", pf)
	}
	r = s.filter(ctx, &pb.FilterRequest{RequestId: 4, Plugin: "Local", Cycle: 2, Generation: 3, Nodes: []uint32{1}, AfterPreFilter: true})
	if r.Error == nil || !strings.Contains(r.Error.String(), "no PreFilter") {
		t.Fatalf("a Filter behind a failed PreFilter: %v", r)
	}
	// One that never comes: the Filter gives up after GenerationWait.
	r = s.filter(ctx, &pb.FilterRequest{RequestId: 5, Plugin: "TeamQuota", Cycle: 2, Generation: 3, Nodes: []uint32{1}, AfterPreFilter: true})
	if r.Error == nil || !strings.Contains(r.Error.String(), "did not arrive") {
		t.Fatalf("a Filter behind a PreFilter that never came: %v", r)
	}
}

// gate: Reserve refuses pods labelled deny; Permit counts the pods it ran for.
type gate struct {
	mu      sync.Mutex
	permits []string
}

func (*gate) Name() string { return "Gate" }
func (*gate) Reserve(_ context.Context, c *Cycle, _ *CycleState, _ string) *Status {
	if c.Pod.Labels["deny"] != "" {
		return NewUnschedulable("denied")
	}
	return nil
}
func (*gate) Unreserve(context.Context, *Cycle, *CycleState, string) {}
func (g *gate) Permit(_ context.Context, c *Cycle, _ *CycleState, _ string, _ *Handle) (*Status, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.permits = append(g.permits, c.Pod.Uid)
	return nil, 0
}

// permit-after-reserve: a Permit sent right behind its cycle's Reserve waits for the
// Reserve's outcome (even when it arrives first) and runs only if it succeeded.
func TestPermitAfterReserveWaitsForItsOutcome(t *testing.T) {
	g := &gate{}
	opts := DefaultOptions("unix:///unused")
	opts.GenerationWait = time.Second
	s := newService([]Plugin{g}, opts).fallback
	var st replState
	denied := xpod("denied", "")
	denied.Labels["deny"] = "yes"
	applyAll(t, s, &st, full(1, []*Node{node(1, "a")}, nil), start(2, 1, xpod("me", "")), start(3, 2, denied))
	ctx := context.Background()
	done := make(chan *pb.PermitResponse)
	go func() {
		r, _ := s.permitCall(ctx, &pb.CycleRequest{RequestId: 2, Plugin: "Gate", Cycle: 1, Generation: 2, NodeName: "a", AfterReserve: true})
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("the Permit did not wait for its Reserve: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if r := s.cycleCall(ctx, &pb.CycleRequest{RequestId: 1, Plugin: "Gate", Cycle: 1, Generation: 2, NodeName: "a"}, pointReserve); codeOf(r.Status) != pb.Code_SUCCESS {
		t.Fatalf("Reserve: %v", r)
	}
	if r := <-done; codeOf(r.Status) != pb.Code_SUCCESS {
		t.Fatalf("Permit behind the Reserve: %v", r)
	}
	// A Reserve that refuses: the Permit behind it fails and the plugin's Permit never runs.
	if r := s.cycleCall(ctx, &pb.CycleRequest{RequestId: 3, Plugin: "Gate", Cycle: 2, Generation: 3, NodeName: "a"}, pointReserve); codeOf(r.Status) != pb.Code_UNSCHEDULABLE {
		t.Fatalf("Reserve of a denied pod: %v", r)
	}
	r, _ := s.permitCall(ctx, &pb.CycleRequest{RequestId: 4, Plugin: "Gate", Cycle: 2, Generation: 3, NodeName: "a", AfterReserve: true})
	if codeOf(r.Status) != pb.Code_ERROR || !strings.Contains(r.Status.String(), "behind a Reserve") {
		t.Fatalf("a Permit behind a refused Reserve: %v", r)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.permits) != 1 || g.permits[0] != "me" {
		t.Fatalf("Permit ran for %v", g.permits)
	}
}
