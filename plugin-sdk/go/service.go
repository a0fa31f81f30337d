package switchyard

import (
	"context"
	"fmt"
	"io"
	"log"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// ProtocolVersion is the contract version this SDK speaks.
const ProtocolVersion = "v1"

// The optional capabilities this SDK serves when the scheduler offers them.
const (
	CapabilityFilterBatch    = "filter-batch"
	CapabilityReplicateBatch = "replicate-batch"
)

// registered is a plugin with its extension points resolved once, by type
// assertion, at Serve.
type registered struct {
	p         Plugin
	name      string
	nodeLocal bool
	events    []*ClusterEvent
	// Alike pods, as declared (checkAlike vets them at Serve).
	signature     []PodField
	normalization ScoreNormalization

	preEnqueue PreEnqueuePlugin
	queueSort  QueueSortPlugin
	preFilter  PreFilterPlugin
	extensions PreFilterExtensions // only with preFilter
	filter     FilterPlugin
	postFilter PostFilterPlugin
	preScore   PreScorePlugin
	score      ScorePlugin
	normalize  ScoreExtensions // only with score: the plugin's own
	reserve    ReservePlugin
	permit     PermitPlugin
	preBind    PreBindPlugin
	bind       BindPlugin
	postBind   PostBindPlugin
}

func register(p Plugin) *registered {
	r := &registered{p: p, name: p.Name()}
	if n, ok := p.(NodeLocalPlugin); ok {
		r.nodeLocal = n.NodeLocal()
	}
	if e, ok := p.(EventsPlugin); ok {
		r.events = e.Events()
	}
	if sp, ok := p.(SignaturePlugin); ok {
		r.signature = append([]PodField(nil), sp.Signature()...)
	}
	if n, ok := p.(ScoreNormalizationPlugin); ok {
		r.normalization = n.ScoreNormalization()
	}
	r.preEnqueue, _ = p.(PreEnqueuePlugin)
	r.queueSort, _ = p.(QueueSortPlugin)
	r.preFilter, _ = p.(PreFilterPlugin)
	if r.preFilter != nil {
		r.extensions, _ = p.(PreFilterExtensions)
	}
	r.filter, _ = p.(FilterPlugin)
	r.postFilter, _ = p.(PostFilterPlugin)
	r.preScore, _ = p.(PreScorePlugin)
	r.score, _ = p.(ScorePlugin)
	if r.score != nil {
		r.normalize, _ = p.(ScoreExtensions)
	}
	r.reserve, _ = p.(ReservePlugin)
	r.permit, _ = p.(PermitPlugin)
	r.preBind, _ = p.(PreBindPlugin)
	r.bind, _ = p.(BindPlugin)
	r.postBind, _ = p.(PostBindPlugin)
	return r
}

// normalizes says whether the plugin has a NormalizeScore: its own, or a standard
// one it declared.
func (r *registered) normalizes() bool {
	return r.score != nil && (r.normalize != nil || standardNormalization(r.normalization))
}

// normalizeInPlace applies the plugin's NormalizeScore (see normalizes).
func (r *registered) normalizeInPlace(ctx context.Context, c *Cycle, state *CycleState, scores []int64) *Status {
	if NormalizeScores(r.normalization, scores) {
		return nil
	}
	return guard("NormalizeScore", func() *Status { return r.normalize.NormalizeScore(ctx, c, state, scores) })
}

func (r *registered) info() *pb.PluginInfo {
	var points []pb.ExtensionPoint
	add := func(has bool, e pb.ExtensionPoint) {
		if has {
			points = append(points, e)
		}
	}
	add(r.preEnqueue != nil, pb.ExtensionPoint_PRE_ENQUEUE)
	add(r.queueSort != nil, pb.ExtensionPoint_QUEUE_SORT)
	add(r.preFilter != nil, pb.ExtensionPoint_PRE_FILTER)
	add(r.filter != nil, pb.ExtensionPoint_FILTER)
	add(r.postFilter != nil, pb.ExtensionPoint_POST_FILTER)
	add(r.preScore != nil, pb.ExtensionPoint_PRE_SCORE)
	add(r.score != nil, pb.ExtensionPoint_SCORE)
	add(r.reserve != nil, pb.ExtensionPoint_RESERVE)
	add(r.permit != nil, pb.ExtensionPoint_PERMIT)
	add(r.preBind != nil, pb.ExtensionPoint_PRE_BIND)
	add(r.bind != nil, pb.ExtensionPoint_BIND)
	add(r.postBind != nil, pb.ExtensionPoint_POST_BIND)
	normalization := ScoreNormalizationCustom
	if r.score != nil {
		normalization = r.normalization
	}
	return &pb.PluginInfo{
		Name:                r.name,
		ExtensionPoints:     points,
		PreFilterExtensions: r.extensions != nil,
		NormalizeScore:      r.normalizes(),
		Events:              r.events,
		NodeLocal:           r.nodeLocal,
		Signature:           r.signature,
		ScoreNormalization:  normalization,
	}
}

// service implements pb.PluginServer. Everything a connection builds (replica,
// cycles, waiting pods) lives in a session of that connection, so a call on a new
// connection can never be answered from an old connection's replica (R6), even when
// its streams are read before the old connection's last messages.
type service struct {
	pb.UnimplementedPluginServer

	plugins []*registered
	byName  map[string]int
	opts    Options
	handle  *Handle
	tracer  *otlp.Exporter // nil: no spans (see trace.go)

	mu       sync.Mutex
	sessions map[uint64]*session
	nextConn uint64
	// For streams without a connection tag (the service used without Serve).
	fallback *session
}

func newService(plugins []Plugin, opts Options) *service {
	svc := &service{byName: map[string]int{}, opts: opts, sessions: map[uint64]*session{}}
	for i, p := range plugins {
		svc.plugins = append(svc.plugins, register(p))
		svc.byName[p.Name()] = i
	}
	svc.handle = &Handle{svc: svc}
	svc.fallback = svc.newSession()
	return svc
}

// ---------------------------------------------------------------- connections

type connKey struct{}

// connTagger is a grpc stats.Handler that gives every connection its own session.
type connTagger struct{ svc *service }

func (t connTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	t.svc.mu.Lock()
	t.svc.nextConn++
	id := t.svc.nextConn
	t.svc.sessions[id] = t.svc.newSession()
	t.svc.mu.Unlock()
	return context.WithValue(ctx, connKey{}, id)
}

func (t connTagger) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	if id, ok := ctx.Value(connKey{}).(uint64); ok {
		t.svc.mu.Lock()
		delete(t.svc.sessions, id)
		t.svc.mu.Unlock()
	}
}

