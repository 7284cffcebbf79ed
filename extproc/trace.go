package extproc

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// tracerName is the instrumentation scope of warmpath's spans.
const tracerName = "github.com/warmpath/warmpath/extproc"

// serverSpanName names the SERVER span of one ext_proc stream.
const serverSpanName = "warmpath.request"

// maxCandidateAttrs bounds the per-candidate array attributes on a span.
const maxCandidateAttrs = 64

// tracing is a Server's span machinery; a nil *tracing means tracing is
// off and every hook returns at once.
type tracing struct {
	tracer  *telemetry.Tracer
	prop    propagation.TextMapPropagator
	semconv telemetry.Semconv
	// capture puts the request's messages or prompt on the GenAI span.
	capture bool
	// traces recycles *requestTrace values, with their scratch, from
	// ended requests.
	traces sync.Pool
}

// WithTracing records spans through p. With p nil or disabled the Server
// does no span work at all. capturePrompts adds the request's messages (or
// prompt) as gen_ai.input.messages; it is off by default because prompts
// are user data.
func WithTracing(p *telemetry.Provider, capturePrompts bool) Option {
	return func(s *Server) {
		if p == nil {
			return
		}
		s.semconv = p.Semconv()
		if !p.Enabled() {
			return
		}
		s.tr = &tracing{tracer: p.Tracer(tracerName), prop: p.Propagator(), semconv: p.Semconv(), capture: capturePrompts}
		s.tr.traces.New = func() any { return new(requestTrace) }
	}
}

// requestTrace is the spans of one exchange: the SERVER span for the stream
// and the GenAI CLIENT span for the upstream call, once a worker is chosen.
// Methods on a nil *requestTrace do nothing. After end it goes back to its
// tracing's pool and must not be used; its spans, once ended, belong to the
// exporter.
//
// Each attribute key is set at most once per span (telemetry.Span does not
// deduplicate): the hooks below run once each, in order, and set disjoint
// keys.
type requestTrace struct {
	t      *tracing
	server *telemetry.Span
	client *telemetry.Span // nil until decided, and again once ended
	// bag is the baggage that came with the parent context; it goes
	// upstream with the CLIENT span's context.
	bag baggage.Baggage
	// rejectedStatus says rejected set the SERVER span's error.type.
	rejectedStatus bool
	// names, ttfts and cached are scratch for the per-candidate attributes,
	// whose values copy them.
	names  []string
	ttfts  []float64
	cached []int64
}

// release clears rt, keeping its scratch slices' storage, and puts it back
// in the pool.
func (t *tracing) release(rt *requestTrace) {
	names, ttfts, cached := rt.names[:0], rt.ttfts[:0], rt.cached[:0]
	clear(names[:cap(names)])
	*rt = requestTrace{names: names, ttfts: ttfts, cached: cached}
	t.traces.Put(rt)
}

// headerCarrier reads trace-context headers from Envoy's request headers.
type headerCarrier []*corev3.HeaderValue

func (c headerCarrier) Get(key string) string {
	for _, h := range c {
		if h.GetKey() == key {
			return headerValue(h)
		}
	}
	return ""
}

func (c headerCarrier) Set(string, string) {}

func (c headerCarrier) Keys() []string {
	ks := make([]string, len(c))
	for i, h := range c {
		ks[i] = h.GetKey()
	}
	return ks
}

// metadataCarrier reads trace context from the ext_proc stream's gRPC
// metadata, where Envoy puts it when its own tracing is on.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if vs := metadata.MD(c).Get(key); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (c metadataCarrier) Set(string, string) {}

func (c metadataCarrier) Keys() []string {
	ks := make([]string, 0, len(c))
	for k := range c {
		ks = append(ks, k)
	}
	return ks
}

// setTraceHeader returns a setter that writes injected trace context into
// a header mutation, overwriting what the client sent (Envoy overwrites
// when append is unset).
func setTraceHeader(hm *extprocv3.HeaderMutation) func(k, v string) {
	return func(k, v string) { hm.SetHeaders = append(hm.SetHeaders, setHeader(k, v)) }
}

// has reports whether the headers carry key with a non-empty value, without
// copying the value.
func (c headerCarrier) has(key string) bool {
	for _, h := range c {
		if h.GetKey() == key {
			return len(h.GetRawValue()) > 0 || h.GetValue() != ""
		}
	}
	return false
}

