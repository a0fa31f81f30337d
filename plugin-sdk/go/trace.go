package switchyard

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp"
	"github.com/switchyard-sched/switchyard/plugin-sdk/go/pb"
)

// Tracing (contract clause T1): every call carries the W3C traceparent of the
// scheduler's span for it ("" when the attempt is not traced). When Options.OTLP is
// set (FromEnv sets it from the OTEL_* variables, as the Rust and Python SDKs read
// them), each traced call gets a span under that parent, named and attributed as the
// other SDKs do ("Filter Accelerator"; extension_point, plugin), exported over
// OTLP/gRPC by package otlp.

type traceparentKey struct{}
type spanKey struct{}

// Traceparent returns the W3C trace context to parent a plugin's own spans for
// this call: the SDK's span for the call when it exports one, else the scheduler's
// span for the call ("" when the attempt is not traced). A plugin using
// OpenTelemetry can start its span under it with its own propagator, or use
// StartSpan.
func Traceparent(ctx context.Context) string {
	if sp, _ := ctx.Value(spanKey{}).(*otlp.Span); sp != nil {
		return sp.Context().Traceparent()
	}
	s, _ := ctx.Value(traceparentKey{}).(string)
	return s
}

// StartSpan starts a span of the plugin's own under the SDK's span for this call,
// exported with it; end it with End. When the SDK exports no span for the call
// (tracing off, or the call not traced) it returns ctx and a nil span, whose methods
// do nothing:
//
//	ctx, sp := sy.StartSpan(ctx, "lookup", otlp.Int("pods", n))
//	defer sp.End()
func StartSpan(ctx context.Context, name string, attrs ...otlp.Attribute) (context.Context, *otlp.Span) {
	parent, _ := ctx.Value(spanKey{}).(*otlp.Span)
	sp := parent.Child(name, otlp.KindInternal, attrs...)
	if sp == nil {
		return ctx, nil
	}
	return context.WithValue(ctx, spanKey{}, sp), sp
}

func withTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return context.WithValue(ctx, traceparentKey{}, tp)
}

// callSpan starts the sidecar's span for one call, a child of the scheduler's span
// named by traceparent: none when export is off or the call is not traced (an
// empty traceparent, or one not sampled); a traceparent that does not parse starts a
// new trace, as the other SDKs' propagators do.
func (svc *service) callSpan(ctx context.Context, point, plugin, traceparent string, attrs ...otlp.Attribute) (context.Context, *otlp.Span) {
	ctx = withTraceparent(ctx, traceparent)
	if svc.tracer == nil || traceparent == "" {
		return ctx, nil
	}
	parent, _ := otlp.ParseTraceparent(traceparent)
	all := append([]otlp.Attribute{otlp.String("extension_point", point), otlp.String("plugin", plugin)}, attrs...)
	sp := svc.tracer.Start(parent, point+" "+plugin, otlp.KindInternal, all...)
	if sp == nil {
		return ctx, nil
	}
	return context.WithValue(ctx, spanKey{}, sp), sp
}

// traced answers one call with handle inside its span (see callSpan), which ends
// with the reply: an Error status (from status) marks it as an error.
func traced[Resp any](ctx context.Context, svc *service, point, plugin, traceparent string, attrs []otlp.Attribute,
	handle func(context.Context) Resp, status func(Resp) *pb.Status) (r Resp) {
	ctx, sp := svc.callSpan(ctx, point, plugin, traceparent, attrs...)
	if sp == nil {
		return handle(ctx)
	}
	defer func() {
		if p := recover(); p != nil {
			sp.SetError(fmt.Sprintf("panic while answering: %v", p))
			sp.End()
			panic(p) // serveStream answers it
		}
		endSpan(sp, status(r))
	}()
	return handle(ctx)
}

// endSpan ends a call's span, as an error when st is an Error status.
func endSpan(sp *otlp.Span, st *pb.Status) {
	if st.GetCode() == pb.Code_ERROR {
		sp.SetError(strings.Join(st.GetReasons(), "; "))
	}
	sp.End()
}

// cycleAttrs are the attributes of a call inside a cycle: cycle, and nodes (how
// many nodes the call names; -1: a call that names none).
func cycleAttrs(cycle uint64, nodes int) []otlp.Attribute {
	a := []otlp.Attribute{otlp.Int("cycle", int64(cycle))}
	if nodes >= 0 {
		a = append(a, otlp.Int("nodes", int64(nodes)))
	}
	return a
}