func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTagger) HandleRPC(context.Context, stats.RPCStats)                       {}

// session returns the session of the connection a stream belongs to.
func (svc *service) session(ctx context.Context) *session {
	id, ok := ctx.Value(connKey{}).(uint64)
	if !ok {
		return svc.fallback
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if s, ok := svc.sessions[id]; ok {
		return s
	}
	// The connection already ended: answer from an empty session (errors).
	return svc.newSession()
}

func (svc *service) allSessions() []*session {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	out := []*session{svc.fallback}
	for _, s := range svc.sessions {
		out = append(out, s)
	}
	return out
}

// ---------------------------------------------------------------- session

// cycleEntry is one scheduling attempt (CycleStart to CycleEnd).
type cycleEntry struct {
	id      uint64
	pod     *Pod
	profile string
	// generation of the CycleStart message: the cycle's calls name it.
	generation uint64
	// snapshotGeneration is the replica generation scheduling calls are evaluated at.
	snapshotGeneration uint64
	states             []*pluginState // by plugin index

	preMu     sync.Mutex
	preScores map[int]*Status // PreScore outcomes, for Score with after_pre_score
	preDone   chan struct{}   // closed and replaced at every outcome
}

type pluginState struct {
	mu sync.RWMutex
	st CycleState
}

func (e *cycleEntry) view(snap *Snapshot) *Cycle {
	return &Cycle{ID: e.id, Pod: e.pod, Profile: e.profile, Snapshot: snap}
}

func (e *cycleEntry) recordPreScore(idx int, s *Status) {
	e.preMu.Lock()
	e.preScores[idx] = s
	close(e.preDone)
	e.preDone = make(chan struct{})
	e.preMu.Unlock()
}

type waitingPod struct {
	pod     *Pod
	plugins []string
}

// permitStream serialises sends on one Permit stream (replies and decisions).
type permitStream struct {
	mu     sync.Mutex
	stream pb.Plugin_PermitServer
}

func (p *permitStream) send(r *pb.PermitResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stream.Send(r)
}

type session struct {
	svc *service

	replicaMu sync.RWMutex
	replica   *Snapshot

	genMu   sync.Mutex
	applied uint64        // generation of the last Replicate message applied
	genCh   chan struct{} // closed and replaced at every applied message

	cyclesMu sync.Mutex
	cycles   map[uint64]*cycleEntry

	waitMu  sync.Mutex
	waiting map[string]*waitingPod
	permit  *permitStream // the open Permit stream, for decisions
}

func (svc *service) newSession() *session {
	return &session{
		svc:     svc,
		replica: NewSnapshot(),
		genCh:   make(chan struct{}),
		cycles:  map[uint64]*cycleEntry{},
		waiting: map[string]*waitingPod{},
	}
}

func (s *session) setApplied(g uint64) {
	s.genMu.Lock()
	s.applied = g
	close(s.genCh)
	s.genCh = make(chan struct{})
	s.genMu.Unlock()
}

// reached waits (bounded) until the replica has applied generation g.
func (s *session) reached(ctx context.Context, g uint64) *Status {
	wait := s.svc.opts.GenerationWait
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.genMu.Lock()
		applied, ch := s.applied, s.genCh
		s.genMu.Unlock()
		if applied >= g {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return Errorf("generation %d not reached within %v (replica at %d)", g, wait, applied)
		case <-ctx.Done():
			return Errorf("generation %d not reached before the stream closed (replica at %d)", g, applied)
		}
	}
}

// replState is what a Replicate stream checks its messages against.
type replState struct {
	started bool
	expect  uint64
}

// apply applies one Replicate message; an error ends the stream (R2, R3).
func (s *session) apply(m *pb.ReplicateRequest, st *replState) error {
	g := m.GetGeneration()
	full := m.GetDelta().GetFull()
	switch {
	case !st.started && !full:
		return fmt.Errorf("the first message of a Replicate stream must be a full snapshot (got generation %d)", g)
	case st.started && !full && g != st.expect:
		return fmt.Errorf("generation gap: expected %d, got %d", st.expect, g)
	}
	switch k := m.GetKind().(type) {
	case *pb.ReplicateRequest_Delta:
		if full {
			s.cyclesMu.Lock()
			s.cycles = map[uint64]*cycleEntry{}
			s.cyclesMu.Unlock()
			s.waitMu.Lock()
			s.waiting = map[string]*waitingPod{}
			s.waitMu.Unlock()
		}
		s.replicaMu.Lock()
		var err error
		if k.Delta == nil {
			err = fmt.Errorf("generation %d: empty delta", g)
		} else {
			err = s.replica.apply(g, k.Delta)
		}
		s.replicaMu.Unlock()
		if err != nil {
			return err
		}
	case *pb.ReplicateRequest_CycleStart:
		pod := k.CycleStart.GetPod()
		if pod == nil {
			pod = &Pod{}
		}
		s.replicaMu.Lock()
		s.replica.noteCyclePod(pod)
		snapGen := s.replica.generation
		s.replicaMu.Unlock()
		e := &cycleEntry{
			id:                 k.CycleStart.GetCycle(),
			pod:                pod,
			profile:            k.CycleStart.GetProfile(),
			generation:         g,
			snapshotGeneration: snapGen,
			preScores:          map[int]*Status{},
			preDone:            make(chan struct{}),
		}
		for range s.svc.plugins {
			e.states = append(e.states, &pluginState{})
		}
		s.cyclesMu.Lock()
		s.cycles[e.id] = e
		s.cyclesMu.Unlock()
	case *pb.ReplicateRequest_CycleEnd:
		s.cyclesMu.Lock()
		e := s.cycles[k.CycleEnd.GetCycle()]
		delete(s.cycles, k.CycleEnd.GetCycle())
		s.cyclesMu.Unlock()
		if e != nil {
			s.waitMu.Lock()
			delete(s.waiting, e.pod.GetUid())
			s.waitMu.Unlock()
		}
	default:
		return fmt.Errorf("generation %d: empty Replicate message", g)
	}
	st.started, st.expect = true, g+1
	s.setApplied(g)
	return nil
}

