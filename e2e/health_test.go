package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/e2e/vllmsim"
)

// healthConfig is warmpath over the given workers with round-robin routing
// (so traffic reaches every worker), short ejection settings and the given
// active /health interval; extra is appended before the workers list.
func healthConfig(active, extra string, ws ...*simWorker) string {
	var b strings.Builder
	b.WriteString(`policy: round-robin
models:
  - name: qwen3
extproc:
  debug_headers: true
  drain_timeout: 2s
discovery:
  static_reload: 100ms
  scrape: {interval: 200ms, max_age: 2s}
  health:
    failure_threshold: 2
    base_ejection: 3s
    max_ejection: 10s
    active_interval: ` + active + `
log: {level: debug}
`)
	b.WriteString(extra)
	b.WriteString("workers:\n")
	for _, w := range ws {
		b.WriteString(w.yaml())
	}
	return b.String()
}

// healthEnv is warmpath and real Envoy over simulator workers.
type healthEnv struct {
	ws  map[string]*simWorker
	wp  *warmpathProc
	url string
}

func startHealthEnv(t *testing.T, active string, ws ...*simWorker) *healthEnv {
	t.Helper()
	return startHealthEnvWith(t, healthConfig(active, "", ws...), ws...)
}

// startHealthEnvWith is startHealthEnv with warmpath's whole configuration.
func startHealthEnvWith(t *testing.T, config string, ws ...*simWorker) *healthEnv {
	t.Helper()
	h := &healthEnv{ws: map[string]*simWorker{}}
	for _, w := range ws {
		h.ws[w.name] = w
	}
	h.wp = startWarmpath(t, config)
	e := startEnvoy(t, "envoy/envoy.yaml", h.wp.ExtProc)
	h.url = "http://" + e.Listeners["llm_ingress"]
	waitFor(t, "warmpath ready", func() bool { return h.wp.readyz(t) == 200 })
	return h
}

// sendChecked sends one request and fails the test if warmpath routed it to
// worker while worker was ejected for the whole exchange: the same
// ejection (same end time) seen before and after the request.
func (h *healthEnv) sendChecked(t *testing.T, worker string) result {
	t.Helper()
	before := h.wp.workers(t)[worker].Health
	r := send(t, h.url, 4)
	after := h.wp.workers(t)[worker].Health
	if r.worker == worker && before.EjectedUntil != "" && before.EjectedUntil == after.EjectedUntil {
		t.Fatalf("request routed to %s while it was ejected until %s", worker, before.EjectedUntil)
	}
	return r
}

