package otlp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/collectorpb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/tracepb"
)

// Collector is an in-process TraceService that keeps what it receives.
type Collector struct {
	collectorpb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	requests []*collectorpb.ExportTraceServiceRequest
	headers  []metadata.MD
	got      chan struct{}
}

func (c *Collector) Export(ctx context.Context, r *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	c.requests = append(c.requests, r)
	c.headers = append(c.headers, md)
	c.mu.Unlock()
	select {
	case c.got <- struct{}{}:
	default:
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (c *Collector) spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, r := range c.requests {
		for _, rs := range r.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				out = append(out, ss.GetSpans()...)
			}
		}
	}
	return out
}

// startCollector serves a Collector on 127.0.0.1:0 (with TLS when creds is set).
func startCollector(t *testing.T, opts ...grpc.ServerOption) (*Collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{got: make(chan struct{}, 1)}
	srv := grpc.NewServer(append(opts, grpc.CustomCodec(codec{}))...) //nolint:staticcheck // grpc 1.33
	collectorpb.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, lis.Addr().String()
}

func waitSpans(t *testing.T, c *Collector, n int) []*tracepb.Span {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if s := c.spans(); len(s) >= n {
			return s
		}
		select {
		case <-c.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("got %d spans, want %d", len(c.spans()), n)
		}
	}
}

const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
)