func (s *session) plugin(name string) (int, *registered, *Status) {
	i, ok := s.svc.byName[name]
	if !ok {
		return 0, nil, Errorf("this sidecar serves no plugin named %q", name)
	}
	return i, s.svc.plugins[i], nil
}

// cycle returns the cycle a call names once the replica has reached the call's
// generation. A node-local plugin's call may name a generation after the cycle's
// start (relaxed, C2).
func (s *session) cycle(ctx context.Context, id, g uint64, relaxed bool) (*cycleEntry, *Status) {
	if st := s.reached(ctx, g); st != nil {
		return nil, st
	}
	s.cyclesMu.Lock()
	e := s.cycles[id]
	s.cyclesMu.Unlock()
	switch {
	case e == nil:
		return nil, Errorf("cycle %d is unknown (never started, or already ended)", id)
	case e.generation == g || (relaxed && e.generation <= g):
		return e, nil
	default:
		return nil, Errorf("cycle %d started at generation %d, not %d", id, e.generation, g)
	}
}

// replicaAt read-locks the replica for a scheduling call: it must still be at the
// cycle's generation, never later, unless the plugin is node-local (C2). The caller
// must call the returned unlock.
func (s *session) replicaAt(e *cycleEntry, relaxed bool) (*Snapshot, func(), *Status) {
	s.replicaMu.RLock()
	r := s.replica
	if !relaxed && r.generation != e.snapshotGeneration {
		s.replicaMu.RUnlock()
		return nil, nil, Errorf("the replica moved on to generation %d since cycle %d (at %d) started", r.generation, e.id, e.snapshotGeneration)
	}
	return r, s.replicaMu.RUnlock, nil
}

func nodesByID(r *Snapshot, ids []uint32) ([]*NodeInfo, *Status) {
	out := make([]*NodeInfo, len(ids))
	for i, id := range ids {
		n := r.Node(id)
		if n == nil {
			return nil, Errorf("unknown node id %d", id)
		}
		out[i] = n
	}
	return out, nil
}

// guard runs a plugin method, turning a panic into an Error status: a plugin bug
// fails that call, not the sidecar.
func guard(what string, f func() *Status) (s *Status) {
	defer func() {
		if r := recover(); r != nil {
			s = Errorf("%s panicked: %v", what, r)
		}
	}()
	return f()
}

func statusReply(id, g uint64, s *Status) *pb.StatusResponse {
	return &pb.StatusResponse{RequestId: id, Status: s.toPB(), Generation: g}
}

// ---------------------------------------------------------------- calls

func (s *session) preEnqueue(ctx context.Context, req *pb.PreEnqueueRequest) *pb.StatusResponse {
	_, p, st := s.plugin(req.GetPlugin())
	switch {
	case st != nil:
	case p.preEnqueue == nil:
		st = Errorf("plugin %q has no PreEnqueue", req.GetPlugin())
	case req.GetPod() == nil:
		st = Errorf("PreEnqueue request without a pod")
	default:
		st = guard("PreEnqueue", func() *Status { return p.preEnqueue.PreEnqueue(ctx, req.GetPod()) })
	}
	return statusReply(req.GetRequestId(), 0, st)
}

func (s *session) queueSort(ctx context.Context, req *pb.QueueSortRequest) *pb.QueueSortResponse {
	out := &pb.QueueSortResponse{RequestId: req.GetRequestId()}
	_, p, st := s.plugin(req.GetPlugin())
	switch {
	case st != nil:
	case p.queueSort == nil || req.GetPod() == nil:
		st = Errorf("plugin %q has no QueueSort, or the request has no pod", req.GetPlugin())
	default:
		var key []byte
		st = guard("QueueSort", func() *Status { key = p.queueSort.SortKey(ctx, req.GetPod()); return nil })
		out.SortKey = key
	}
	out.Status = st.toPB()
	return out
}

func (s *session) preFilter(ctx context.Context, req *pb.PreFilterRequest) *pb.PreFilterResponse {
	out := &pb.PreFilterResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	res, st := func() (*PreFilterResult, *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return nil, st
		}
		if p.preFilter == nil {
			return nil, Errorf("plugin %q has no PreFilter", req.GetPlugin())
		}
		snap, unlock, st := s.replicaAt(e, p.nodeLocal)
		if st != nil {
			return nil, st
		}
		defer unlock()
		ps := e.states[idx]
		ps.mu.Lock()
		defer ps.mu.Unlock()
		var res *PreFilterResult
		st = guard("PreFilter", func() *Status {
			var st *Status
			res, st = p.preFilter.PreFilter(ctx, e.view(snap), &ps.st)
			return st
		})
		if res != nil && res.NodeNames != nil {
			for _, n := range res.NodeNames {
				if snap.NodeByName(n) == nil {
					return nil, Errorf("PreFilter of %q named node %q, which the replica does not hold", req.GetPlugin(), n)
				}
			}
		}
		return res, st
	}()
	out.Status = st.toPB()
	if res != nil && res.NodeNames != nil && st.IsSuccess() {
		out.HasNodeNames = true
		out.NodeNames = append([]string{}, res.NodeNames...)
	}
	return out
}

func (s *session) filter(ctx context.Context, req *pb.FilterRequest) *pb.FilterResponse {
	return traced(ctx, s.svc, "Filter", req.GetPlugin(), req.GetTraceparent(), cycleAttrs(req.GetCycle(), len(req.GetNodes())),
		func(ctx context.Context) *pb.FilterResponse { return s.filterTraced(ctx, req) },
		(*pb.FilterResponse).GetError)
}

