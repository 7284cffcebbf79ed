package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// LoadReader is what the Guard needs from a Scraper.
type LoadReader interface {
	Load(worker string) (EngineLoad, bool)
}

// GuardConfig says what warmpath assumes about the engines' caches.
type GuardConfig struct {
	// Interval between checks. Default 5 s.
	Interval time.Duration
	// BlockSize returns the configured KV block size of a model, 0 when
	// not configured. Nil: no configured sizes.
	BlockSize func(model string) int
	// EventBlockSize returns the block size seen in a worker's KV events
	// (BlockStored.block_size), 0 before any event; kvindex's
	// (*Index).BlockSizeSeen fits. Nil: none.
	EventBlockSize func(worker string) int
	// HashAlgo, when set, is the --prefix-caching-hash-algo every worker
	// should run (warmpath's own keys do not depend on it; operators who
	// pin it want to know when a worker differs).
	HashAlgo string
}

// Checks the Guard runs, the values of the check label of
// warmpath_discovery_config_mismatch.
const (
	CheckPrefixCachingOff = "prefix_caching_off" // the engine caches no prefixes: index hits are fiction
	CheckBlockSizeConfig  = "block_size_config"  // engine block size ≠ configured block size
	CheckBlockSizeEvents  = "block_size_events"  // block size in KV events ≠ engine's or configured
	CheckHashAlgo         = "hash_algo"          // engine hash algorithm ≠ GuardConfig.HashAlgo
)

// Problem is one disagreement between a worker's cache configuration and
// warmpath's configuration or its KV events.
type Problem struct {
	Worker string `json:"worker"`
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// Guard compares every worker's vllm:cache_config_info (block size, prefix
// caching, hash algorithm) with the configuration and with the block size
// seen in its KV events. It logs each problem when it first appears and
// when it clears, exposes the current problems as a gauge and through
// Problems.
//
// Create it with NewGuard and drive it with Run. Its methods are safe for
// concurrent use.
type Guard struct {
	workers WorkerLister
	loads   LoadReader
	cfg     GuardConfig
	log     *slog.Logger

	problems atomic.Pointer[[]Problem]
	gauge    *prometheus.GaugeVec
}

// NewGuard returns a guard over the workers of ws and their loads. Options:
// WithLogger, WithRegisterer.
func NewGuard(ws WorkerLister, loads LoadReader, cfg GuardConfig, co component.Options) (*Guard, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	g := &Guard{
		workers: ws, loads: loads, cfg: cfg, log: co.Log(),
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmpath_discovery_config_mismatch",
			Help: "1 for each worker and check where the engine's cache configuration disagrees with warmpath's configuration or its KV events.",
		}, []string{"worker", "check"}),
	}
	g.problems.Store(&[]Problem{})
	if err := co.Register("discovery guard", g.gauge); err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return g, nil
}

