package extproc

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// decisionPicker answers every Pick with a copy of a fixed decision for the
// first candidate, as a warmpath-style policy would explain it.
type decisionPicker struct {
	tmpl scoring.Decision
	done chan scoring.Outcome
}

func newDecisionPicker(mode scoring.Mode, path string) *decisionPicker {
	c0 := scoring.Candidate{Worker: "w0", Address: "10.0.0.1:8000", CachedTokens: 608,
		QueueWait: 40 * time.Millisecond, Prefill: 10 * time.Millisecond, Overhead: 5 * time.Millisecond, PredictedTTFT: 55 * time.Millisecond,
		PredictedTPOT: 20 * time.Millisecond, PredictedE2E: 235 * time.Millisecond, Slowdown: 30 * time.Millisecond}
	c1 := scoring.Candidate{Worker: "w1", Address: "10.0.0.2:8000", CachedTokens: 0,
		QueueWait: 0, Prefill: 200 * time.Millisecond, Overhead: 5 * time.Millisecond, PredictedTTFT: 205 * time.Millisecond}
	return &decisionPicker{
		tmpl: scoring.Decision{Worker: "w0", Address: "10.0.0.1:8000", Policy: "warmpath", Mode: mode, TokenizePath: path,
			PromptTokens: 640, OutputTokens: 10, Objective: scoring.ObjectiveSLO, SLO: scoring.SLO{TTFT: 2 * time.Second},
			Chosen: c0, Candidates: []scoring.Candidate{c0, c1}, Reason: "lowest predicted ttft"},
		done: make(chan scoring.Outcome, 100),
	}
}

func (p *decisionPicker) Pick(_ context.Context, _ *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	d := p.tmpl
	d.Worker, d.Address, d.Decided = ws[0].Name, ws[0].Address, time.Now()
	return &d, nil
}

func (p *decisionPicker) Done(_ *scoring.Decision, o scoring.Outcome) { p.done <- o }

func (p *decisionPicker) wait(t *testing.T) scoring.Outcome {
	t.Helper()
	select {
	case o := <-p.done:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no assignment ended within 10s")
		return scoring.Outcome{}
	}
}

// spanRecorder is an exporter that keeps every span it is given; with a
// synchronous provider a span is there the moment it ends. It also checks
// that no span sets an attribute key twice, which telemetry.Span does not
// deduplicate.
type spanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
	dupes []string
}

func (r *spanRecorder) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range spans {
		seen := map[attribute.Key]bool{}
		for _, kv := range s.Attributes() {
			if seen[kv.Key] {
				r.dupes = append(r.dupes, s.Name()+": "+string(kv.Key))
			}
			seen[kv.Key] = true
		}
	}
	r.spans = append(r.spans, spans...)
	return nil
}

func (r *spanRecorder) Shutdown(context.Context) error { return nil }

// Ended returns the spans exported so far, in the order they ended.
func (r *spanRecorder) Ended() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// newRecorded returns a provider whose spans go to a new recorder, and the
// recorder, which fails t at cleanup if a span repeated an attribute key.
func newRecorded(t *testing.T, sc telemetry.Semconv) (*telemetry.Provider, *spanRecorder) {
	t.Helper()
	rec := &spanRecorder{}
	t.Cleanup(func() {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.dupes) > 0 {
			t.Errorf("attribute keys set twice: %v", rec.dupes)
		}
	})
	return telemetry.NewProvider(rec, sc, telemetry.SpanOptions{Sync: true}), rec
}

// traced is an ext_proc Server with an in-memory span recorder.
type traced struct {
	srv    *Server
	rec    *spanRecorder
	reg    *prometheus.Registry
	picker *decisionPicker
	client extprocv3.ExternalProcessorClient
}

func newTraced(t *testing.T, picker *decisionPicker, sc telemetry.Semconv, opts ...Option) *traced {
	t.Helper()
	return newTracedAt(t, picker, sc, nil, opts...)
}

