module github.com/switchyard-sched/switchyard/plugin-sdk/go

go 1.19

require (
	github.com/golang/protobuf v1.4.1
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