func TestRealEnvoyPassiveEjectionAndRecovery(t *testing.T) {
	t.Parallel()
	h := startHealthEnv(t, "300ms", startSim(t, "w0", false), startSim(t, "w1", false), startSim(t, "w2", false))
	seen := map[string]int{}
	for i := range 3 {
		r := send(t, h.url, 4)
		if r.status != 200 {
			t.Fatalf("warm-up request %d: status %d: %s", i, r.status, r.body)
		}
		seen[r.worker]++
	}
	if len(seen) != 3 {
		t.Fatalf("round-robin reached %v, want all three workers", seen)
	}

	// w1's engine fails every request: after failure_threshold 5xx it is ejected.
	h.ws["w1"].SetFaults(vllmsim.Faults{ErrorFraction: 1, DieAfterTokens: 1})
	failed := 0
	for i := 0; h.wp.workers(t)["w1"].Health.EjectedUntil == ""; i++ {
		if i == 12 {
			t.Fatalf("w1 not ejected after %d requests (%d failed on it)", i, failed)
		}
		r := send(t, h.url, 4)
		switch {
		case r.worker == "w1" && r.status == 500:
			failed++
		case r.worker == "w1" || r.status != 200:
			t.Fatalf("request %d: worker %s status %d: %s", i, r.worker, r.status, r.body)
		}
	}
	if failed != 2 {
		t.Errorf("w1 ejected after %d failures, want failure_threshold 2", failed)
	}
	v := h.wp.workers(t)["w1"]
	if v.Health.Usable || !strings.Contains(v.Health.LastFailure, "500") {
		t.Errorf("/debug/workers w1 = %+v, want unusable with last failure status 500", v)
	}
	if n := h.wp.metric(t, "warmpath_discovery_ejections_total"); n < 1 {
		t.Errorf("warmpath_discovery_ejections_total = %v", n)
	}
	if n := h.wp.metric(t, "warmpath_discovery_workers", `state="ejected"`); n != 1 {
		t.Errorf(`warmpath_discovery_workers{state="ejected"} = %v, want 1`, n)
	}

	// While ejected, w1 gets nothing; the others serve everything.
	errorsBefore := h.ws["w1"].counter(t, "vllmsim_faults_injected_total")
	ejectedUntil := h.wp.workers(t)["w1"].Health.EjectedUntil
	for i := range 6 {
		r := h.sendChecked(t, "w1")
		if r.worker != "w1" && r.status != 200 {
			t.Fatalf("request %d while w1 ejected: worker %s status %d", i, r.worker, r.status)
		}
	}
	if h.wp.workers(t)["w1"].Health.EjectedUntil == ejectedUntil {
		// Still the same ejection: the engine must not have seen a request.
		if n := h.ws["w1"].counter(t, "vllmsim_faults_injected_total"); n != errorsBefore {
			t.Errorf("ejected w1's engine received %v requests", n-errorsBefore)
		}
	}

	// Fault cleared: after the back-off w1 gets traffic again and succeeds.
	h.ws["w1"].SetFaults(vllmsim.Faults{DieAfterTokens: 1})
	waitFor(t, "w1 usable after its back-off", func() bool { return h.wp.workers(t)["w1"].Health.Usable })
	served := false
	for i := 0; i < 6 && !served; i++ {
		r := send(t, h.url, 4)
		if r.status != 200 {
			t.Fatalf("request %d after recovery: worker %s status %d: %s", i, r.worker, r.status, r.body)
		}
		served = r.worker == "w1"
	}
	if !served {
		t.Fatal("w1 got no request in 6 after it recovered")
	}
	if n := h.wp.metric(t, "warmpath_discovery_workers", `state="usable"`); n != 3 {
		t.Errorf(`warmpath_discovery_workers{state="usable"} = %v, want 3`, n)
	}
}

// A worker killed while requests stream on it: the streams end and their
// assignments are released, the dead worker is ejected after at most one
// more request (Envoy answers that one with a 503 local reply, which
// triggers an immediate active check; the periodic one is an hour away),
// and the others serve everything after.
func TestRealEnvoyWorkerKilledMidRun(t *testing.T) {
	t.Parallel()
	h := startHealthEnv(t, "1h", startSim(t, "w0", false), startSim(t, "w1", false), startSim(t, "w2", false))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streams := openStreams(ctx, h.url, 6)
	for _, s := range streams {
		if s.ended() {
			t.Fatalf("a stream ended before the kill: worker %q: %v", s.worker, s.err)
		}
	}
	if n := h.wp.metric(t, "warmpath_assignments_in_flight", `worker="w2"`); n != 2 {
		t.Fatalf("in flight on w2 = %v, want 2 (round-robin over 3)", n)
	}

	h.ws["w2"].kill()
	for _, s := range streams {
		if s.worker == "w2" {
			<-s.done // the stream on the dead worker ends; a hang fails the test's deadline
			if s.err == nil {
				t.Error("a stream cut by the dead worker ended cleanly at the client, want an error")
			}
		}
	}
	waitFor(t, "w2's assignments released", func() bool {
		return h.wp.metric(t, "warmpath_assignments_in_flight", `worker="w2"`) == 0
	})
	if n := h.wp.metric(t, "warmpath_assignments_ended_total", `end="aborted"`); n != 2 {
		t.Errorf("assignments ended aborted = %v, want the 2 on w2", n)
	}

	// Round-robin sends the next requests to w2 in turn: at most one finds
	// it dead (Envoy's 503) before it is ejected.
	failed := 0
	for i := 0; h.wp.workers(t)["w2"].Health.EjectedUntil == ""; i++ {
		if i == 6 {
			t.Fatalf("w2 not ejected after %d requests", i)
		}
		r := send(t, h.url, 4)
		switch {
		case r.worker == "w2" && r.status == 503:
			failed++
		case r.status != 200:
			t.Fatalf("request %d: worker %s status %d: %s", i, r.worker, r.status, r.body)
		}
	}
	if failed > 1 {
		t.Errorf("%d requests failed on the dead worker before its ejection, want at most 1", failed)
	}
	v := h.wp.workers(t)["w2"]
	if v.Health.Usable || v.Health.Active != "fail" {
		t.Errorf("/debug/workers w2 = %+v, want unusable, active check failed", v)
	}
	for i := range 6 {
		r := h.sendChecked(t, "w2")
		if r.status != 200 || r.worker == "w2" {
			t.Fatalf("request %d after w2 died: worker %s status %d: %s", i, r.worker, r.status, r.body)
		}
	}

	// The surviving streams end when their clients leave.
	cancel()
	for _, s := range streams {
		<-s.done
	}
	waitFor(t, "every assignment released", func() bool {
		return h.wp.metric(t, "warmpath_assignments_in_flight") == 0
	})
}

