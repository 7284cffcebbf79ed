package extproc

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkRoundTrip measures one request's ext_proc exchange over loopback
// gRPC as Envoy drives it in FULL_DUPLEX_STREAMED: request headers and a
// chat body in, the routing reply and the echoed body out, then a streamed
// response of 20 SSE chunks, each watched and echoed. The picker is a
// trivial fake, so this is the protocol's own cost. It reports the median
// and p99 from the body's end to the routing reply, and per response chunk
// from send to echo.
func BenchmarkRoundTrip(b *testing.B) {
	h := newHarness(b, testConfig())
	chunks := strings.SplitAfter(strings.Repeat("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n", 20), "\n\n")
	chunks = chunks[:len(chunks)-1]
	var route, chunk []time.Duration
	for b.Loop() {
		e := h.open(b, fullDuplex, fullDuplex)
		e.requestHeaders("POST", "/v1/chat/completions", false)
		t0 := time.Now()
		e.requestBody(chatBody, true)
		e.recv()
		route = append(route, time.Since(t0))
		e.recv() // the echoed body
		e.responseHeaders("200", "text/event-stream", false)
		e.recv()
		for i, c := range chunks {
			t1 := time.Now()
			e.responseBody(c, i == len(chunks)-1)
			e.recv()
			chunk = append(chunk, time.Since(t1))
		}
		e.cancel()
	}
	report(b, route, "route")
	report(b, chunk, "chunk")
}

func report(b *testing.B, xs []time.Duration, what string) {
	slices.Sort(xs)
	p := func(q float64) float64 { return float64(xs[min(len(xs)-1, int(q*float64(len(xs))))].Microseconds()) }
	b.ReportMetric(p(0.5), what+"-p50-µs")
	b.ReportMetric(p(0.99), what+"-p99-µs")
}

// BenchmarkWatcherChunk is the watcher's CPU cost per SSE chunk, without gRPC.
func BenchmarkWatcherChunk(b *testing.B) {
	benchWatcher(b, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
}

// BenchmarkWatcherAnthropicChunk is BenchmarkWatcherChunk for a named
// Anthropic event, whose name must cost no allocation.
func BenchmarkWatcherAnthropicChunk(b *testing.B) {
	benchWatcher(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token\"}}\n\n")
}

// benchWatcher feeds one watcher the same SSE chunk b.N times.
func benchWatcher(b *testing.B, chunk string) {
	c := []byte(chunk)
	w := newWatcher("text/event-stream", 1<<20)
	now := time.Now()
	b.SetBytes(int64(len(c)))
	for b.Loop() {
		w.write(c, now)
	}
}
