package switchyard

import (
	"context"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// PreEnqueue, QueueSort and PreFilter over the session's replica.

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
	res, st := func() (res *PreFilterResult, st *Status) {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return nil, st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
		if st != nil {
			return nil, st
		}
		// A Filter sent right behind (after_pre_filter) waits for this outcome.
		defer func() {
			if st == nil {
				st = &Status{Code: Success}
			}
			e.recordPreFilter(idx, st)
			if st.Code == Success {
				st = nil
			}
		}()
		if p.preFilter == nil {
			return nil, Errorf("plugin %q has no PreFilter", req.GetPlugin())
		}
		snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
		if st != nil {
			return nil, st
		}
		defer unlock()
		ps := e.states[idx]
		ps.mu.Lock()
		defer ps.mu.Unlock()
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
