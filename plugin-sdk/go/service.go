package switchyard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// ProtocolVersion is the contract version this SDK speaks.
const ProtocolVersion = "v1"

// The optional capabilities this SDK serves when the scheduler offers them.
const (
	CapabilityFilterBatch    = "filter-batch"
	CapabilityReplicateBatch = "replicate-batch"
	// CapabilityFilterAfterPreFilter: a Filter may come right behind its cycle's
	// PreFilter (FilterRequest.after_pre_filter); it is evaluated once that
	// PreFilter's outcome is recorded, and fails unless the PreFilter succeeded.
	CapabilityFilterAfterPreFilter = "filter-after-pre-filter"
	// CapabilityPermitAfterReserve: a Permit may come right behind its cycle's Reserve
	// (CycleRequest.after_reserve); it is evaluated after that Reserve, and only if
	// the Reserve succeeded.
	CapabilityPermitAfterReserve = "permit-after-reserve"
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
	nodePods      bool
	podOnly       bool // PreFilterPodOnly, as declared (checkAlike vets it)
	labelKeys     []string
	normalization ScoreNormalization
	// scoreLabel: a LabelScorePlugin's node label (its PreScore and Score are the
	// SDK's labelScorer).
	scoreLabel string

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

// answersAtNamedGeneration reports whether the plugin's calls may be answered at the
// generation they name rather than the one their cycle started at: node-local, or a
// PreFilter that reads only the pod (PreFilterPodOnlyPlugin).
func (r *registered) answersAtNamedGeneration() bool {
	return r.nodeLocal || (r.nodePods && r.podOnly)
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
	if np, ok := p.(SignatureNodePodsPlugin); ok {
		r.nodePods = np.SignatureNodePods()
		r.labelKeys = append([]string(nil), np.SignatureLabelKeys()...)
	}
	if po, ok := p.(PreFilterPodOnlyPlugin); ok {
		r.podOnly = po.PreFilterPodOnly()
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
	if l, ok := p.(LabelScorePlugin); ok && r.preScore == nil && r.score == nil {
		r.scoreLabel = l.ScoreNodeLabel()
		r.preScore, r.score = labelScorer{l}, labelScorer{l}
	}
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
		SignatureNodePods:   r.nodePods,
		SignatureLabelKeys:  r.labelKeys,
		PreFilterPodOnly:    r.nodePods && r.podOnly,
		ScoreNormalization:  normalization,
		ScoreNodeLabel:      r.scoreLabel,
	}
}

// service implements pb.PluginServer. Everything a connection builds (replica,
// cycles, waiting pods) lives in a session of that connection, so a call on a new
// connection can never be answered from an old connection's replica (R6), even when
// its streams are read before the old connection's last messages.
type service struct {
	pb.UnimplementedPluginServer

	plugins []*registered
	indexes []Index // every plugin's, declared in each session's replica
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
	svc := &service{byName: map[string]int{}, opts: opts, sessions: map[uint64]*session{}, indexes: pluginIndexes(plugins)}
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

	preMu      sync.Mutex
	preScores  map[int]*Status // PreScore outcomes, for Score with after_pre_score
	preFilters map[int]*Status // PreFilter outcomes, for Filter with after_pre_filter
	reserves   map[int]*Status // Reserve outcomes, for Permit with after_reserve
	preDone    chan struct{}   // closed and replaced at every outcome
}

type pluginState struct {
	mu sync.RWMutex
	st CycleState
}

func (e *cycleEntry) view(snap *Snapshot) *Cycle {
	return &Cycle{ID: e.id, Pod: e.pod, Profile: e.profile, Snapshot: snap}
}

func (e *cycleEntry) recordPreScore(idx int, s *Status) { e.record(e.preScores, idx, s) }

func (e *cycleEntry) recordPreFilter(idx int, s *Status) { e.record(e.preFilters, idx, s) }

func (e *cycleEntry) recordReserve(idx int, s *Status) { e.record(e.reserves, idx, s) }

func (e *cycleEntry) record(outcomes map[int]*Status, idx int, s *Status) {
	e.preMu.Lock()
	outcomes[idx] = s
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
		replica: NewSnapshot().WithIndexes(svc.indexes...),
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
			preFilters:         map[int]*Status{},
			reserves:           map[int]*Status{},
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
