package extproc

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/internal/grpcbuf"
	"github.com/warmpath/warmpath/scoring"
)

// fakePool serves a fixed worker list; unhealthy workers are named in down.
type fakePool struct {
	workers []discovery.Worker
	down    map[string]bool
}

func (p *fakePool) Candidates(model string) ([]discovery.Worker, bool) {
	var ws []discovery.Worker
	known := model == ""
	for _, w := range p.workers {
		if model != "" && !w.Serves(model) {
			continue
		}
		known = true
		if !p.down[w.Name] {
			ws = append(ws, w)
		}
	}
	return ws, known
}

func (p *fakePool) Models() []string {
	var ms []string
	seen := map[string]bool{}
	for _, w := range p.workers {
		for _, m := range w.Models {
			if !seen[m] {
				seen[m] = true
				ms = append(ms, m)
			}
		}
	}
	return ms
}

// fakePicker picks the first candidate and records every call.
type fakePicker struct {
	mu       sync.Mutex
	picked   []*scoring.Request
	outcomes []scoring.Outcome
	first    int // FirstToken calls
	done     chan scoring.Outcome
}

func (p *fakePicker) FirstToken(*scoring.Decision) {
	p.mu.Lock()
	p.first++
	p.mu.Unlock()
}

func newFakePicker() *fakePicker { return &fakePicker{done: make(chan scoring.Outcome, 10000)} }

func (p *fakePicker) Pick(_ context.Context, r *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	p.mu.Lock()
	cp := *r
	p.picked = append(p.picked, &cp)
	p.mu.Unlock()
	return &scoring.Decision{Worker: ws[0].Name, Address: ws[0].Address, Policy: "fake", Reason: "first candidate", Decided: time.Now()}, nil
}

func (p *fakePicker) Done(_ *scoring.Decision, o scoring.Outcome) {
	p.mu.Lock()
	p.outcomes = append(p.outcomes, o)
	p.mu.Unlock()
	p.done <- o
}

func (p *fakePicker) lastRequest(t *testing.T) *scoring.Request {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.picked) == 0 {
		t.Fatal("picker was not called")
	}
	return p.picked[len(p.picked)-1]
}

// waitOutcome waits for the next assignment to end.
func (p *fakePicker) waitOutcome(t *testing.T) scoring.Outcome {
	t.Helper()
	select {
	case o := <-p.done:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("no assignment ended within 10s")
		return scoring.Outcome{}
	}
}

var testWorkers = []discovery.Worker{
	{Name: "w0", Address: "10.0.0.1:8000", Models: []string{"qwen3"}},
	{Name: "w1", Address: "10.0.0.2:8000", Models: []string{"qwen3", "llama"}},
}

func testConfig() Config {
	return Config{
		DestinationHeader: "x-gateway-destination-endpoint",
		MetadataNamespace: "envoy.lb",
		MaxBodyBytes:      1 << 20,
		MaxResponseBytes:  1 << 20,
		MaxBufferedBytes:  64 << 20,
		BodyTimeout:       time.Minute,
		BodyMode:          "full_duplex",
		RetryAfter:        2,
		AssignmentTTL:     time.Hour,
		SLOHeaders:        true,
		SubsetNamespace:   "envoy.lb.subset_hint",
	}
}

// harness is an ext_proc Server on a loopback :0 listener with a gRPC
// client playing Envoy.
type harness struct {
	srv    *Server
	picker *fakePicker
	pool   *fakePool
	reg    *prometheus.Registry
	client extprocv3.ExternalProcessorClient
}

func newHarness(t testing.TB, cfg Config, opts ...Option) *harness {
	t.Helper()
	h := &harness{picker: newFakePicker(), pool: &fakePool{workers: testWorkers}, reg: prometheus.NewRegistry()}
	srv, err := New(cfg, h.pool, h.picker, component.Options{Registerer: h.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.client = serveLoopback(t, h.srv)
	return h
}

// serveLoopback serves srv on a loopback :0 listener until the test ends
// and returns a client connected to it.
func serveLoopback(t testing.TB, srv *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// warmpath's own codec, as internal/app serves with it.
	gs := grpc.NewServer(grpc.ForceServerCodecV2(grpcbuf.Codec{Pool: &grpcbuf.Pool{}}))
	extprocv3.RegisterExternalProcessorServer(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-served
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// envoy is one fake Envoy stream.
type envoy struct {
	t      testing.TB
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	first  bool
	reqM   filterv3.ProcessingMode_BodySendMode
	respM  filterv3.ProcessingMode_BodySendMode
}

func (h *harness) open(t testing.TB, reqMode, respMode filterv3.ProcessingMode_BodySendMode) *envoy {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	st, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &envoy{t: t, stream: st, cancel: cancel, first: true, reqM: reqMode, respM: respMode}
}

func (e *envoy) send(r *extprocv3.ProcessingRequest) {
	e.t.Helper()
	if e.first {
		r.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: e.reqM, ResponseBodyMode: e.respM}
		e.first = false
	}
	if err := e.stream.Send(r); err != nil {
		e.t.Fatalf("send: %v", err)
	}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func (e *envoy) requestHeaders(method, path string, eos bool, extra ...string) {
	e.t.Helper()
	kv := append([]string{":method", method, ":path", path, ":authority", "gw", "content-type", "application/json"}, extra...)
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}}})
}

func (e *envoy) requestBody(b string, eos bool) {
	e.t.Helper()
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}})
}

func (e *envoy) requestTrailers() {
	e.t.Helper()
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("x-trailer", "1")}}})
}

func (e *envoy) responseHeaders(status, contentType string, eos bool) {
	e.t.Helper()
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", status, "content-type", contentType), EndOfStream: eos}}})
}

func (e *envoy) responseBody(b string, eos bool) {
	e.t.Helper()
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}})
}

func (e *envoy) recv() *extprocv3.ProcessingResponse {
	e.t.Helper()
	r, err := e.stream.Recv()
	if err != nil {
		e.t.Fatalf("recv: %v", err)
	}
	return r
}

// recvErr receives until the stream ends and returns its error.
func (e *envoy) recvErr() error {
	e.t.Helper()
	for {
		if _, err := e.stream.Recv(); err != nil {
			return err
		}
	}
}
