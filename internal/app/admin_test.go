package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	srv := httptest.NewServer(newAdminHandler(reg, func() bool { return true }, pool, pred, func() any { return map[string]int{"workers": 1} }, false))
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

func TestPProfOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	pool, err := discovery.NewPool(nil, discovery.HealthConfig{ActiveInterval: -1}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer(newAdminHandler(prometheus.NewRegistry(), func() bool { return true }, pool, &recordingPredictor{}, func() any { return nil }, on))
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/mutex?debug=1", "/debug/pprof/block?debug=1", "/debug/pprof/goroutine?debug=1"} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := map[bool]int{false: 404, true: 200}[on]; resp.StatusCode != want {
				t.Errorf("pprof %v: GET %s = %d, want %d", on, path, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}
