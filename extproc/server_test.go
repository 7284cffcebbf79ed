package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmpath/warmpath/scoring"
)

const (
	fullDuplex = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	buffered   = filterv3.ProcessingMode_BUFFERED
	streamed   = filterv3.ProcessingMode_STREAMED
)

const chatBody = `{"model":"qwen3","stream":true,"stream_options":{"include_usage":true},"max_tokens":16,"n":2,"cache_salt":"s1","messages":[{"role":"user","content":"hello"}]}`

// checkRouted asserts the reply routes to addr: overwriting header,
// clear_route_cache and envoy.lb metadata.
func checkRouted(t *testing.T, cr *extprocv3.CommonResponse, r *extprocv3.ProcessingResponse, addr string) {
	t.Helper()
	if cr == nil || cr.GetHeaderMutation() == nil {
		t.Fatalf("no header mutation in %v", r)
	}
	hs := cr.GetHeaderMutation().GetSetHeaders()
	if len(hs) != 1 || hs[0].GetHeader().GetKey() != "x-gateway-destination-endpoint" || string(hs[0].GetHeader().GetRawValue()) != addr {
		t.Fatalf("destination header: %v", hs)
	}
	if hs[0].GetHeader().GetValue() != "" || hs[0].GetAppend() != nil {
		t.Fatalf("header must use raw_value only and overwrite: %v", hs[0])
	}
	if !cr.GetClearRouteCache() {
		t.Fatal("clear_route_cache not set")
	}
	got := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	if got != addr {
		t.Fatalf("envoy.lb metadata = %q, want %q", got, addr)
	}
}

func TestFullDuplexRequestAndStreamedResponse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	e := h.open(t, fullDuplex, fullDuplex)
	// The client tries to choose its upstream; warmpath must overwrite it.
	e.requestHeaders("POST", "/v1/chat/completions", false, "x-gateway-destination-endpoint", "6.6.6.6:1", "x-request-id", "req-1")
	parts := []string{chatBody[:10], chatBody[10:40], chatBody[40:]}
	for i, p := range parts {
		e.requestBody(p, i == len(parts)-1)
	}
	r := e.recv()
	checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
	var echoed strings.Builder
	for {
		sr := e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			t.Fatal("expected streamed_response body chunks after the header reply")
		}
		echoed.Write(sr.GetBody())
		if sr.GetEndOfStream() {
			break
		}
	}
	if echoed.String() != chatBody {
		t.Fatalf("body echoed as %q", echoed.String())
	}
	req := h.picker.lastRequest(t)
	if req.ID != "req-1" || req.Model != "qwen3" || !req.Stream || req.MaxTokens != 16 || req.CacheSalt != "s1" || req.API != scoring.APIChat {
		t.Fatalf("parsed request: %+v", req)
	}

	e.responseHeaders("200", "text/event-stream", false)
	if e.recv().GetResponseHeaders() == nil {
		t.Fatal("want response_headers reply")
	}
	chunks := strings.SplitAfter(openAIStream, "\n\n")
	for i, c := range chunks {
		last := i == len(chunks)-1
		e.responseBody(c, last)
		sr := e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sr.GetBody()) != c || sr.GetEndOfStream() != last {
			t.Fatalf("chunk %d echoed as %q eos=%v", i, sr.GetBody(), sr.GetEndOfStream())
		}
	}
	o := h.picker.waitOutcome(t)
	if o.End != scoring.EndCompleted || o.HTTPStatus != 200 || o.PromptTokens != 640 || o.CompletionTokens != 10 || o.CachedTokens != 624 || o.TTFT <= 0 ||
		o.Decode <= 0 || o.TTFT+o.Decode > o.Duration {
		t.Fatalf("outcome %+v", o)
	}
	if n := h.srv.InFlight(); n != 0 {
		t.Fatalf("%d assignments left in flight", n)
	}
	h.picker.mu.Lock()
	defer h.picker.mu.Unlock()
	if h.picker.first != 1 {
		t.Fatalf("FirstToken called %d times, want 1", h.picker.first)
	}
}

