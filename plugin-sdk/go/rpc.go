package switchyard

import (
	"context"
	"fmt"
	"io"
	"log"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// The gRPC service: one stream loop per extension point over the session.

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
			if c == CapabilityFilterBatch || c == CapabilityReplicateBatch || c == CapabilityFilterAfterPreFilter || c == CapabilityPermitAfterReserve {
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
		func(ctx context.Context, r *pb.PreScoreRequest) *pb.PreScoreResponse {
			return traced(ctx, svc, "PreScore", r.GetPlugin(), r.GetTraceparent(), cycleAttrs(r.GetCycle(), len(r.GetNodes())),
				func(ctx context.Context) *pb.PreScoreResponse { return s.preScore(ctx, r) },
				(*pb.PreScoreResponse).GetStatus)
		},
		func(r *pb.PreScoreRequest, st *Status) *pb.PreScoreResponse {
			return &pb.PreScoreResponse{RequestId: r.GetRequestId(), Generation: r.GetGeneration(), Status: st.toPB()}
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
