package switchyard

import (
	"fmt"

	protoV1 "github.com/golang/protobuf/proto"
	"google.golang.org/protobuf/proto"
)

// codec is the server's gRPC codec: protobuf, with the generated (API v2) types of
// this module marshalled by google.golang.org/protobuf directly, and older (API v1)
// messages by github.com/golang/protobuf. grpc-go's default codec goes through
// github.com/golang/protobuf, which handles API v2 messages only from v1.4 on:
// Debian 12 ships v1.3.5 with grpc 1.33 (its health service types are API v1), so
// without this the offline Debian build panics on the first message. With current
// modules both paths are the same code as the default codec.
type codec struct{}

func (codec) Marshal(v interface{}) ([]byte, error) {
	switch m := v.(type) {
	case proto.Message:
		return proto.Marshal(m)
	case protoV1.Message:
		return protoV1.Marshal(m)
	}
	return nil, fmt.Errorf("codec: cannot marshal %T: not a protobuf message", v)
}

func (codec) Unmarshal(data []byte, v interface{}) error {
	switch m := v.(type) {
	case proto.Message:
		return proto.Unmarshal(data, m)
	case protoV1.Message:
		return protoV1.Unmarshal(data, m)
	}
	return fmt.Errorf("codec: cannot unmarshal into %T: not a protobuf message", v)
}

func (codec) String() string { return "proto" }

// Name makes codec an encoding.Codec too (the probe's client side).
func (codec) Name() string { return "proto" }
