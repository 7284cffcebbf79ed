package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is a minimal OTLP/gRPC trace collector that keeps every span.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []*tracepb.Span
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: lis.Addr().String()}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return r
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// span returns the first span named name, or nil.
func (r *otlpReceiver) span(name string) *tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetIntValue() != 0:
				return fmt.Sprint(v.GetIntValue())
			case v.GetDoubleValue() != 0:
				return fmt.Sprint(v.GetDoubleValue())
			}
			return v.String()
		}
	}
	return ""
}

// headerUpstream streams the fixed SSE answer and records each request's
// headers.
type headerUpstream struct {
	srv *httptest.Server

	mu      sync.Mutex
	headers []http.Header
}

func newHeaderUpstream(t *testing.T) *headerUpstream {
	u := &headerUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range sseFor("w0") {
			io.WriteString(w, c)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *headerUpstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func (u *headerUpstream) last(t *testing.T) http.Header {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.headers) == 0 {
		t.Fatal("upstream received nothing")
	}
	return u.headers[len(u.headers)-1]
}

// TestTraceThroughRealEnvoy sends a chat request carrying the client's
// traceparent through real Envoy and warmpath to an upstream, and checks
// the spans warmpath exported over OTLP/gRPC and the context the upstream
// received: client span → warmpath SERVER span → GenAI CLIENT span →
// upstream.
func TestTraceThroughRealEnvoy(t *testing.T) {
	rcv := startOTLPReceiver(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+rcv.addr)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	up := newHeaderUpstream(t)
	wp := startWarmpath(t, fmt.Sprintf(`policy: round-robin
models: [{name: qwen3}]
workers: [{name: w0, address: %q, models: [qwen3]}]
`, up.addr()))
	e := startEnvoy(t, "envoy/envoy.yaml", wp.ExtProc)
	url := "http://" + e.Listeners["llm_ingress"]

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	resp := post(t, t.Context(), url+"/v1/chat/completions", chatReq,
		"traceparent", "00-"+traceID+"-"+parentID+"-01", "x-request-id", "trace-e2e-1")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "[DONE]") {
		t.Fatalf("status %d body %s", resp.StatusCode, b)
	}
	waitFor(t, "both spans exported", func() bool {
		return rcv.span("warmpath.request") != nil && rcv.span("chat qwen3") != nil
	})
	server, client := rcv.span("warmpath.request"), rcv.span("chat qwen3")
	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	if hexID(server.GetTraceId()) != traceID || hexID(server.GetParentSpanId()) != parentID {
		t.Fatalf("server span trace %s parent %s, want the client's %s/%s",
			hexID(server.GetTraceId()), hexID(server.GetParentSpanId()), traceID, parentID)
	}
	if server.GetKind() != tracepb.Span_SPAN_KIND_SERVER || client.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("kinds %v %v", server.GetKind(), client.GetKind())
	}
	if hexID(client.GetTraceId()) != traceID || hexID(client.GetParentSpanId()) != hexID(server.GetSpanId()) {
		t.Fatalf("client span parent %s, want the server span %s", hexID(client.GetParentSpanId()), hexID(server.GetSpanId()))
	}
	// The upstream's parent is warmpath's CLIENT span: exactly one
	// traceparent, the client's own replaced.
	tps := up.last(t).Values("traceparent")
	want := "00-" + traceID + "-" + hexID(client.GetSpanId()) + "-01"
	if len(tps) != 1 || tps[0] != want {
		t.Fatalf("upstream traceparent %v, want [%s]", tps, want)
	}
	for k, v := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "qwen3",
		"gen_ai.usage.input_tokens": "20", "gen_ai.usage.output_tokens": "3", "gen_ai.usage.cache_read.input_tokens": "16",
		"warmpath.worker": "w0", "warmpath.completion": "completed",
	} {
		if got := spanAttr(client, k); got != v {
			t.Errorf("client span %s = %q, want %q", k, got, v)
		}
	}
	for k, v := range map[string]string{"warmpath.policy": "round-robin", "warmpath.mode": "load-only", "gen_ai.request.id": "trace-e2e-1"} {
		if got := spanAttr(server, k); got != v {
			t.Errorf("server span %s = %q, want %q", k, got, v)
		}
	}
	var events []string
	for _, ev := range client.GetEvents() {
		events = append(events, ev.GetName())
	}
	if strings.Join(events, ",") != "gen_ai.first_token,gen_ai.last_token" {
		t.Errorf("client span events %v", events)
	}
}
