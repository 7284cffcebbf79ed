package app

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/discovery"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// lineWriter captures stdout and signals the ready line.
type lineWriter struct {
	mu    sync.Mutex
	b     strings.Builder
	ready chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	for _, ln := range strings.Split(w.b.String(), "\n") {
		if strings.HasPrefix(ln, "warmpath ready ") {
			select {
			case w.ready <- ln:
			default:
			}
		}
	}
	return len(p), nil
}

func TestServeReadinessAndGracefulDrain(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Policy = "round-robin"
	cfg.Listen = ListenConfig{ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	cfg.Workers = []discovery.Worker{{Name: "w0", Address: "127.0.0.1:1", Models: []string{"m"}}}
	cfg.ExtProc.DrainTimeout = 5 * time.Second
	cfg.ExtProc.DrainDelay = time.Second
	cfg.Discovery.Health.ActiveInterval = -1 // the worker address is not real
	ctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{ready: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, embedOptions{}, out, io.Discard) }()
	var line string
	select {
	case line = <-out.ready:
	case err := <-done:
		t.Fatalf("serve ended: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no ready line")
	}
	var extprocAddr, adminAddr string
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "extproc="); ok {
			extprocAddr = v
		}
		if v, ok := strings.CutPrefix(f, "admin="); ok {
			adminAddr = v
		}
	}
	conn, err := grpc.NewClient(extprocAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.GetStatus()
	}
	deadline := time.Now().Add(10 * time.Second)
	for check("readiness") != healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("readiness never SERVING")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, svc := range []string{"liveness", "envoy.service.ext_proc.v3.ExternalProcessor", "", "inference-extension"} {
		if st := check(svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%q: %v", svc, st)
		}
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/debug/workers": 200} {
		resp, err := http.Get("http://" + adminAddr + path)
		if err != nil || resp.StatusCode != want {
			t.Fatalf("GET %s: %v %v", path, err, resp)
		}
		resp.Body.Close()
	}

	// An in-flight stream holds shutdown until it ends.
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}, EndOfStream: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	stopped := time.Now()
	deadline = time.Now().Add(5 * time.Second)
	for check("envoy.service.ext_proc.v3.ExternalProcessor") == healthpb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("health still SERVING while draining")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Within the drain delay a new stream is still served: the proxy has
	// not yet seen NOT_SERVING.
	late, err := extprocv3.NewExternalProcessorClient(conn).Process(t.Context())
	if err == nil {
		err = late.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/models")}}}, EndOfStream: true}}})
	}
	if err == nil {
		_, err = late.Recv()
	}
	if err != nil || time.Since(stopped) > cfg.ExtProc.DrainDelay {
		t.Fatalf("a stream opened %v into the drain delay of %v: %v", time.Since(stopped), cfg.ExtProc.DrainDelay, err)
	}
	late.CloseSend()
	select {
	case err := <-done:
		t.Fatalf("serve returned while a stream was in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after the stream ended")
	}
}
