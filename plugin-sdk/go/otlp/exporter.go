// Package otlp is a small, self-contained OpenTelemetry span exporter over
// OTLP/gRPC: spans with W3C trace context, batched and exported in the background
// through the generated TraceService client (package pb/collectorpb), configured by
// the standard OTEL_* variables. The Switchyard Go SDK uses it for its span per call
// (OpenTelemetry for Go cannot be vendored offline); plugins may use it through the
// SDK's StartSpan.
//
// It never blocks the caller on export and never fails the caller: a full queue
// drops spans, a failed export drops its batch, and each kind of trouble is logged
// once.
package otlp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/collectorpb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/commonpb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/resourcepb"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/tracepb"
)

// ScopeName names the instrumentation scope of the spans (as the Python SDK's
// tracer does).
const ScopeName = "switchyard-plugin"

// Kind is a span's kind.
type Kind = tracepb.Span_SpanKind

// Span kinds.
const (
	KindInternal = tracepb.Span_SPAN_KIND_INTERNAL
	KindServer   = tracepb.Span_SPAN_KIND_SERVER
	KindClient   = tracepb.Span_SPAN_KIND_CLIENT
)

// Attribute is a span attribute.
type Attribute struct {
	Key   string
	value *commonpb.AnyValue
}

// String, Int, Bool and Float64 make attributes.
func String(k, v string) Attribute {
	return Attribute{k, &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// Int is an integer attribute.
func Int(k string, v int64) Attribute {
	return Attribute{k, &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// Bool is a boolean attribute.
func Bool(k string, v bool) Attribute {
	return Attribute{k, &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

// Float64 is a floating-point attribute.
func Float64(k string, v float64) Attribute {
	return Attribute{k, &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// Exporter starts spans and exports the ended ones. A nil *Exporter starts no spans.
type Exporter struct {
	cfg      Config
	conn     *grpc.ClientConn
	client   collectorpb.TraceServiceClient
	headers  metadata.MD
	resource *resourcepb.Resource
	scope    *commonpb.InstrumentationScope

	queue   chan *tracepb.Span
	stop    chan struct{} // closed by Shutdown
	done    chan struct{} // closed when the export loop has exited
	ctx     context.Context
	cancel  context.CancelFunc // aborts an export in flight (Shutdown's deadline)
	closed  atomic.Bool
	stopped sync.Once

	dropped  atomic.Uint64
	exported atomic.Uint64
	warned   sync.Map // kind of trouble -> logged once
}

// New starts an exporter to cfg.Endpoint (the connection is made in the
// background: an unreachable collector only fails exports). Defaults: 5 s between
// exports, 10 s per export, 2048 queued spans, 512 per export.
func New(cfg Config) (*Exporter, error) {
	addr, useTLS, err := target(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if cfg.ScheduleDelay <= 0 {
		cfg.ScheduleDelay = 5 * time.Second
	}
	if cfg.ExportTimeout <= 0 {
		cfg.ExportTimeout = 10 * time.Second
	}
	if cfg.MaxQueueSize <= 0 {
		cfg.MaxQueueSize = 2048
	}
	if cfg.MaxExportBatchSize <= 0 {
		cfg.MaxExportBatchSize = 512
	}
	if cfg.MaxExportBatchSize > cfg.MaxQueueSize {
		cfg.MaxExportBatchSize = cfg.MaxQueueSize
	}
	creds := grpc.WithInsecure()
	if useTLS {
		c, err := clientTLS(cfg)
		if err != nil {
			return nil, err
		}
		creds = grpc.WithTransportCredentials(credentials.NewTLS(c))
	}
	// Reconnect to a collector that went away within 5 s (grpc's default backoff
	// grows to 2 min), and let an export wait for the connection (up to
	// ExportTimeout) rather than fail at once while it is re-established: a
	// collector that starts after the sidecar still gets the first spans.
	bo := backoff.DefaultConfig
	bo.MaxDelay = 5 * time.Second
	conn, err := grpc.Dial(addr, creds, grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}), grpc.WaitForReady(true)))
	if err != nil {
		return nil, fmt.Errorf("OTLP endpoint %s: %w", cfg.Endpoint, err)
	}
	e := &Exporter{
		cfg:      cfg,
		conn:     conn,
		client:   collectorpb.NewTraceServiceClient(conn),
		resource: resource(cfg),
		scope:    &commonpb.InstrumentationScope{Name: ScopeName},
		queue:    make(chan *tracepb.Span, cfg.MaxQueueSize),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if len(cfg.Headers) > 0 {
		e.headers = metadata.New(cfg.Headers)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.loop()
	return e, nil
}

func clientTLS(cfg Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("OTLP certificate: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTLP certificate %s: no PEM certificate", cfg.CAFile)
		}
	}
	if cfg.ClientCertFile != "" && cfg.ClientKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.ClientCertFile, cfg.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("OTLP client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

func resource(cfg Config) *resourcepb.Resource {
	attrs := map[string]string{
		"telemetry.sdk.language": "go",
		"telemetry.sdk.name":     "switchyard-plugin-go",
	}
	for k, v := range cfg.ResourceAttributes {
		attrs[k] = v
	}
	if cfg.ServiceName != "" {
		attrs["service.name"] = cfg.ServiceName
	} else if attrs["service.name"] == "" {
		attrs["service.name"] = "unknown_service:go"
	}
	r := &resourcepb.Resource{}
	for k, v := range attrs {
		r.Attributes = append(r.Attributes, &commonpb.KeyValue{Key: k, Value: String(k, v).value})
	}
	return r
}

// Start starts a span named name under parent: a valid parent gives a child in its
// trace (none when the parent is not sampled: nil), an invalid one a new trace.
// End it with End. Nil (no span) when e is nil or shut down; a nil *Span's methods
// do nothing.
func (e *Exporter) Start(parent SpanContext, name string, kind Kind, attrs ...Attribute) *Span {
	if e == nil || e.closed.Load() {
		return nil
	}
	s := &Span{e: e, name: name, kind: kind, start: time.Now()}
	if parent.IsValid() {
		if !parent.Sampled() {
			return nil
		}
		s.ctx.TraceID = parent.TraceID
		s.parent = parent.SpanID
		s.parentRemote = parent.Remote
		s.ctx.Flags = parent.Flags
	} else {
		s.ctx.TraceID = newTraceID()
		s.ctx.Flags = 1
	}
	s.ctx.SpanID = newSpanID()
	s.attrs = append(s.attrs, attrs...)
	return s
}

// Child starts a span under s, exported by the same exporter (nil when s is nil).
func (s *Span) Child(name string, kind Kind, attrs ...Attribute) *Span {
	if s == nil {
		return nil
	}
	return s.e.Start(s.ctx, name, kind, attrs...)
}

// Span is a span being recorded; its methods are safe for concurrent use.
type Span struct {
	e            *Exporter
	ctx          SpanContext
	parent       [8]byte
	parentRemote bool
	name         string
	kind         Kind
	start        time.Time

	mu     sync.Mutex
	attrs  []Attribute
	errMsg *string
	ended  bool
}

// Context is the span's own context (to parent further spans, or to format as a
// traceparent); zero for a nil span.
func (s *Span) Context() SpanContext {
	if s == nil {
		return SpanContext{}
	}
	return s.ctx
}

// SetAttributes adds attributes (a later value of a key replaces an earlier one).
func (s *Span) SetAttributes(attrs ...Attribute) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.attrs = append(s.attrs, attrs...)
	s.mu.Unlock()
}

// SetError marks the span's status as an error with msg.
func (s *Span) SetError(msg string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.errMsg = &msg
	s.mu.Unlock()
}

// End records the end time and queues the span for export (without blocking: a full
// queue drops it). Only the first End counts.
func (s *Span) End() {
	if s == nil {
		return
	}
	end := time.Now()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	ps := &tracepb.Span{
		TraceId:           append([]byte(nil), s.ctx.TraceID[:]...),
		SpanId:            append([]byte(nil), s.ctx.SpanID[:]...),
		Name:              s.name,
		Kind:              s.kind,
		StartTimeUnixNano: uint64(s.start.UnixNano()),
		EndTimeUnixNano:   uint64(end.UnixNano()),
		Flags:             uint32(s.ctx.Flags) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK),
	}
	if s.parent != [8]byte{} {
		ps.ParentSpanId = append([]byte(nil), s.parent[:]...)
		if s.parentRemote {
			ps.Flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
		}
	}
	seen := make(map[string]int, len(s.attrs))
	for _, a := range s.attrs {
		kv := &commonpb.KeyValue{Key: a.Key, Value: a.value}
		if i, ok := seen[a.Key]; ok {
			ps.Attributes[i] = kv
			continue
		}
		seen[a.Key] = len(ps.Attributes)
		ps.Attributes = append(ps.Attributes, kv)
	}
	if s.errMsg != nil {
		ps.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: *s.errMsg}
	}
	s.mu.Unlock()
	s.e.enqueue(ps)
}

func (e *Exporter) enqueue(s *tracepb.Span) {
	if e.closed.Load() {
		return
	}
	select {
	case e.queue <- s:
	default:
		e.dropped.Add(1)
		e.warnOnce("queue", "span queue full (%d spans): dropping spans (OTEL_BSP_MAX_QUEUE_SIZE)", e.cfg.MaxQueueSize)
	}
}

// Dropped is the number of spans dropped so far (queue full or export failed);
// Exported the number the collector accepted.
func (e *Exporter) Dropped() uint64 { return e.dropped.Load() }

// Exported is the number of spans exported so far.
func (e *Exporter) Exported() uint64 { return e.exported.Load() }

func (e *Exporter) warnOnce(kind, format string, args ...interface{}) {
	if _, loaded := e.warned.LoadOrStore(kind, true); !loaded {
		log.Printf("switchyard: OTLP export to %s: "+format+" (logged once)", append([]interface{}{e.cfg.Endpoint}, args...)...)
	}
}

// loop exports a batch every ScheduleDelay, or as soon as MaxExportBatchSize spans
// are queued, and what is left at shutdown.
func (e *Exporter) loop() {
	defer close(e.done)
	ticker := time.NewTicker(e.cfg.ScheduleDelay)
	defer ticker.Stop()
	var batch []*tracepb.Span
	for {
		select {
		case s := <-e.queue:
			batch = append(batch, s)
			if len(batch) >= e.cfg.MaxExportBatchSize {
				e.export(batch)
				batch = nil
			}
		case <-ticker.C:
			if len(batch) > 0 {
				e.export(batch)
				batch = nil
			}
		case <-e.stop:
			for {
				select {
				case s := <-e.queue:
					batch = append(batch, s)
					if len(batch) >= e.cfg.MaxExportBatchSize {
						e.export(batch)
						batch = nil
					}
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				e.export(batch)
			}
			return
		}
	}
}

func (e *Exporter) export(batch []*tracepb.Span) {
	if e.ctx.Err() != nil {
		e.dropped.Add(uint64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.ExportTimeout)
	defer cancel()
	if e.headers != nil {
		ctx = metadata.NewOutgoingContext(ctx, e.headers)
	}
	req := &collectorpb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   e.resource,
		ScopeSpans: []*tracepb.ScopeSpans{{Scope: e.scope, Spans: batch}},
	}}}
	resp, err := e.client.Export(ctx, req)
	if err != nil {
		e.dropped.Add(uint64(len(batch)))
		e.warnOnce("export", "export failed, dropping %d spans: %v", len(batch), err)
		return
	}
	rejected := uint64(0)
	if ps := resp.GetPartialSuccess(); ps != nil && ps.GetRejectedSpans() > 0 {
		rejected = uint64(ps.GetRejectedSpans())
		e.dropped.Add(rejected)
		e.warnOnce("rejected", "the collector rejected %d spans: %s", rejected, ps.GetErrorMessage())
	}
	if n := uint64(len(batch)); n > rejected {
		e.exported.Add(n - rejected)
	}
}

// Shutdown stops starting spans, exports the spans still queued and closes the
// connection, waiting at most until ctx is done (then the export in flight is
// abandoned and its spans dropped). Later calls return at once.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e == nil {
		return nil
	}
	var err error
	e.stopped.Do(func() {
		e.closed.Store(true)
		close(e.stop)
		select {
		case <-e.done:
		case <-ctx.Done():
			e.cancel()
			<-e.done
			err = errors.New("OTLP export: shutdown deadline reached; spans still queued were dropped")
		}
		e.cancel()
		_ = e.conn.Close()
	})
	return err
}

// codec marshals the generated (API v2) messages with google.golang.org/protobuf:
// Debian's grpc 1.33 default codec goes through golang/protobuf 1.3.5, which cannot
// (see the SDK's codec.go).
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("otlp codec: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("otlp codec: cannot unmarshal into %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (codec) Name() string { return "proto" }

// String is the codec's name for grpc's older Codec interface.
func (codec) String() string { return "proto" }
