package extproc

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

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
