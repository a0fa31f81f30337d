// Package pb holds the generated Go types and gRPC service code of the Switchyard
// plugin contract (proto/switchyard/plugin/v1/plugin.proto in the repository).
//
// Generated with protoc 3.21.12, protoc-gen-go v1.28.1 and protoc-gen-go-grpc 1.0
// (Debian: apt-get install protobuf-compiler protoc-gen-go protoc-gen-go-grpc).
// The .proto file has no go_package option, so the import path is given with M
// flags. Regenerate with `go generate ./pb` from plugin-sdk/go.
package pb

//go:generate protoc -I ../../../proto --go_out=. --go_opt=module=github.com/switchyard-sched/switchyard/plugin-sdk/go/pb --go_opt=Mswitchyard/plugin/v1/plugin.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/pb;pb --go-grpc_out=. --go-grpc_opt=module=github.com/switchyard-sched/switchyard/plugin-sdk/go/pb --go-grpc_opt=Mswitchyard/plugin/v1/plugin.proto=github.com/switchyard-sched/switchyard/plugin-sdk/go/pb;pb switchyard/plugin/v1/plugin.proto
