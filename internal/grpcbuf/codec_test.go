package grpcbuf

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	// The registered proto codec, the reference.
	_ "google.golang.org/grpc/encoding/proto"
)

var _ encoding.CodecV2 = Codec{}

func bodyRequest(n int) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: bytes.Repeat([]byte("0123456789abcdef"), n/16), EndOfStream: true}},
		MetadataContext: &corev3.Metadata{},
	}
}

// TestCodecMatchesRegistered encodes messages small and large with Codec
// and with grpc-go's registered proto codec: the bytes must be the same,
// and each must decode the other's.
func TestCodecMatchesRegistered(t *testing.T) {
	ref := encoding.GetCodecV2("proto")
	c := Codec{Pool: &Pool{}}
	for _, n := range []int{0, 16, 1 << 10, 64 << 10, 1 << 20, 5 << 20} {
		m := bodyRequest(n)
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), want.Materialize()) {
			t.Fatalf("%d-byte body: encodings differ", n)
		}
		var back extprocv3.ProcessingRequest
		if err := c.Unmarshal(want, &back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, m) {
			t.Fatalf("%d-byte body: decoded message differs", n)
		}
		got.Free()
		want.Free()
	}
}

// TestCodecUnmarshalSplit decodes a message that arrives in several
// buffers, as frames do, after the pool's buffers were dirtied.
func TestCodecUnmarshalSplit(t *testing.T) {
	p := &Pool{}
	c := Codec{Pool: p}
	for range 4 {
		b := p.Get(200 << 10)
		for i := range *b {
			(*b)[i] = 0xff
		}
		p.Put(b)
	}
	m := bodyRequest(150 << 10)
	enc, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var data mem.BufferSlice
	for len(enc) > 0 {
		n := min(len(enc), 16<<10+7)
		data = append(data, mem.SliceBuffer(enc[:n]))
		enc = enc[n:]
	}
	var back extprocv3.ProcessingRequest
	if err := c.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, m) {
		t.Fatal("decoded message differs")
	}
}

func TestCodecRejectsNonProto(t *testing.T) {
	c := Codec{Pool: &Pool{}}
	if _, err := c.Marshal("not a message"); err == nil || !strings.Contains(err.Error(), "not a proto.Message") {
		t.Fatalf("Marshal: %v", err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Fatal("Unmarshal into an int succeeded")
	}
}

func BenchmarkMarshalBodyChunk(b *testing.B) {
	m := bodyRequest(64 << 10)
	for _, c := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"grpcbuf", Codec{Pool: &Pool{}}}, {"registered", encoding.GetCodecV2("proto")}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				d, err := c.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				d.Free()
			}
		})
	}
}

// selfWriting is a message whose own wire form is marked, so a test can
// tell whether the codec wrote it or reflected on the message.
type selfWriting struct {
	*extprocv3.ProcessingRequest
	wire []byte
}

func (s selfWriting) WireSize() int              { return len(s.wire) }
func (s selfWriting) AppendWire(b []byte) []byte { return append(b, s.wire...) }

// TestCodecWireAppender sends a WireAppender's own wire form, small (its
// own slice) and large (a pooled buffer, returned on Free), where grpc-go's
// registered codec marshals the message.
func TestCodecWireAppender(t *testing.T) {
	c := Codec{Pool: &Pool{}}
	for _, n := range []int{0, 10, 1 << 10, 64 << 10} {
		m := selfWriting{ProcessingRequest: bodyRequest(16), wire: bytes.Repeat([]byte{0xa5}, n)}
		got, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Materialize(), m.wire) {
			t.Fatalf("%d bytes: the codec did not send the message's own wire form", n)
		}
		got.Free()
		ref, err := encoding.GetCodecV2("proto").Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := proto.Marshal(m.ProcessingRequest); !bytes.Equal(ref.Materialize(), want) {
			t.Fatalf("%d bytes: the registered codec did not marshal the message", n)
		}
	}
}

// selfReading reads itself only when its wire form is the one marked.
type selfReading struct {
	*extprocv3.ProcessingRequest
	marked []byte
	read   int
}

func (s *selfReading) ReadWire(data []byte) bool {
	if !bytes.Equal(data, s.marked) {
		return false
	}
	s.read++
	return true
}

// TestCodecWireReader hands a WireReader the data it reads itself and
// unmarshals what it declines into the message.
func TestCodecWireReader(t *testing.T) {
	c := Codec{Pool: &Pool{}}
	r := &selfReading{ProcessingRequest: &extprocv3.ProcessingRequest{}, marked: []byte{0xa5}}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xa5})}, r); err != nil || r.read != 1 {
		t.Fatalf("the marked form: err %v, read by the message %d times", err, r.read)
	}
	m := bodyRequest(64)
	enc, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc)}, r); err != nil || r.read != 1 || !proto.Equal(r.ProcessingRequest, m) {
		t.Fatalf("a declined form: err %v, read by the message %d times, got %v", err, r.read, r.ProcessingRequest)
	}
}
