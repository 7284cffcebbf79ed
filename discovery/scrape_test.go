package discovery

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
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

// staticLister is a fixed worker set.
type staticLister struct {
	mu sync.Mutex
	ws []Worker
}

func (l *staticLister) Workers() []Worker {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ws
}

func (l *staticLister) set(ws ...Worker) {
	l.mu.Lock()
	l.ws = ws
	l.mu.Unlock()
}

// metricsServer serves a settable /metrics body and status.
type metricsServer struct {
	mu     sync.Mutex
	body   []byte
	status int
	accept string
}

func (m *metricsServer) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accept = r.Header.Get("Accept")
	if r.URL.Path != "/metrics" {
		http.NotFound(rw, r)
		return
	}
	if m.status != 0 {
		rw.WriteHeader(m.status)
	}
	_, _ = rw.Write(m.body)
}

func (m *metricsServer) set(status int, body []byte) {
	m.mu.Lock()
	m.status, m.body = status, body
	m.mu.Unlock()
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("enginemetrics/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestScraper(t *testing.T) {
	t.Parallel()
	ms := &metricsServer{body: readFixture(t, "vllm-single.prom")}
	srv := httptest.NewServer(ms)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")

	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	lister := &staticLister{}
	lister.set(w("a", addr, "m"), w("down", "127.0.0.1:1", "m"))
	reg := prometheus.NewRegistry()
	s, err := NewScraper(lister, ScrapeConfig{Interval: time.Second, MaxBytes: 1 << 20},
		component.Options{Clock: clk.Now, Registerer: reg}, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := s.Load("a"); ok || !l.Stale {
		t.Fatalf("before any scrape: Load = %+v, %v; want stale, not ok", l, ok)
	}

	s.ScrapeNow(t.Context())
	l, ok := s.Load("a")
	if !ok || l.Stale || l.Running != 62 || l.Waiting != 11 || !l.ScrapedAt.Equal(clk.Now()) || l.LastError != "" {
		t.Fatalf("after scrape: Load = %+v, %v", l, ok)
	}
	if ms.accept != "text/plain;version=0.0.4" {
		t.Errorf("Accept = %q", ms.accept)
	}
	if d, ok := s.Load("down"); ok || !d.Stale || d.LastError == "" || !d.ScrapedAt.IsZero() {
		t.Fatalf("unreachable worker: Load = %+v, %v; want stale with an error, not ok", d, ok)
	}
	if d, ok := s.Loads()["down"]; !ok || d.LastError == "" {
		t.Fatalf("unreachable worker missing from Loads: %+v", d)
	}

	type step struct {
		name      string
		advance   time.Duration
		status    int
		body      []byte
		wantStale bool
		wantErr   string
		result    string
	}
	steps := []step{
		{name: "fresh within max age", advance: 3 * time.Second, wantStale: false, result: scrapeOK},
		{name: "server error keeps old figures", advance: 1500 * time.Millisecond, status: 500, wantStale: false, wantErr: "status 500", result: scrapeBadStatus},
		{name: "stale once max age passes", advance: time.Second, status: 500, wantStale: true, wantErr: "status 500", result: scrapeBadStatus},
		{name: "not vllm", advance: time.Second, body: []byte("# TYPE up gauge\nup 1\n"), wantStale: true, wantErr: "no vllm engine metrics", result: scrapeBadBody},
		{name: "too large", advance: time.Second, body: bytes.Repeat([]byte("# padding\n"), 200_000), wantStale: true, wantErr: "too large", result: scrapeTooLarge},
		{name: "recovers", advance: time.Second, wantStale: false, result: scrapeOK},
	}
	good := readFixture(t, "vllm-single.prom")
	for _, st := range steps {
		body := st.body
		if body == nil {
			body = good
		}
		ms.set(st.status, body)
		before := testutil.ToFloat64(s.scrapes.WithLabelValues(st.result))
		s.ScrapeNow(t.Context())
		if got := testutil.ToFloat64(s.scrapes.WithLabelValues(st.result)); got != before+1 {
			t.Errorf("%s: %s scrapes went %v -> %v", st.name, st.result, before, got)
		}
		l, _ := s.Load("a")
		if l.Stale != st.wantStale || !strings.Contains(l.LastError, st.wantErr) || (st.wantErr == "") != (l.LastError == "") {
			t.Fatalf("%s: Load = stale %v err %q; want stale %v err %q", st.name, l.Stale, l.LastError, st.wantStale, st.wantErr)
		}
		if l.Running != 62 {
			t.Fatalf("%s: last good figures lost: running %d", st.name, l.Running)
		}
		clk.Advance(st.advance)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warmpath_discovery_stale_workers Workers whose last successful engine metrics scrape is older than the configured maximum age.
# TYPE warmpath_discovery_stale_workers gauge
warmpath_discovery_stale_workers 1
`), "warmpath_discovery_stale_workers"); err != nil {
		t.Error(err)
	}

	// A worker that leaves is forgotten; one that moves starts afresh.
	lister.set(w("a", "127.0.0.1:1", "m"))
	s.ScrapeNow(t.Context())
	if _, ok := s.Load("down"); ok {
		t.Error("removed worker still has a load")
	}
	if l, _ := s.Load("a"); !l.Stale || l.Running != 0 || !l.ScrapedAt.IsZero() {
		t.Errorf("moved worker kept the old address's figures: %+v", l)
	}
	if got := len(s.Loads()); got != 1 {
		t.Errorf("Loads has %d entries, want 1", got)
	}
}

func TestScraperDataParallel(t *testing.T) {
	t.Parallel()
	ms := &metricsServer{body: readFixture(t, "vllm-dp2.prom")}
	srv := httptest.NewServer(ms)
	t.Cleanup(srv.Close)
	lister := &staticLister{}
	lister.set(w("a", strings.TrimPrefix(srv.URL, "http://"), "m"))
	s, err := NewScraper(lister, ScrapeConfig{}, component.Options{}, WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	s.ScrapeNow(t.Context())
	if l, ok := s.Load("a"); !ok || l.Running != 65 || l.Engines != 2 || l.CacheConfig.BlockSize != 32 {
		t.Fatalf("Load = %+v", l)
	}
}

// cpuTime returns the process's user+system CPU time.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScrape100Workers measures one scrape round of 100 workers
// serving the realistic single-engine exposition over loopback HTTP. The
// cpu-ms/round metric is process CPU time per round, the in-process test
// server's share included, so it overstates the scraper's own cost; at
// one round per second, cpu-ms/round ÷ 10 is the percentage of one core.
func BenchmarkScrape100Workers(b *testing.B) {
	text := readFixture(b, "vllm-single.prom")
	srv := httptest.NewServer(&metricsServer{body: text})
	b.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	ws := make([]Worker, 100)
	for i := range ws {
		ws[i] = w("w"+string(rune('0'+i/10))+string(rune('0'+i%10)), addr, "m")
	}
	lister := &staticLister{}
	lister.set(ws...)
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 100
	s, err := NewScraper(lister, ScrapeConfig{Concurrency: 16}, component.Options{}, WithHTTPClient(client))
	if err != nil {
		b.Fatal(err)
	}
	s.ScrapeNow(b.Context()) // warm connections
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		s.ScrapeNow(b.Context())
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(time.Millisecond)/float64(b.N), "cpu-ms/round")
	if l, ok := s.Load("w99"); !ok || l.Running != 62 {
		b.Fatalf("Load = %+v, %v", l, ok)
	}
}

// TestH2CWorkers: a worker whose Protocol is h2c (an InferencePool's
// appProtocol kubernetes.io/h2c) is scraped and health-checked over HTTP/2
// cleartext, which a server that speaks nothing else answers.
func TestH2CWorkers(t *testing.T) {
	t.Parallel()
	ms := &metricsServer{body: readFixture(t, "vllm-single.prom")}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(rw, "h2c only", http.StatusHTTPVersionNotSupported)
			return
		}
		if r.URL.Path == "/health" {
			return
		}
		ms.ServeHTTP(rw, r)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	h2 := w("a", addr, "m")
	h2.Protocol = ProtocolH2C
	lister := &staticLister{}
	lister.set(h2, w("b", addr, "m"))
	s, err := NewScraper(lister, ScrapeConfig{}, component.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.ScrapeNow(t.Context())
	if l, ok := s.Load("a"); !ok || l.LastError != "" || l.Running != 62 {
		t.Fatalf("h2c worker: Load = %+v, %v", l, ok)
	}
	if l, _ := s.Load("b"); l.LastError == "" {
		t.Fatal("an HTTP/1.1 worker on an h2c-only server was scraped")
	}
	p, _, _ := newTestPool(t, HealthConfig{ActiveInterval: time.Hour})
	p.Apply([]Worker{h2})
	p.CheckNow(t.Context())
	if !p.Ready() {
		t.Fatal("the h2c worker did not pass its health check")
	}
}
