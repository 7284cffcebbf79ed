package extproc

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/internal/grpcbuf"
)

// TestChunkReplyWire checks the hand-written wire form of a streamed body
// piece against proto.Marshal of streamedChunk, the same reply built as a
// message: both directions, the end of the stream or not, and bodies
// around each length at which a length prefix grows a byte. One reply is
// refilled throughout, as an exchange does.
func TestChunkReplyWire(t *testing.T) {
	for _, response := range []bool{false, true} {
		c := newChunkReply(response)
		for _, n := range []int{0, 1, 100, 115, 116, 117, 127, 128, 16371, 16372, 16383, 16384, 64 << 10, 2_097_140} {
			for _, eos := range []bool{false, true} {
				body := bytes.Repeat([]byte{'x'}, n)
				want, err := proto.Marshal(streamedChunk(response, body, eos))
				if err != nil {
					t.Fatal(err)
				}
				c.fill(body, eos)
				got := c.AppendWire([]byte("prefix"))
				if !bytes.Equal(got[:6], []byte("prefix")) || !bytes.Equal(got[6:], want) {
					t.Fatalf("response %v, %d bytes, eos %v: wire form differs from proto.Marshal", response, n, eos)
				}
				if c.WireSize() != len(want) {
					t.Fatalf("response %v, %d bytes, eos %v: WireSize %d, proto.Marshal wrote %d", response, n, eos, c.WireSize(), len(want))
				}
				// What a codec without AppendWire sends: the message itself.
				if asMessage, err := proto.Marshal(c); err != nil || !bytes.Equal(asMessage, want) {
					t.Fatalf("response %v, %d bytes, eos %v: the reply as a message marshals otherwise (%v)", response, n, eos, err)
				}
			}
		}
	}
}

// FuzzChunkReplyWire is TestChunkReplyWire over any body.
func FuzzChunkReplyWire(f *testing.F) {
	f.Add([]byte(nil), false, false)
	f.Add([]byte("data: {}\n\n"), true, true)
	f.Fuzz(func(t *testing.T, body []byte, response, eos bool) {
		want, err := proto.Marshal(streamedChunk(response, body, eos))
		if err != nil {
			t.Fatal(err)
		}
		c := newChunkReply(response).fill(body, eos)
		if got := c.AppendWire(nil); !bytes.Equal(got, want) || c.WireSize() != len(want) {
			t.Fatalf("wire form %x (size %d), proto.Marshal %x", got, c.WireSize(), want)
		}
	})
}

// BenchmarkChunkReply is the encoding of one streamed response piece (an
// SSE chunk of one token) by warmpath's codec: built as a message each
// time and marshaled by reflection, against the exchange's reply refilled
// and written by hand.
func BenchmarkChunkReply(b *testing.B) {
	body := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	codec := grpcbuf.Codec{Pool: &grpcbuf.Pool{}}
	b.Run("message", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := codec.Marshal(streamedChunk(true, body, false))
			if err != nil {
				b.Fatal(err)
			}
			d.Free()
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		c := newChunkReply(true)
		for b.Loop() {
			d, err := codec.Marshal(c.fill(body, false))
			if err != nil {
				b.Fatal(err)
			}
			d.Free()
		}
	})
}

// chunkRequest is a response body chunk as Envoy sends it.
func chunkRequest(body string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: eos}}}
}