func TestBufferedRequestStreamedResponse(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DebugHeaders = true
	h := newHarness(t, cfg)
	e := h.open(t, buffered, streamed)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	if r := e.recv(); r.GetRequestHeaders() == nil || r.GetRequestHeaders().GetResponse().GetHeaderMutation() != nil {
		t.Fatalf("BUFFERED: want an empty request_headers reply first, got %v", r)
	}
	e.requestBody(chatBody, true)
	r := e.recv()
	checkRouted(t, r.GetRequestBody().GetResponse(), r, "10.0.0.1:8000")
	e.responseHeaders("200", "text/event-stream", false)
	set := e.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(set) != 2 || string(set[0].GetHeader().GetRawValue()) != "w0" || set[1].GetHeader().GetKey() != "x-warmpath-reason" {
		t.Fatalf("debug headers: %v", set)
	}
	e.responseBody(openAIStream, true)
	if r := e.recv(); r.GetResponseBody() == nil || r.GetResponseBody().GetResponse() != nil {
		t.Fatalf("STREAMED response: want an empty body reply (pass through), got %v", r)
	}
	if o := h.picker.waitOutcome(t); o.End != scoring.EndCompleted || o.CachedTokens != 624 {
		t.Fatalf("outcome %+v", o)
	}
}

func TestFullDuplexWithTrailersAndLargeBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	e := h.open(t, fullDuplex, fullDuplex)
	big := `{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("x", 200_000) + `"}]}`
	e.requestHeaders("POST", "/v1/chat/completions", false)
	e.requestBody(big[:100_000], false)
	e.requestBody(big[100_000:], false)
	e.requestTrailers()
	r := e.recv()
	checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
	var got strings.Builder
	for got.Len() < len(big) {
		sr := e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if len(sr.GetBody()) > maxChunk {
			t.Fatalf("chunk of %d bytes exceeds %d", len(sr.GetBody()), maxChunk)
		}
		if sr.GetEndOfStream() {
			t.Fatal("end_of_stream must stay false when trailers follow")
		}
		got.Write(sr.GetBody())
	}
	if got.String() != big {
		t.Fatal("body changed")
	}
	if e.recv().GetRequestTrailers() == nil {
		t.Fatal("want request_trailers reply last")
	}
}

func TestHeadersOnlyRequestRoutesImmediately(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	e := h.open(t, fullDuplex, fullDuplex)
	e.requestHeaders("GET", "/v1/models", true)
	r := e.recv()
	checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
	if req := h.picker.lastRequest(t); req.API != scoring.APIOther {
		t.Fatalf("api %q", req.API)
	}
	e.responseHeaders("200", "application/json", false)
	e.recv()
	e.responseBody(`{"object":"list","data":[]}`, true)
	e.recv()
	if o := h.picker.waitOutcome(t); o.End != scoring.EndCompleted {
		t.Fatalf("outcome %+v", o)
	}
}

func TestStreamedRequestModeRoutesOnHeaders(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	e := h.open(t, streamed, streamed)
	e.requestHeaders("POST", "/v1/chat/completions", false)
	r := e.recv()
	checkRouted(t, r.GetRequestHeaders().GetResponse(), r, "10.0.0.1:8000")
	e.requestBody(chatBody, true)
	if e.recv().GetRequestBody() == nil {
		t.Fatal("want a pass-through body reply")
	}
	if got := testutil.ToFloat64(h.srv.m.bodyHidden); got != 1 {
		t.Fatalf("body_hidden = %v", got)
	}
}

func TestBadInputGetsAClearAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		down             []string
		status           int
		reason, errType  string
		msgHas           string
	}{
		{"invalid json", "/v1/chat/completions", `{"model": "qwen3", "messages": [`, nil, 400, "invalid_request", "invalid_request_error", "not valid JSON"},
		{"invalid json anthropic", "/v1/messages", `{nope`, nil, 400, "invalid_request", "invalid_request_error", "not valid JSON"},
		{"wrong type", "/v1/chat/completions", `{"model": 7, "messages": []}`, nil, 400, "invalid_request", "invalid_request_error", "model"},
		{"no messages", "/v1/chat/completions", `{"model": "qwen3"}`, nil, 400, "invalid_request", "invalid_request_error", "messages"},
		{"bad prompt", "/v1/completions", `{"model": "qwen3", "prompt": [1, "a"]}`, nil, 400, "invalid_request", "invalid_request_error", "prompt"},
		{"anthropic without max_tokens", "/v1/messages", `{"model": "qwen3", "messages": []}`, nil, 400, "invalid_request", "invalid_request_error", "max_tokens"},
		{"empty body", "/v1/completions", ``, nil, 400, "invalid_request", "invalid_request_error", "empty"},
		{"unknown model", "/v1/chat/completions", `{"model": "gpt-9", "messages": []}`, nil, 404, "unknown_model", "NotFoundError", "Served models: llama, qwen3"},
		{"900-byte model name: the answer repeats 256 bytes of it", "/v1/chat/completions", `{"model": "` + strings.Repeat("m", 900) + `", "messages": []}`, nil, 404, "unknown_model", "NotFoundError", "m… (900 bytes)` does not exist"},
		{"top-level array", "/v1/chat/completions", `[{"model": "qwen3"}]`, nil, 400, "invalid_request", "invalid_request_error", "must be a JSON object"},
		{"unknown model anthropic", "/v1/messages", `{"model": "gpt-9", "max_tokens": 1, "messages": []}`, nil, 404, "unknown_model", "not_found_error", "gpt-9"},
		{"no healthy worker", "/v1/chat/completions", `{"model": "qwen3", "messages": []}`, []string{"w0", "w1"}, 503, "no_healthy_worker", "ServiceUnavailableError", "qwen3"},
		{"too large", "/v1/chat/completions", `{"model":"qwen3","messages":[{"role":"user","content":"` + strings.Repeat("y", 2000) + `"}]}`, nil, 413, "body_too_large", "invalid_request_error", "limit of 1000 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxBodyBytes = 1000
			h := newHarness(t, cfg)
			h.pool.down = map[string]bool{}
			for _, d := range tc.down {
				h.pool.down[d] = true
			}
			e := h.open(t, fullDuplex, fullDuplex)
			e.requestHeaders("POST", tc.path, false)
			// Send in small chunks so the size limit triggers mid-body.
			for i := 0; i < len(tc.body); i += 500 {
				e.requestBody(tc.body[i:min(i+500, len(tc.body))], i+500 >= len(tc.body))
			}
			if tc.body == "" {
				e.requestBody("", true)
			}
			ir := e.recv().GetImmediateResponse()
			if ir == nil || int(ir.GetStatus().GetCode()) != tc.status {
				t.Fatalf("want ImmediateResponse %d, got %v", tc.status, ir)
			}
			var body map[string]any
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil {
				t.Fatalf("error body is not JSON: %q", ir.GetBody())
			}
			inner, _ := body["error"].(map[string]any)
			if tc.path == "/v1/messages" && body["type"] != "error" {
				t.Fatalf("anthropic error shape: %s", ir.GetBody())
			}
			if inner["type"] != tc.errType || !strings.Contains(inner["message"].(string), tc.msgHas) {
				t.Fatalf("error body %s; want type %q and message containing %q", ir.GetBody(), tc.errType, tc.msgHas)
			}
			hdrs := map[string]string{}
			for _, hv := range ir.GetHeaders().GetSetHeaders() {
				hdrs[hv.GetHeader().GetKey()] = string(hv.GetHeader().GetRawValue())
			}
			if hdrs["content-type"] != "application/json" {
				t.Fatalf("content-type %q", hdrs["content-type"])
			}
			if tc.status == 503 && hdrs["retry-after"] != "2" {
				t.Fatalf("503 without Retry-After: %v", hdrs)
			}
			if got := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues(tc.reason)); got != 1 {
				t.Fatalf("rejections{reason=%q} = %v", tc.reason, got)
			}
			e.cancel()
			if n := h.srv.InFlight(); n != 0 {
				t.Fatalf("%d assignments in flight after a rejection", n)
			}
		})
	}
}

