package app

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
)

// fixedLoad reports the same engine gauges for every worker, scraped at
// the time held in at.
type fixedLoad struct {
	reports map[string]discovery.EngineLoad
	at      *time.Time
}

func (l fixedLoad) Load(worker string) (discovery.EngineLoad, bool) {
	r, ok := l.reports[worker]
	r.ScrapedAt = *l.at
	return r, ok
}

// BenchmarkDecisionRealIndex is one decision as warmpath serves it, with
// the production KV-cache index behind the production adapter: an
// 8K-token prompt (32 families of 4K shared tokens, each on a few of 16
// workers, plus a 4K tail), lookup, load reconciliation with a fresh
// scrape, TTFT prediction on 16 workers, the warmpath policy, the
// reservation and the speculative entry, and ending an older assignment
// (release and calibration), with 64 assignments in flight. The clock
// advances 1 ms per decision and the scrape is renewed every second, as a
// pool at 1,000 requests/s would see it.
func BenchmarkDecisionRealIndex(b *testing.B) {
	ix, err := kvindex.New(kvindex.DefaultConfig(), component.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]discovery.Worker, 16)
	load := fixedLoad{reports: map[string]discovery.EngineLoad{}, at: new(time.Time)}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range ws {
		ws[i] = discovery.Worker{Name: fmt.Sprintf("w%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i+1), Models: []string{"m"}}
		load.reports[ws[i].Name] = discovery.EngineLoad{EngineMetrics: discovery.EngineMetrics{
			Running: rng.IntN(8), Waiting: rng.IntN(3), HasKVCacheUsage: true, KVCacheUsage: 0.5 * rng.Float64()}}
	}
	prompts := make([][]uint32, 256)
	for i := range prompts {
		ids := make([]uint32, 8192)
		for j := range ids {
			ids[j] = uint32(i%32*100000 + j) // the family's shared 4K
			if j >= 4096 {
				ids[j] = uint32(5_000_000 + i*10000 + j)
			}
		}
		prompts[i] = ids
	}
	for i, ids := range prompts {
		n := 256 + rng.IntN(256) // blocks stored: the shared half and some of the tail
		hashes := make([]uint64, n)
		for j := range hashes {
			hashes[j] = uint64(i)<<32 | uint64(j+1)
		}
		w := ws[rng.IntN(len(ws))].Name
		ix.Apply(kvindex.Source{Worker: w, Model: "m"}, []kvindex.Event{{
			Kind: kvindex.BlockStored, BlockHashes: hashes, TokenIDs: ids[:n*16], BlockSize: 16}})
	}
	clock := clocktest.New(time.Unix(1_000_000, 0))
	*load.at = clock.Now()
	r, err := scoring.New(scoring.PolicyWarmpath, scoring.DefaultConfig(), scoring.Sources{Index: ix, Load: load},
		component.Options{Registerer: prometheus.NewRegistry(), Clock: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ring := make([]*scoring.Decision, 64)
	i := 0
	pick := func() {
		d, err := r.Pick(ctx, &scoring.Request{Model: "m", TokenIDs: prompts[i%len(prompts)], Stream: true}, ws)
		if err != nil {
			b.Fatal(err)
		}
		slot := i % len(ring)
		if old := ring[slot]; old != nil {
			r.Done(old, scoring.Outcome{End: scoring.EndCompleted, TTFT: old.Chosen.PredictedTTFT * 11 / 10,
				Duration: time.Second, PromptTokens: old.PromptTokens, CachedTokens: old.Chosen.CachedTokens, CompletionTokens: 64})
		}
		ring[slot] = d
		i++
		clock.Advance(time.Millisecond)
		if i%1000 == 0 {
			*load.at = clock.Now()
		}
	}
	for range len(ring) {
		pick()
	}
	// predict is the lookup and the prediction on every candidate, which
	// reserve nothing; pick is the whole decision path.
	b.Run("predict", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			if _, err := r.Predict(ctx, &scoring.Request{Model: "m", TokenIDs: prompts[i%len(prompts)], Stream: true}, ws); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("pick", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			pick()
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// processCPU returns the process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
