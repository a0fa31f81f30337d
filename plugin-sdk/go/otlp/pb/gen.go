// Package pb holds the generated Go types and gRPC client of the OpenTelemetry
// protocol's trace export (OTLP/gRPC), from the .proto files vendored in ../proto
// (opentelemetry-proto v1.10.0, Apache-2.0; see ../proto/LICENSE): commonpb,
// resourcepb, tracepb and collectorpb (TraceService). They back the SDK's own span
// exporter (package otlp), since OpenTelemetry for Go cannot be vendored offline.
//
// Generated with protoc 3.21.12, protoc-gen-go v1.28.1 and protoc-gen-go-grpc 1.0,
// as ../../pb is. The files' go_package options name go.opentelemetry.io/proto/otlp,
// so M flags map them into this module instead. Regenerate with `go generate ./otlp/pb`
// from plugin-sdk/go.
package pb

//go:generate protoc -I ../proto --go_out=. --go_opt=module=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb --go_opt=Mopentelemetry/proto/common/v1/common.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/commonpb;commonpb --go_opt=Mopentelemetry/proto/resource/v1/resource.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/resourcepb;resourcepb --go_opt=Mopentelemetry/proto/trace/v1/trace.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/tracepb;tracepb --go_opt=Mopentelemetry/proto/collector/trace/v1/trace_service.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/collectorpb;collectorpb --go-grpc_out=. --go-grpc_opt=module=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb --go-grpc_opt=Mopentelemetry/proto/common/v1/common.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/commonpb;commonpb --go-grpc_opt=Mopentelemetry/proto/resource/v1/resource.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/resourcepb;resourcepb --go-grpc_opt=Mopentelemetry/proto/trace/v1/trace.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/tracepb;tracepb --go-grpc_opt=Mopentelemetry/proto/collector/trace/v1/trace_service.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/otlp/pb/collectorpb;collectorpb opentelemetry/proto/common/v1/common.proto opentelemetry/proto/resource/v1/resource.proto opentelemetry/proto/trace/v1/trace.proto opentelemetry/proto/collector/trace/v1/trace_service.proto