// newTracedAt is newTraced reading time from clock (nil: time.Now).
func newTracedAt(t *testing.T, picker *decisionPicker, sc telemetry.Semconv, clock func() time.Time, opts ...Option) *traced {
	t.Helper()
	p, rec := newRecorded(t, sc)
	tr := &traced{rec: rec, reg: prometheus.NewRegistry(), picker: picker}
	opts = append([]Option{WithTracing(p, false)}, opts...)
	srv, err := New(testConfig(), &fakePool{workers: testWorkers}, picker,
		component.Options{Registerer: tr.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr.srv = srv
	tr.client = serveLoopback(t, tr.srv)
	return tr
}

// open starts a stream; md is gRPC metadata as Envoy would send it.
func (tr *traced) open(t *testing.T, md ...string) *envoy {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	st, err := tr.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &envoy{t: t, stream: st, cancel: cancel, first: true, reqM: fullDuplex, respM: fullDuplex}
}

// spansEnded waits until n spans have ended and returns them by name.
func (tr *traced) spansEnded(t *testing.T, n int) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(tr.rec.Ended()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans ended, want %d", len(tr.rec.Ended()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range tr.rec.Ended() {
		out[s.Name()] = s
	}
	return out
}

// streamResponse plays the streamed chat response of openAIStream on e,
// after the routing reply, and closes the stream once the assignment ended.
func (tr *traced) streamResponse(t *testing.T, e *envoy) {
	t.Helper()
	e.responseHeaders("200", "text/event-stream", false)
	e.recv()
	chunks := strings.SplitAfter(openAIStream, "\n\n")
	for i, c := range chunks {
		e.responseBody(c, i == len(chunks)-1)
		e.recv()
	}
	tr.picker.wait(t)
	if err := e.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	e.recvErr()
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs compares the wanted attributes (by their printed value).
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		switch {
		case v == "<absent>" && ok:
			t.Errorf("span %q: %s = %s, want it absent", s.Name(), k, g.String())
		case v != "<absent>" && (!ok || g.String() != v):
			t.Errorf("span %q: %s = %q (present %v), want %q", s.Name(), k, g.String(), ok, v)
		}
	}
}

// routeHeaders returns the set headers of the routing reply.
func routeHeaders(t *testing.T, e *envoy) map[string][]string {
	t.Helper()
	r := e.recv()
	cr := r.GetRequestHeaders().GetResponse()
	if cr == nil {
		t.Fatalf("want a request_headers reply, got %v", r)
	}
	out := map[string][]string{}
	for _, h := range cr.GetHeaderMutation().GetSetHeaders() {
		if h.GetAppend() != nil || h.GetHeader().GetValue() != "" {
			t.Fatalf("header %s must overwrite and use raw_value only", h.GetHeader().GetKey())
		}
		out[h.GetHeader().GetKey()] = append(out[h.GetHeader().GetKey()], string(h.GetHeader().GetRawValue()))
	}
	for _, k := range cr.GetHeaderMutation().GetRemoveHeaders() {
		out["-"+k] = nil
	}
	// Drain the echoed body.
	for !e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
	}
	return out
}

const (
	clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	clientTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	envoyTraceparent  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	envoyTraceID      = "0af7651916cd43dd8448eb211c80319c"
)

