package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/discovery/enginemetrics"
	"github.com/warmpath/warmpath/internal/component"
)

// WorkerLister is what the Scraper and Guard need from a Pool: the current
// worker set.
type WorkerLister interface {
	Workers() []Worker
}

// ScrapeConfig configures engine metrics scraping. The zero value of each
// field selects its default.
type ScrapeConfig struct {
	// Interval between scrapes of every worker. Default 1 s.
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds one scrape. Default Interval.
	Timeout time.Duration `yaml:"timeout"`
	// MaxAge is how old the last successful scrape may be before the load
	// is stale. Default 3 × Interval.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxBytes bounds a /metrics body. Default 8 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// Concurrency bounds scrapes in flight. Default 16.
	Concurrency int `yaml:"concurrency"`
}

// DefaultScrapeConfig returns what the discovery.scrape section of
// warmpath's configuration starts from: a 1 s interval and a 3 s maximum
// age; the other fields are zero, which selects their defaults.
func DefaultScrapeConfig() ScrapeConfig {
	return ScrapeConfig{Interval: time.Second, MaxAge: 3 * time.Second}
}

// Validate reports every invalid field, joined.
func (c ScrapeConfig) Validate() error {
	var errs []error
	if c.Interval <= 0 || c.MaxAge <= 0 {
		errs = append(errs, fmt.Errorf("interval, max_age: %v, %v, want both positive", c.Interval, c.MaxAge))
	}
	if c.Timeout < 0 || c.MaxBytes < 0 || c.Concurrency < 0 {
		errs = append(errs, errors.New("timeout, max_bytes, concurrency: must not be negative (0 selects the default)"))
	}
	return errors.Join(errs...)
}

func (c ScrapeConfig) withDefaults() ScrapeConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = c.Interval
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 3 * c.Interval
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8 << 20
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	return c
}

// EngineMetrics, LoRAInfo and CacheConfig are the figures read from a
// worker's /metrics; see package enginemetrics.
type (
	EngineMetrics = enginemetrics.Metrics
	LoRAInfo      = enginemetrics.LoRAInfo
	CacheConfig   = enginemetrics.CacheConfig
)

// EngineLoad is the last known load of one worker.
type EngineLoad struct {
	EngineMetrics
	// ScrapedAt is when the figures were scraped; zero when no scrape of
	// this worker has succeeded yet.
	ScrapedAt time.Time `json:"scraped_at,omitzero"`
	// Stale is true when no scrape succeeded within MaxAge. The figures
	// are then the last known ones (or zero when there never were any):
	// they are not a measurement of an idle worker, and a scorer must
	// not read them as one.
	Stale bool `json:"stale"`
	// LastError describes the last failed scrape since the last success.
	LastError string `json:"last_error,omitempty"`
}

type loadEntry struct {
	address string
	load    EngineLoad
}

// Scraper scrapes every worker's /metrics each Interval and keeps the
// newest EngineLoad per worker. Results are swapped whole through an
// atomic pointer, so Load never locks.
//
// Create it with NewScraper and drive it with Run. Its methods are safe for
// concurrent use.
type Scraper struct {
	workers WorkerLister
	cfg     ScrapeConfig
	log     *slog.Logger
	now     func() time.Time
	client  *http.Client
	h2c     *http.Client // the client for h2c workers

	loads atomic.Pointer[map[string]loadEntry]
	bufs  sync.Pool // *scrapeBufs

	scrapes  *prometheus.CounterVec
	duration prometheus.Histogram
}

type scrapeBufs struct {
	body   []byte
	parser enginemetrics.Parser
}

// Scrape results, the values of the result label of
// warmpath_discovery_scrapes_total.
const (
	scrapeOK        = "ok"
	scrapeHTTPError = "http_error"
	scrapeBadStatus = "bad_status"
	scrapeTooLarge  = "too_large"
	scrapeBadBody   = "parse_error"
)

// errTooLarge reports a body over MaxBytes.
var errTooLarge = errors.New("metrics body too large")

// NewScraper returns a scraper of the workers listed by ws. Options:
// WithLogger, WithRegisterer, WithClock, WithHTTPClient.
func NewScraper(ws WorkerLister, cfg ScrapeConfig, co component.Options, opts ...Option) (*Scraper, error) {
	o := buildOptions(opts)
	s := &Scraper{
		workers: ws,
		cfg:     cfg.withDefaults(),
		log:     co.Log(),
		now:     co.Now(),
		client:  o.client,
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_discovery_scrapes_total",
			Help: "Engine /metrics scrapes, by result (ok, http_error, bad_status, too_large, parse_error).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warmpath_discovery_scrape_duration_seconds",
			Help:    "Wall time of one engine /metrics scrape, request and parse.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
	}
	if s.client == nil {
		s.client = defaultHTTPClient()
	}
	s.h2c = h2cClient(s.client)
	s.bufs.New = func() any { return &scrapeBufs{} }
	empty := map[string]loadEntry{}
	s.loads.Store(&empty)
	for _, r := range []string{scrapeOK, scrapeHTTPError, scrapeBadStatus, scrapeTooLarge, scrapeBadBody} {
		s.scrapes.WithLabelValues(r)
	}
	stale := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmpath_discovery_stale_workers",
		Help: "Workers whose last successful engine metrics scrape is older than the configured maximum age.",
	}, func() float64 {
		n := 0
		for _, l := range s.Loads() {
			if l.Stale {
				n++
			}
		}
		return float64(n)
	})
	if err := co.Register("discovery scraper", s.scrapes, s.duration, stale); err != nil {
		return nil, fmt.Errorf("metrics scraper: %w", err)
	}
	return s, nil
}

