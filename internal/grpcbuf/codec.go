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
// registered "proto" codec does; only where the buffers come from differs,
// that a WireAppender writes itself and a WireReader may read itself.
type Codec struct{ Pool *Pool }

// WireAppender is a proto message that writes its own wire form: a hot
// message of a fixed shape (a streamed body chunk, sent once per response
// token) skips the reflection of proto.Size and proto.Marshal: 180 ns
// against 950 ns for an SSE chunk of one token (extproc's
// BenchmarkChunkReply). What AppendWire writes must be
// exactly what proto.Marshal writes for the message, which its own tests
// check; other codecs marshal the message itself.
type WireAppender interface {
	proto.Message
	// WireSize is the length of the wire form.
	WireSize() int
	// AppendWire appends the wire form, WireSize bytes, to b.
	AppendWire(b []byte) []byte
}

// Name is the codec's content subtype, the registered proto codec's.
func (Codec) Name() string { return "proto" }

// Marshal encodes v, which must be a proto.Message. Small messages get
// their own slice; the rest a buffer from the pool that gRPC returns once
// the frame is written.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(WireAppender); ok {
		return c.marshalWire(w), nil
	}
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

// WireReader is a proto message that reads some of its wire forms itself:
// a hot message of a fixed shape (a streamed body chunk, received once per
// response token) skips proto.Unmarshal's reflection and allocations. Where
// ReadWire reads data, the message must equal what proto.Unmarshal makes
// of it, which its own tests check; where it declines, the codec
// unmarshals the message.
type WireReader interface {
	proto.Message
	// ReadWire reads data into the message and reports whether it did;
	// it must leave the message as it was when it declines. data is valid
	// only during the call.
	ReadWire(data []byte) bool
}

// marshalWire encodes a WireAppender as Marshal does a message: a small
// one in its own slice, the rest in a buffer from the pool.
func (c Codec) marshalWire(w WireAppender) mem.BufferSlice {
	size := w.WireSize()
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(w.AppendWire(make([]byte, 0, size)))}
	}
	b := c.Pool.Get(size)
	*b = w.AppendWire((*b)[:0])
	return mem.BufferSlice{mem.NewBuffer(b, c.Pool)}
}

// Unmarshal decodes data into v, which must be a proto.Message. The
// message keeps no reference to data: proto copies bytes fields out.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := message(v)
	if m == nil {
		return fmt.Errorf("grpcbuf: unmarshal into %T: not a proto.Message", v)
	}
	if len(data) == 1 {
		if r, ok := v.(WireReader); ok && r.ReadWire(data[0].ReadOnlyData()) {
			return nil
		}
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	b := data.MaterializeToBuffer(c.Pool)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}
