package switchyard

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Filter and FilterBatch: failures grouped by status, what-if deltas, parallel over nodes.

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
	e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
	if st != nil {
		return nil, nil, st
	}
	if p.filter == nil {
		return nil, nil, Errorf("plugin %q has no Filter", req.GetPlugin())
	}
	if req.GetAfterPreFilter() {
		if pf := s.preFilterOutcome(ctx, e, idx); !pf.IsSuccess() {
			if pf.CodeOf() == Error {
				return nil, nil, pf
			}
			return nil, nil, Errorf("Filter sent behind a PreFilter that returned %v", pf.CodeOf())
		}
	}
	snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
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