func (s *session) filterTraced(ctx context.Context, req *pb.FilterRequest) *pb.FilterResponse {
	out := &pb.FilterResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	failures, ahead, st := s.filterCall(ctx, req)
	if st != nil {
		out.Error = st.toPB()
		return out
	}
	out.Evaluated = uint32(len(req.GetNodes()))
	if req.GetGroupFailures() {
		out.FailureGroups = groupFailures(failures)
	} else {
		out.Failures = failures
	}
	out.Score = ahead
	return out
}

// groupFailures groups a Filter reply's failures by status
// (FilterRequest.group_failures): each distinct status (code and reasons) once,
// with the indices of the items failing with it, in item order. Groups come in the
// order of their first item.
func groupFailures(failures []*pb.NodeStatus) []*pb.FailureGroup {
	type key struct {
		code    pb.Code
		reasons string
	}
	var groups []*pb.FailureGroup
	index := map[key]*pb.FailureGroup{}
	for _, f := range failures {
		st := f.GetStatus()
		k := key{st.GetCode(), joinReasons(st.GetReasons())}
		g, ok := index[k]
		if !ok {
			g = &pb.FailureGroup{Status: &pb.Status{Code: st.GetCode(), Reasons: st.GetReasons()}}
			index[k] = g
			groups = append(groups, g)
		}
		g.Indices = append(g.Indices, f.GetIndex())
	}
	return groups
}

// joinReasons encodes a list of reasons as one string that no other list encodes
// to: each reason is prefixed with its length, so texts holding any byte (NUL
// included) and empty reasons stay apart.
func joinReasons(reasons []string) string {
	var b strings.Builder
	for _, r := range reasons {
		b.WriteString(strconv.Itoa(len(r)))
		b.WriteByte(':')
		b.WriteString(r)
	}
	return b.String()
}

func (s *session) filterCall(ctx context.Context, req *pb.FilterRequest) ([]*pb.NodeStatus, *pb.ScoreAhead, *Status) {
	idx, p, st := s.plugin(req.GetPlugin())
	if st != nil {
		return nil, nil, st
	}
	e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
	if st != nil {
		return nil, nil, st
	}
	if p.filter == nil {
		return nil, nil, Errorf("plugin %q has no Filter", req.GetPlugin())
	}
	snap, unlock, st := s.replicaAt(e, p.nodeLocal)
	if st != nil {
		return nil, nil, st
	}
	defer unlock()
	ps := e.states[idx]
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	c := e.view(snap)
	nodes, st := nodesByID(snap, req.GetNodes())
	if st != nil {
		return nil, nil, st
	}
	deltas := make([]*pb.NodeDelta, len(nodes))
	for _, d := range req.GetDeltas() {
		if d == nil || int(d.GetIndex()) >= len(nodes) {
			return nil, nil, Errorf("delta for item %d of a batch of %d", d.GetIndex(), len(nodes))
		}
		deltas[d.GetIndex()] = d
	}
	eval := func(i int) *Status {
		return guard("Filter", func() *Status {
			if deltas[i] == nil {
				return p.filter.Filter(ctx, c, &ps.st, nodes[i])
			}
			return filterWithDelta(ctx, p, c, &ps.st, nodes[i], deltas[i])
		})
	}
	results := make([]*Status, len(nodes))
	s.svc.forEach(len(nodes), func(i int) { results[i] = eval(i) })
	var failures []*pb.NodeStatus
	failed := make([]bool, len(nodes))
	for i, r := range results {
		if !r.IsSuccess() {
			failed[i] = true
			failures = append(failures, &pb.NodeStatus{Index: uint32(i), Status: r.toPB()})
		}
	}
	var ahead *pb.ScoreAhead
	if req.GetScoreFirst() > 0 {
		ahead = s.scoreAhead(ctx, req, p, c, &ps.st, nodes, deltas, failed)
	}
	return failures, ahead, nil
}