// Run scrapes all workers every Interval until ctx is done; it returns nil.
func (s *Scraper) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.ScrapeNow(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ScrapeNow scrapes every current worker once, concurrently, and publishes
// the results before it returns. Workers that left the set are forgotten;
// a failed scrape keeps the last good figures with their old ScrapedAt.
// Run calls it every Interval; it is exported for tests and tools.
func (s *Scraper) ScrapeNow(ctx context.Context) {
	ws := s.workers.Workers()
	old := *s.loads.Load()
	next := make(map[string]loadEntry, len(ws))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.cfg.Concurrency)
	for _, w := range ws {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			prev, ok := old[w.Name]
			if !ok || prev.address != w.Address {
				prev = loadEntry{address: w.Address}
			}
			m, err := s.scrape(ctx, clientFor(&w, s.client, s.h2c), w.Address)
			if ctx.Err() != nil {
				return
			}
			e := prev
			if err != nil {
				e.load.LastError = err.Error()
				if prev.load.LastError == "" {
					s.log.Warn("discovery: engine metrics scrape failed", "worker", w.Name, "err", err)
				}
			} else {
				e.load = EngineLoad{EngineMetrics: m, ScrapedAt: s.now()}
			}
			mu.Lock()
			next[w.Name] = e
			mu.Unlock()
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	s.loads.Store(&next)
}

func (s *Scraper) scrape(ctx context.Context, client *http.Client, addr string) (EngineMetrics, error) {
	start := time.Now()
	defer func() { s.duration.Observe(time.Since(start).Seconds()) }()
	b := s.bufs.Get().(*scrapeBufs)
	defer s.bufs.Put(b)
	var err error
	b.body, err = s.fetch(ctx, client, addr, b.body[:0])
	if err != nil {
		return EngineMetrics{}, err
	}
	m, err := b.parser.Parse(b.body)
	if err != nil {
		s.scrapes.WithLabelValues(scrapeBadBody).Inc()
		return EngineMetrics{}, fmt.Errorf("scrape %s: %w", addr, err)
	}
	s.scrapes.WithLabelValues(scrapeOK).Inc()
	return m, nil
}

func (s *Scraper) fetch(ctx context.Context, client *http.Client, addr string, buf []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		s.scrapes.WithLabelValues(scrapeHTTPError).Inc()
		return buf, fmt.Errorf("scrape %s: %w", addr, err)
	}
	// The classic text format: vLLM (prometheus_client) would otherwise
	// be free to answer in OpenMetrics.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		s.scrapes.WithLabelValues(scrapeHTTPError).Inc()
		return buf, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		s.scrapes.WithLabelValues(scrapeBadStatus).Inc()
		return buf, fmt.Errorf("scrape %s: status %d", addr, resp.StatusCode)
	}
	w := bytes.NewBuffer(buf)
	n, err := w.ReadFrom(io.LimitReader(resp.Body, s.cfg.MaxBytes+1))
	if err != nil {
		s.scrapes.WithLabelValues(scrapeHTTPError).Inc()
		return w.Bytes(), fmt.Errorf("scrape %s: read body: %w", addr, err)
	}
	if n > s.cfg.MaxBytes {
		s.scrapes.WithLabelValues(scrapeTooLarge).Inc()
		return w.Bytes(), fmt.Errorf("scrape %s: %w (over %d bytes)", addr, errTooLarge, s.cfg.MaxBytes)
	}
	return w.Bytes(), nil
}

// Load returns the last known load of the named worker, with Stale set as
// of now. ok is false when no scrape of the worker has succeeded yet (the
// load is then zero and Stale), as scoring.EngineLoad expects.
func (s *Scraper) Load(worker string) (l EngineLoad, ok bool) {
	e, ok := (*s.loads.Load())[worker]
	l = e.load
	l.Stale = s.stale(l.ScrapedAt)
	return l, ok && !l.ScrapedAt.IsZero()
}

// Loads returns the last known load of every worker scraped at least once,
// successfully or not, by name.
func (s *Scraper) Loads() map[string]EngineLoad {
	m := *s.loads.Load()
	out := make(map[string]EngineLoad, len(m))
	for name, e := range m {
		l := e.load
		l.Stale = s.stale(l.ScrapedAt)
		out[name] = l
	}
	return out
}

func (s *Scraper) stale(at time.Time) bool {
	return at.IsZero() || s.now().Sub(at) > s.cfg.MaxAge
}
