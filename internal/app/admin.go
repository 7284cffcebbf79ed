package app

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/scoring"
)

// predictor answers what a policy would decide, reserving nothing.
type predictor interface {
	Predict(ctx context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error)
}

// maxLookupBody bounds POST /debug/lookup bodies: a 100K-token chat
// request is well under 1 MiB of JSON.
const maxLookupBody = 4 << 20

// adminOptions say which debug endpoints the admin API serves, and how
// they are guarded.
type adminOptions struct {
	// Debug serves /debug/workers and POST /debug/lookup; PProf Go's
	// profiler under /debug/pprof/.
	Debug, PProf bool
	// Token, when set, returns the bearer token every /debug/ request must
	// carry. It is called per request, so a rotated token file takes
	// effect at once.
	Token func() (string, error)
	// Unauthorized counts /debug/ requests refused for their token.
	Unauthorized prometheus.Counter
}

// newAdminHandler serves the admin API: /metrics from reg, /healthz (the
// process is alive), /readyz (ready() holds) and, as o says, the debug
// endpoints /debug/workers, POST /debug/lookup and Go's profiler under
// /debug/pprof/, each behind o.Token when set.
func newAdminHandler(reg *prometheus.Registry, ready func() bool, pool extproc.Pool, pred predictor, status func() any, o adminOptions) http.Handler {
	mux := http.NewServeMux()
	debug := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, guardDebug(h, o)) }
	if o.PProf {
		debug("GET /debug/pprof/", pprof.Index) // heap, mutex, block, goroutine, allocs, threadcreate
		debug("GET /debug/pprof/cmdline", pprof.Cmdline)
		debug("GET /debug/pprof/profile", pprof.Profile)
		debug("GET /debug/pprof/symbol", pprof.Symbol)
		debug("GET /debug/pprof/trace", pprof.Trace)
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
	if !o.Debug {
		return mux
	}
	debug("GET /debug/workers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, status())
	})
	debug("POST /debug/lookup", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Model   string          `json:"model"`
			Tokens  []uint32        `json:"tokens"`
			Path    string          `json:"path"`
			Request json.RawMessage `json:"request"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxLookupBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body: over %d bytes", maxLookupBody)})
				return
			}
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

// guardDebug serves h to requests carrying o.Token's bearer token, when o
// has one; others get 401, and 503 when the token cannot be read.
func guardDebug(h http.HandlerFunc, o adminOptions) http.Handler {
	if o.Token == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := o.Token()
		if err != nil {
			http.Error(w, "debug token unavailable", http.StatusServiceUnavailable)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			if o.Unauthorized != nil {
				o.Unauthorized.Inc()
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="warmpath debug"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

// readToken returns a function reading the bearer token from path, its
// surrounding white space trimmed; an empty token is an error.
func readToken(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("debug token file %s is empty", path)
		}
		return t, nil
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client may be gone; nothing to do then
}
