package switchyard

import (
	"context"
	"time"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// PostFilter, Reserve through PostBind, and Permit.

func (s *session) postFilter(ctx context.Context, req *pb.PostFilterRequest) *pb.PostFilterResponse {
	out := &pb.PostFilterResponse{RequestId: req.GetRequestId(), Generation: req.GetGeneration()}
	res, st := func() (*PostFilterResult, *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
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
		snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
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
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
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
				st := guard("Reserve", func() *Status { return p.reserve.Reserve(ctx, c, &ps.st, node) })
				// A Permit sent right behind this call waits for its outcome.
				e.recordReserve(idx, st)
				return st
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
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
		if st != nil {
			return st, 0
		}
		if p.permit == nil {
			return Errorf("plugin %q has no Permit", req.GetPlugin()), 0
		}
		if req.GetAfterReserve() {
			if r := s.outcome(ctx, e, e.reserves, idx, "Permit named a Reserve"); !r.IsSuccess() {
				return Errorf("Permit sent behind a Reserve that returned %v", r.CodeOf()), 0
			}
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
