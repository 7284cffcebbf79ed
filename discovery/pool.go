package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/warmpath/warmpath/internal/component"
)

// Pool holds the current worker set and each worker's health, and answers
// the router's questions about them. The set comes from a Source and is
// swapped whole through an atomic pointer, so readers never lock.
//
// A Pool is created with NewPool and driven by Run. Its methods are safe for
// concurrent use.
type Pool struct {
	src    Source
	health HealthConfig
	log    *slog.Logger
	now    func() time.Time
	client *http.Client
	h2c    *http.Client // the client for h2c workers

	snap    atomic.Pointer[snapshot]
	suspect chan struct{} // one-slot trigger: a failure asks for an active check round now
	applyMu sync.Mutex    // serialises Apply, so sets reach watchers in order

	mu       sync.Mutex // guards watchers
	watchers map[chan []Worker]struct{}

	updates   *prometheus.CounterVec
	ejections prometheus.Counter
	checks    *prometheus.CounterVec
	states    *prometheus.Desc
}

// snapshot is one immutable worker set with its per-worker health state.
// states[i] belongs to workers[i]; the state objects themselves are mutable
// (atomics) and carried over to the next snapshot while a worker keeps its
// name and address.
type snapshot struct {
	workers []Worker
	states  []*workerState
	byName  map[string]int
	byModel map[string][]int
	models  []string
}

// NewPool returns a pool fed by src. hc configures passive and active health
// checking; its zero value takes the defaults documented on HealthConfig.
// Options: WithLogger, WithRegisterer, WithClock, WithHTTPClient.
func NewPool(src Source, hc HealthConfig, co component.Options, opts ...Option) (*Pool, error) {
	o := buildOptions(opts)
	p := &Pool{
		src:      src,
		health:   hc.withDefaults(),
		log:      co.Log(),
		now:      co.Now(),
		client:   o.client,
		watchers: make(map[chan []Worker]struct{}),
		suspect:  make(chan struct{}, 1),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_discovery_updates_total",
			Help: "Worker sets received from the discovery source, by result (applied, rejected).",
		}, []string{"result"}),
		ejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_discovery_ejections_total",
			Help: "Workers ejected by passive health checking (connection failures and 5xx).",
		}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_discovery_health_checks_total",
			Help: "Active /health checks, by result (pass, fail).",
		}, []string{"result"}),
		states: prometheus.NewDesc("warmpath_discovery_workers",
			"Workers in the current set, by state (usable, ejected, unhealthy).", []string{"state"}, nil),
	}
	if p.client == nil {
		p.client = defaultHTTPClient()
	}
	p.h2c = h2cClient(p.client)
	p.snap.Store(buildSnapshot(nil, nil))
	for _, r := range []string{"applied", "rejected"} {
		p.updates.WithLabelValues(r)
	}
	for _, r := range []string{"pass", "fail"} {
		p.checks.WithLabelValues(r)
	}
	if err := co.Register("discovery pool", p.updates, p.ejections, p.checks, stateCollector{p}); err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	return p, nil
}

// Run runs the source, applies every worker set it publishes and, when
// enabled, the active health checker, until ctx is done or the source
// fails. It returns nil on cancellation and the source's error otherwise.
// With a nil source Run only checks health; the caller then feeds Apply.
func (p *Pool) Run(ctx context.Context) error {
	up := NewUpdates()
	g, ctx := errgroup.WithContext(ctx)
	if p.src != nil {
		g.Go(func() error { return p.src.Run(ctx, up) })
	}
	g.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-up.Ready():
				if ws, ok := up.Take(); ok {
					p.Apply(ws)
				}
			}
		}
	})
	if p.health.ActiveInterval > 0 {
		g.Go(func() error { return p.runActive(ctx) })
	}
	return g.Wait()
}

// Apply validates ws and, if valid, makes it the current set and notifies
// watchers; an invalid set is logged, counted and dropped, and the current
// set stays. Health state carries over for workers whose name and address
// are unchanged. Run calls Apply; it is exported for wiring without a Source.
func (p *Pool) Apply(ws []Worker) {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if err := ValidateWorkers(ws); err != nil {
		p.updates.WithLabelValues("rejected").Inc()
		p.log.Error("discovery: worker set rejected, keeping the current set", "err", err)
		return
	}
	p.updates.WithLabelValues("applied").Inc()
	old := p.snap.Load()
	next := buildSnapshot(ws, old)
	p.snap.Store(next)
	added, removed := diffNames(old, next)
	if len(added)+len(removed) > 0 {
		p.log.Info("discovery: worker set changed", "workers", len(next.workers), "added", added, "removed", removed)
	}
	p.notify(next.workers)
}

