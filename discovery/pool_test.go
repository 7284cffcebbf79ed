package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/component"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// chanSource publishes whatever sets are sent on its channel.
type chanSource struct{ sets chan []Worker }

func (s chanSource) Run(ctx context.Context, out *Updates) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ws := <-s.sets:
			out.Publish(ws)
		}
	}
}

// failingSource fails at once.
type failingSource struct{ err error }

func (s failingSource) Run(context.Context, *Updates) error { return s.err }

func w(name, addr string, models ...string) Worker {
	return Worker{Name: name, Address: addr, Models: models}
}

func names(ws []Worker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	slices.Sort(out)
	return out
}

func newTestPool(t *testing.T, hc HealthConfig, opts ...Option) (*Pool, *clocktest.Clock, *prometheus.Registry) {
	t.Helper()
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	reg := prometheus.NewRegistry()
	if hc.ActiveInterval == 0 {
		hc.ActiveInterval = -1
	}
	p, err := NewPool(nil, hc, component.Options{Clock: clk.Now, Registerer: reg}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, clk, reg
}

func TestUpdatesCoalesce(t *testing.T) {
	t.Parallel()
	u := NewUpdates()
	if _, ok := u.Take(); ok {
		t.Fatal("Take on an empty mailbox returned a set")
	}
	for i := range 100 { // never blocks
		u.Publish([]Worker{w("w"+strings.Repeat("x", i), "h:1", "m")})
	}
	<-u.Ready()
	ws, ok := u.Take()
	if !ok || len(ws) != 1 || ws[0].Name != "w"+strings.Repeat("x", 99) {
		t.Fatalf("Take = %v, %v; want the last published set", ws, ok)
	}
	if _, ok := u.Take(); ok {
		t.Fatal("second Take returned a set")
	}
	u.Publish(nil)
	if ws, ok := u.Take(); !ok || ws == nil || len(ws) != 0 {
		t.Fatalf("empty set published: Take = %#v, %v; want empty non-nil set", ws, ok)
	}
}

func TestValidateWorkers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ws      []Worker
		wantErr string
	}{
		{name: "empty set", ws: nil},
		{name: "good", ws: []Worker{w("a", "10.0.0.1:8000", "m"), w("b", "[::1]:8000", "m")}},
		{name: "duplicate", ws: []Worker{w("a", "h:1", "m"), w("a", "h:2", "m")}, wantErr: `worker "a": duplicate name`},
		{name: "no name", ws: []Worker{w("", "h:1", "m")}, wantErr: "worker 0: empty name"},
		{name: "bad address", ws: []Worker{w("a", "h", "m")}, wantErr: `address "h" is not host:port`},
		{name: "no port", ws: []Worker{w("a", "h:", "m")}, wantErr: `address "h:" is not host:port`},
		{name: "no models", ws: []Worker{w("a", "h:1")}, wantErr: `worker "a": no models`},
		{name: "negative dp", ws: []Worker{{Name: "a", Address: "h:1", Models: []string{"m"}, DataParallelSize: -1}}, wantErr: "negative data_parallel_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateWorkers(tc.ws)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateWorkers = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidWorkers) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateWorkers = %v, want ErrInvalidWorkers containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPoolCandidates(t *testing.T) {
	t.Parallel()
	p, _, reg := newTestPool(t, HealthConfig{})
	if ws, known := p.Candidates("qwen"); known || ws != nil {
		t.Fatalf("empty pool: Candidates = %v, %v", ws, known)
	}
	if ws, known := p.Candidates(""); known || len(ws) != 0 {
		t.Fatalf(`empty pool: Candidates("") = %v, %v`, ws, known)
	}
	p.Apply([]Worker{w("a", "h:1", "qwen"), w("b", "h:2", "qwen", "llama"), w("c", "h:3", "llama")})
	tests := []struct {
		model     string
		want      []string
		wantKnown bool
	}{
		{"qwen", []string{"a", "b"}, true},
		{"llama", []string{"b", "c"}, true},
		{"gpt", nil, false},
	}
	for _, tc := range tests {
		ws, known := p.Candidates(tc.model)
		if known != tc.wantKnown || !slices.Equal(names(ws), tc.want) {
			t.Errorf("Candidates(%q) = %v, %v; want %v, %v", tc.model, names(ws), known, tc.want, tc.wantKnown)
		}
	}
	if got := p.Models(); !slices.Equal(got, []string{"llama", "qwen"}) {
		t.Errorf("Models = %v", got)
	}
	p.ReportResult("c", 0, &dialError{syscall.ECONNREFUSED})
	if ws, known := p.Candidates(""); !known || !slices.Equal(names(ws), []string{"a", "b"}) {
		t.Errorf(`Candidates("") = %v, %v; want every usable worker`, names(ws), known)
	}
	// A bad set is rejected and the old one stays.
	p.Apply([]Worker{w("a", "h:1", "qwen"), w("a", "h:2", "qwen")})
	if got := names(p.Workers()); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("after rejected set Workers = %v", got)
	}
	if got := testutil.ToFloat64(p.updates.WithLabelValues("rejected")); got != 1 {
		t.Errorf("rejected updates = %v, want 1", got)
	}
	const want = `
# HELP warmpath_discovery_workers Workers in the current set, by state (usable, ejected, unhealthy).
# TYPE warmpath_discovery_workers gauge
warmpath_discovery_workers{state="ejected"} 1
warmpath_discovery_workers{state="unhealthy"} 0
warmpath_discovery_workers{state="usable"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "warmpath_discovery_workers"); err != nil {
		t.Error(err)
	}
}

func TestPassiveEjectionAndRecovery(t *testing.T) {
	t.Parallel()
	connRefused := &dialError{syscall.ECONNREFUSED}
	type step struct {
		advance    time.Duration
		err        error
		status     int
		wantUsable bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "connection failure ejects at once then recovers",
			steps: []step{
				{err: connRefused, wantUsable: false},
				{advance: 999 * time.Millisecond, wantUsable: false},
				{advance: time.Millisecond, wantUsable: true},
			},
		},
		{
			name: "5xx ejects after the threshold",
			steps: []step{
				{status: 503, wantUsable: true},
				{status: 500, wantUsable: true},
				{status: 502, wantUsable: false},
				{advance: time.Second, wantUsable: true},
			},
		},
		{
			name: "success clears failures",
			steps: []step{
				{status: 500, wantUsable: true},
				{status: 500, wantUsable: true},
				{status: 200, wantUsable: true},
				{status: 500, wantUsable: true},
				{status: 500, wantUsable: true},
			},
		},
		{
			name: "back-off doubles after recovery and is capped",
			steps: []step{
				{err: connRefused, wantUsable: false},
				{advance: time.Second, wantUsable: true},
				{status: 500, wantUsable: false}, // half-open: one failure re-ejects, for 2 s
				{advance: 1999 * time.Millisecond, wantUsable: false},
				{advance: time.Millisecond, wantUsable: true},
				{err: connRefused, wantUsable: false}, // 4 s, capped to 3 s
				{advance: 3 * time.Second, wantUsable: true},
				{status: 200, wantUsable: true},
				{err: connRefused, wantUsable: false}, // back to 1 s
				{advance: time.Second, wantUsable: true},
			},
		},
		{
			name: "no response counts toward the threshold",
			steps: []step{
				{err: errNoResponse, wantUsable: true},
				{status: 500, wantUsable: true},
				{err: errNoResponse, wantUsable: false},
				{advance: time.Second, wantUsable: true},
			},
		},
		{
			name: "client cancellation is not the worker's fault",
			steps: []step{
				{err: context.Canceled, wantUsable: true},
				{err: context.Canceled, wantUsable: true},
				{err: context.Canceled, wantUsable: true},
			},
		},
		{
			name: "4xx is a success",
			steps: []step{
				{status: 500, wantUsable: true},
				{status: 500, wantUsable: true},
				{status: 400, wantUsable: true},
				{status: 500, wantUsable: true},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, clk, _ := newTestPool(t, HealthConfig{MaxEjection: 3 * time.Second})
			p.Apply([]Worker{w("a", "h:1", "m"), w("b", "h:2", "m")})
			for i, s := range tc.steps {
				clk.Advance(s.advance)
				if s.err != nil || s.status != 0 {
					p.ReportResult("a", s.status, s.err)
				}
				ws, _ := p.Candidates("m")
				usable := slices.Contains(names(ws), "a")
				if usable != s.wantUsable {
					t.Fatalf("step %d: a usable = %v, want %v", i, usable, s.wantUsable)
				}
				if !slices.Contains(names(ws), "b") {
					t.Fatalf("step %d: b not a candidate", i)
				}
				if !p.Ready() {
					t.Fatalf("step %d: not ready with b usable", i)
				}
			}
		})
	}
}

// errNoResponse stands for extproc.ErrNoResponse: no response, cause unknown.
var errNoResponse = errors.New("no response from upstream")

// dialError stands for a dial failure without a network.
type dialError struct{ errno syscall.Errno }

func (e *dialError) Error() string { return "dial tcp: " + e.errno.Error() }
func (e *dialError) Unwrap() error { return e.errno }

func TestReadyAndEjectionKeepsMembership(t *testing.T) {
	t.Parallel()
	p, clk, reg := newTestPool(t, HealthConfig{})
	if p.Ready() {
		t.Fatal("empty pool is ready")
	}
	p.Apply([]Worker{w("a", "h:1", "m")})
	if !p.Ready() {
		t.Fatal("pool with a usable worker is not ready")
	}
	if p.ReadyWhere(func(w Worker) bool { return w.Name != "a" }) {
		t.Fatal("ReadyWhere counted a worker its predicate refused")
	}
	p.ReportResult("a", 0, &dialError{syscall.ECONNREFUSED})
	p.ReportResult("nobody", 0, &dialError{syscall.ECONNREFUSED}) // ignored
	if p.Ready() {
		t.Fatal("pool whose only worker is ejected is ready")
	}
	ws, known := p.Candidates("m")
	if !known || len(ws) != 0 {
		t.Fatalf("Candidates = %v, %v; want none but known", ws, known)
	}
	if got := names(p.Workers()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ejected worker left the set: %v", got)
	}
	h, ok := p.Health("a")
	if !ok || h.Usable || h.EjectedUntil.IsZero() || h.LastFailure != "dial tcp: connection refused" {
		t.Fatalf("Health = %+v, %v", h, ok)
	}
	if got := testutil.ToFloat64(p.ejections); got != 1 {
		t.Fatalf("ejections = %v", got)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warmpath_discovery_workers Workers in the current set, by state (usable, ejected, unhealthy).
# TYPE warmpath_discovery_workers gauge
warmpath_discovery_workers{state="ejected"} 1
warmpath_discovery_workers{state="unhealthy"} 0
warmpath_discovery_workers{state="usable"} 0
`), "warmpath_discovery_workers"); err != nil {
		t.Error(err)
	}
	// State survives an unchanged re-publish but not an address change.
	p.Apply([]Worker{w("a", "h:1", "m")})
	if p.Ready() {
		t.Fatal("re-publishing the same worker cleared its ejection")
	}
	p.Apply([]Worker{w("a", "h:9", "m")})
	if !p.Ready() {
		t.Fatal("a worker with a new address inherited the old ejection")
	}
	// The state gauge is computed when scraped: an ejection that ran out shows as usable.
	p.ReportResult("a", 0, &dialError{syscall.ECONNREFUSED})
	clk.Advance(time.Second)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warmpath_discovery_workers Workers in the current set, by state (usable, ejected, unhealthy).