// forEach runs f for 0..n-1, on several goroutines when n reaches the parallel
// threshold.
func (svc *service) forEach(n int, f func(int)) {
	t := svc.opts.ParallelThreshold
	if t <= 0 || n < t {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	workers := runtime.GOMAXPROCS(0)
	if workers > n {
		workers = n
	}
	var next int64 = -1
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// filterWithDelta runs Filter on a what-if copy of the node: the delta's pods
// removed and added, the plugin's state forked and updated by its RemovePod and
// AddPod (removals first, as upstream's dry run) (F5).
func filterWithDelta(ctx context.Context, p *registered, c *Cycle, base *CycleState, node *NodeInfo, d *pb.NodeDelta) *Status {
	ni := node.clone()
	state := base.Clone()
	for _, uid := range d.GetRemovePods() {
		pod := ni.removePod(uid)
		if pod == nil {
			return Errorf("delta removes pod %s, which is not on node %s", uid, node.Name())
		}
		if p.extensions != nil {
			if st := p.extensions.RemovePod(ctx, c, state, pod, ni); !st.IsSuccess() {
				return Errorf("RemovePod: %s", st.Message())
			}
		}
	}
	adds := make([]*Pod, 0, len(d.GetAddPods())+len(d.GetAddPodObjects()))
	for _, uid := range d.GetAddPods() {
		pod := c.Snapshot.Pod(uid)
		if pod == nil {
			return Errorf("delta adds pod %s, which the replica does not hold", uid)
		}
		adds = append(adds, pod)
	}
	for _, pod := range d.GetAddPodObjects() {
		if pod == nil {
			return Errorf("delta adds an empty pod object")
		}
		adds = append(adds, pod)
	}
	for _, pod := range adds {
		if pod.GetNodeName() != ni.Name() {
			cp := clonePod(pod)
			cp.NodeName = ni.Name()
			pod = cp
		}
		ni.Pods = append(ni.Pods, pod)
		if p.extensions != nil {
			if st := p.extensions.AddPod(ctx, c, state, pod, ni); !st.IsSuccess() {
				return Errorf("AddPod: %s", st.Message())
			}
		}
	}
	return p.filter.Filter(ctx, c, state, ni)
}

// scoreAhead runs PreScore (on a fork of the state), Score and NormalizeScore over
// the first score_first passing items of a Filter call (SC3).
func (s *session) scoreAhead(ctx context.Context, req *pb.FilterRequest, p *registered, c *Cycle, state *CycleState, nodes []*NodeInfo, deltas []*pb.NodeDelta, failed []bool) *pb.ScoreAhead {
	if p.score == nil {
		return nil
	}
	var scored []*NodeInfo
	for i := range nodes {
		if len(scored) == int(req.GetScoreFirst()) {
			break
		}
		if failed[i] {
			continue
		}
		if deltas[i] != nil {
			return nil // items with a delta are never scored ahead
		}
		scored = append(scored, nodes[i])
	}
	if req.GetPreScore() && p.preScore != nil {
		fork := state.Clone()
		if st := guard("PreScore", func() *Status { return p.preScore.PreScore(ctx, c, fork, scored) }); !st.IsSuccess() {
			return &pb.ScoreAhead{Status: st.toPB()}
		}
		state = fork
	}
	// raw_scores: the scheduler keeps raw scores to reuse for alike pods and
	// normalises them itself.
	scores, normalized, st := s.scoreNodes(ctx, p, c, state, scored, !req.GetRawScores())
	if st != nil {
		return &pb.ScoreAhead{Status: st.toPB()}
	}
	return &pb.ScoreAhead{Status: (*Status)(nil).toPB(), Scores: scores, Normalized: normalized}
}

// scoreNodes scores nodes, then normalises when asked and the plugin can; the flag
// says whether the scores are final (0..100, checked): a plugin without a
// NormalizeScore returns final scores whatever was asked.
func (s *session) scoreNodes(ctx context.Context, p *registered, c *Cycle, state *CycleState, nodes []*NodeInfo, normalize bool) ([]int64, bool, *Status) {
	scores := make([]int64, len(nodes))
	errs := make([]*Status, len(nodes))
	s.svc.forEach(len(nodes), func(i int) {
		errs[i] = guard("Score", func() *Status {
			v, st := p.score.Score(ctx, c, state, nodes[i])
			scores[i] = v
			return st
		})
	})
	for _, st := range errs {
		if !st.IsSuccess() {
			return nil, false, st
		}
	}
	if p.normalizes() {
		if !normalize {
			return scores, false, nil
		}
		if st := p.normalizeInPlace(ctx, c, state, scores); !st.IsSuccess() {
			return nil, false, st
		}
	}
	if st := checkRange(p.name, scores, nodes); st != nil {
		return nil, false, st
	}
	return scores, true, nil
}

// checkRange refuses final scores outside 0..100 with a clear error, instead of
// letting the scheduler reject the reply (SC1).
func checkRange(plugin string, scores []int64, nodes []*NodeInfo) *Status {
	for i, v := range scores {
		if v < 0 || v > 100 {
			name := ""
			if i < len(nodes) && nodes[i] != nil {
				name = " for node " + nodes[i].Name()
			}
			return Errorf("plugin %q scored %d%s: final scores must be in 0..100 (normalise them with NormalizeScore)", plugin, v, name)
		}
	}
	return nil
}

func (s *session) filterMany(ctx context.Context, req *pb.FilterBatchRequest) *pb.FilterBatchResponse {
	// One bounded wait for the latest generation the calls name: a replica that
	// never gets there fails them all at once, not one wait after another.
	var latest uint64
	for _, c := range req.GetCalls() {
		if c.GetGeneration() > latest {
			latest = c.GetGeneration()
		}
	}
	missed := s.reached(ctx, latest)
	out := &pb.FilterBatchResponse{RequestId: req.GetRequestId()}
	for _, call := range req.GetCalls() {
		if call == nil {
			call = &pb.FilterRequest{}
		}
		if missed != nil {
			out.Replies = append(out.Replies, &pb.FilterResponse{RequestId: call.GetRequestId(), Generation: call.GetGeneration(), Error: missed.toPB()})
			continue
		}
		out.Replies = append(out.Replies, s.filter(ctx, call))
	}
	return out
}

func (s *session) preScore(ctx context.Context, req *pb.PreScoreRequest) *pb.StatusResponse {
	st := func() *Status {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return st
		}
		st = func() *Status {
			if p.preScore == nil {
				return Errorf("plugin %q has no PreScore", req.GetPlugin())
			}
			snap, unlock, st := s.replicaAt(e, p.nodeLocal)
			if st != nil {
				return st
			}
			defer unlock()
			nodes, st := nodesByID(snap, req.GetNodes())
			if st != nil {
				return st
			}
			ps := e.states[idx]
			ps.mu.Lock()
			defer ps.mu.Unlock()
			return guard("PreScore", func() *Status { return p.preScore.PreScore(ctx, e.view(snap), &ps.st, nodes) })
		}()
		e.recordPreScore(idx, st)
		return st
	}()
	return statusReply(req.GetRequestId(), req.GetGeneration(), st)
}

// preScoreOutcome waits (bounded) for this cycle's PreScore of plugin idx, sent
// just before a Score with after_pre_score.
func (s *session) preScoreOutcome(ctx context.Context, e *cycleEntry, idx int) *Status {
	wait := s.svc.opts.GenerationWait
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		e.preMu.Lock()
		st, done := e.preScores[idx]
		ch := e.preDone
		e.preMu.Unlock()
		if done {
			return st
		}
		select {
		case <-ch:
		case <-timer.C:
			return Errorf("Score named a PreScore of cycle %d that did not arrive within %v", e.id, wait)
		case <-ctx.Done():
			return Errorf("the stream closed while Score waited for the PreScore of cycle %d", e.id)
		}
	}
}

func (s *session) score(ctx context.Context, req *pb.ScoreRequest) *pb.ScoreResponse {
	out := &pb.ScoreResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	scores, normalized, st := func() ([]int64, bool, *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, false, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return nil, false, st
		}
		if p.score == nil {
			return nil, false, Errorf("plugin %q has no Score", req.GetPlugin())
		}
		if req.GetAfterPreScore() {
			if st := s.preScoreOutcome(ctx, e, idx); !st.IsSuccess() {
				return nil, false, st
			}
		}
		snap, unlock, st := s.replicaAt(e, p.nodeLocal)
		if st != nil {
			return nil, false, st
		}
		defer unlock()
		nodes, st := nodesByID(snap, req.GetNodes())
		if st != nil {
			return nil, false, st
		}
		ps := e.states[idx]
		ps.mu.RLock()
		defer ps.mu.RUnlock()
		return s.scoreNodes(ctx, p, e.view(snap), &ps.st, nodes, req.GetNormalize())
	}()
	out.Status = st.toPB()
	if st == nil {
		out.Scores, out.Normalized = scores, normalized
	}
	return out
}

