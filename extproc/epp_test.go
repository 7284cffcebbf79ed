package extproc

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/scoring"
)

var _ Reassigner = (*scoring.Router)(nil)

// scoredPicker picks the candidate with the lowest predicted TTFT and
// fills every candidate's prediction and score, as scoring.Router does;
// it records Reassign calls.
type scoredPicker struct {
	*fakePicker
	ttft map[string]time.Duration // by worker; 1s when absent

	mu        sync.Mutex
	reassigns []string
}

func newScoredPicker(ttft map[string]time.Duration) *scoredPicker {
	return &scoredPicker{fakePicker: newFakePicker(), ttft: ttft}
}

func (p *scoredPicker) Pick(ctx context.Context, r *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	d, err := p.fakePicker.Pick(ctx, r, ws)
	if err != nil {
		return nil, err
	}
	best := 0
	for i, w := range ws {
		t, ok := p.ttft[w.Name]
		if !ok {
			t = time.Second
		}
		d.Candidates = append(d.Candidates, scoring.Candidate{Worker: w.Name, Address: w.Address, PredictedTTFT: t, Score: t.Seconds()})
		if t < d.Candidates[best].PredictedTTFT {
			best = i
		}
	}
	d.Chosen = d.Candidates[best]
	d.Worker, d.Address = d.Chosen.Worker, d.Chosen.Address
	return d, nil
}

func (p *scoredPicker) Reassign(_ *scoring.Decision, worker string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reassigns = append(p.reassigns, worker)
	return true
}

// fakeHealth records the results reported per worker.
type fakeHealth struct {
	mu      sync.Mutex
	results []string // worker:status
}

func (h *fakeHealth) ReportResult(worker string, status int, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.results = append(h.results, worker+":"+itoa(status))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

var eppWorkers = []discovery.Worker{
	{Name: "w0", Address: "10.0.0.1:8000", Models: []string{"qwen3"}},
	{Name: "w1", Address: "10.0.0.2:8000", Models: []string{"qwen3"}},
	{Name: "w2", Address: "10.0.0.3:8000", Models: []string{"qwen3"}},
	{Name: "w3", Address: "[fd00::4]:8000", Models: []string{"qwen3"}},
}

// newEPPHarness is a harness over eppWorkers with a scoredPicker.
func newEPPHarness(t *testing.T, cfg Config, ttft map[string]time.Duration, opts ...Option) (*harness, *scoredPicker) {
	t.Helper()
	h := newHarness(t, cfg, opts...)
	p := newScoredPicker(ttft)
	h.pool.workers = eppWorkers
	h.srv.picker = p
	h.picker = p.fakePicker
	return h, p
}

// filterMD builds forwarded filter metadata: namespace → key → value.
func filterMD(ns, key string, v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: {Fields: map[string]*structpb.Value{key: v}}}}
}

func listValue(ss ...string) *structpb.Value {
	vs := make([]*structpb.Value, len(ss))
	for i, s := range ss {
		vs[i] = structpb.NewStringValue(s)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

// route sends a full-duplex chat request with md and extra headers and
// returns the first reply (the routing reply, or an ImmediateResponse).
func (e *envoy) route(md *corev3.Metadata, extra ...string) *extprocv3.ProcessingResponse {
	e.t.Helper()
	kv := append([]string{":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json"}, extra...)
	e.send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)}}})
	e.requestBody(chatBody, true)
	return e.recv()
}

// destinationOf returns the destination header and the envoy.lb value of a
// routing reply.
func destinationOf(t *testing.T, r *extprocv3.ProcessingResponse) (header, meta string) {
	t.Helper()
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			header = string(h.GetHeader().GetRawValue())
		}
	}
	meta = r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	return header, meta
}