func buildSnapshot(ws []Worker, old *snapshot) *snapshot {
	s := &snapshot{
		workers: slices.Clone(ws),
		states:  make([]*workerState, len(ws)),
		byName:  make(map[string]int, len(ws)),
		byModel: make(map[string][]int),
	}
	for i, w := range s.workers {
		s.byName[w.Name] = i
		if old != nil {
			if j, ok := old.byName[w.Name]; ok && old.workers[j].Address == w.Address {
				s.states[i] = old.states[j]
			}
		}
		if s.states[i] == nil {
			s.states[i] = &workerState{}
		}
		for _, m := range w.Models {
			if idx := s.byModel[m]; !slices.Contains(idx, i) {
				s.byModel[m] = append(idx, i)
			}
		}
	}
	for m := range s.byModel {
		s.models = append(s.models, m)
	}
	sort.Strings(s.models)
	return s
}

func diffNames(old, next *snapshot) (added, removed []string) {
	for _, w := range next.workers {
		if _, ok := old.byName[w.Name]; !ok {
			added = append(added, w.Name)
		}
	}
	for _, w := range old.workers {
		if _, ok := next.byName[w.Name]; !ok {
			removed = append(removed, w.Name)
		}
	}
	return added, removed
}

// Candidates returns the workers serving model that may receive a new
// request now: not ejected by passive health checking and not failing
// active checks. An empty model asks for every usable worker (requests
// that name no model, such as GET /v1/models). known is false when no
// worker in the set serves model at all (an unknown model, or an empty
// set), and true when some do, even if none is usable. The returned slice
// is the caller's; the Workers in it must not be mutated.
func (p *Pool) Candidates(model string) (ws []Worker, known bool) {
	s := p.snap.Load()
	now := p.now()
	if model == "" {
		ws = make([]Worker, 0, len(s.workers))
		for i, w := range s.workers {
			if s.states[i].usable(now) {
				ws = append(ws, w)
			}
		}
		return ws, len(s.workers) > 0
	}
	idx, known := s.byModel[model]
	if !known {
		return nil, false
	}
	ws = make([]Worker, 0, len(idx))
	for _, i := range idx {
		if s.states[i].usable(now) {
			ws = append(ws, s.workers[i])
		}
	}
	return ws, true
}

// Models returns the sorted model names served by the current set.
func (p *Pool) Models() []string { return slices.Clone(p.snap.Load().models) }

// Workers returns the current set, healthy or not, in source order.
func (p *Pool) Workers() []Worker { return slices.Clone(p.snap.Load().workers) }

// Watch returns a channel that receives the current worker set at once and
// then every new set. The channel holds one set; a slow reader sees only the
// newest, and the pool never blocks on it. The channel is closed after ctx
// is done.
func (p *Pool) Watch(ctx context.Context) <-chan []Worker {
	ch := make(chan []Worker, 1)
	p.mu.Lock()
	ch <- p.Workers()
	p.watchers[ch] = struct{}{}
	p.mu.Unlock()
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		delete(p.watchers, ch)
		close(ch)
		p.mu.Unlock()
	})
	return ch
}

func (p *Pool) notify(ws []Worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ch := range p.watchers {
		select { // drop a set the reader has not taken yet: only the newest matters
		case <-ch:
		default:
		}
		ch <- slices.Clone(ws) // cannot block: this goroutine is the only sender and holds mu
	}
}

// Ready reports whether at least one worker can take requests: it is not
// ejected and, when active checking is enabled, has passed its last check.
func (p *Pool) Ready() bool { return p.ReadyWhere(nil) }

// ReadyWhere is like Ready but counts only workers for which also(w) is
// true, so that readiness can require the same worker to be healthy and,
// say, caught up in the KV index:
//
//	pool.ReadyWhere(func(w discovery.Worker) bool { return w.KVEvents == "" || index.CaughtUp(w.Name) })
//
// A nil also counts every worker.
func (p *Pool) ReadyWhere(also func(Worker) bool) bool {
	s := p.snap.Load()
	now := p.now()
	for i, st := range s.states {
		if st.usable(now) && (p.health.ActiveInterval <= 0 || st.active.Load() == activePass) &&
			(also == nil || also(s.workers[i])) {
			return true
		}
	}
	return false
}

// stateCollector exports the number of workers per state, computed when
// scraped so that ejections that have run out are not reported.
type stateCollector struct{ p *Pool }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.p.states }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.p.snap.Load()
	now := c.p.now()
	var usable, ejected, unhealthy float64
	for _, st := range s.states {
		switch {
		case st.ejected(now):
			ejected++
		case st.active.Load() == activeFail:
			unhealthy++
		default:
			usable++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.p.states, prometheus.GaugeValue, usable, "usable")
	ch <- prometheus.MustNewConstMetric(c.p.states, prometheus.GaugeValue, ejected, "ejected")
	ch <- prometheus.MustNewConstMetric(c.p.states, prometheus.GaugeValue, unhealthy, "unhealthy")
}