func (s *session) normalizeScore(ctx context.Context, req *pb.NormalizeScoreRequest) *pb.ScoreResponse {
	out := &pb.ScoreResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	scores, st := func() ([]int64, *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return nil, st
		}
		if !p.normalizes() {
			return nil, Errorf("plugin %q has no NormalizeScore", req.GetPlugin())
		}
		snap, unlock, st := s.replicaAt(e, p.nodeLocal)
		if st != nil {
			return nil, st
		}
		defer unlock()
		scores := append([]int64{}, req.GetScores()...)
		ps := e.states[idx]
		ps.mu.RLock()
		defer ps.mu.RUnlock()
		if st := p.normalizeInPlace(ctx, e.view(snap), &ps.st, scores); !st.IsSuccess() {
			return nil, st
		}
		var nodes []*NodeInfo
		if len(req.GetNodes()) == len(scores) {
			nodes, _ = nodesByID(snap, req.GetNodes())
		}
		return scores, checkRange(p.name, scores, nodes)
	}()
	out.Status = st.toPB()
	if st == nil {
		out.Scores, out.Normalized = scores, true
	}
	return out
}

func (s *session) postFilter(ctx context.Context, req *pb.PostFilterRequest) *pb.PostFilterResponse {
	out := &pb.PostFilterResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	res, st := func() (*PostFilterResult, *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return nil, st
		}
		if p.postFilter == nil {
			return nil, Errorf("plugin %q has no PostFilter", req.GetPlugin())
		}
		statuses := make(map[string]*Status, len(req.GetNodeStatuses()))
		for k, v := range req.GetNodeStatuses() {
			statuses[k] = statusFromPB(v)
		}
		snap, unlock, st := s.replicaAt(e, p.nodeLocal)
		if st != nil {
			return nil, st
		}
		defer unlock()
		ps := e.states[idx]
		ps.mu.Lock()
		defer ps.mu.Unlock()
		var res *PostFilterResult
		st = guard("PostFilter", func() *Status {
			var st *Status
			res, st = p.postFilter.PostFilter(ctx, e.view(snap), &ps.st, statuses)
			return st
		})
		return res, st
	}()
	out.Status = st.toPB()
	if res != nil {
		out.NominatedNodeName = res.NominatedNodeName
	}
	return out
}

// point names the binding-cycle extension points served by cycleCall.
type point int

const (
	pointReserve point = iota
	pointUnreserve
	pointPreBind
	pointBind
	pointPostBind
)

func (pt point) String() string {
	return [...]string{"Reserve", "Unreserve", "PreBind", "Bind", "PostBind"}[pt]
}

// cycleCall serves Reserve, Unreserve, PreBind, Bind and PostBind: a cycle, a node,
// a status. They read the replica as it is (binding overlaps later cycles).
func (s *session) cycleCall(ctx context.Context, req *pb.CycleRequest, pt point) *pb.StatusResponse {
	st := func() *Status {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return st
		}
		s.replicaMu.RLock()
		defer s.replicaMu.RUnlock()
		c := e.view(s.replica)
		node := req.GetNodeName()
		ps := e.states[idx]
		missing := Errorf("plugin %q has no %s", req.GetPlugin(), pt)
		switch pt {
		case pointReserve, pointUnreserve:
			if p.reserve == nil {
				return missing
			}
			ps.mu.Lock()
			defer ps.mu.Unlock()
			if pt == pointReserve {
				return guard("Reserve", func() *Status { return p.reserve.Reserve(ctx, c, &ps.st, node) })
			}
			return guard("Unreserve", func() *Status { p.reserve.Unreserve(ctx, c, &ps.st, node); return nil })
		case pointPreBind:
			if p.preBind == nil {
				return missing
			}
			ps.mu.RLock()
			defer ps.mu.RUnlock()
			return guard("PreBind", func() *Status { return p.preBind.PreBind(ctx, c, &ps.st, node) })
		case pointBind:
			if p.bind == nil {
				return missing
			}
			ps.mu.RLock()
			defer ps.mu.RUnlock()
			return guard("Bind", func() *Status { return p.bind.Bind(ctx, c, &ps.st, node) })
		default:
			if p.postBind == nil {
				return missing
			}
			ps.mu.RLock()
			defer ps.mu.RUnlock()
			return guard("PostBind", func() *Status { p.postBind.PostBind(ctx, c, &ps.st, node); return nil })
		}
	}()
	return statusReply(req.GetRequestId(), req.GetGeneration(), st)
}

// permitCall runs Permit; a Wait registers the pod as waiting on the plugin. The
// reply is sent by the caller while it holds the stream (see Permit), so a decision
// for the pod cannot overtake its Wait.
func (s *session) permitCall(ctx context.Context, req *pb.CycleRequest) (*pb.PermitResponse, func()) {
	out := &pb.PermitResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	var register func()
	st, timeout := func() (*Status, time.Duration) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return st, 0
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.nodeLocal)
		if st != nil {
			return st, 0
		}
		if p.permit == nil {
			return Errorf("plugin %q has no Permit", req.GetPlugin()), 0
		}
		s.replicaMu.RLock()
		c := e.view(s.replica)
		ps := e.states[idx]
		ps.mu.Lock()
		var timeout time.Duration
		st = guard("Permit", func() *Status {
			var st *Status
			st, timeout = p.permit.Permit(ctx, c, &ps.st, req.GetNodeName(), s.svc.handle)
			return st
		})
		ps.mu.Unlock()
		s.replicaMu.RUnlock()
		if st.CodeOf() == Wait {
			if timeout <= 0 {
				return Errorf("plugin %q answered Permit Wait without a timeout (it must be > 0)", req.GetPlugin()), 0
			}
			register = func() {
				s.waitMu.Lock()
				defer s.waitMu.Unlock()
				w := s.waiting[e.pod.GetUid()]
				if w == nil {
					w = &waitingPod{pod: e.pod}
					s.waiting[e.pod.GetUid()] = w
				}
				for _, n := range w.plugins {
					if n == req.GetPlugin() {
						return
					}
				}
				w.plugins = append(w.plugins, req.GetPlugin())
			}
		}
		return st, timeout
	}()
	out.Status = st.toPB()
	if st.CodeOf() == Wait {
		ms := timeout.Milliseconds()
		if ms < 1 {
			ms = 1
		}
		if ms > int64(^uint32(0)) {
			ms = int64(^uint32(0))
		}
		out.TimeoutMillis = uint32(ms)
	}
	if register == nil {
		register = func() {}
	}
	return out, register
}