func TestSpansForStreamedChat(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false, "x-request-id", "req-7", "traceparent", clientTraceparent, "tracestate", "vendor=x",
		"baggage", "tenant.tier=gold")
	e.requestBody(chatBody, true)
	hs := routeHeaders(t, e)
	tr.streamResponse(t, e)
	spans := tr.spansEnded(t, 2)
	server, client := spans["warmpath.request"], spans["chat qwen3"]
	if got := hs["baggage"]; len(got) != 1 || got[0] != "tenant.tier=gold" {
		t.Errorf("injected baggage %v, want the client's", got)
	}
	if server == nil || client == nil {
		t.Fatalf("spans: %v", spans)
	}
	if server.SpanKind() != trace.SpanKindServer || client.SpanKind() != trace.SpanKindClient {
		t.Fatalf("kinds %v %v", server.SpanKind(), client.SpanKind())
	}
	if server.Parent().TraceID().String() != clientTraceID || server.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("server span parent %v, want the client's traceparent", server.Parent())
	}
	if client.Parent().SpanID() != server.SpanContext().SpanID() || client.SpanContext().TraceID().String() != clientTraceID {
		t.Fatalf("client span parent %v", client.Parent())
	}
	// The upstream gets the CLIENT span's context, replacing the client's.
	wantTP := "00-" + clientTraceID + "-" + client.SpanContext().SpanID().String() + "-01"
	if got := hs["traceparent"]; len(got) != 1 || got[0] != wantTP {
		t.Fatalf("injected traceparent %v, want %s", got, wantTP)
	}
	if got := hs["tracestate"]; len(got) != 1 || got[0] != "vendor=x" {
		t.Fatalf("injected tracestate %v", got)
	}
	checkAttrs(t, server, map[attribute.Key]string{
		"warmpath.policy": "warmpath", "warmpath.mode": "exact", "warmpath.tokenize.path": "local",
		"warmpath.candidates": "2", "warmpath.worker": "w0", "gen_ai.request.id": "req-7",
		"warmpath.candidates.workers": `["w0","w1"]`, "warmpath.candidates.predicted_ttft": "[0.055,0.205]",
		"http.response.status_code": "200", "gen_ai.request.model": "qwen3",
		"warmpath.objective": "slo", "warmpath.slo.ttft": "2", "warmpath.slo.tpot": "<absent>",
	})
	checkAttrs(t, client, map[attribute.Key]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "qwen3",
		"server.address": "10.0.0.1", "server.port": "8000", "gen_ai.request.max_tokens": "16", "gen_ai.request.choice.count": "2", "gen_ai.request.stream": "true",
		"warmpath.predicted.cached_tokens": "608", "warmpath.predicted.queue_wait": "0.04",
		"warmpath.predicted.prefill": "0.01", "warmpath.predicted.ttft": "0.055",
		"warmpath.predicted.tpot": "0.02", "warmpath.predicted.e2e": "0.235", "warmpath.predicted.slowdown": "0.03",
		"warmpath.predicted.output_tokens": "10",
		"gen_ai.usage.input_tokens":        "640", "gen_ai.usage.output_tokens": "10",
		"gen_ai.usage.cache_read.input_tokens": "624", "warmpath.actual.cached_tokens": "624",
		"warmpath.completion": "completed", "error.type": "<absent>", "gen_ai.input.messages": "<absent>",
	})
	a := attrs(client)
	if a["warmpath.actual.ttft"].AsFloat64() <= 0 || a["gen_ai.response.time_to_first_chunk"].AsFloat64() != a["warmpath.actual.ttft"].AsFloat64() {
		t.Errorf("actual ttft %v, ttfc %v", a["warmpath.actual.ttft"].String(), a["gen_ai.response.time_to_first_chunk"].String())
	}
	if tpot := a["warmpath.actual.tpot"].AsFloat64(); tpot <= 0 || math.Abs(a["warmpath.tpot_error"].AsFloat64()-(tpot-0.02)) > 1e-9 {
		t.Errorf("actual tpot %v, error %v", tpot, a["warmpath.tpot_error"].String())
	}
	if e2e := a["warmpath.actual.e2e"].AsFloat64(); e2e < a["warmpath.actual.ttft"].AsFloat64() {
		t.Errorf("actual e2e %v before the first token", e2e)
	}
	var names []string
	for _, ev := range client.Events() {
		names = append(names, ev.Name)
	}
	if strings.Join(names, ",") != "gen_ai.first_token,gen_ai.last_token" {
		t.Fatalf("events %v", names)
	}
	if client.Events()[0].Time.After(client.Events()[1].Time) || client.StartTime().After(client.Events()[0].Time) {
		t.Fatal("events out of order")
	}
	if client.Status().Code == codes.Error || server.Status().Code == codes.Error {
		t.Fatalf("statuses %v %v", client.Status(), server.Status())
	}
}