// The running binary follows edits of its config file: a good edit adds a
// worker that then gets traffic; a bad edit is rejected and the set stays.
func TestRealEnvoyStaticReload(t *testing.T) {
	t.Parallel()
	w0, w1, w2 := startSim(t, "w0", false), startSim(t, "w1", false), startSim(t, "w2", false)
	h := startHealthEnv(t, "300ms", w0, w1)
	// startWarmpath wrote the file in a directory of this test's temp root.
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(t.TempDir()), "*", "warmpath.yaml"))
	if len(files) != 1 {
		t.Fatalf("config files %v, want one", files)
	}
	path := files[0]
	write := func(cfg string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	routed := func(n int) map[string]int {
		got := map[string]int{}
		for i := range n {
			r := send(t, h.url, 4)
			if r.status != 200 {
				t.Fatalf("request %d: worker %s status %d: %s", i, r.worker, r.status, r.body)
			}
			got[r.worker]++
		}
		return got
	}
	if got := routed(4); got["w0"] != 2 || got["w1"] != 2 {
		t.Fatalf("before any edit: routed %v, want w0 and w1 twice each", got)
	}

	write(healthConfig("300ms", "", w0, w1, w2))
	waitFor(t, "w2 added and usable", func() bool { return h.wp.workers(t)["w2"].Health.Usable })
	if got := routed(6); got["w0"] != 2 || got["w1"] != 2 || got["w2"] != 2 {
		t.Fatalf("after adding w2: routed %v, want two each", got)
	}

	// A typo'd key: the strict loader rejects the whole file.
	bad := strings.Replace(healthConfig("300ms", "", w0), "address:", "adress:", 1)
	write(bad)
	waitFor(t, "the bad edit rejected", func() bool {
		return h.wp.metric(t, "warmpath_discovery_static_reloads_total", `result="rejected"`) == 1
	})
	if ws := h.wp.workers(t); len(ws) != 3 {
		t.Fatalf("after the bad edit: workers %v, want the three of the last good file", ws)
	}
	if got := routed(6); got["w0"] != 2 || got["w1"] != 2 || got["w2"] != 2 {
		t.Fatalf("after the bad edit: routed %v, want two each", got)
	}
}

