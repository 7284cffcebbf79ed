package telemetry

import (
	"context"
	"math/rand/v2"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer starts warmpath's spans. It is a lean recorder rather than the
// OpenTelemetry SDK's tracer: a request's two spans are plain structs that
// the caller fills, each attribute key set once, and that a batcher hands to
// the SDK's exporters (OTLP, stdout) as they are. The SDK's recording span
// takes a lock per call, deduplicates attributes through a map when it ends
// and wakes its batch processor once per span; at 100% sampling that cost
// more than the request's own work. Sampling still uses the SDK's samplers.
type Tracer struct {
	*spans // shared by a Provider's tracers
	scope  instrumentation.Scope
}

// spanSink receives ended spans: the batcher, or a synchronous exporter.
type spanSink interface {
	enqueue(*Span)
}

// Start starts a span named name of the given kind at ts, a child of the
// span context in ctx when it is valid (as a propagator's Extract leaves
// it). The sampler decides whether it records; a span that does not record
// still has a span context to propagate.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, ts time.Time) *Span {
	parent := trace.SpanContextFromContext(ctx)
	s := &Span{tracer: t, name: name, kind: kind, start: ts, parent: parent}
	var tid trace.TraceID
	if parent.IsValid() {
		tid = parent.TraceID()
	} else {
		tid = newTraceID()
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name, Kind: kind})
	var flags trace.TraceFlags
	if res.Decision == sdktrace.RecordAndSample {
		flags = trace.FlagsSampled
		s.recording = true
	}
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: res.Tracestate,
	})
	return s
}

// StartChild starts a span under parent, a span of this tracer, taking
// parent's sampling decision instead of asking the sampler again: what the
// parent-based samplers decide, and what the ratio samplers decide too,
// since their decision depends on the trace id alone.
func (t *Tracer) StartChild(parent *Span, name string, kind trace.SpanKind, ts time.Time) *Span {
	s := &Span{tracer: t, name: name, kind: kind, start: ts, parent: parent.sc, recording: parent.recording}
	s.sc = parent.sc.WithSpanID(newSpanID()).WithRemote(false)
	return s
}

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for id == (trace.TraceID{}) {
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i], id[8+i] = byte(hi>>(56-8*i)), byte(lo>>(56-8*i))
		}
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for id == (trace.SpanID{}) {
		v := rand.Uint64()
		for i := range 8 {
			id[i] = byte(v >> (56 - 8*i))
		}
	}
	return id
}

// Span is one span being recorded. It is not safe for concurrent use: a
// request's spans are written by the goroutine serving its stream. Once
// End is called it belongs to the exporter and must not be touched.
//
// Attributes are appended as they are set, without deduplication: the
// caller sets each key at most once.
type Span struct {
	// ReadOnlySpan is embedded, always nil, for its unexported method, which
	// the SDK's exporters require of what they export; Span implements every
	// exported method itself.
	sdktrace.ReadOnlySpan

	tracer     *Tracer
	name       string
	kind       trace.SpanKind
	sc, parent trace.SpanContext
	start, end time.Time
	recording  bool
	attrs      []attribute.KeyValue
	events     []sdktrace.Event
	status     sdktrace.Status
	// buf backs attrs and evbuf events, so that a typical span makes no
	// allocation of its own beyond the Span.
	buf   [24]attribute.KeyValue
	evbuf [2]sdktrace.Event
}

// IsRecording reports whether the span records (was sampled).
func (s *Span) IsRecording() bool { return s != nil && s.recording }

// SetAttributes appends attributes; each key must be set only once per span.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	if !s.IsRecording() {
		return
	}
	if s.attrs == nil {
		s.attrs = s.buf[:0]
	}
	s.attrs = append(s.attrs, kv...)
}

// AddEvent records an event at ts.
func (s *Span) AddEvent(name string, ts time.Time, kv ...attribute.KeyValue) {
	if !s.IsRecording() {
		return
	}
	if s.events == nil {
		s.events = s.evbuf[:0]
	}
	s.events = append(s.events, sdktrace.Event{Name: name, Time: ts, Attributes: kv})
}

// SetStatus sets the span's status with the SDK's precedence (Ok over
// Error over Unset); a description is kept only with Error.
func (s *Span) SetStatus(code codes.Code, description string) {
	if !s.IsRecording() || code < s.status.Code {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.status = sdktrace.Status{Code: code, Description: description}
}

// RecordError adds an "exception" event for err, as the SDK does.
func (s *Span) RecordError(err error, ts time.Time) {
	if err == nil || !s.IsRecording() {
		return
	}
	s.AddEvent("exception", ts, attribute.String("exception.type", errorTypeName(err)),
		attribute.String("exception.message", err.Error()))
}

// End ends the span at ts and hands it to the exporter when it records.
func (s *Span) End(ts time.Time) {
	if !s.IsRecording() || !s.end.IsZero() {
		return
	}
	s.end = ts
	s.tracer.sink.enqueue(s)
}

// The sdktrace.ReadOnlySpan methods, read by exporters.

func (s *Span) Name() string                     { return s.name }
func (s *Span) SpanContext() trace.SpanContext   { return s.sc }
func (s *Span) Parent() trace.SpanContext        { return s.parent }
func (s *Span) SpanKind() trace.SpanKind         { return s.kind }
func (s *Span) StartTime() time.Time             { return s.start }
func (s *Span) EndTime() time.Time               { return s.end }
func (s *Span) Attributes() []attribute.KeyValue { return s.attrs }
func (s *Span) Links() []sdktrace.Link           { return nil }
func (s *Span) Events() []sdktrace.Event         { return s.events }
func (s *Span) Status() sdktrace.Status          { return s.status }
func (s *Span) InstrumentationScope() instrumentation.Scope {
	return s.tracer.scope
}

//nolint:staticcheck // part of the SDK's interface
func (s *Span) InstrumentationLibrary() instrumentation.Library {
	return instrumentation.Library(s.tracer.scope)
}
func (s *Span) Resource() *resource.Resource { return s.tracer.res }
func (s *Span) DroppedAttributes() int       { return 0 }
func (s *Span) DroppedLinks() int            { return 0 }
func (s *Span) DroppedEvents() int           { return 0 }
func (s *Span) ChildSpanCount() int          { return 0 }

// errorTypeName is the exception.type of err, named as the SDK names it.
func errorTypeName(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer or another unnamed type
	}
	return t.PkgPath() + "." + t.Name()
}
