package telemetry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// recorder is an exporter that keeps what it is given and can be made to
// block, to fill the batcher's queue.
type recorder struct {
	mu      sync.Mutex
	spans   []sdktrace.ReadOnlySpan
	batches []int
	gate    chan struct{} // when not nil, each export waits for a receive
	closed  bool
}

func (r *recorder) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, spans...)
	r.batches = append(r.batches, len(spans))
	return nil
}

func (r *recorder) Shutdown(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

func TestSpanRecordsWhatTheSDKWould(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := NewProvider(rec, Semconv{}, SpanOptions{Sync: true})
	tr := p.Tracer("scope")
	t0 := time.Unix(1000, 0)
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	srv := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "warmpath.request", trace.SpanKindServer, t0)
	cli := tr.Start(trace.ContextWithSpanContext(context.Background(), srv.SpanContext()), "chat m", trace.SpanKindClient, t0.Add(time.Millisecond))
	cli.SetAttributes(attribute.String("a", "1"), attribute.Int("b", 2))
	cli.AddEvent("first", t0.Add(2*time.Millisecond))
	cli.SetStatus(codes.Error, "boom")
	cli.SetStatus(codes.Unset, "") // Unset does not replace Error
	srv.RecordError(errors.New("stream reset"), t0.Add(3*time.Millisecond))
	cli.End(t0.Add(4 * time.Millisecond))
	cli.End(t0.Add(9 * time.Millisecond)) // a second End does nothing
	srv.End(t0.Add(5 * time.Millisecond))

	if len(rec.spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(rec.spans))
	}
	c, s := rec.spans[0], rec.spans[1]
	if c.SpanContext().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() || c.Parent().SpanID() != s.SpanContext().SpanID() {
		t.Errorf("parentage: server %v parent %v, client %v parent %v", s.SpanContext(), s.Parent(), c.SpanContext(), c.Parent())
	}
	if !c.SpanContext().IsSampled() || c.SpanContext().SpanID() == s.SpanContext().SpanID() {
		t.Errorf("client span context %v", c.SpanContext())
	}
	if c.SpanKind() != trace.SpanKindClient || s.SpanKind() != trace.SpanKindServer || c.Name() != "chat m" {
		t.Errorf("kinds %v %v, name %q", c.SpanKind(), s.SpanKind(), c.Name())
	}
	if !c.EndTime().Equal(t0.Add(4*time.Millisecond)) || !c.StartTime().Equal(t0.Add(time.Millisecond)) {
		t.Errorf("client times %v–%v", c.StartTime(), c.EndTime())
	}
	if got := c.Status(); got.Code != codes.Error || got.Description != "boom" {
		t.Errorf("status %+v", got)
	}
	if len(c.Attributes()) != 2 || len(c.Events()) != 1 || c.Events()[0].Name != "first" {
		t.Errorf("attributes %v, events %v", c.Attributes(), c.Events())
	}
	if ev := s.Events(); len(ev) != 1 || ev[0].Name != "exception" || ev[0].Attributes[0].Value.AsString() != "*errors.errorString" {
		t.Errorf("error event %+v", ev)
	}
	if c.InstrumentationScope().Name != "scope" || c.Resource() == nil {
		t.Errorf("scope %v, resource %v", c.InstrumentationScope(), c.Resource())
	}
}

func TestUnsampledSpanPropagatesButRecordsNothing(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	p := NewProvider(rec, Semconv{}, SpanOptions{Sync: true}) // parent-based
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, Remote: true})
	s := p.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "x", trace.SpanKindServer, time.Now())
	s.SetAttributes(attribute.String("a", "b"))
	s.End(time.Now())
	if s.IsRecording() || s.SpanContext().IsSampled() || !s.SpanContext().IsValid() || s.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("span under an unsampled parent: recording %v, context %v", s.IsRecording(), s.SpanContext())
	}
	child := p.Tracer("t").StartChild(s, "y", trace.SpanKindClient, time.Now())
	child.End(time.Now())
	if child.IsRecording() || child.SpanContext().TraceID() != parent.TraceID() || !child.Parent().Equal(s.SpanContext()) {
		t.Errorf("child of an unsampled span: recording %v, context %v, parent %v", child.IsRecording(), child.SpanContext(), child.Parent())
	}
	if rec.count() != 0 {
		t.Errorf("%d spans exported, want 0", rec.count())
	}
	// Under a sampled span, a child records and keeps the trace state.
	ts, _ := trace.ParseTraceState("vendor=v")
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	root := p.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), sampled), "x", trace.SpanKindServer, time.Now())
	kid := p.Tracer("t").StartChild(root, "y", trace.SpanKindClient, time.Now())
	if !kid.IsRecording() || !kid.SpanContext().IsSampled() || kid.SpanContext().TraceState().Get("vendor") != "v" ||
		kid.SpanContext().SpanID() == root.SpanContext().SpanID() || kid.SpanContext().IsRemote() {
		t.Errorf("child of a sampled span: recording %v, context %v", kid.IsRecording(), kid.SpanContext())
	}
}