// /readyz stays 503 until a worker passes its health check and, as that
// worker has kv_events, its index stream has finished the initial replay.
func TestReadinessWaitsForHealthAndReplay(t *testing.T) {
	t.Parallel()
	engine := newSim(t, "http", false) // HTTP side: bound, not answering yet
	events := newSim(t, "kv", true)    // KV-event side: bound, replay not served yet
	kv := events.srv.Worker("kv")
	cfg := strings.Replace(healthConfig("200ms", "kvindex: {replay_timeout: 1m}\n"), "workers:\n",
		"workers:\n  - {name: w0, address: \""+engine.srv.HTTPAddr()+"\", models: [qwen3], kv_events: \""+
			kv.KVEvents+"\", kv_replay: \""+kv.KVReplay+"\"}\n", 1)
	wp := startWarmpath(t, cfg)

	waitFor(t, "a failed /health check", func() bool {
		return wp.metric(t, "warmpath_discovery_health_checks_total", `result="fail"`) >= 1
	})
	if c := wp.readyz(t); c != 503 {
		t.Fatalf("/readyz = %d before any worker is healthy, want 503", c)
	}

	engine.start()
	waitFor(t, "a passed /health check", func() bool { return wp.workers(t)["w0"].Health.Active == "pass" })
	if up, ok := wp.caughtUp(t)["w0"]; !ok || up {
		t.Fatalf("index stream of w0: present %v, caught up %v; want present and replay pending", ok, up)
	}
	if c := wp.readyz(t); c != 503 {
		t.Fatalf("/readyz = %d while the index replay is pending, want 503", c)
	}

	events.start()
	waitFor(t, "/readyz 200 after the replay", func() bool { return wp.readyz(t) == 200 })
	if !wp.caughtUp(t)["w0"] {
		t.Fatal("ready, but the index stream of w0 is not caught up")
	}
}

// TestSilentKVEventsFlagged reproduces silent blind routing: a worker whose
// KV-event endpoint is written without "*" connects its publisher (as vLLM
// does) where warmpath also connects, so no event ever arrives, while its
// replay endpoint answers and warmpath calls it caught up. After the
// requests that must have stored blocks, warmpath flags it: a warning, the
// gauge, /debug/workers and the decision's span attribute (seen in the
// debug header's absence of cache and in the metric).
func TestSilentKVEventsFlagged(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	cfg := vllmsim.DefaultConfig()
	cfg.Port = 0
	cfg.ServedModelNames = []string{"qwen3"}
	k, err := vllmsim.ParseKVEventsConfig(fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:%d","replay_endpoint":"tcp://127.0.0.1:*","topic":"kv-events","buffer_steps":1000}`, port))
	if err != nil {
		t.Fatal(err)
	}
	cfg.KVEvents = k
	w0 := startSimWith(t, "w0", cfg)
	w1 := startSim(t, "w1", true) // publishes as it should
	h := startHealthEnvWith(t, healthConfig("300ms", "", w0, w1), w0, w1)
	if up := h.wp.caughtUp(t); !up["w0"] || !up["w1"] {
		t.Fatalf("caught up %v: want both (w0's replay answers; its live stream is what is broken)", up)
	}
	for i := range 40 {
		body := distinctCompletion(i, 64)
		resp := post(t, t.Context(), h.url+"/v1/completions", body)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	var silent []string
	waitFor(t, "w0 flagged as silent", func() bool {
		silent = h.wp.silentWorkers(t)
		return len(silent) > 0
	})
	if len(silent) != 1 || silent[0] != "w0" {
		t.Fatalf("kv_events_silent = %v, want [w0]", silent)
	}
	if v := h.wp.metric(t, "warmpath_scoring_kv_events_silent", `worker="w0"`); v != 1 {
		t.Errorf(`warmpath_scoring_kv_events_silent{worker="w0"} = %v, want 1`, v)
	}
	if v := h.wp.metric(t, "warmpath_scoring_kv_events_silent", `worker="w1"`); v != 0 {
		t.Errorf(`warmpath_scoring_kv_events_silent{worker="w1"} = %v, want 0`, v)
	}
	if !strings.Contains(h.wp.logs(), "publishes no KV events") {
		t.Error("no warning logged for the silent worker")
	}
}

// distinctCompletion is a token-id completion whose n-token prompt shares
// nothing with another i's, so that each stores new blocks.
func distinctCompletion(i, n int) string {
	ids := make([]string, n)
	for j := range ids {
		ids[j] = fmt.Sprint(1000 + i*n + j)
	}
	return fmt.Sprintf(`{"model":"qwen3","prompt":[%s],"max_tokens":2,"ignore_eos":true}`, strings.Join(ids, ","))
}