func TestSpansForNonStreamedCompletion(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeRemote, "remote"), telemetry.Semconv{})
	// No client traceparent: Envoy's context from the gRPC metadata is the parent.
	e := tr.open(t, "traceparent", envoyTraceparent)
	e.requestHeaders("POST", "/v1/completions", false)
	e.requestBody(`{"model":"qwen3","prompt":"Say hi","max_tokens":5}`, true)
	hs := routeHeaders(t, e)
	e.responseHeaders("200", "application/json", false)
	e.recv()
	e.responseBody(`{"id":"cmpl-1","object":"text_completion","choices":[{"text":"hi","index":0,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, true)
	e.recv()
	tr.picker.wait(t)
	e.stream.CloseSend()
	e.recvErr()
	spans := tr.spansEnded(t, 2)
	server, client := spans["warmpath.request"], spans["text_completion qwen3"]
	if server == nil || client == nil {
		t.Fatalf("spans: %v", spans)
	}
	if server.Parent().TraceID().String() != envoyTraceID || !server.Parent().IsRemote() {
		t.Fatalf("server parent %v, want Envoy's context from gRPC metadata", server.Parent())
	}
	if got := hs["traceparent"]; len(got) != 1 || !strings.HasPrefix(got[0], "00-"+envoyTraceID+"-"+client.SpanContext().SpanID().String()) {
		t.Fatalf("injected traceparent %v", got)
	}
	checkAttrs(t, client, map[attribute.Key]string{
		"gen_ai.operation.name": "text_completion", "gen_ai.request.stream": "<absent>",
		"gen_ai.usage.input_tokens": "3", "gen_ai.usage.output_tokens": "2",
		"gen_ai.usage.cache_read.input_tokens": "<absent>", "gen_ai.response.time_to_first_chunk": "<absent>",
		"warmpath.completion": "completed", "http.response.status_code": "200",
	})
	checkAttrs(t, server, map[attribute.Key]string{"warmpath.mode": "remote-tokenized", "warmpath.tokenize.path": "remote"})
}

func TestHeaderTraceparentWinsOverMetadata(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
	e := tr.open(t, "traceparent", envoyTraceparent)
	e.requestHeaders("GET", "/v1/models", true, "traceparent", clientTraceparent)
	r := e.recv()
	var tp string
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "traceparent" {
			tp = string(h.GetHeader().GetRawValue())
		}
	}
	e.stream.CloseSend()
	e.recvErr()
	spans := tr.spansEnded(t, 1)
	server := spans["warmpath.request"]
	if server.Parent().TraceID().String() != clientTraceID {
		t.Fatalf("parent %v, want the header's", server.Parent())
	}
	// No GenAI operation on /v1/models: the SERVER span's context goes upstream.
	if tp != "00-"+clientTraceID+"-"+server.SpanContext().SpanID().String()+"-01" {
		t.Fatalf("injected %q", tp)
	}
	if len(spans) != 1 {
		t.Fatalf("want only the server span, got %v", spans)
	}
}

func TestSpansForAbortedStream(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	e.requestBody(chatBody, true)
	routeHeaders(t, e)
	e.responseHeaders("200", "text/event-stream", false)
	e.recv()
	chunks := strings.SplitAfter(openAIStream, "\n\n")
	e.responseBody(chunks[0]+chunks[2], false)
	e.recv()
	e.cancel() // the client went away
	if o := tr.picker.wait(t); o.End != scoring.EndAborted {
		t.Fatalf("outcome %+v", o)
	}
	spans := tr.spansEnded(t, 2)
	client, server := spans["chat qwen3"], spans["warmpath.request"]
	checkAttrs(t, client, map[attribute.Key]string{
		"warmpath.completion": "aborted", "error.type": "aborted", "gen_ai.usage.input_tokens": "<absent>",
	})
	if client.Status().Code != codes.Error {
		t.Fatalf("client status %v", client.Status())
	}
	var names []string
	for _, ev := range client.Events() {
		names = append(names, ev.Name)
	}
	if strings.Join(names, ",") != "gen_ai.first_token,gen_ai.last_token" {
		t.Fatalf("events %v", names)
	}
	if server.EndTime().IsZero() || server.EndTime().Before(client.EndTime()) {
		t.Fatal("server span must end after the client span")
	}
}

func TestDegradedDecisionIsVisible(t *testing.T) {
	t.Parallel()
	p := newDecisionPicker(scoring.ModeLoadOnly, "none")
	p.tmpl.TokenizeReason = "no tokenizer and /tokenize failed"
	p.tmpl.Chosen.CachedTokens, p.tmpl.Chosen.PredictedTTFT = 0, 0
	tr := newTraced(t, p, telemetry.Semconv{})
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	e.requestBody(chatBody, true)
	routeHeaders(t, e)
	e.responseHeaders("503", "application/json", false)
	e.recv()
	e.responseBody(`{"error":{"message":"overloaded"}}`, true)
	e.recv()
	p.wait(t)
	e.stream.CloseSend()
	e.recvErr()
	spans := tr.spansEnded(t, 2)
	checkAttrs(t, spans["warmpath.request"], map[attribute.Key]string{
		"warmpath.mode": "load-only", "warmpath.tokenize.path": "none",
		"warmpath.tokenize.reason": "no tokenizer and /tokenize failed", "http.response.status_code": "503",
	})
	checkAttrs(t, spans["chat qwen3"], map[attribute.Key]string{
		"error.type": "503", "warmpath.upstream_error": "overloaded", "warmpath.completion": "aborted",
	})
	if got := testutil.ToFloat64(tr.srv.om.decisions.WithLabelValues("warmpath", "load-only")); got != 1 {
		t.Fatalf("load-only decisions counter %v", got)
	}
	if got := testutil.ToFloat64(tr.srv.om.tokenizePath.WithLabelValues("none")); got != 1 {
		t.Fatalf("tokenize path counter %v", got)
	}
}

func TestRejectedRequestSpan(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	e.requestBody(`{"model":"nope","messages":[]}`, true)
	if e.recv().GetImmediateResponse() == nil {
		t.Fatal("want an immediate response")
	}
	e.cancel() // Envoy ends the stream after an immediate response
	spans := tr.spansEnded(t, 1)
	s := spans["warmpath.request"]
	checkAttrs(t, s, map[attribute.Key]string{"warmpath.reject_reason": "unknown_model", "error.type": "404"})
	if s.Status().Code != codes.Error || len(spans) != 1 {
		t.Fatalf("status %v, spans %v", s.Status(), spans)
	}
}

// TestRecycledTraceStartsClean checks that a request's spans carry nothing
// of an earlier request on the same server (span state is recycled).
func TestRecycledTraceStartsClean(t *testing.T) {
	t.Parallel()
	tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false, "x-request-id", "first")
	e.requestBody(chatBody, true)
	routeHeaders(t, e)
	tr.streamResponse(t, e)
	tr.spansEnded(t, 2)

	e = tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false, "x-request-id", "second")
	e.requestBody(`{"model":"nope","messages":[]}`, true)
	if e.recv().GetImmediateResponse() == nil {
		t.Fatal("want an immediate response")
	}
	e.cancel()
	ended := tr.spansEnded(t, 3)
	if len(ended) != 2 {
		t.Fatalf("spans %v", ended)
	}
	s := tr.rec.Ended()[2]
	checkAttrs(t, s, map[attribute.Key]string{
		"gen_ai.request.id": "second", "warmpath.reject_reason": "unknown_model",
		"warmpath.worker": "<absent>", "warmpath.candidates.workers": "<absent>", "warmpath.policy": "<absent>",
	})
}

func TestPromptCaptureIsOptIn(t *testing.T) {
	t.Parallel()
	prov, rec := newRecorded(t, telemetry.Semconv{})
	p := newDecisionPicker(scoring.ModeExact, "local")
	tr := newTraced(t, p, telemetry.Semconv{}, WithTracing(prov, true))
	e := tr.open(t)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	e.requestBody(chatBody, true)
	routeHeaders(t, e)
	e.cancel()
	p.wait(t)
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.Ended()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "chat qwen3" {
			checkAttrs(t, s, map[attribute.Key]string{"gen_ai.input.messages": `[{"role":"user","content":"hello"}]`})
			return
		}
	}
	t.Fatal("no chat span")
}

// TestTracingOffAddsNothing checks that without a provider no trace header
// is added and no span work happens.
func TestTracingOffAddsNothing(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"no option", "disabled provider"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var opts []Option
			if name == "disabled provider" {
				opts = append(opts, WithTracing(telemetry.Disabled(telemetry.Semconv{}), true))
			}
			h := newHarness(t, testConfig(), opts...)
			if h.srv.tr != nil {
				t.Fatal("tracing state present while off")
			}
			e := h.open(t, fullDuplex, fullDuplex)
			e.requestHeaders("POST", "/v1/chat/completions", false, "traceparent", clientTraceparent)
			e.requestBody(chatBody, true)
			r := e.recv()
			checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
		})
	}
}

// TestInvalidHeaderTraceparentFallsBackToMetadata: a malformed client
// traceparent does not hide Envoy's context.
func TestInvalidHeaderTraceparentFallsBackToMetadata(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header string
		md           []string
		wantTrace    string // "" means a new root
	}{
		{name: "garbage header, metadata parent", header: "00-zz-yy-01", md: []string{"traceparent", envoyTraceparent}, wantTrace: envoyTraceID},
		{name: "all-zero trace id, metadata parent", header: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", md: []string{"traceparent", envoyTraceparent}, wantTrace: envoyTraceID},
		{name: "garbage header, no metadata", header: "not a traceparent", wantTrace: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := newTraced(t, newDecisionPicker(scoring.ModeExact, "local"), telemetry.Semconv{})
			e := tr.open(t, tc.md...)
			e.requestHeaders("GET", "/v1/models", true, "traceparent", tc.header)
			e.recv()
			e.stream.CloseSend()
			e.recvErr()
			s := tr.spansEnded(t, 1)["warmpath.request"]
			switch {
			case tc.wantTrace == "" && s.Parent().IsValid():
				t.Fatalf("want a root span, got parent %v", s.Parent())
			case tc.wantTrace != "" && s.Parent().TraceID().String() != tc.wantTrace:
				t.Fatalf("parent %v, want trace %s", s.Parent(), tc.wantTrace)
			}
		})
	}
}