func TestBatcherExportsFullBatchesAtOnce(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	// An hour's delay: only a full batch (or Shutdown) exports.
	p := NewProvider(rec, Semconv{}, SpanOptions{Batch: BatchConfig{ScheduleDelay: time.Hour, MaxBatch: 4, MaxQueue: 100}})
	tr := p.Tracer("t")
	for range 8 {
		tr.Start(context.Background(), "s", trace.SpanKindServer, time.Now()).End(time.Now())
	}
	deadline := time.Now().Add(10 * time.Second)
	for rec.count() < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rec.count() != 8 {
		t.Fatalf("%d spans exported by full batches, want 8", rec.count())
	}
	tr.Start(context.Background(), "s", trace.SpanKindServer, time.Now()).End(time.Now())
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 9 || !rec.closed {
		t.Fatalf("after Shutdown: %d spans, exporter closed %v; want 9, true", rec.count(), rec.closed)
	}
	for _, n := range rec.batches {
		if n > 4 {
			t.Errorf("a batch of %d spans, max 4", n)
		}
	}
	// Spans ended after Shutdown are dropped, not exported.
	tr.Start(context.Background(), "late", trace.SpanKindServer, time.Now()).End(time.Now())
	if rec.count() != 9 {
		t.Errorf("a span ended after Shutdown was exported")
	}
}

func TestBatcherDropsWhenQueueFull(t *testing.T) {
	t.Parallel()
	rec := &recorder{gate: make(chan struct{})}
	b := newBatcher(rec, BatchConfig{ScheduleDelay: time.Hour, MaxBatch: 2, MaxQueue: 4}, nil)
	tr := &Tracer{spans: &spans{sampler: sdktrace.AlwaysSample(), sink: b}}
	end := func() { tr.Start(context.Background(), "s", trace.SpanKindServer, time.Now()).End(time.Now()) }
	end()
	end() // a full batch: the loop takes it and blocks in the exporter
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for range 6 { // 4 fit in the queue, 2 are dropped
		end()
	}
	if d := b.Dropped(); d != 2 {
		t.Fatalf("dropped %d, want 2", d)
	}
	close(rec.gate)
	if err := b.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 6 {
		t.Fatalf("%d spans exported, want 6", rec.count())
	}
}

func TestSamplerFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env     []string
		want    string // the sampler's Description, "" for an error
		wantErr bool
	}{
		{env: nil, want: "ParentBased{root:AlwaysOnSampler"},
		{env: []string{"OTEL_TRACES_SAMPLER", "always_on"}, want: "AlwaysOnSampler"},
		{env: []string{"OTEL_TRACES_SAMPLER", "always_off"}, want: "AlwaysOffSampler"},
		{env: []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"}, want: "TraceIDRatioBased{0.25}"},
		{env: []string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.5"}, want: "ParentBased{root:TraceIDRatioBased{0.5}"},
		{env: []string{"OTEL_TRACES_SAMPLER", "parentbased_always_off"}, want: "ParentBased{root:AlwaysOffSampler"},
		{env: []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"}, wantErr: true},
		{env: []string{"OTEL_TRACES_SAMPLER", "bogus"}, wantErr: true},
	}
	for _, tc := range tests {
		s, err := SamplerFromEnv(envOf(tc.env...))
		if tc.wantErr {
			if err == nil {
				t.Errorf("%v: want an error, got %v", tc.env, s.Description())
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if d := s.Description(); len(d) < len(tc.want) || d[:len(tc.want)] != tc.want {
			t.Errorf("%v: sampler %s, want %s…", tc.env, d, tc.want)
		}
	}
}

func TestBatchConfigFromEnv(t *testing.T) {
	t.Parallel()
	got := BatchConfigFromEnv(envOf("OTEL_BSP_SCHEDULE_DELAY", "50", "OTEL_BSP_MAX_QUEUE_SIZE", "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "x"))
	want := BatchConfig{ScheduleDelay: 50 * time.Millisecond, ExportTimeout: 30 * time.Second, MaxQueue: 100, MaxBatch: 100}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