func TestOutOfOrderIsAStreamError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		run  func(e *envoy)
	}{
		{"body before headers", func(e *envoy) { e.requestBody("{}", true) }},
		{"headers twice", func(e *envoy) {
			e.requestHeaders("GET", "/v1/models", true)
			e.recv()
			e.requestHeaders("GET", "/v1/models", true)
		}},
		{"response body before response headers", func(e *envoy) {
			e.requestHeaders("GET", "/v1/models", true)
			e.recv()
			e.responseBody("x", true)
		}},
		{"body after end", func(e *envoy) {
			e.requestHeaders("POST", "/v1/chat/completions", false)
			e.requestBody(chatBody, true)
			for e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() != true {
			}
			e.requestBody("more", true)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, testConfig())
			e := h.open(t, fullDuplex, fullDuplex)
			tc.run(e)
			err := e.recvErr()
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("want FailedPrecondition, got %v", err)
			}
			if got := testutil.ToFloat64(h.srv.m.streamErrors.WithLabelValues("out_of_order")); got != 1 {
				t.Fatalf("out_of_order counter = %v", got)
			}
			if tc.name == "body after end" {
				if o := h.picker.waitOutcome(t); o.End != scoring.EndAborted {
					t.Fatalf("outcome %+v", o)
				}
			}
		})
	}
}

func TestEarlyCloseAndClientAbort(t *testing.T) {
	t.Parallel()
	t.Run("close after headers", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, testConfig())
		e := h.open(t, fullDuplex, fullDuplex)
		e.requestHeaders("POST", "/v1/chat/completions", false)
		if err := e.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := e.recvErr(); !errors.Is(err, io.EOF) {
			t.Fatalf("want a clean end, got %v", err)
		}
		if n := h.srv.InFlight(); n != 0 {
			t.Fatalf("%d in flight", n)
		}
	})
	t.Run("abort mid response", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, testConfig())
		e := h.open(t, fullDuplex, fullDuplex)
		e.requestHeaders("POST", "/v1/chat/completions", false)
		e.requestBody(chatBody, true)
		for !e.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
		}
		e.responseHeaders("200", "text/event-stream", false)
		e.recv()
		chunks := strings.SplitAfter(openAIStream, "\n\n")
		e.responseBody(chunks[0]+chunks[2], false)
		e.recv()
		e.cancel() // the client went away: Envoy resets the stream
		o := h.picker.waitOutcome(t)
		if o.End != scoring.EndAborted || o.TTFT <= 0 || o.HTTPStatus != 200 {
			t.Fatalf("outcome %+v", o)
		}
		if got := testutil.ToFloat64(h.srv.m.ended.WithLabelValues("aborted")); got != 1 {
			t.Fatalf("aborted counter %v", got)
		}
	})
	t.Run("upstream 5xx", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, testConfig())
		e := h.open(t, fullDuplex, fullDuplex)
		e.requestHeaders("GET", "/v1/models", true)
		e.recv()
		e.responseHeaders("503", "application/json", false)
		e.recv()
		e.responseBody(`{"error":{"message":"overloaded"}}`, true)
		e.recv()
		if o := h.picker.waitOutcome(t); o.End != scoring.EndAborted || o.HTTPStatus != 503 || o.Error != "overloaded" {
			t.Fatalf("outcome %+v", o)
		}
	})
}

