package sse

import (
	"strings"
	"testing"
)

// vllmStream returns a vLLM-shaped stream of n content events: OpenAI chat
// chunks, or Anthropic named events when anthropic is set, with line
// endings eol.
func vllmStream(n int, anthropic bool, eol string) []byte {
	var b strings.Builder
	for range n {
		if anthropic {
			b.WriteString("event: content_block_delta" + eol +
				`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" word"}}` + eol + eol)
		} else {
			b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + eol + eol)
		}
	}
	return []byte(b.String())
}

// BenchmarkParser measures event splitting alone for a 1000-event stream
// fed in 1 KiB pieces, as a client's reads or Envoy's chunks deliver it.
func BenchmarkParser(b *testing.B) {
	for _, bc := range []struct {
		name      string
		anthropic bool
		eol       string
	}{
		{"openai-lf", false, "\n"},
		{"openai-crlf", false, "\r\n"},
		{"anthropic-lf", true, "\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const events = 1000
			stream := vllmStream(events, bc.anthropic, bc.eol)
			emit := func(_, _ []byte) error { return nil }
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				var p Parser
				for off := 0; off < len(stream); off += 1024 {
					if err := p.Feed(stream[off:min(off+1024, len(stream))], emit); err != nil {
						b.Fatal(err)
					}
				}
				if err := p.Finish(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/events, "ns/event")
		})
	}
}