// TestReceivedReadWire reads every message of an exchange into one
// received, as the loop does: the response body chunks that carry nothing
// else by hand, the rest by the codec, each equal to what proto.Unmarshal
// makes of it.
func TestReceivedReadWire(t *testing.T) {
	withMetadata := chunkRequest("data: x\n\n", false)
	withMetadata.MetadataContext = &corev3.Metadata{} // as Envoy sends every chunk
	withNamespace := chunkRequest("data: x\n\n", false)
	withNamespace.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb": {}}}
	observed := chunkRequest("data: x\n\n", false)
	observed.ObservabilityMode = true
	compressed := chunkRequest("", true)
	compressed.GetResponseBody().GrpcMessageCompressed = true
	r := newReceived()
	for _, c := range []struct {
		name string
		msg  *extprocv3.ProcessingRequest
		hand bool // ReadWire reads it
	}{
		{"request headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/chat/completions")}}}}}}, false},
		{"chunk", chunkRequest(`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n", false), true},
		{"empty chunk", chunkRequest("", false), true},
		{"last chunk", chunkRequest("data: [DONE]\n\n", true), true},
		{"longer chunk", chunkRequest(strings.Repeat("z", 70_000), false), true},
		{"shorter chunk after it", chunkRequest("y", false), true},
		{"end of stream alone", chunkRequest("", true), true},
		{"chunk with an empty metadata context", withMetadata, true},
		{"chunk with a metadata namespace", withNamespace, false},
		{"chunk after the codec's chunk", withMetadata, true},
		{"chunk in observability mode", observed, false},
		{"chunk of a compressed gRPC message", compressed, false},
		{"request body", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte("{}"), EndOfStream: true}}}, false},
		{"chunk after the codec's message", chunkRequest("data: after\n\n", false), true},
		{"response trailers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{}}}, false},
	} {
		data, err := proto.Marshal(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		if hand := r.ReadWire(data); hand != c.hand {
			t.Fatalf("%s: ReadWire read it %v, want %v", c.name, hand, c.hand)
		}
		if err := (grpcbuf.Codec{Pool: &grpcbuf.Pool{}}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, r); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !proto.Equal(r.ProcessingRequest, c.msg) {
			t.Fatalf("%s: received %v, want %v", c.name, r.ProcessingRequest, c.msg)
		}
	}
}

// TestReceivedReadWireForms reads wire forms proto.Marshal does not write
// but proto.Unmarshal accepts: the hand reading takes those it can match
// exactly and declines the rest (a field given twice, which proto merges
// or overwrites), leaving the message as it was.
func TestReceivedReadWireForms(t *testing.T) {
	tag := func(b []byte, n protowire.Number, t protowire.Type) []byte { return protowire.AppendTag(b, n, t) }
	chunk := func(inner []byte) []byte {
		return protowire.AppendBytes(tag(nil, chunkResponseBody, protowire.BytesType), inner)
	}
	body := func(b []byte, v string) []byte {
		return protowire.AppendBytes(tag(b, fieldHTTPBody, protowire.BytesType), []byte(v))
	}
	eos := func(b []byte, v ...byte) []byte {
		return append(tag(b, fieldHTTPEndOfStream, protowire.VarintType), v...)
	}
	for _, c := range []struct {
		name string
		data []byte
		hand bool
	}{
		{"end of stream before the body", chunk(body(eos(nil, 1), "x")), true},
		{"end of stream of 2", chunk(eos(nil, 2)), true},
		{"end of stream in a long varint", chunk(eos(nil, 0x81, 0x80, 0x00)), true},
		{"false end of stream, written", chunk(body(eos(nil, 0), "x")), true},
		{"body twice", chunk(body(body(nil, "a"), "b")), false},
		{"end of stream twice", chunk(eos(eos(nil, 1), 0)), false},
		{"response body twice", append(chunk(body(nil, "a")), chunk(eos(nil, 1))...), false},
		{"an unknown field", chunk(protowire.AppendVarint(tag(body(nil, "a"), 99, protowire.VarintType), 7)), false},
		{"body as a varint", chunk(protowire.AppendVarint(tag(nil, fieldHTTPBody, protowire.VarintType), 1)), false},
		{"truncated", chunk(body(nil, "abc"))[:5], false},
		{"empty metadata first", append(protowire.AppendBytes(tag(nil, chunkMetadata, protowire.BytesType), nil), chunk(body(nil, "a"))...), true},
		{"empty metadata twice", protowire.AppendBytes(tag(protowire.AppendBytes(tag(chunk(body(nil, "a")), chunkMetadata, protowire.BytesType), nil), chunkMetadata, protowire.BytesType), nil), false},
		{"empty metadata alone", protowire.AppendBytes(tag(nil, chunkMetadata, protowire.BytesType), nil), false},
		{"empty", nil, false},
	} {
		r := newReceived()
		before := chunkRequest("untouched", true)
		r.ProcessingRequest = proto.Clone(before).(*extprocv3.ProcessingRequest)
		hand := r.ReadWire(c.data)
		if hand != c.hand {
			t.Fatalf("%s: ReadWire read it %v, want %v", c.name, hand, c.hand)
		}
		want := new(extprocv3.ProcessingRequest)
		err := proto.Unmarshal(c.data, want)
		switch {
		case hand && (err != nil || !proto.Equal(r.ProcessingRequest, want)):
			t.Fatalf("%s: read %v, proto.Unmarshal %v (%v)", c.name, r.ProcessingRequest, want, err)
		case !hand && !proto.Equal(r.ProcessingRequest, before):
			t.Fatalf("%s: declined, but the message changed to %v", c.name, r.ProcessingRequest)
		}
	}
}

// FuzzReceivedReadWire holds ReadWire to proto.Unmarshal on any input: what
// it reads must decode to the same message, and what it declines must leave
// the message as it was.
func FuzzReceivedReadWire(f *testing.F) {
	meta := chunkRequest("data: x\n\n", false)
	meta.MetadataContext = &corev3.Metadata{}
	for _, m := range []*extprocv3.ProcessingRequest{chunkRequest("data: x\n\n", false), chunkRequest("", true), meta,
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("{}")}}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newReceived()
		before := chunkRequest("before", false)
		r.ProcessingRequest = proto.Clone(before).(*extprocv3.ProcessingRequest)
		if !r.ReadWire(data) {
			if !proto.Equal(r.ProcessingRequest, before) {
				t.Fatalf("declined %x, but the message changed", data)
			}
			return
		}
		want := new(extprocv3.ProcessingRequest)
		if err := proto.Unmarshal(data, want); err != nil || !proto.Equal(r.ProcessingRequest, want) {
			t.Fatalf("read %x as %v, proto.Unmarshal gives %v (%v)", data, r.ProcessingRequest, want, err)
		}
	})
}

// BenchmarkReceived is the decoding of one response chunk as Envoy sends
// it (an SSE chunk of one token and an empty metadata context) by
// warmpath's codec: into a new message by proto.Unmarshal, as gRPC's Recv
// does, against the exchange's received, read by hand.
func BenchmarkReceived(b *testing.B) {
	m := chunkRequest(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`+"\n\n", false)
	m.MetadataContext = &corev3.Metadata{}
	data, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	codec := grpcbuf.Codec{Pool: &grpcbuf.Pool{}}
	b.Run("message", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, new(extprocv3.ProcessingRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		r := newReceived()
		for b.Loop() {
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
