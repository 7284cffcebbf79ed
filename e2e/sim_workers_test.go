package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/e2e/vllmsim"
)

// killableListener records every accepted connection so that kill can
// drop them all with a TCP reset, as when a worker process dies: clients
// see their streams cut and new connections refused.
type killableListener struct {
	net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func (l *killableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns = append(l.conns, c)
	return c, nil
}

func (l *killableListener) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.killed = true
	// Connections first: closing the listener stops the simulator's server,
	// whose handlers would then end their responses cleanly, which a dead
	// process never does.
	for _, c := range l.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST, not FIN
		}
		c.Close()
	}
	l.Listener.Close()
}

// simWorker is an in-process vLLM simulator serving model "qwen3".
type simWorker struct {
	name string
	srv  *vllmsim.Server
	ln   *killableListener

	run       func()
	startOnce sync.Once
	stop      context.CancelFunc
	done      chan error
	killOnce  sync.Once
}

// newSim creates a simulator on :0 that start runs; it is killed when the
// test ends. With kv set it publishes KV events and serves replay on :0
// ZMQ endpoints.
func newSim(t *testing.T, name string, kv bool) *simWorker {
	t.Helper()
	cfg := vllmsim.DefaultConfig()
	cfg.Port = 0
	cfg.ServedModelNames = []string{"qwen3"}
	if kv {
		k, err := vllmsim.ParseKVEventsConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*","topic":"kv-events","buffer_steps":1000}`)
		if err != nil {
			t.Fatal(err)
		}
		cfg.KVEvents = k
	}
	return newSimWith(t, name, cfg)
}

// newSimWith is newSim with the simulator's whole configuration.
func newSimWith(t *testing.T, name string, cfg vllmsim.Config) *simWorker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	kl := &killableListener{Listener: ln}
	srv, err := vllmsim.NewServer(cfg, vllmsim.WithListener(kl))
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &simWorker{name: name, srv: srv, ln: kl, stop: cancel, done: make(chan error, 1)}
	w.run = func() { go func() { w.done <- srv.Run(ctx) }() }
	t.Cleanup(w.kill)
	return w
}

// startSim creates a simulator and runs it until the test ends.
func startSim(t *testing.T, name string, kv bool) *simWorker {
	t.Helper()
	w := newSim(t, name, kv)
	w.start()
	return w
}

// startSimWith is startSim with the simulator's whole configuration.
func startSimWith(t *testing.T, name string, cfg vllmsim.Config) *simWorker {
	t.Helper()
	w := newSimWith(t, name, cfg)
	w.start()
	return w
}

// start runs the simulator: until then its sockets are bound but nothing
// answers on them.
func (w *simWorker) start() { w.startOnce.Do(w.run) }

// kill resets every connection, closes the listener and stops the engines,
// as when the worker's process dies. It is idempotent.
func (w *simWorker) kill() {
	w.killOnce.Do(func() {
		w.ln.kill()
		w.stop()
		ran := true
		w.startOnce.Do(func() { ran = false }) // a killed worker never starts
		if ran {
			<-w.done
		} else {
			w.srv.Close() // the sockets of a server never run
		}
	})
}

// yaml returns the worker's entry for warmpath's workers list.
func (w *simWorker) yaml() string {
	dw := w.srv.Worker(w.name)
	s := fmt.Sprintf("  - {name: %s, address: %q, models: [qwen3]", w.name, dw.Address)
	if dw.KVEvents != "" {
		s += fmt.Sprintf(", kv_events: %q, kv_replay: %q", dw.KVEvents, dw.KVReplay)
	}
	return s + "}\n"
}

// counter sums the samples of the simulator's metric family name whose
// labels include every given name=value pair.
func (w *simWorker) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := w.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	sample:
		for _, m := range mf.GetMetric() {
			for _, want := range labels {
				k, v, _ := strings.Cut(want, "=")
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == k && lp.GetValue() == v)
				}
				if !found {
					continue sample
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// workerView is the part of warmpath's /debug/workers entry these tests read.
type workerView struct {
	Name   string `json:"name"`
	Health struct {
		Usable       bool   `json:"usable"`
		EjectedUntil string `json:"ejected_until"`
		Active       string `json:"active"`
		LastFailure  string `json:"last_failure"`
	} `json:"health"`
}

// debugWorkers decodes warmpath's GET /debug/workers into body.
func (p *warmpathProc) debugWorkers(t *testing.T, body any) {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + "/debug/workers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(body); err != nil {
		t.Fatalf("decode /debug/workers: %v", err)
	}
}

