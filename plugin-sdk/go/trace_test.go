package switchyard

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/collectorpb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/tracepb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// collector is an in-process OTLP TraceService keeping the spans it receives.
type collector struct {
	collectorpb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
}

func (c *collector) Export(_ context.Context, r *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range r.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				c.service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (c *collector) byName() map[string][]*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*tracepb.Span{}
	for _, s := range c.spans {
		out[s.GetName()] = append(out[s.GetName()], s)
	}
	return out
}

// spy records the trace context its Filter sees and starts a span of its own.
type spy struct {
	mu   sync.Mutex
	seen []string
}

func (*spy) Name() string { return "Spy" }

func (s *spy) Filter(ctx context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) *Status {
	_, sp := StartSpan(ctx, "spy lookup", otlp.String("node", n.Name()))
	sp.End()
	s.mu.Lock()
	s.seen = append(s.seen, Traceparent(ctx))
	s.mu.Unlock()
	return nil
}

func (*spy) Score(_ context.Context, _ *Cycle, _ *CycleState, n *NodeInfo) (int64, *Status) {
	return 0, Errorf("no score for %s", n.Name())
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().String()
		}
	}
	return ""
}

// TestCallSpansUnderTraceparent (T1): each traced call gets a span under its
// traceparent, exported over OTLP/gRPC to an in-process collector on 127.0.0.1:0;
// untraced calls get none.
func TestCallSpansUnderTraceparent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	cs := grpc.NewServer(grpc.CustomCodec(codec{})) //nolint:staticcheck // grpc 1.33
	collectorpb.RegisterTraceServiceServer(cs, col)
	go func() { _ = cs.Serve(lis) }()
	defer cs.Stop()

	sp := &spy{}
	svc := newService([]Plugin{sp}, DefaultOptions("unix:///unused"))
	svc.tracer = startTracing(otlp.Config{Endpoint: "http://" + lis.Addr().String(), ScheduleDelay: 50 * time.Millisecond}, []Plugin{sp})
	if svc.tracer == nil {
		t.Fatal("no exporter")
	}
	bl := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StatsHandler(connTagger{svc}), grpc.CustomCodec(codec{})) //nolint:staticcheck
	pb.RegisterPluginServer(srv, svc)
	go func() { _ = srv.Serve(bl) }()
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, "bufnet", grpc.WithInsecure(),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return bl.Dial() }),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewPluginClient(conn)
	rs, _ := c.Replicate(ctx)
	first := full(1, []*Node{node(1, "a"), node(2, "b")}, nil)
	second := start(2, 1, xpod("me", ""))
	second.Ack = true
	first.More = []*pb.ReplicateRequest{second}
	_ = rs.Send(first)
	if a, err := rs.Recv(); err != nil || a.AppliedGeneration != 2 {
		t.Fatalf("ack: %v %v", a, err)
	}

	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := func(span string) string { return "00-" + trace + "-" + span + "-01" }
	fs, _ := c.Filter(ctx)
	_ = fs.Send(&pb.FilterRequest{RequestId: 1, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{1, 2}, Traceparent: tp("00000000000000a1")})
	_ = fs.Send(&pb.FilterRequest{RequestId: 2, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{1}}) // untraced
	_ = fs.Send(&pb.FilterRequest{RequestId: 3, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{1},
		Traceparent: "00-" + trace + "-00000000000000a3-00"}) // not sampled
	for i := 0; i < 3; i++ {
		if r, err := fs.Recv(); err != nil || r.Error != nil {
			t.Fatalf("Filter: %v %v", r, err)
		}
	}
	fb, _ := c.FilterBatch(ctx)
	_ = fb.Send(&pb.FilterBatchRequest{RequestId: 5, Calls: []*pb.FilterRequest{
		{RequestId: 6, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{2}, Traceparent: tp("00000000000000b1")},
		{RequestId: 7, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{2}, Traceparent: tp("00000000000000b2")},
	}})
	if r, err := fb.Recv(); err != nil || len(r.Replies) != 2 {
		t.Fatalf("FilterBatch: %v %v", r, err)
	}
	ss, _ := c.Score(ctx)
	_ = ss.Send(&pb.ScoreRequest{RequestId: 8, Plugin: "Spy", Cycle: 1, Generation: 2, Nodes: []uint32{1}, Traceparent: tp("00000000000000c1")})
	if r, err := ss.Recv(); err != nil || r.Status.GetCode() != pb.Code_ERROR {
		t.Fatalf("Score: %v %v", r, err)
	}
	// The Traceparent a plugin sees is its span's for the call, in the call's trace.
	sp.mu.Lock()
	seen := append([]string(nil), sp.seen...)
	sp.mu.Unlock()
	// Untraced: ""; not sampled (no span): the call's own.
	if len(seen) != 6 || len(seen[0]) != 55 || seen[0][3:35] != trace || seen[0] == tp("00000000000000a1") || seen[1] != seen[0] ||
		seen[2] != "" || seen[3] != "00-"+trace+"-00000000000000a3-00" {
		t.Fatalf("Traceparent seen by the plugin: %q", seen)
	}

	// Shutdown exports what is still queued.
	stopTracing(svc.tracer)
	spans := col.byName()
	filters := spans["Filter Spy"]
	if len(filters) != 3 {
		t.Fatalf("Filter spans: %d, want 3 (traced and sampled calls only): %v", len(filters), spans)
	}
	parents := map[string]*tracepb.Span{}
	for _, s := range filters {
		if hex.EncodeToString(s.GetTraceId()) != trace {
			t.Errorf("trace id %x", s.GetTraceId())
		}
		parents[hex.EncodeToString(s.GetParentSpanId())] = s
		if attr(s, "extension_point") == "" || attr(s, "plugin") == "" || s.GetKind() != otlp.KindInternal {
			t.Errorf("span %v", s)
		}
	}
	for _, p := range []string{"00000000000000a1", "00000000000000b1", "00000000000000b2"} {
		if parents[p] == nil {
			t.Errorf("no Filter span with parent %s", p)
		}
	}
	if s := parents["00000000000000a1"]; s != nil && attr(s, "nodes") == "" {
		t.Errorf("no nodes attribute: %v", s)
	}
	inner := spans["spy lookup"]
	if len(inner) != 4 { // two nodes in the first call, one in each batch call
		t.Fatalf("plugin spans: %d, want 4", len(inner))
	}
	if a1 := parents["00000000000000a1"]; a1 != nil && !bytes.Equal(inner[0].GetParentSpanId(), a1.GetSpanId()) &&
		!bytes.Equal(inner[1].GetParentSpanId(), a1.GetSpanId()) {
		t.Errorf("the plugin's span is not under the call's span")
	}
	score := spans["Score Spy"]
	if len(score) != 1 || score[0].GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		hex.EncodeToString(score[0].GetParentSpanId()) != "00000000000000c1" {
		t.Fatalf("Score span: %v", score)
	}
	col.mu.Lock()
	service := col.service
	col.mu.Unlock()
	if service != "switchyard-sidecar-spy" {
		t.Errorf("service.name %q", service)
	}
}
