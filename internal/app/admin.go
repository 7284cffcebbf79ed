package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/scoring"
)

// predictor answers what a policy would decide, reserving nothing.
type predictor interface {
	Predict(ctx context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error)
}

// maxLookupBody bounds POST /debug/lookup bodies.
const maxLookupBody = 32 << 20

// newAdminHandler serves the admin API: /metrics from reg, /healthz (the
// process is alive), /readyz (ready() holds), /debug/workers, POST
// /debug/lookup and, with withPProf, Go's profiler under /debug/pprof/.
func newAdminHandler(reg *prometheus.Registry, ready func() bool, pool extproc.Pool, pred predictor, status func() any, withPProf bool) http.Handler {
	mux := http.NewServeMux()
	if withPProf {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index) // heap, mutex, block, goroutine, allocs, threadcreate
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /debug/workers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, status())
	})
	mux.HandleFunc("POST /debug/lookup", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Model   string          `json:"model"`
			Tokens  []uint32        `json:"tokens"`
			Path    string          `json:"path"`
			Request json.RawMessage `json:"request"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLookupBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
			return
		}
		var req scoring.Request
		switch {
		case in.Tokens != nil:
			req = scoring.Request{API: scoring.APICompletions, Path: "/v1/completions", Model: in.Model, TokenIDs: in.Tokens}
		case in.Request != nil:
			if in.Path == "" {
				in.Path = "/v1/chat/completions"
			}
			var err error
			if req, err = extproc.ParseRequest("POST", in.Path, in.Request, in.Model); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
				return
			}
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"model", "tokens"} or {"model", "path", "request"}`})
			return
		}
		ws, known := pool.Candidates(req.Model)
		switch {
		case !known:
			writeJSON(w, http.StatusNotFound, map[string]any{"error": "unknown model " + req.Model, "served": pool.Models()})
			return
		case len(ws) == 0:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no healthy worker serves " + req.Model})
			return
		}
		d, err := pred.Predict(r.Context(), &req, ws)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, d.Explain())
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client may be gone; nothing to do then
}