// Run checks every Interval until ctx is done; it returns nil.
func (g *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		g.CheckNow()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Problems returns the problems found by the last check, sorted by worker
// and check.
func (g *Guard) Problems() []Problem { return slices.Clone(*g.problems.Load()) }

// CheckNow checks every current worker, publishes and logs the result and
// returns the problems found.
func (g *Guard) CheckNow() []Problem {
	var ps []Problem
	for _, w := range g.workers.Workers() {
		ps = append(ps, g.check(w)...)
	}
	slices.SortFunc(ps, func(a, b Problem) int {
		if c := strings.Compare(a.Worker, b.Worker); c != 0 {
			return c
		}
		return strings.Compare(a.Check, b.Check)
	})
	old := *g.problems.Swap(&ps)
	key := func(p Problem) string { return p.Worker + "\x00" + p.Check + "\x00" + p.Detail }
	was := map[string]bool{}
	for _, p := range old {
		was[key(p)] = true
	}
	is := map[string]bool{}
	for _, p := range ps {
		is[key(p)] = true
		if !was[key(p)] {
			g.log.Error("discovery: engine cache configuration disagrees with warmpath", "worker", p.Worker, "check", p.Check, "detail", p.Detail)
		}
	}
	for _, p := range old {
		if !is[key(p)] {
			g.log.Info("discovery: engine cache configuration problem cleared", "worker", p.Worker, "check", p.Check)
		}
	}
	g.gauge.Reset()
	for _, p := range ps {
		g.gauge.WithLabelValues(p.Worker, p.Check).Set(1)
	}
	return ps
}

func (g *Guard) check(w Worker) []Problem {
	var ps []Problem
	add := func(check, format string, args ...any) {
		ps = append(ps, Problem{Worker: w.Name, Check: check, Detail: fmt.Sprintf(format, args...)})
	}
	var cc *CacheConfig
	if l, ok := g.loads.Load(w.Name); ok {
		cc = l.CacheConfig
	}
	configured, configuredFor := 0, ""
	if g.cfg.BlockSize != nil {
		for _, m := range w.Models {
			if b := g.cfg.BlockSize(m); b > 0 {
				configured, configuredFor = b, m
				if cc != nil && cc.BlockSize > 0 && cc.BlockSize != b {
					add(CheckBlockSizeConfig, "engine block_size %d, configured %d for model %q", cc.BlockSize, b, m)
				}
			}
		}
	}
	if cc != nil {
		if !cc.PrefixCaching {
			add(CheckPrefixCachingOff, "enable_prefix_caching is off: the engine reuses no cached prefix")
		}
		if g.cfg.HashAlgo != "" && cc.HashAlgo != "" && cc.HashAlgo != g.cfg.HashAlgo {
			add(CheckHashAlgo, "engine prefix_caching_hash_algo %q, expected %q", cc.HashAlgo, g.cfg.HashAlgo)
		}
	}
	if g.cfg.EventBlockSize != nil {
		if eb := g.cfg.EventBlockSize(w.Name); eb > 0 {
			switch {
			case cc != nil && cc.BlockSize > 0 && eb != cc.BlockSize:
				add(CheckBlockSizeEvents, "KV events carry block_size %d, engine reports %d", eb, cc.BlockSize)
			case configured > 0 && eb != configured:
				add(CheckBlockSizeEvents, "KV events carry block_size %d, configured %d for model %q", eb, configured, configuredFor)
			}
		}
	}
	return ps
}

// WorkerStatus is one worker as /debug/workers shows it: where it is, its
// health, its last known load and any configuration problems.
type WorkerStatus struct {
	Name             string       `json:"name"`
	Address          string       `json:"address"`
	Models           []string     `json:"models"`
	KVEvents         string       `json:"kv_events,omitempty"`
	KVReplay         string       `json:"kv_replay,omitempty"`
	DataParallelSize int          `json:"data_parallel_size"`
	Protocol         string       `json:"protocol,omitempty"`
	Health           WorkerHealth `json:"health"`
	Load             *EngineLoad  `json:"load,omitempty"`
	Problems         []Problem    `json:"problems,omitempty"`
}

// Status returns the debug view of every worker in p. s and g may be nil
// when metrics scraping or the guard are not running.
func Status(p *Pool, s *Scraper, g *Guard) []WorkerStatus {
	var problems []Problem
	if g != nil {
		problems = g.Problems()
	}
	var loads map[string]EngineLoad
	if s != nil {
		loads = s.Loads()
	}
	ws := p.Workers()
	out := make([]WorkerStatus, 0, len(ws))
	for _, w := range ws {
		st := WorkerStatus{
			Name: w.Name, Address: w.Address, Models: w.Models,
			KVEvents: w.KVEvents, KVReplay: w.KVReplay, DataParallelSize: w.Ranks(), Protocol: w.Protocol,
		}
		st.Health, _ = p.Health(w.Name)
		if l, ok := loads[w.Name]; ok {
			st.Load = &l
		}
		for _, pr := range problems {
			if pr.Worker == w.Name {
				st.Problems = append(st.Problems, pr)
			}
		}
		out = append(out, st)
	}
	return out
}
