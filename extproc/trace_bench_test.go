//go:build unix

package extproc

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// replayStream is an in-process ext_proc stream: Recv hands out a fixed
// message sequence, Send discards. Any other method panics (nil interface).
type replayStream struct {
	extprocv3.ExternalProcessor_ProcessServer
	ctx  context.Context
	msgs []*extprocv3.ProcessingRequest
	i    int
}

func (s *replayStream) Context() context.Context { return s.ctx }

func (s *replayStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if s.i == len(s.msgs) {
		return nil, io.EOF
	}
	s.i++
	return s.msgs[s.i-1], nil
}

func (s *replayStream) Send(*extprocv3.ProcessingResponse) error { return nil }

// discardExporter drops spans after the batch processor hands them over.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// chatExchange is one streamed chat request and response as Envoy sends it.
func chatExchange() []*extprocv3.ProcessingRequest {
	pc := &extprocv3.ProtocolConfiguration{RequestBodyMode: fullDuplex, ResponseBodyMode: fullDuplex}
	msgs := []*extprocv3.ProcessingRequest{
		{ProtocolConfig: pc, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", "x-request-id", "bench",
				"traceparent", clientTraceparent)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(chatBody), EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":status", "200", "content-type", "text/event-stream")}}},
	}
	chunks := strings.SplitAfter(openAIStream, "\n\n")
	for i, c := range chunks {
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1}}})
	}
	return msgs
}

// processCPU returns the process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// nopPicker decides like a warmpath policy without doing work.
type nopPicker struct{ d scoring.Decision }

func (p *nopPicker) Pick(context.Context, *scoring.Request, scoring.Workers) (*scoring.Decision, error) {
	d := p.d
	return &d, nil
}

func (p *nopPicker) Done(*scoring.Decision, scoring.Outcome) {}

// BenchmarkRequestTracing measures one whole request (headers, body,
// decision, streamed response, end) through Server.Process with tracing off
// and with every request sampled; the difference is tracing's per-request
// cost.
func BenchmarkRequestTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			var opts []Option
			if mode == "on" {
				p := telemetry.NewProvider(discardExporter{}, telemetry.Semconv{}, telemetry.SpanOptions{Sampler: sdktrace.AlwaysSample()})
				b.Cleanup(func() { p.Shutdown(context.Background()) })
				opts = append(opts, WithTracing(p, false))
			}
			p := &nopPicker{d: newDecisionPicker(scoring.ModeExact, "local").tmpl}
			srv, err := New(testConfig(), &fakePool{workers: testWorkers}, p, component.Options{Registerer: prometheus.NewRegistry(),
				Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			msgs := chatExchange()
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if err := srv.Process(&replayStream{ctx: ctx, msgs: msgs}); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time of the whole process (the batch processor's goroutine
			// included) per request: less disturbed by other load than wall time.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
