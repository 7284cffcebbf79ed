package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
)

// recordingPredictor answers with the first candidate and keeps the request.
type recordingPredictor struct{ got *scoring.Request }

func (p *recordingPredictor) Predict(_ context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	p.got = req
	c := scoring.Candidate{Worker: ws[0].Name, CachedTokens: 624, PredictedTTFT: 31 * time.Millisecond}
	return &scoring.Decision{Worker: ws[0].Name, Mode: scoring.ModeExact, Chosen: c, Candidates: []scoring.Candidate{c}}, nil
}

func TestDebugLookup(t *testing.T) {
	t.Parallel()
	pool, err := discovery.NewPool(nil, discovery.HealthConfig{ActiveInterval: -1}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool.Apply([]discovery.Worker{{Name: "w0", Address: "127.0.0.1:1", Models: []string{"qwen3"}}})
	reg := prometheus.NewRegistry()
	pred := &recordingPredictor{}
	srv := httptest.NewServer(newAdminHandler(reg, func() bool { return true }, pool, pred, func() any { return map[string]int{"workers": 1} }, adminOptions{Debug: true}))
	defer srv.Close()
	tests := []struct {
		name, body string
		status     int
		check      func(t *testing.T, body string)
	}{
		{"tokens", `{"model":"qwen3","tokens":[1,2,3]}`, 200, func(t *testing.T, body string) {
			var e scoring.Explanation
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Chosen != "w0" || e.Mode != "exact" || e.Workers[0].CachedTokens != 624 {
				t.Fatalf("%v %s", err, body)
			}
			if pred.got.API != scoring.APICompletions || len(pred.got.TokenIDs) != 3 {
				t.Fatalf("request %+v", pred.got)
			}
		}},
		{"chat request", `{"model":"qwen3","path":"/v1/chat/completions","request":{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}}`, 200, func(t *testing.T, body string) {
			if pred.got.API != scoring.APIChat || !strings.Contains(string(pred.got.Body), "hi") {
				t.Fatalf("request %+v", pred.got)
			}
		}},
		{"unknown model", `{"model":"gpt","tokens":[1]}`, 404, nil},
		{"bad request body", `{"model":"qwen3","request":{"messages":"x"}}`, 400, nil},
		{"unknown field", `{"modle":"qwen3"}`, 400, nil},
		{"neither", `{"model":"qwen3"}`, 400, nil},
		{"body over the limit", `{"model":"qwen3","tokens":[` + strings.Repeat("1,", maxLookupBody/2) + `1]}`, 413, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/debug/lookup", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if tc.check != nil {
				tc.check(t, string(b))
			}
		})
	}
}

// TestDebugEndpointsGuarded checks which admin endpoints answer with the
// debug endpoints and pprof off or on, with and without a bearer token:
// /metrics, /healthz and /readyz always; /debug/* only when switched on,
// and then only with the token when one is set.
func TestDebugEndpointsGuarded(t *testing.T) {
	t.Parallel()
	pool, err := discovery.NewPool(nil, discovery.HealthConfig{ActiveInterval: -1}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := []string{"/metrics", "/healthz", "/readyz"}
	debug := []string{"/debug/workers"}
	pprof := []string{"/debug/pprof/", "/debug/pprof/mutex?debug=1", "/debug/pprof/block?debug=1", "/debug/pprof/goroutine?debug=1"}
	tests := []struct {
		name   string
		o      adminOptions
		header string
		want   map[int][]string // status → paths
	}{
		{name: "off", want: map[int][]string{200: open, 404: append(debug, pprof...)}},
		{name: "debug on", o: adminOptions{Debug: true}, want: map[int][]string{200: append(open, debug...), 404: pprof}},
		{name: "pprof on", o: adminOptions{PProf: true}, want: map[int][]string{200: append(open, pprof...), 404: debug}},
		{name: "token, none sent", o: adminOptions{Debug: true, PProf: true, Token: readToken(tokenFile)},
			want: map[int][]string{200: open, 401: append(debug, pprof...)}},
		{name: "token, a wrong one sent", o: adminOptions{Debug: true, PProf: true, Token: readToken(tokenFile)}, header: "Bearer guess",
			want: map[int][]string{200: open, 401: append(debug, pprof...)}},
		{name: "token sent", o: adminOptions{Debug: true, PProf: true, Token: readToken(tokenFile)}, header: "Bearer s3cret",
			want: map[int][]string{200: append(append(open, debug...), pprof...)}},
		{name: "token file unreadable", o: adminOptions{Debug: true, Token: readToken(tokenFile + ".gone")}, header: "Bearer s3cret",
			want: map[int][]string{200: open, 503: debug}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			unauthorized := prometheus.NewCounter(prometheus.CounterOpts{Name: "unauthorized_total"})
			tc.o.Unauthorized = unauthorized
			srv := httptest.NewServer(newAdminHandler(prometheus.NewRegistry(), func() bool { return true }, pool, &recordingPredictor{}, func() any { return nil }, tc.o))
			defer srv.Close()
			var refused float64
			for status, paths := range tc.want {
				for _, path := range paths {
					req, _ := http.NewRequest("GET", srv.URL+path, nil)
					if tc.header != "" {
						req.Header.Set("Authorization", tc.header)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != status {
						t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, status)
					}
					if status == 401 {
						refused++
						if resp.Header.Get("WWW-Authenticate") == "" {
							t.Errorf("GET %s: 401 without WWW-Authenticate", path)
						}
					}
				}
			}
			if n := testutil.ToFloat64(unauthorized); n != refused {
				t.Errorf("%v refusals counted, want %v", n, refused)
			}
		})
	}
}

// TestDebugEndpointsDefault checks the default: /debug/* on a loopback
// admin address only.
func TestDebugEndpointsDefault(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "localhost:0": true, "[::1]:9090": true, ":9090": false, "0.0.0.0:9090": false, "10.0.0.7:9090": false} {
		if got := DefaultConfig().Debug.debugEndpoints(addr); got != want {
			t.Errorf("admin %s: debug endpoints %v, want %v", addr, got, want)
		}
	}
}