# TYPE warmpath_discovery_workers gauge
warmpath_discovery_workers{state="ejected"} 0
warmpath_discovery_workers{state="unhealthy"} 0
warmpath_discovery_workers{state="usable"} 1
`), "warmpath_discovery_workers"); err != nil {
		t.Error(err)
	}
}

func TestActiveHealth(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	healthy := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(rw, r)
			return
		}
		mu.Lock()
		ok := healthy[r.Host]
		mu.Unlock()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	// Two names for the same listener, distinguished by Host.
	addr2 := strings.Replace(addr, "127.0.0.1", "localhost", 1)
	p, _, _ := newTestPool(t, HealthConfig{ActiveInterval: time.Hour}, WithHTTPClient(srv.Client()))
	p.Apply([]Worker{w("a", addr, "m"), w("b", addr2, "m"), w("dead", "127.0.0.1:1", "m")})
	if p.Ready() {
		t.Fatal("ready before any check passed")
	}
	if ws, _ := p.Candidates("m"); len(ws) != 3 {
		t.Fatalf("unchecked workers should be candidates, got %v", names(ws))
	}
	mu.Lock()
	healthy[addr] = true
	mu.Unlock()
	p.CheckNow(t.Context())
	if !p.Ready() {
		t.Fatal("not ready after a check passed")
	}
	if ws, _ := p.Candidates("m"); !slices.Equal(names(ws), []string{"a"}) {
		t.Fatalf("Candidates = %v, want [a]", names(ws))
	}
	mu.Lock()
	healthy[addr], healthy[addr2] = false, true
	mu.Unlock()
	p.CheckNow(t.Context())
	if ws, _ := p.Candidates("m"); !slices.Equal(names(ws), []string{"b"}) {
		t.Fatalf("Candidates = %v, want [b]", names(ws))
	}
	if got := testutil.ToFloat64(p.checks.WithLabelValues("pass")); got != 2 {
		t.Errorf("passing checks = %v, want 2", got)
	}
	if got := testutil.ToFloat64(p.checks.WithLabelValues("fail")); got != 4 {
		t.Errorf("failing checks = %v, want 4", got)
	}
}

// TestRestartedWorkerIsNotHeldEjected: a worker whose engine died fails
// each active check and is ejected again for longer each time; once its
// health endpoint passes again it is a candidate at once, not after the
// longest ejection it earned (30 s by default; a black-box test saw a
// restarted engine get nothing for 10 s after a 60 s outage).
func TestRestartedWorkerIsNotHeldEjected(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // the engine is dead: connections are refused
	p, clk, _ := newTestPool(t, HealthConfig{ActiveInterval: time.Hour, BaseEjection: time.Second, MaxEjection: 30 * time.Second})
	p.Apply([]Worker{w("a", addr, "m")})
	for range 6 { // a check every 5 s while it is dead
		p.CheckNow(t.Context())
		clk.Advance(5 * time.Second)
	}
	if ws, _ := p.Candidates("m"); len(ws) != 0 {
		t.Fatalf("a dead worker is a candidate: %v", names(ws))
	}
	lis, err = net.Listen("tcp", addr) // restarted on the same port
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close() })
	p.CheckNow(t.Context())
	if ws, _ := p.Candidates("m"); !slices.Equal(names(ws), []string{"a"}) {
		t.Errorf("after its health check passed again: Candidates = %v, want [a]", names(ws))
	}
	// A worker ejected for failing requests while its health passes stays out.
	for range 5 {
		p.ReportResult("a", 503, nil)
	}
	p.CheckNow(t.Context())
	if ws, _ := p.Candidates("m"); len(ws) != 0 {
		t.Errorf("a worker ejected for 5xx answers was released by a passing check: %v", names(ws))
	}
}

func TestPoolRunAndWatch(t *testing.T) {
	t.Parallel()
	src := chanSource{sets: make(chan []Worker)}
	p, err := NewPool(src, HealthConfig{ActiveInterval: -1}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	wctx, wcancel := context.WithCancel(t.Context())
	watch := p.Watch(wctx)
	if first := <-watch; len(first) != 0 {
		t.Fatalf("first watched set = %v, want empty", first)
	}
	src.sets <- []Worker{w("a", "h:1", "m")}
	if got := names(<-watch); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("watched set = %v", got)
	}
	// A watcher that does not read never blocks the pool; it then sees the newest set.
	src.sets <- []Worker{w("b", "h:2", "m")}
	src.sets <- []Worker{w("c", "h:3", "m")}
	src.sets <- []Worker{w("d", "h:4", "m")}
	waitFor(t, func() bool { return slices.Equal(names(p.Workers()), []string{"d"}) })
	// Three sets were applied while nobody read; the watcher holds at most
	// one of them, and the newest follows at once if it was not that one.
	for reads := 1; ; reads++ {
		got := names(<-watch)
		if slices.Equal(got, []string{"d"}) {
			break
		}
		if reads == 2 {
			t.Fatalf("slow watcher got two stale sets, the last %v; want the newest [d]", got)
		}
	}
	wcancel()
	for range watch { // drains and ends: the channel is closed
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil on cancel", err)
	}

	boom := errors.New("boom")
	p2, _ := NewPool(failingSource{boom}, HealthConfig{ActiveInterval: -1}, component.Options{})
	if err := p2.Run(t.Context()); !errors.Is(err, boom) {
		t.Fatalf("Run with a failing source = %v, want %v", err, boom)
	}
}

// waitFor polls cond until it holds. The timeout only turns a hang into a
// failure; it measures nothing.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition never held")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestIsDialError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"refused", &dialError{syscall.ECONNREFUSED}, true},
		{"unreachable", fmt.Errorf("x: %w", syscall.EHOSTUNREACH), true},
		{"dial op", &net.OpError{Op: "dial", Err: errors.New("i/o timeout")}, true},
		{"dns", &net.DNSError{Err: "no such host", Name: "w"}, true},
		{"read op", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, false},
		{"no response", errNoResponse, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := IsDialError(tc.err); got != tc.want {
				t.Fatalf("IsDialError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The shapes extproc (Pool, HealthReporter) and kvevents consume; a
// signature change here breaks the application's wiring.
var _ interface {
	Candidates(model string) (ws []Worker, known bool)
	Models() []string
	ReportResult(worker string, status int, err error)
} = (*Pool)(nil)

// A worker that dies between active checks is ejected after the first
// failure the response path reports, not FailureThreshold of them nor the
// next ActiveInterval: the failure triggers a check round, whose refused
// connection ejects it. A live worker that answered 503 only fails once.
func TestFailureTriggersActiveCheck(t *testing.T) {
	t.Parallel()
	live := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(live.Close)
	dying := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	dyingAddr := strings.TrimPrefix(dying.URL, "http://")
	reg := prometheus.NewRegistry()
	p, err := NewPool(nil, HealthConfig{ActiveInterval: time.Hour, FailureThreshold: 3}, component.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.Apply([]Worker{w("live", strings.TrimPrefix(live.URL, "http://"), "m"), w("dying", dyingAddr, "m")})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitUntil(t, "both pass the first check", func() bool {
		return testutil.ToFloat64(p.checks.WithLabelValues("pass")) >= 2
	})

	dying.Close() // now refuses connections
	p.ReportResult("live", 503, nil)
	p.ReportResult("dying", 503, nil)
	waitUntil(t, "dying ejected", func() bool {
		h, _ := p.Health("dying")
		return !h.EjectedUntil.IsZero()
	})
	if ws, _ := p.Candidates("m"); !slices.Equal(names(ws), []string{"live"}) {
		t.Fatalf("Candidates = %v, want [live]", names(ws))
	}
	if h, _ := p.Health("live"); !h.Usable || !h.EjectedUntil.IsZero() {
		t.Fatalf("live worker after one 503: %+v, want usable", h)
	}
	if got := testutil.ToFloat64(p.ejections); got != 1 {
		t.Fatalf("ejections = %v, want 1", got)
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