// parent chooses the span parent: the client's traceparent header when it
// carries a valid context, else the context Envoy put in the gRPC metadata.
func (t *tracing) parent(ctx context.Context, hs []*corev3.HeaderValue) context.Context {
	if hc := headerCarrier(hs); hc.has("traceparent") {
		if p := t.prop.Extract(context.Background(), hc); trace.SpanContextFromContext(p).IsValid() {
			return p
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return t.prop.Extract(context.Background(), metadataCarrier(md))
	}
	return context.Background()
}

// start opens the SERVER span when the request headers arrive.
func (t *tracing) start(ctx context.Context, hs []*corev3.HeaderValue, r *scoring.Request, method string) *requestTrace {
	if t == nil {
		return nil
	}
	rt := t.traces.Get().(*requestTrace)
	rt.t = t
	parent := t.parent(ctx, hs)
	rt.bag = baggage.FromContext(parent)
	rt.server = t.tracer.Start(parent, serverSpanName, trace.SpanKindServer, r.Arrived)
	rt.server.SetAttributes(telemetry.GenAIRequestID.String(r.ID), telemetry.URLPath.String(r.Path),
		attribute.String("http.request.method", method))
	if r.Tenant != "" {
		rt.server.SetAttributes(telemetry.Tenant.String(r.Tenant))
	}
	return rt
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// decided records the decision on the SERVER span, opens the GenAI CLIENT
// span for the upstream call and injects its context into hm, so the
// worker's own spans nest under it.
func (rt *requestTrace) decided(r *scoring.Request, input []byte, d *scoring.Decision, hm *extprocv3.HeaderMutation, now time.Time) {
	if rt == nil {
		return
	}
	if srv := rt.server; srv.IsRecording() {
		srv.SetAttributes(
			telemetry.Policy.String(d.Policy),
			telemetry.Mode.String(string(d.Mode)),
			telemetry.TokenizePath.String(d.TokenizePath),
			telemetry.Candidates.Int(len(d.Candidates)),
			telemetry.Worker.String(d.Worker),
			telemetry.Reason.String(d.Reason),
		)
		if d.TokenizeReason != "" {
			srv.SetAttributes(telemetry.TokenizeReason.String(d.TokenizeReason))
		}
		if d.PromptTokens > 0 {
			srv.SetAttributes(telemetry.PromptTokens.Int(d.PromptTokens))
		}
		if d.StalePeers > 0 {
			srv.SetAttributes(telemetry.StalePeers.Int(d.StalePeers))
		}
		if d.KVSilent {
			srv.SetAttributes(telemetry.KVEventsSilent.Bool(true))
		}
		if d.Objective != "" {
			srv.SetAttributes(telemetry.Objective.String(string(d.Objective)))
		}
		if d.SLO.TTFT > 0 {
			srv.SetAttributes(telemetry.SLOTTFT.Float64(seconds(d.SLO.TTFT)))
		}
		if d.SLO.TPOT > 0 {
			srv.SetAttributes(telemetry.SLOTPOT.Float64(seconds(d.SLO.TPOT)))
		}
		if r.Model != "" {
			srv.SetAttributes(telemetry.GenAIRequestModel.String(r.Model))
		}
		if n := min(len(d.Candidates), maxCandidateAttrs); n > 0 {
			names, ttfts, cached := rt.names[:0], rt.ttfts[:0], rt.cached[:0]
			for _, c := range d.Candidates[:n] {
				names = append(names, c.Worker)
				ttfts = append(ttfts, seconds(c.PredictedTTFT))
				cached = append(cached, int64(c.CachedTokens))
			}
			// The slice attributes copy their elements; the scratch is reusable.
			srv.SetAttributes(telemetry.CandidateWorkers.StringSlice(names),
				telemetry.CandidatePredictedTTFTs.Float64Slice(ttfts), telemetry.CandidateCachedTokens.Int64Slice(cached))
			rt.names, rt.ttfts, rt.cached = names, ttfts, cached
		}
	}
	upstream := rt.server.SpanContext()
	if op, provider, ok := telemetry.Operation(string(r.API)); ok {
		rt.client = rt.t.tracer.StartChild(rt.server, op+" "+r.Model, trace.SpanKindClient, now)
		upstream = rt.client.SpanContext()
		if c := rt.client; c.IsRecording() {
			c.SetAttributes(
				telemetry.GenAIOperationName.String(op),
				telemetry.GenAIProviderName.String(provider),
				telemetry.GenAIRequestModel.String(r.Model),
				telemetry.Worker.String(d.Worker),
				telemetry.PredictedCachedTokens.Int(d.Chosen.CachedTokens),
				telemetry.PredictedQueueWait.Float64(seconds(d.Chosen.QueueWait)),
				telemetry.PredictedPrefill.Float64(seconds(d.Chosen.Prefill)),
				telemetry.PredictedTTFT.Float64(seconds(d.Chosen.PredictedTTFT)),
				telemetry.PredictedTPOT.Float64(seconds(d.Chosen.PredictedTPOT)),
				telemetry.PredictedE2E.Float64(seconds(d.Chosen.PredictedE2E)),
				telemetry.PredictedSlowdown.Float64(seconds(d.Chosen.Slowdown)),
				telemetry.PredictedOutputTokens.Int(d.OutputTokens),
			)
			if host, port, err := net.SplitHostPort(d.Address); err == nil {
				c.SetAttributes(telemetry.ServerAddress.String(host))
				if p, err := strconv.Atoi(port); err == nil {
					c.SetAttributes(telemetry.ServerPort.Int(p))
				}
			}
			if r.MaxTokens > 0 {
				c.SetAttributes(telemetry.GenAIRequestMaxTokens.Int(r.MaxTokens))
			}
			if r.Choices > 1 {
				c.SetAttributes(telemetry.GenAIRequestChoiceCount.Int(r.Choices))
			}
			if r.Stream {
				c.SetAttributes(telemetry.GenAIRequestStream.Bool(true))
			}
			if rt.t.capture {
				if len(input) > 0 {
					c.SetAttributes(telemetry.GenAIInputMessages.String(string(input)))
				}
			}
		}
	}
	telemetry.InjectTraceContext(upstream, rt.bag, setTraceHeader(hm))
}

// rejected records that warmpath answered the client itself.
func (rt *requestTrace) rejected(rej *rejection) {
	if rt == nil {
		return
	}
	rt.server.SetAttributes(telemetry.RejectReason.String(rej.reason), telemetry.ErrorType.String(strconv.Itoa(rej.status)))
	rt.rejectedStatus = true
	rt.server.SetStatus(codes.Error, rej.reason)
}

// ended records the outcome on the CLIENT span, with events at the first
// and last token, and ends it.
func (rt *requestTrace) ended(d *scoring.Decision, o scoring.Outcome, w *watcher, stream bool, now time.Time) {
	if rt == nil || rt.client == nil {
		return
	}
	span := rt.client
	rt.client = nil
	if span.IsRecording() {
		span.SetAttributes(telemetry.Completion.String(string(o.End)))
		if o.HTTPStatus != 0 {
			span.SetAttributes(telemetry.HTTPResponseStatusCode.Int(o.HTTPStatus))
		}
		if o.PromptTokens >= 0 {
			span.SetAttributes(telemetry.GenAIUsageInputTokens.Int(o.PromptTokens))
		}
		if o.CompletionTokens >= 0 {
			span.SetAttributes(telemetry.GenAIUsageOutputTokens.Int(o.CompletionTokens))
		}
		if o.CachedTokens >= 0 {
			span.SetAttributes(telemetry.GenAIUsageCacheRead.Int(o.CachedTokens), telemetry.ActualCachedTokens.Int(o.CachedTokens))
		}
		if o.TTFT > 0 {
			span.SetAttributes(telemetry.ActualTTFT.Float64(seconds(o.TTFT)))
			if d != nil && d.Chosen.PredictedTTFT > 0 {
				span.SetAttributes(telemetry.TTFTError.Float64(seconds(o.TTFT - d.Chosen.PredictedTTFT)))
			}
			if stream {
				span.SetAttributes(telemetry.GenAIResponseTTFC.Float64(seconds(o.TTFT)))
			}
		}
		if tpot := o.TPOT(); tpot > 0 {
			span.SetAttributes(telemetry.ActualTPOT.Float64(seconds(tpot)))
			if d != nil && d.Chosen.PredictedTPOT > 0 {
				span.SetAttributes(telemetry.TPOTError.Float64(seconds(tpot - d.Chosen.PredictedTPOT)))
			}
		}
		if e2e := o.E2E(); e2e > 0 {
			span.SetAttributes(telemetry.ActualE2E.Float64(seconds(e2e)))
			if d != nil && d.Chosen.PredictedE2E > 0 {
				span.SetAttributes(telemetry.E2EError.Float64(seconds(e2e - d.Chosen.PredictedE2E)))
			}
		}
		if et := errorType(o); et != "" {
			span.SetAttributes(telemetry.ErrorType.String(et))
			if o.Error != "" {
				span.SetAttributes(telemetry.UpstreamError.String(headerSafe(o.Error)))
			}
			span.SetStatus(codes.Error, et)
		}
		if w != nil && !w.firstToken.IsZero() {
			span.AddEvent(telemetry.EventFirstToken, w.firstToken)
		}
		if w != nil && !w.lastToken.IsZero() {
			span.AddEvent(telemetry.EventLastToken, w.lastToken)
		}
	}
	span.End(now)
}

// errorType is the low-cardinality error.type of an outcome, "" when it
// succeeded: the HTTP status for error statuses, else how it ended.
func errorType(o scoring.Outcome) string {
	switch {
	case o.HTTPStatus >= 400:
		return strconv.Itoa(o.HTTPStatus)
	case o.End == scoring.EndAborted && o.Error != "":
		return "stream_error"
	case o.End == scoring.EndAborted:
		return "aborted"
	case o.End == scoring.EndExpired:
		return "expired"
	}
	return ""
}

// fail records a stream-level error.
func (rt *requestTrace) fail(err error, now time.Time) {
	if rt == nil {
		return
	}
	rt.server.RecordError(err, now)
	rt.server.SetStatus(codes.Error, "ext_proc stream error")
}

// end closes the SERVER span when the stream ends; code is the final HTTP
// status ("0" when no response was seen). It releases rt.
func (rt *requestTrace) end(code string, now time.Time) {
	if rt == nil {
		return
	}
	if rt.client != nil { // the stream ended without an outcome
		rt.client.SetStatus(codes.Error, "aborted")
		rt.client.End(now)
	}
	if n, err := strconv.Atoi(code); err == nil && n > 0 {
		rt.server.SetAttributes(telemetry.HTTPResponseStatusCode.Int(n))
		if n >= 500 {
			rt.server.SetStatus(codes.Error, code)
		}
	} else if !rt.rejectedStatus {
		rt.server.SetAttributes(telemetry.ErrorType.String("aborted"))
		rt.server.SetStatus(codes.Error, "no response")
	}
	rt.server.End(now)
	rt.t.release(rt)
}

// observeDecision records a decision on the metrics and the span, injects
// the trace context and removes the tenant header from the upstream
// request, all through the routing reply's header mutation.
func (s *Server) observeDecision(ex *exchange, cr *extprocv3.CommonResponse) {
	rt := &ex.route
	s.om.decided(rt.dec)
	ex.trace.decided(&rt.req, rt.input, rt.dec, cr.HeaderMutation, s.now())
	s.tenant.stripTenantHeader(cr.HeaderMutation)
}

// observeFinal records the GenAI request metrics and ends the SERVER span
// when the stream ends. code is the final status ("0" for none), model the
// bounded model label.
func (s *Server) observeFinal(ex *exchange, code, model string) {
	now := s.now()
	req := &ex.route.req
	r := genAIRequest{
		api: string(req.API), model: model, tenant: s.tenant.tenantLabel(req.Tenant),
		arrived: req.Arrived, end: now, errorType: statusErrorType(code), input: -1, output: -1,
	}
	cached := -1
	if w := ex.route.watch; w != nil {
		r.firstToken, r.lastToken = w.firstToken, w.lastToken
		r.input, r.output, cached = w.usage.PromptTokens, w.usage.CompletionTokens, w.usage.CachedTokens
	}
	s.om.request(r)
	s.om.cachedUsage(r, cached)
	ex.trace.end(code, now)
	ex.trace = nil // released by end
}
