package app

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmpath/warmpath/extproc"
)

// newAdminHandler serves the admin API: /metrics from reg, /healthz (the
// process is alive), /readyz (ready() holds) and /debug/workers.
func newAdminHandler(reg *prometheus.Registry, ready func() bool, pool *staticPool, proc *extproc.Server) http.Handler {
	mux := http.NewServeMux()
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
		type worker struct {
			Name     string   `json:"name"`
			Address  string   `json:"address"`
			Models   []string `json:"models"`
			InFlight int      `json:"in_flight"`
		}
		ws, _ := pool.Candidates("")
		out := make([]worker, len(ws))
		for i, x := range ws {
			out[i] = worker{x.Name, x.Address, x.Models, proc.Assignments().InFlight(x.Name)}
		}
		writeJSON(w, http.StatusOK, map[string]any{"workers": out})
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
