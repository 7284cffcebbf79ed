package grpcbuf

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// message is v as a proto.Message, or nil.
func message(v any) proto.Message {
	switch m := v.(type) {
	case proto.Message:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}

// Codec is the proto codec with its buffers from Pool, for
// grpc.ForceServerCodecV2. It marshals and unmarshals exactly as grpc-go's
// registered "proto" codec does; only where the buffers come from differs.
type Codec struct{ Pool *Pool }

// Name is the codec's content subtype, the registered proto codec's.
func (Codec) Name() string { return "proto" }

// Marshal encodes v, which must be a proto.Message. Small messages get
// their own slice; the rest a buffer from the pool that gRPC returns once
// the frame is written.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m := message(v)
	if m == nil {
		return nil, fmt.Errorf("grpcbuf: marshal %T: not a proto.Message", v)
	}
	// Size caches the sizes of nested messages, which UseCachedSize then
	// reads instead of computing them again.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b := c.Pool.Get(size)
	out, err := opts.MarshalAppend((*b)[:0], m)
	if err != nil {
		c.Pool.Put(b)
		return nil, err
	}
	*b = out
	return mem.BufferSlice{mem.NewBuffer(b, c.Pool)}, nil
}

// Unmarshal decodes data into v, which must be a proto.Message. The
// message keeps no reference to data: proto copies bytes fields out.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := message(v)
	if m == nil {
		return fmt.Errorf("grpcbuf: unmarshal into %T: not a proto.Message", v)
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	b := data.MaterializeToBuffer(c.Pool)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}