// ---------------------------------------------------------------- Permit decisions

// Handle lets a Permit plugin decide later about pods it answered Wait for. It is
// safe for concurrent use and valid for the life of the sidecar.
type Handle struct{ svc *service }

// Allow lets plugin release the waiting pod uid. It returns false when the pod is
// not waiting on that plugin (already decided, timed out, its cycle ended, or its
// Wait not yet sent).
func (h *Handle) Allow(plugin, uid string) bool { return h.decide(plugin, uid, true, "") }

// Reject rejects the waiting pod uid: the scheduler unreserves it and retries it
// later. message says why.
func (h *Handle) Reject(plugin, uid, message string) bool {
	return h.decide(plugin, uid, false, message)
}

// WaitingPods returns the pods currently waiting on plugin.
func (h *Handle) WaitingPods(plugin string) []*Pod {
	var out []*Pod
	for _, s := range h.svc.allSessions() {
		s.waitMu.Lock()
		for _, w := range s.waiting {
			for _, p := range w.plugins {
				if p == plugin {
					out = append(out, w.pod)
					break
				}
			}
		}
		s.waitMu.Unlock()
	}
	return out
}

func (h *Handle) decide(plugin, uid string, allow bool, message string) bool {
	for _, s := range h.svc.allSessions() {
		s.waitMu.Lock()
		w := s.waiting[uid]
		found := -1
		if w != nil {
			for i, p := range w.plugins {
				if p == plugin {
					found = i
				}
			}
		}
		if found < 0 {
			s.waitMu.Unlock()
			continue
		}
		w.plugins = append(w.plugins[:found], w.plugins[found+1:]...)
		if !allow || len(w.plugins) == 0 {
			delete(s.waiting, uid)
		}
		ps := s.permit
		s.waitMu.Unlock()
		if ps == nil {
			return false
		}
		err := ps.send(&pb.PermitResponse{
			RequestId: 0,
			Decision:  &pb.WaitingPodDecision{PodUid: uid, Plugin: plugin, Allow: allow, Message: message},
		})
		return err == nil
	}
	return false
}

// ---------------------------------------------------------------- streams

// serveStream reads a stream's calls in order and answers each before reading the
// next, as the Rust SDK does. A panic in the SDK or the plugin answers that call with
// an Error status (via fail) instead of killing the sidecar.
func serveStream[Req any, Resp any](ctx context.Context, recv func() (Req, error), send func(Resp) error, handle func(context.Context, Req) Resp, fail func(Req, *Status) Resp) error {
	for {
		req, err := recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		resp := func() (r Resp) {
			defer func() {
				if p := recover(); p != nil {
					r = fail(req, Errorf("panic while answering: %v", p))
				}
			}()
			return handle(ctx, req)
		}()
		if err := send(resp); err != nil {
			return err
		}
	}
}

func (svc *service) Handshake(_ context.Context, req *pb.HandshakeRequest) (*pb.HandshakeResponse, error) {
	ok := false
	for _, v := range req.GetProtocolVersions() {
		if v == ProtocolVersion {
			ok = true
		}
	}
	if !ok {
		return nil, grpcstatus.Errorf(codes.FailedPrecondition, "this sidecar speaks protocol %s; the scheduler offered %q", ProtocolVersion, req.GetProtocolVersions())
	}
	out := &pb.HandshakeResponse{ProtocolVersion: ProtocolVersion, MaxBatchNodes: svc.opts.MaxBatchNodes}
	for _, p := range svc.plugins {
		out.Plugins = append(out.Plugins, p.info())
	}
	if svc.opts.Capabilities {
		// Pod batches are only sent for node-local plugins; offering them costs
		// nothing.
		for _, c := range req.GetCapabilities() {
			if c == CapabilityFilterBatch || c == CapabilityReplicateBatch {
				out.Capabilities = append(out.Capabilities, c)
			}
		}
	}
	return out, nil
}

func (svc *service) Replicate(stream pb.Plugin_ReplicateServer) error {
	s := svc.session(stream.Context())
	var st replState
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		msgs := append([]*pb.ReplicateRequest{req}, req.GetMore()...)
		for i, m := range msgs {
			if m == nil {
				m = &pb.ReplicateRequest{}
			}
			var err error
			if i > 0 && len(m.GetMore()) > 0 {
				err = fmt.Errorf("generation %d: a message inside `more` has `more`", m.GetGeneration())
			} else {
				err = s.apply(m, &st)
			}
			if err != nil {
				log.Printf("switchyard: replication failed; closing the stream: %v", err)
				return grpcstatus.Error(codes.FailedPrecondition, err.Error())
			}
			if m.GetAck() {
				if err := stream.Send(&pb.ReplicateResponse{AppliedGeneration: m.GetGeneration()}); err != nil {
					return err
				}
			}
		}
	}
}

func (svc *service) PreEnqueue(stream pb.Plugin_PreEnqueueServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send, s.preEnqueue,
		func(r *pb.PreEnqueueRequest, st *Status) *pb.StatusResponse {
			return statusReply(r.GetRequestId(), 0, st)
		})
}

func (svc *service) QueueSort(stream pb.Plugin_QueueSortServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send, s.queueSort,
		func(r *pb.QueueSortRequest, st *Status) *pb.QueueSortResponse {
			return &pb.QueueSortResponse{RequestId: r.GetRequestId(), Status: st.toPB()}
		})
}