func TestSubsetHintParse(t *testing.T) {
	t.Parallel()
	const ns = "envoy.lb.subset_hint"
	tests := []struct {
		name  string
		md    *corev3.Metadata
		ns    string
		form  hintForm
		allow []string
		deny  []string
	}{
		{name: "absent", md: nil, ns: ns, form: hintNone, allow: []string{"10.0.0.1:8000"}},
		{name: "other key", md: filterMD(ns, "x-other", listValue("10.0.0.1:8000")), ns: ns, form: hintNone, allow: []string{"10.0.0.9:1"}},
		{name: "hints ignored", md: filterMD(ns, subsetKey, listValue()), ns: "", form: hintNone, allow: []string{"10.0.0.9:1"}},
		{name: "list", md: filterMD(ns, subsetKey, listValue("10.0.0.1:8000", " 10.0.0.2:8000 ")), ns: ns, form: hintList,
			allow: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, deny: []string{"10.0.0.1:8001", "10.0.0.3:8000"}},
		{name: "list of comma strings", md: filterMD(ns, subsetKey, listValue("10.0.0.1:8000,10.0.0.2:8000")), ns: ns, form: hintList,
			allow: []string{"10.0.0.2:8000"}, deny: []string{"10.0.0.3:8000"}},
		{name: "comma string", md: filterMD(ns, subsetKey, structpb.NewStringValue("10.0.0.1:8000, 10.0.0.2:8000,,")), ns: ns, form: hintString,
			allow: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, deny: []string{"10.0.0.3:8000"}},
		{name: "bare host allows its every port", md: filterMD(ns, subsetKey, structpb.NewStringValue("10.0.0.1")), ns: ns, form: hintString,
			allow: []string{"10.0.0.1:8000", "10.0.0.1:8001"}, deny: []string{"10.0.0.2:8000"}},
		{name: "IPv6 written two ways", md: filterMD(ns, subsetKey, listValue("[fd00:0::4]:8000", "[FD00::5]")), ns: ns, form: hintList,
			allow: []string{"[fd00::4]:8000", "[fd00::5]:1"}, deny: []string{"[fd00::4]:8001"}},
		{name: "empty list", md: filterMD(ns, subsetKey, listValue()), ns: ns, form: hintList, deny: []string{"10.0.0.1:8000"}},
		{name: "empty string", md: filterMD(ns, subsetKey, structpb.NewStringValue("")), ns: ns, form: hintString, deny: []string{"10.0.0.1:8000"}},
		{name: "number", md: filterMD(ns, subsetKey, structpb.NewNumberValue(8000)), ns: ns, form: hintInvalid, deny: []string{"10.0.0.1:8000"}},
		{name: "list of numbers", md: filterMD(ns, subsetKey, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1)}})),
			ns: ns, form: hintList, deny: []string{"10.0.0.1:8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set, form := subsetHint(tt.md, tt.ns)
			if form != tt.form || set.present != (form != hintNone) {
				t.Fatalf("form %q present %v, want %q", form, set.present, tt.form)
			}
			for _, a := range tt.allow {
				if !set.allows(a) {
					t.Errorf("%s not allowed", a)
				}
			}
			for _, a := range tt.deny {
				if set.allows(a) {
					t.Errorf("%s allowed", a)
				}
			}
		})
	}
}

