package switchyard

import (
	"context"
	"time"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// PreScore, Score, NormalizeScore, and the scores a Filter reply brings ahead.

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

func (s *session) preScore(ctx context.Context, req *pb.PreScoreRequest) *pb.PreScoreResponse {
	var table *pb.LabelScores
	st := func() *Status {
		idx, p, st := s.plugin(req.GetPlugin())
		if st != nil {
			return st
		}
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
		if st != nil {
			return st
		}
		st = func() *Status {
			if p.preScore == nil {
				return Errorf("plugin %q has no PreScore", req.GetPlugin())
			}
			snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
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
			st = guard("PreScore", func() *Status { return p.preScore.PreScore(ctx, e.view(snap), &ps.st, nodes) })
			if st.IsSuccess() && p.scoreLabel != "" {
				table = labelScoresReply(&ps.st)
			}
			return st
		}()
		e.recordPreScore(idx, st)
		return st
	}()
	r := statusReply(req.GetRequestId(), req.GetGeneration(), st)
	return &pb.PreScoreResponse{RequestId: r.RequestId, Status: r.Status, Generation: r.Generation, LabelScores: table}
}

// preScoreOutcome waits (bounded) for this cycle's PreScore of plugin idx, sent
// just before a Score with after_pre_score.
func (s *session) preScoreOutcome(ctx context.Context, e *cycleEntry, idx int) *Status {
	return s.outcome(ctx, e, e.preScores, idx, "Score named a PreScore")
}

// preFilterOutcome waits (bounded) for this cycle's PreFilter of plugin idx, sent
// just before a Filter with after_pre_filter.
func (s *session) preFilterOutcome(ctx context.Context, e *cycleEntry, idx int) *Status {
	return s.outcome(ctx, e, e.preFilters, idx, "Filter named a PreFilter")
}

// outcome waits (up to GenerationWait) until outcomes holds plugin idx's.
func (s *session) outcome(ctx context.Context, e *cycleEntry, outcomes map[int]*Status, idx int, what string) *Status {
	wait := s.svc.opts.GenerationWait
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		e.preMu.Lock()
		st, done := outcomes[idx]
		ch := e.preDone
		e.preMu.Unlock()
		if done {
			return st
		}
		select {
		case <-ch:
		case <-timer.C:
			return Errorf("%s of cycle %d that did not arrive within %v", what, e.id, wait)
		case <-ctx.Done():
			return Errorf("the stream closed while waiting: %s of cycle %d", what, e.id)
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
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
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
		snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
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
		e, st := s.cycle(ctx, req.GetCycle(), req.GetGeneration(), p.answersAtNamedGeneration())
		if st != nil {
			return nil, st
		}
		if !p.normalizes() {
			return nil, Errorf("plugin %q has no NormalizeScore", req.GetPlugin())
		}
		snap, unlock, st := s.replicaAt(e, p.answersAtNamedGeneration())
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
