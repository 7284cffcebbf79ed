package extproc

import (
	"io"
	"log/slog"
	"net"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/internal/mtls"
	"github.com/warmpath/warmpath/internal/mtls/mtlstest"
)

// TestRequestSourceIsTheStreamsClient checks that the request handed to
// the picker names who opened the stream, the source calibration bounds:
// the client's address over plaintext, its certificate's identity over
// mutual TLS, and never anything a header says.
func TestRequestSourceIsTheStreamsClient(t *testing.T) {
	t.Parallel()
	ca := mtlstest.NewCA(t, "warmpath")
	serverCert, serverKey := ca.Issue(t, "warmpath")
	envoyCert, envoyKey := ca.Issue(t, "gateway-envoy")
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		tls  bool
		want string
	}{
		{name: "plaintext", want: "addr:127.0.0.1"},
		{name: "mutual TLS", tls: true, want: "cert:gateway-envoy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &harness{picker: newFakePicker(), pool: &fakePool{workers: testWorkers}, reg: prometheus.NewRegistry()}
			srv, err := New(testConfig(), h.pool, h.picker, component.Options{Registerer: h.reg, Logger: discard})
			if err != nil {
				t.Fatal(err)
			}
			serverCreds, clientCreds := insecure.NewCredentials(), insecure.NewCredentials()
			if tc.tls {
				sc, err := mtls.Server(mtls.Files{Cert: serverCert, Key: serverKey, ClientCA: ca.CertFile}, discard)
				if err != nil {
					t.Fatal(err)
				}
				cc, err := mtls.Client(mtls.Files{Cert: envoyCert, Key: envoyKey, ClientCA: ca.CertFile}, discard)
				if err != nil {
					t.Fatal(err)
				}
				serverCreds, clientCreds = credentials.NewTLS(sc), credentials.NewTLS(cc)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer(grpc.Creds(serverCreds))
			extprocv3.RegisterExternalProcessorServer(gs, srv)
			go func() { _ = gs.Serve(lis) }()
			t.Cleanup(gs.Stop)
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(clientCreds))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			h.client = extprocv3.NewExternalProcessorClient(conn)

			e := h.open(t, fullDuplex, fullDuplex)
			// A client cannot name its source: no header is read for it.
			r := e.route(nil, "x-forwarded-for", "10.6.6.6", "x-warmpath-source", "cert:someone-else")
			if r.GetImmediateResponse() != nil {
				t.Fatalf("request rejected: %v", r.GetImmediateResponse())
			}
			h.picker.mu.Lock()
			defer h.picker.mu.Unlock()
			if len(h.picker.picked) != 1 {
				t.Fatalf("%d picks, want 1", len(h.picker.picked))
			}
			if got := h.picker.picked[0].Source; got != tc.want {
				t.Errorf("source %q, want %q", got, tc.want)
			}
		})
	}
}