// TestThousandsOfConcurrentRequestsLeaveNothingBehind runs many streams at
// once, aborting a random third of them at random points.
func TestThousandsOfConcurrentRequestsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, testConfig())
	const n = 2000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	chunks := strings.SplitAfter(openAIStream, "\n\n")
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			abortAt := -1
			if rng.IntN(3) == 0 {
				abortAt = rng.IntN(4)
			}
			st := &subtestEnvoy{h: h, t: t}
			st.run(abortAt, chunks)
		}()
	}
	wg.Wait()
	// Every stream has ended on the client side; the server ends each
	// assignment exactly once, possibly just after. Streams aborted before
	// their body was sent were never routed.
	h.picker.mu.Lock()
	routed := len(h.picker.picked)
	h.picker.mu.Unlock()
	if routed < n/2 {
		t.Fatalf("only %d of %d requests were routed", routed, n)
	}
	ended := 0
	for ended < routed {
		h.picker.waitOutcome(t)
		ended++
	}
	if got := h.srv.InFlight(); got != 0 {
		t.Fatalf("%d assignments leaked", got)
	}
	total := testutil.ToFloat64(h.srv.m.ended.WithLabelValues("completed")) + testutil.ToFloat64(h.srv.m.ended.WithLabelValues("aborted"))
	if total != float64(routed) {
		t.Fatalf("ended counters sum to %v, want %d", total, routed)
	}
	select {
	case o := <-h.picker.done:
		t.Fatalf("an assignment ended twice: %+v", o)
	default:
	}
}

// subtestEnvoy drives one request, aborting at step abortAt (-1: never).
type subtestEnvoy struct {
	h *harness
	t *testing.T
}

func (s *subtestEnvoy) run(abortAt int, chunks []string) {
	c, cancel := context.WithCancel(s.t.Context())
	defer cancel()
	st, err := s.h.client.Process(c)
	if err != nil {
		s.t.Error(err)
		return
	}
	step := 0
	abort := func() bool {
		if step == abortAt {
			cancel()
			return true
		}
		step++
		return false
	}
	send := func(r *extprocv3.ProcessingRequest) bool { return st.Send(r) == nil }
	recv := func() bool { _, err := st.Recv(); return err == nil }
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions")}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: fullDuplex, ResponseBodyMode: fullDuplex}}
	if !send(first) || abort() {
		return
	}
	if !send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(chatBody), EndOfStream: true}}}) {
		return
	}
	if !recv() || !recv() || abort() { // header reply + one body chunk
		return
	}
	if !send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":status", "200", "content-type", "text/event-stream")}}}) || !recv() || abort() {
		return
	}
	for i, c := range chunks {
		if !send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(c), EndOfStream: i == len(chunks)-1}}}) || !recv() {
			return
		}
		if i == 2 && abort() {
			return
		}
	}
	_ = st.CloseSend()
	for recv() {
	}
}

// TestAssignmentExpires: an assignment whose response has not ended within
// the TTL ends as expired, once. The stream goes on passing the response
// through, and its end later reports nothing more to the picker.
func TestAssignmentExpires(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.AssignmentTTL = 20 * time.Millisecond
	h := newHarness(t, cfg)
	e := h.open(t, modeFullDuplex, modeFullDuplex)
	e.requestHeaders("POST", "/v1/chat/completions", false, "x-request-id", "ttl")
	e.requestBody(chatBody, true)
	routeHeaders(t, e)
	e.responseHeaders("200", "text/event-stream", false)
	if e.recv().GetResponseHeaders() == nil {
		t.Fatal("want response_headers reply")
	}
	o := h.picker.waitOutcome(t)
	if o.End != scoring.EndExpired || o.Duration < cfg.AssignmentTTL {
		t.Fatalf("outcome %+v, want expired after at least %v", o, cfg.AssignmentTTL)
	}
	if n := h.srv.InFlight(); n != 0 {
		t.Fatalf("%d assignments in flight after expiry", n)
	}
	e.responseBody(openAIStream, true)
	if sr := e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(sr.GetBody()) != openAIStream {
		t.Fatalf("response after expiry echoed as %q", sr.GetBody())
	}
	if err := e.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := e.recvErr(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream ended with %v", err)
	}
	h.picker.mu.Lock()
	n := len(h.picker.outcomes)
	h.picker.mu.Unlock()
	if n != 1 {
		t.Fatalf("picker heard %d outcomes, want 1", n)
	}
	if got := testutil.ToFloat64(h.srv.m.ended.WithLabelValues("expired")); got != 1 {
		t.Fatalf("expired assignments counted %v times", got)
	}
}