// workers returns warmpath's /debug/workers view by worker name.
func (p *warmpathProc) workers(t *testing.T) map[string]workerView {
	t.Helper()
	var body struct {
		Workers []workerView `json:"workers"`
	}
	p.debugWorkers(t, &body)
	out := map[string]workerView{}
	for _, w := range body.Workers {
		out[w.Name] = w
	}
	return out
}

// silentWorkers returns /debug/workers' kv_events_silent.
func (p *warmpathProc) silentWorkers(t *testing.T) []string {
	t.Helper()
	var body struct {
		Silent []string `json:"kv_events_silent"`
	}
	p.debugWorkers(t, &body)
	return body.Silent
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// readyz returns the status code of warmpath's /readyz.
func (p *warmpathProc) readyz(t *testing.T) int {
	t.Helper()
	return p.adminStatus(t, "/readyz")
}

// adminStatus returns the status code of GET path on the admin port.
func (p *warmpathProc) adminStatus(t *testing.T, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + p.Admin + path)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// completion is a token-id completion request (the simulator needs no
// tokenizer for it) generating maxTokens tokens.
func completion(maxTokens int, stream bool) string {
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprint(100 + i)
	}
	return fmt.Sprintf(`{"model":"qwen3","prompt":[%s],"max_tokens":%d,"stream":%t,"ignore_eos":true}`,
		strings.Join(ids, ","), maxTokens, stream)
}

// result is one finished request through Envoy.
type result struct {
	status int
	worker string // x-warmpath-worker: where warmpath sent it
	body   string
}

// send posts a completion through Envoy and reads the whole response.
func send(t *testing.T, url string, maxTokens int) result {
	t.Helper()
	resp := post(t, t.Context(), url+"/v1/completions", completion(maxTokens, false))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, worker: resp.Header.Get("x-warmpath-worker"), body: string(b)}
}

// SetFaults replaces the simulator's injected faults.
func (w *simWorker) SetFaults(f vllmsim.Faults) { w.srv.SetFaults(f) }

// caughtUp returns, from warmpath's /debug/workers, whether each worker's
// KV-event stream has finished its initial replay; workers without a
// stream are absent.
func (p *warmpathProc) caughtUp(t *testing.T) map[string]bool {
	t.Helper()
	var body struct {
		Index []struct {
			Worker   string `json:"worker"`
			CaughtUp bool   `json:"caught_up"`
		} `json:"index"`
	}
	p.debugWorkers(t, &body)
	out := map[string]bool{}
	for _, s := range body.Index {
		out[s.Worker] = s.CaughtUp
	}
	return out
}

// openStream is one streamed generation through Envoy, held open until
// its context ends.
type openStream struct {
	worker string // x-warmpath-worker
	err    error
	done   chan struct{}
}

// ended reports whether the stream is over.
func (s *openStream) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// openStreams starts n long streamed completions through url and returns
// once each has delivered its first token (or failed).
func openStreams(ctx context.Context, url string, n int) []*openStream {
	var streams []*openStream
	var started sync.WaitGroup
	for range n {
		s := &openStream{done: make(chan struct{})}
		streams = append(streams, s)
		started.Add(1)
		go func() {
			defer close(s.done)
			first := true
			defer func() {
				if first {
					started.Done()
				}
			}()
			req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(completion(4000, true)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				s.err = err
				return
			}
			defer resp.Body.Close()
			s.worker = resp.Header.Get("x-warmpath-worker")
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if first && strings.HasPrefix(sc.Text(), "data: ") {
					first = false
					started.Done()
				}
			}
			s.err = sc.Err()
		}()
	}
	started.Wait()
	return streams
}
