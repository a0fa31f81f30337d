// Package switchyard is the Go SDK for Switchyard scheduler plugins that run as
// gRPC sidecars.
//
// A plugin is a type with a Name method and the method of each extension point it
// takes part in (Filter, Score, PreFilter, Permit, ...), with kube-scheduler's
// meaning; the SDK finds them by type assertion, declares them at handshake, and
// owns the whole sidecar protocol (proto/README.md in the repository): the gRPC
// streams, the replica of the scheduler's snapshot kept current by the Replicate
// stream (full snapshots, deltas, pod updates, gap checks, acknowledgements),
// waiting for the generation each call names, per-cycle state from CycleStart to
// CycleEnd, what-if deltas (a forked state and the plugin's AddPod/RemovePod),
// batched and score-ahead Filter calls, FilterBatch, NormalizeScore, Permit
// decisions, gRPC health, a span per traced call exported over OTLP/gRPC when the
// OTEL_* variables ask for it (package otlp; see Traceparent and StartSpan), and
// shutdown on SIGTERM.
//
//	type NoMaintenance struct{}
//
//	func (NoMaintenance) Name() string    { return "NoMaintenance" }
//	func (NoMaintenance) NodeLocal() bool { return true }
//	func (NoMaintenance) Filter(_ context.Context, _ *switchyard.Cycle, _ *switchyard.CycleState, n *switchyard.NodeInfo) *switchyard.Status {
//		if n.Node.Labels["maintenance"] == "true" {
//			return switchyard.NewUnresolvable("node is under maintenance")
//		}
//		return nil
//	}
//
//	func main() { switchyard.Main(NoMaintenance{}) }
//
// Main's command line is the same in every Switchyard SDK: --listen ADDRESS, --probe
// (an exec health probe) and --no-optional-capabilities, which offers none of the
// protocol's optional capabilities (Options.Capabilities false) to serve as an older
// sidecar would; SWITCHYARD_PLUGIN_CAPABILITIES=off is its environment fallback,
// read by FromEnv.
package switchyard