func (svc *service) PreFilter(stream pb.Plugin_PreFilterServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.PreFilterRequest) *pb.PreFilterResponse {
			return traced(ctx, svc, "PreFilter", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), -1),
				func(ctx context.Context) *pb.PreFilterResponse { return s.preFilter(ctx, r) },
				(*pb.PreFilterResponse).GetStatus)
		},
		func(r *pb.PreFilterRequest, st *Status) *pb.PreFilterResponse {
			return &pb.PreFilterResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Status: st.toPB()}
		})
}

func (svc *service) Filter(stream pb.Plugin_FilterServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send, s.filter,
		func(r *pb.FilterRequest, st *Status) *pb.FilterResponse {
			return &pb.FilterResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Error: st.toPB()}
		})
}

func (svc *service) FilterBatch(stream pb.Plugin_FilterBatchServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send, s.filterMany,
		func(r *pb.FilterBatchRequest, st *Status) *pb.FilterBatchResponse {
			out := &pb.FilterBatchResponse{RequestId: r.GetRequestId()}
			for _, c := range r.GetCalls() {
				out.Replies = append(out.Replies, &pb.FilterResponse{RequestId: c.GetRequestId(), Generation: c.GetGeneration(), Error: st.toPB()})
			}
			return out
		})
}

func (svc *service) PostFilter(stream pb.Plugin_PostFilterServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.PostFilterRequest) *pb.PostFilterResponse {
			return traced(ctx, svc, "PostFilter", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), -1),
				func(ctx context.Context) *pb.PostFilterResponse { return s.postFilter(ctx, r) },
				(*pb.PostFilterResponse).GetStatus)
		},
		func(r *pb.PostFilterRequest, st *Status) *pb.PostFilterResponse {
			return &pb.PostFilterResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Status: st.toPB()}
		})
}

func (svc *service) PreScore(stream pb.Plugin_PreScoreServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.PreScoreRequest) *pb.StatusResponse {
			return traced(ctx, svc, "PreScore", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), len(r.GetNodes())),
				func(ctx context.Context) *pb.StatusResponse { return s.preScore(ctx, r) },
				(*pb.StatusResponse).GetStatus)
		},
		func(r *pb.PreScoreRequest, st *Status) *pb.StatusResponse {
			return statusReply(r.GetRequestId(), r.GetGeneration(), st)
		})
}

func (svc *service) Score(stream pb.Plugin_ScoreServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.ScoreRequest) *pb.ScoreResponse {
			return traced(ctx, svc, "Score", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), len(r.GetNodes())),
				func(ctx context.Context) *pb.ScoreResponse { return s.score(ctx, r) },
				(*pb.ScoreResponse).GetStatus)
		},
		func(r *pb.ScoreRequest, st *Status) *pb.ScoreResponse {
			return &pb.ScoreResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Status: st.toPB()}
		})
}

func (svc *service) NormalizeScore(stream pb.Plugin_NormalizeScoreServer) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.NormalizeScoreRequest) *pb.ScoreResponse {
			return traced(ctx, svc, "NormalizeScore", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), len(r.GetNodes())),
				func(ctx context.Context) *pb.ScoreResponse { return s.normalizeScore(ctx, r) },
				(*pb.ScoreResponse).GetStatus)
		},
		func(r *pb.NormalizeScoreRequest, st *Status) *pb.ScoreResponse {
			return &pb.ScoreResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Status: st.toPB()}
		})
}

// cycleStream serves one of the binding-cycle streams.
func (svc *service) cycleStream(stream interface {
	Context() context.Context
	Recv() (*pb.CycleRequest, error)
	Send(*pb.StatusResponse) error
}, pt point) error {
	s := svc.session(stream.Context())
	return serveStream(stream.Context(), stream.Recv, stream.Send,
		func(ctx context.Context, r *pb.CycleRequest) *pb.StatusResponse {
			return traced(ctx, svc, pt.String(), r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), -1),
				func(ctx context.Context) *pb.StatusResponse { return s.cycleCall(ctx, r, pt) },
				(*pb.StatusResponse).GetStatus)
		},
		func(r *pb.CycleRequest, st *Status) *pb.StatusResponse {
			return statusReply(r.GetRequestId(), r.GetGeneration(), st)
		})
}

func (svc *service) Reserve(stream pb.Plugin_ReserveServer) error {
	return svc.cycleStream(stream, pointReserve)
}

func (svc *service) Unreserve(stream pb.Plugin_UnreserveServer) error {
	return svc.cycleStream(stream, pointUnreserve)
}

func (svc *service) PreBind(stream pb.Plugin_PreBindServer) error {
	return svc.cycleStream(stream, pointPreBind)
}

func (svc *service) Bind(stream pb.Plugin_BindServer) error {
	return svc.cycleStream(stream, pointBind)
}

func (svc *service) PostBind(stream pb.Plugin_PostBindServer) error {
	return svc.cycleStream(stream, pointPostBind)
}

// Permit serves the Permit stream, which also carries unsolicited decisions about
// waiting pods (request_id 0), so its sends are serialised.
func (svc *service) Permit(stream pb.Plugin_PermitServer) error {
	s := svc.session(stream.Context())
	ps := &permitStream{stream: stream}
	s.waitMu.Lock()
	s.permit = ps
	s.waitMu.Unlock()
	defer func() {
		s.waitMu.Lock()
		if s.permit == ps {
			s.permit = nil
		}
		s.waitMu.Unlock()
	}()
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		callCtx, sp := svc.callSpan(ctx, "Permit", req.GetPlugin(), req.GetTraceparent(), cycleAttrs(req.GetCycle(), -1)...)
		reply, register := func() (r *pb.PermitResponse, reg func()) {
			defer func() {
				if p := recover(); p != nil {
					r = &pb.PermitResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration(), Status: Errorf("panic while answering: %v", p).toPB()}
					reg = func() {}
				}
			}()
			return s.permitCall(callCtx, req)
		}()
		endSpan(sp, reply.GetStatus())
		ps.mu.Lock()
		register()
		err = stream.Send(reply)
		ps.mu.Unlock()
		if err != nil {
			return err
		}
	}
}