func TestParseTraceparent(t *testing.T) {
	c, ok := ParseTraceparent("00-" + traceID + "-" + spanID + "-01")
	if !ok || hex.EncodeToString(c.TraceID[:]) != traceID || hex.EncodeToString(c.SpanID[:]) != spanID || !c.Sampled() || !c.Remote {
		t.Fatalf("parse: %+v %v", c, ok)
	}
	if got := c.Traceparent(); got != "00-"+traceID+"-"+spanID+"-01" {
		t.Fatalf("format: %s", got)
	}
	if c, ok := ParseTraceparent("01-" + traceID + "-" + spanID + "-00-later"); !ok || c.Sampled() {
		t.Fatalf("a later version with more fields: %+v %v", c, ok)
	}
	for _, bad := range []string{
		"",
		"00-" + traceID + "-" + spanID,
		"00-" + traceID + "-" + spanID + "-01-x", // version 00 has exactly 4 fields
		"ff-" + traceID + "-" + spanID + "-01",
		"00-00000000000000000000000000000000-" + spanID + "-01",
		"00-" + traceID + "-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-" + spanID + "-01",
		"00-" + traceID + "-" + spanID + "-0g",
		"00_" + traceID + "-" + spanID + "-01",
	} {
		if _, ok := ParseTraceparent(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestTarget(t *testing.T) {
	for in, want := range map[string]struct {
		addr string
		tls  bool
	}{
		"http://127.0.0.1:4319":   {"127.0.0.1:4319", false},
		"https://collector:443/x": {"collector:443", true},
		"collector:4317":          {"collector:4317", false},
		"http://collector":        {"collector:4317", false},
		"http://[::1]:4317":       {"[::1]:4317", false},
	} {
		addr, useTLS, err := target(in)
		if err != nil || addr != want.addr || useTLS != want.tls {
			t.Errorf("%s: %s %v %v", in, addr, useTLS, err)
		}
	}
	if _, _, err := target("ftp://x:1"); err == nil {
		t.Error("ftp:// accepted")
	}
}

func TestExportUnderParent(t *testing.T) {
	col, addr := startCollector(t)
	e, err := New(Config{Endpoint: "http://" + addr, ServiceName: "switchyard-sidecar-test", ScheduleDelay: 50 * time.Millisecond,
		Headers: map[string]string{"x-token": "secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	parent, _ := ParseTraceparent("00-" + traceID + "-" + spanID + "-01")
	s := e.Start(parent, "Filter Accelerator", KindInternal, String("extension_point", "Filter"), String("plugin", "Accelerator"))
	child := e.Start(s.Context(), "inner", KindInternal)
	child.End()
	s.SetAttributes(Int("nodes", 3), String("plugin", "Accelerator"))
	s.SetError("boom")
	s.End()
	s.End() // once only

	spans := waitSpans(t, col, 2)
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	var got *tracepb.Span
	for _, sp := range spans {
		if sp.GetName() == "Filter Accelerator" {
			got = sp
		}
	}
	if got == nil {
		t.Fatalf("no Filter span in %v", spans)
	}
	if hex.EncodeToString(got.GetTraceId()) != traceID || hex.EncodeToString(got.GetParentSpanId()) != spanID {
		t.Errorf("trace %x parent %x", got.GetTraceId(), got.GetParentSpanId())
	}
	if len(got.GetSpanId()) != 8 || bytes.Equal(got.GetSpanId(), parent.SpanID[:]) {
		t.Errorf("span id %x", got.GetSpanId())
	}
	if got.GetKind() != KindInternal || got.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || got.GetStatus().GetMessage() != "boom" {
		t.Errorf("kind %v status %v", got.GetKind(), got.GetStatus())
	}
	if got.GetEndTimeUnixNano() < got.GetStartTimeUnixNano() || got.GetStartTimeUnixNano() == 0 {
		t.Errorf("times %d..%d", got.GetStartTimeUnixNano(), got.GetEndTimeUnixNano())
	}
	if got.GetFlags() != 0x301 {
		t.Errorf("flags %#x, want sampled with a remote parent", got.GetFlags())
	}
	attrs := map[string]string{}
	for _, kv := range got.GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().String()
	}
	if len(attrs) != 3 || len(got.GetAttributes()) != 3 || attrs["nodes"] == "" {
		t.Errorf("attributes %v", got.GetAttributes())
	}
	for _, sp := range spans {
		if sp.GetName() == "inner" && (!bytes.Equal(sp.GetParentSpanId(), got.GetSpanId()) || !bytes.Equal(sp.GetTraceId(), got.GetTraceId()) || sp.GetFlags() != 0x101) {
			t.Errorf("child %v", sp)
		}
	}
	col.mu.Lock()
	rs := col.requests[0].GetResourceSpans()[0]
	md := col.headers[0]
	col.mu.Unlock()
	service := ""
	for _, kv := range rs.GetResource().GetAttributes() {
		if kv.GetKey() == "service.name" {
			service = kv.GetValue().GetStringValue()
		}
	}
	if service != "switchyard-sidecar-test" || rs.GetScopeSpans()[0].GetScope().GetName() != ScopeName {
		t.Errorf("resource %v", rs.GetResource())
	}
	if v := md.Get("x-token"); len(v) != 1 || v[0] != "secret" {
		t.Errorf("headers %v", md)
	}
}

func TestUnsampledAndRoot(t *testing.T) {
	col, addr := startCollector(t)
	e, err := New(Config{Endpoint: addr, ScheduleDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	unsampled, _ := ParseTraceparent("00-" + traceID + "-" + spanID + "-00")
	if s := e.Start(unsampled, "x", KindInternal); s != nil {
		t.Error("a span under an unsampled parent")
	}
	root := e.Start(SpanContext{}, "root", KindServer)
	root.End()
	// The schedule delay is an hour: Shutdown exports what is queued.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := col.spans()
	if len(spans) != 1 || len(spans[0].GetParentSpanId()) != 0 || len(spans[0].GetTraceId()) != 16 || spans[0].GetKind() != KindServer {
		t.Fatalf("spans %v", spans)
	}
	if s := e.Start(SpanContext{}, "after", KindInternal); s != nil {
		t.Error("a span after shutdown")
	}
	var nilExporter *Exporter
	nilExporter.Start(SpanContext{}, "x", KindInternal).End() // no-ops
	_ = nilExporter.Shutdown(ctx)
}

func TestQueueFullAndUnreachable(t *testing.T) {
	// Nothing listens there: exports fail (logged once), calls never block.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	e, err := New(Config{Endpoint: "http://" + addr, ScheduleDelay: 10 * time.Millisecond, MaxQueueSize: 4, ExportTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		e.Start(SpanContext{}, "x", KindInternal).End()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("1000 spans took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = e.Shutdown(ctx)
	if e.Dropped() == 0 || e.Exported() != 0 {
		t.Errorf("dropped %d exported %d", e.Dropped(), e.Exported())
	}
}

func TestExportOverTLS(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "tests", "fixtures", "tls")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Skipf("no TLS fixtures: %v", err)
	}
	col, addr := startCollector(t, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	_, port, _ := net.SplitHostPort(addr)
	e, err := New(Config{Endpoint: "https://localhost:" + port, CAFile: filepath.Join(dir, "ca.crt"), ScheduleDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	e.Start(SpanContext{}, "tls", KindInternal).End()
	if spans := waitSpans(t, col, 1); spans[0].GetName() != "tls" {
		t.Fatalf("spans %v", spans)
	}
}

func TestConfigFromEnv(t *testing.T) {
	for _, k := range []string{EndpointEnv, TracesEndpointEnv, TracesExporterEnv, "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if _, ok, _ := ConfigFromEnv(); ok {
		t.Fatal("requested without variables")
	}
	t.Setenv(TracesExporterEnv, "otlp")
	if c, ok, err := ConfigFromEnv(); !ok || err != nil || c.Endpoint != DefaultEndpoint {
		t.Fatalf("%+v %v %v", c, ok, err)
	}
	t.Setenv(EndpointEnv, "http://a:1")
	t.Setenv(TracesEndpointEnv, "http://b:2")
	t.Setenv(ScheduleDelayEnv, "200")
	t.Setenv(ServiceNameEnv, "svc")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "k=v%20w, x = y")
	c, ok, err := ConfigFromEnv()
	if !ok || err != nil || c.Endpoint != "http://b:2" || c.ScheduleDelay != 200*time.Millisecond || c.ServiceName != "svc" ||
		c.Headers["k"] != "v w" || c.Headers["x"] != "y" {
		t.Fatalf("%+v %v %v", c, ok, err)
	}
	t.Setenv(ScheduleDelayEnv, "soon")
	if _, _, err := ConfigFromEnv(); err == nil {
		t.Fatal("a malformed delay accepted")
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if _, ok, _ := ConfigFromEnv(); ok {
		t.Fatal("requested though OTEL_SDK_DISABLED")
	}
}
