package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/warmpath/warmpath/internal/mtls/mtlstest"
)

// TestRealEnvoyTricklingBodyGets408: a client that sends its headers and
// then its body a few bytes at a time, never finishing, is answered 408
// by warmpath's body deadline through a real Envoy, and the stream and its
// buffer are released.
func TestRealEnvoyTricklingBodyGets408(t *testing.T) {
	t.Parallel()
	w := startSim(t, "w0", false)
	h := startHealthEnvWith(t, strings.Replace(healthConfig("0s", "", w), "extproc:\n", "extproc:\n  body_timeout: 1s\n", 1), w)
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":\"qwen3\",")); err != nil {
		t.Fatal(err)
	}
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(got)
			return
		}
		got <- resp
	}()
	// Trickle a byte every 200 ms until the answer comes.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case resp, ok := <-got:
			if !ok {
				t.Fatal("the connection ended without a response")
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408", resp.StatusCode)
			}
			if n := h.wp.metric(t, "warmpath_request_rejections_total", `reason="body_timeout"`); n != 1 {
				t.Errorf("rejections{reason=body_timeout} = %v", n)
			}
			waitFor(t, "the buffer released", func() bool { return h.wp.metric(t, "warmpath_buffered_bytes") == 0 })
			return
		case <-tick.C:
			_, _ = conn.Write([]byte(" ")) // the answer may have closed it
		case <-t.Context().Done():
			t.Fatal("no answer to a trickling body")
		}
	}
}

// TestRealEnvoyMutualTLSExtProc: warmpath's ext_proc port with mutual TLS
// (listen.tls) behind a real Envoy holding a client certificate of the CA:
// Envoy's health check and requests go through, while a client that
// speaks plaintext, or TLS without a certificate of the CA, opens no
// stream.
func TestRealEnvoyMutualTLSExtProc(t *testing.T) {
	t.Parallel()
	ca, other := mtlstest.NewCA(t, "warmpath"), mtlstest.NewCA(t, "stranger")
	serverCert, serverKey := ca.Issue(t, "warmpath")
	envoyCert, envoyKey := ca.Issue(t, "envoy")
	w := startSim(t, "w0", false)
	cfg := strings.Replace(healthConfig("0s", "", w), "log:", fmt.Sprintf(
		"listen: {tls: {cert_file: %q, key_file: %q, client_ca_file: %q}}\nlog:", serverCert, serverKey, ca.CertFile), 1)
	wp := startWarmpath(t, cfg)
	e := startEnvoyWith(t, "envoy/envoy.yaml", func(c *clusterv3.Cluster) {
		if c.Name != "warmpath" {
			return
		}
		tlsCtx, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			AlpnProtocols: []string{"h2"},
			TlsCertificates: []*tlsv3.TlsCertificate{{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: envoyCert}},
				PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: envoyKey}},
			}},
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca.CertFile}},
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}
	}, wp.ExtProc)
	url := "http://" + e.Listeners["llm_ingress"]
	waitFor(t, "warmpath ready", func() bool { return wp.readyz(t) == 200 })
	waitFor(t, "a request routed through mutual TLS", func() bool { return send(t, url, 2).worker == "w0" })

	strangerCert, strangerKey := other.Issue(t, "stranger")
	stranger, err := tls.LoadX509KeyPair(strangerCert, strangerKey)
	if err != nil {
		t.Fatal(err)
	}
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":                 insecure.NewCredentials(),
		"TLS without a certificate": credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}),
		"another CA's certificate":  credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{stranger}}),
	} {
		conn, err := grpc.NewClient(wp.ExtProc, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s: health check answered %v; want no connection", name, err)
		}
	}
}

// TestRealEnvoyDeadWorkerLosesNoRequest kills an idle worker behind
// envoy/envoy-override-host.yaml with extproc.fallbacks: 2. Round-robin
// would keep choosing it in turn until health checking notices (the
// periodic check is an hour away); each request that chose it is served by the
// next endpoint of warmpath's list: zero failures, each outcome credited
// to the worker that served it (Envoy reports it), and the dead worker
// ejected once the proxy has walked past it. (The streams a dying
// worker was serving are cut; TestRealEnvoyWorkerKilledMidRun covers them.)
func TestRealEnvoyDeadWorkerLosesNoRequest(t *testing.T) {
	t.Parallel()
	ws := []*simWorker{startSim(t, "w0", false), startSim(t, "w1", false), startSim(t, "w2", false)}
	cfg := strings.Replace(healthConfig("1h", "", ws...), "extproc:\n", "extproc:\n  fallbacks: 2\n", 1)
	wp := startWarmpath(t, cfg)
	e := startEnvoyWith(t, "envoy/envoy-override-host.yaml", func(c *clusterv3.Cluster) {
		if c.Name == "model_pods" {
			var addrs []string
			for _, w := range ws {
				addrs = append(addrs, w.srv.Worker(w.name).Address)
			}
			setEndpoints(c, addrs...)
		}
	}, wp.ExtProc)
	url := "http://" + e.Listeners["llm_ingress"]
	waitFor(t, "warmpath ready", func() bool { return wp.readyz(t) == 200 })
	for range 3 {
		if r := send(t, url, 2); r.status != 200 {
			t.Fatalf("before the kill: status %d from %q", r.status, r.worker)
		}
	}

	ws[2].kill()
	var failed, credited []string
	for i := range 30 {
		r := send(t, url, 2)
		switch {
		case r.status != 200:
			failed = append(failed, fmt.Sprintf("request %d: status %d, chosen %q: %.200s", i, r.status, r.worker, r.body))
		case r.worker == "w2":
			credited = append(credited, fmt.Sprintf("request %d", i))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of 30 requests failed after the kill, want 0:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	// Envoy reports the endpoint that served (the route's
	// x-warmpath-upstream into envoy.lb): each request that chose the dead
	// worker moved to its fallback, and its x-warmpath-worker names the
	// worker that served it, never the dead one.
	rescued := int(wp.metric(t, "warmpath_served_endpoint_reports_total", `result="fallback"`))
	if rescued == 0 {
		t.Error("no request chose the dead worker: the test did not exercise the fallback")
	}
	// Each walk past the dead worker is a failure reported to health
	// (extproc.ErrRetriedPast), which checks every worker at once and
	// ejects the one that refuses connections: it is not chosen again
	// (before, round-robin chose it every third request, 10 of 30).
	if rescued > 2 {
		t.Errorf("the dead worker was chosen %d times after it died; want it ejected after the first walk past it", rescued)
	}
	if len(credited) > 0 {
		t.Errorf("%d responses name the dead worker as the one that served them: %v", len(credited), credited)
	}
	if got := wp.metric(t, "warmpath_served_endpoint_reports_total", `result="absent"`); got != 0 {
		t.Errorf("%v routed requests without a served-endpoint report", got)
	}
	t.Logf("%d requests chose the dead worker and were served by a fallback", rescued)
}