func TestDestinations(t *testing.T) {
	t.Parallel()
	d := &scoring.Decision{Address: "b:1", Candidates: []scoring.Candidate{
		{Address: "a:1", Score: 3}, {Address: "b:1", Score: 1}, {Address: "c:1", Score: 2}, {Address: "d:1", Score: 2}, {Address: "c:1", Score: 0.5},
	}}
	tests := []struct {
		n    int
		want []string
	}{
		{0, []string{"b:1"}},
		{1, []string{"b:1", "c:1"}},
		{2, []string{"b:1", "c:1", "d:1"}},
		{9, []string{"b:1", "c:1", "d:1", "a:1"}},
	}
	for _, tt := range tests {
		if got := destinations(d, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("destinations(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

// TestSubsetHintRestrictsThePick: the pick is made among the hinted
// endpoints only, whatever the hint's form; a hint naming no endpoint, or
// none eligible (unknown, or unhealthy), is answered 503 with a JSON body
// and Retry-After, each counted under its reason.
func TestSubsetHintRestrictsThePick(t *testing.T) {
	t.Parallel()
	const ns = "envoy.lb.subset_hint"
	tests := []struct {
		name   string
		md     *corev3.Metadata
		down   string
		want   string // routed address, or "" for a 503
		reason string
		form   string
	}{
		{name: "no hint: every worker", want: "10.0.0.1:8000"},
		{name: "list", md: filterMD(ns, subsetKey, listValue("10.0.0.3:8000", "10.0.0.2:8000")), want: "10.0.0.2:8000", form: "list"},
		{name: "string", md: filterMD(ns, subsetKey, structpb.NewStringValue("10.0.0.3:8000")), want: "10.0.0.3:8000", form: "string"},
		{name: "IPv6 endpoint", md: filterMD(ns, subsetKey, listValue("[fd00:0:0::4]:8000")), want: "[fd00::4]:8000", form: "list"},
		{name: "empty list", md: filterMD(ns, subsetKey, listValue()), reason: "subset_empty", form: "list"},
		{name: "empty string", md: filterMD(ns, subsetKey, structpb.NewStringValue(" , ")), reason: "subset_empty", form: "string"},
		{name: "invalid value", md: filterMD(ns, subsetKey, structpb.NewBoolValue(true)), reason: "subset_empty", form: "invalid"},
		{name: "none in the pool", md: filterMD(ns, subsetKey, listValue("192.0.2.1:8000")), reason: "subset_none_eligible", form: "list"},
		{name: "only an unhealthy one", md: filterMD(ns, subsetKey, listValue("10.0.0.2:8000")), down: "w1", reason: "subset_none_eligible", form: "list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, _ := newEPPHarness(t, testConfig(), nil)
			if tt.down != "" {
				h.pool.down = map[string]bool{tt.down: true}
			}
			r := h.open(t, fullDuplex, fullDuplex).route(tt.md)
			if tt.want != "" {
				checkRouted(t, r.GetRequestHeaders().GetResponse(), r, tt.want)
			} else {
				ir := r.GetImmediateResponse()
				if ir.GetStatus().GetCode() != 503 || !json.Valid(ir.GetBody()) || !hasHeader(ir.GetHeaders(), "retry-after", "2") {
					t.Fatalf("want a 503 with a JSON body and retry-after, got %v", r)
				}
				if got := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues(tt.reason)); got != 1 {
					t.Errorf("rejections{reason=%q} = %v, want 1", tt.reason, got)
				}
			}
			if tt.form != "" {
				if got := testutil.ToFloat64(h.srv.m.subsetHints.WithLabelValues(tt.form)); got != 1 {
					t.Errorf("subset_hints{form=%q} = %v, want 1", tt.form, got)
				}
			}
		})
	}
}

func hasHeader(m *extprocv3.HeaderMutation, k, v string) bool {
	for _, h := range m.GetSetHeaders() {
		if h.GetHeader().GetKey() == k && string(h.GetHeader().GetRawValue()) == v {
			return true
		}
	}
	return false
}

// TestFallbacksAndScores: the destination is the chosen endpoint then the
// next best by score, identical in the header and the metadata; with
// endpoint_scores every candidate's predicted TTFT rides along; a client's
// own destination header is overwritten.
func TestFallbacksAndScores(t *testing.T) {
	t.Parallel()
	ttft := map[string]time.Duration{"w0": 3 * time.Second, "w1": time.Second, "w2": 2 * time.Second, "w3": 4 * time.Second}
	tests := []struct {
		name      string
		fallbacks int
		scores    bool
		want      string
	}{
		{name: "one endpoint by default", want: "10.0.0.2:8000"},
		{name: "two fallbacks", fallbacks: 2, want: "10.0.0.2:8000,10.0.0.3:8000,10.0.0.1:8000"},
		{name: "more fallbacks than candidates", fallbacks: 9, scores: true, want: "10.0.0.2:8000,10.0.0.3:8000,10.0.0.1:8000,[fd00::4]:8000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Fallbacks, cfg.EndpointScores = tt.fallbacks, tt.scores
			h, _ := newEPPHarness(t, cfg, ttft)
			r := h.open(t, fullDuplex, fullDuplex).route(nil, "x-gateway-destination-endpoint", "6.6.6.6:1")
			header, meta := destinationOf(t, r)
			if header != tt.want || meta != tt.want {
				t.Fatalf("header %q, metadata %q; want both %q", header, meta, tt.want)
			}
			scores := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()[scoresKey]
			if !tt.scores {
				if scores != nil {
					t.Fatalf("scores sent while off: %v", scores)
				}
				return
			}
			got := scores.GetStructValue().AsMap()
			want := map[string]any{"10.0.0.1:8000": 3.0, "10.0.0.2:8000": 1.0, "10.0.0.3:8000": 2.0, "[fd00::4]:8000": 4.0}
			if len(got) != len(want) {
				t.Fatalf("scores %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("score of %s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestServedEndpoint: the served endpoint the proxy reports on the response
// path decides whose outcome it is: a fallback's report moves the
// assignment (in-flight gauge, picker, health) and reports the endpoints
// the proxy walked past to health as failures, the chosen one's or none
// changes nothing, an unknown one is counted and ignored; with the
// conformance hooks the response echoes it.
func TestServedEndpoint(t *testing.T) {
	t.Parallel()
	ttft := map[string]time.Duration{"w0": 3 * time.Second, "w1": time.Second, "w2": 2 * time.Second}
	tests := []struct {
		name     string
		served   string
		hooks    bool
		result   string
		worker   string // whose outcome it is
		reassign []string
		walked   []string // endpoints the proxy walked past: the list is w1 (chosen), w3 (no prediction), w2
	}{
		{name: "fallback served", served: "10.0.0.3:8000", result: "fallback", worker: "w2", reassign: []string{"w2"}, walked: []string{"w1", "w3"}},
		{name: "fallback served, echoed", served: "10.0.0.3:8000", hooks: true, result: "fallback", worker: "w2", reassign: []string{"w2"}, walked: []string{"w1", "w3"}},
		{name: "first fallback served", served: "[fd00::4]:8000", result: "fallback", worker: "w3", reassign: []string{"w3"}, walked: []string{"w1"}},
		{name: "chosen served", served: "10.0.0.2:8000", hooks: true, result: "chosen", worker: "w1"},
		{name: "no report", result: "absent", worker: "w1"},
		{name: "unknown endpoint", served: "192.0.2.7:80", result: "unknown", worker: "w1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Fallbacks, cfg.ConformanceTestHooks = 2, tt.hooks
			health := &fakeHealth{}
			h, p := newEPPHarness(t, cfg, ttft, WithHealth(health))
			e := h.open(t, fullDuplex, fullDuplex)
			e.route(nil)
			for !e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			}
			var md *corev3.Metadata
			if tt.served != "" {
				md = filterMD("envoy.lb", servedKey, structpb.NewStringValue(tt.served))
			}
			e.send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200", "content-type", "application/json")}}})
			rh := e.recv().GetResponseHeaders().GetResponse().GetHeaderMutation()
			if echoed := hasHeader(rh, testServedHeader, tt.served); echoed != (tt.hooks && tt.served != "") {
				t.Errorf("served echo present = %v with hooks %v: %v", echoed, tt.hooks, rh)
			}
			if got := testutil.ToFloat64(h.srv.m.inFlight.WithLabelValues(tt.worker)); got != 1 {
				t.Errorf("in flight on %s = %v, want 1", tt.worker, got)
			}
			e.responseBody(`{"usage":{"prompt_tokens":5,"completion_tokens":1}}`, true)
			e.recv()
			h.picker.waitOutcome(t)
			p.mu.Lock()
			defer p.mu.Unlock()
			if !slices.Equal(p.reassigns, tt.reassign) {
				t.Errorf("Reassign calls %v, want %v", p.reassigns, tt.reassign)
			}
			health.mu.Lock()
			defer health.mu.Unlock()
			var want []string
			for _, w := range tt.walked {
				want = append(want, w+":0")
			}
			if want = append(want, tt.worker+":200"); !slices.Equal(health.results, want) {
				t.Errorf("health reports %v, want %v", health.results, want)
			}
			if got := testutil.ToFloat64(h.srv.m.served.WithLabelValues(tt.result)); got != 1 {
				t.Errorf("served_endpoint_reports{result=%q} = %v, want 1", tt.result, got)
			}
			for _, w := range []string{"w0", "w1", "w2"} {
				if got := testutil.ToFloat64(h.srv.m.inFlight.WithLabelValues(w)); got != 0 {
					t.Errorf("in flight on %s after the end = %v", w, got)
				}
			}
		})
	}
}

// TestConformanceSelectionHeader: test-epp-endpoint-selection steers the
// pick only with the conformance hooks on; otherwise it is ignored and
// counted (a client never chooses its upstream).
func TestConformanceSelectionHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		hooks  bool
		sel    string
		want   string
		reason string
	}{
		{name: "hooks off: ignored", sel: "10.0.0.3:8000", want: "10.0.0.1:8000"},
		{name: "hooks on: steers", hooks: true, sel: "10.0.0.3:8000", want: "10.0.0.3:8000"},
		{name: "hooks on: several", hooks: true, sel: "192.0.2.1:1, 10.0.0.2:8000", want: "10.0.0.2:8000"},
		{name: "hooks on: none eligible", hooks: true, sel: "192.0.2.1:1", reason: "test_selection_none_eligible"},
		{name: "hooks on: empty", hooks: true, sel: ",", reason: "test_selection_empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.ConformanceTestHooks = tt.hooks
			h, _ := newEPPHarness(t, cfg, nil)
			r := h.open(t, fullDuplex, fullDuplex).route(nil, testSelectionHeader, tt.sel)
			if tt.reason != "" {
				if r.GetImmediateResponse().GetStatus().GetCode() != 503 {
					t.Fatalf("want 503, got %v", r)
				}
				if got := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues(tt.reason)); got != 1 {
					t.Errorf("rejections{reason=%q} = %v", tt.reason, got)
				}
				return
			}
			checkRouted(t, r.GetRequestHeaders().GetResponse(), r, tt.want)
			if got, want := testutil.ToFloat64(h.srv.m.selectionIgnored), map[bool]float64{false: 1}[tt.hooks]; got != want {
				t.Errorf("selection headers ignored = %v, want %v", got, want)
			}
		})
	}
}

// TestShedding: when every candidate's predicted TTFT exceeds shed_ttft the
// request is answered 429 with Retry-After and the API's error shape, the
// picker's reservation is released at once and no assignment is left; one
// candidate within the bound is enough to route.
func TestShedding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ttft map[string]time.Duration
		path string
		shed bool
	}{
		{name: "all slow: shed", ttft: map[string]time.Duration{"w0": 9 * time.Second, "w1": 8 * time.Second, "w2": 7 * time.Second, "w3": 6 * time.Second}, path: "/v1/chat/completions", shed: true},
		{name: "all slow, Anthropic shape", ttft: map[string]time.Duration{"w0": 9 * time.Second, "w1": 8 * time.Second, "w2": 7 * time.Second, "w3": 6 * time.Second}, path: "/v1/messages", shed: true},
		{name: "one fast: routed", ttft: map[string]time.Duration{"w0": 9 * time.Second, "w1": 8 * time.Second, "w2": time.Second, "w3": 6 * time.Second}, path: "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.ShedTTFT = 5 * time.Second
			h, _ := newEPPHarness(t, cfg, tt.ttft)
			e := h.open(t, fullDuplex, fullDuplex)
			e.requestHeaders("POST", tt.path, false)
			e.requestBody(`{"model":"qwen3","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, true)
			r := e.recv()
			if !tt.shed {
				if r.GetRequestHeaders() == nil {
					t.Fatalf("want a routing reply, got %v", r)
				}
				return
			}
			ir := r.GetImmediateResponse()
			if ir.GetStatus().GetCode() != 429 || !hasHeader(ir.GetHeaders(), "retry-after", "2") {
				t.Fatalf("want a 429 with retry-after, got %v", r)
			}
			var body map[string]any
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil {
				t.Fatal(err)
			}
			want := "RateLimitError"
			if tt.path == "/v1/messages" {
				want = "rate_limit_error"
			}
			if !strings.Contains(string(ir.GetBody()), want) {
				t.Errorf("body %s lacks %q", ir.GetBody(), want)
			}
			if o := h.picker.waitOutcome(t); o.End != scoring.EndAborted || o.HTTPStatus != 0 {
				t.Errorf("released with %+v", o)
			}
			if got := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues("shed")); got != 1 {
				t.Errorf("rejections{shed} = %v", got)
			}
			if h.srv.InFlight() != 0 {
				t.Error("a shed request left an assignment")
			}
		})
	}
}

// FuzzSubsetHint: any metadata value (a serialized google.protobuf.Value, or
// else a raw string) parses without panicking, and every entry it names
// allows itself.
func FuzzSubsetHint(f *testing.F) {
	for _, v := range []*structpb.Value{
		listValue("10.0.0.1:8000", "10.0.0.2:8000,10.0.0.3:8000"), structpb.NewStringValue("[::1]:80, 10.0.0.1"),
		listValue(), structpb.NewNumberValue(1), structpb.NewNullValue(),
	} {
		b, _ := proto.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte("10.0.0.1:8000,,[fe80::1%eth0]:1,host:99999"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := &structpb.Value{}
		if err := proto.Unmarshal(b, v); err != nil {
			v = structpb.NewStringValue(string(b))
		}
		set, form := subsetHint(filterMD("ns", subsetKey, v), "ns")
		if form == hintNone || !set.present {
			t.Fatalf("a set key is a hint: form %q", form)
		}
		for a := range set.addrs {
			if !set.allows(a) {
				t.Fatalf("%q does not allow itself", a)
			}
		}
	})
}
