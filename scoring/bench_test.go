package scoring

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/kvindex"
)

// cpuTime returns the process's user+system CPU time. Benchmarks report it
// per operation as cpu-ns/op: on a shared machine wall time per operation
// includes waiting for a core, CPU time does not.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fixedIndex answers every lookup with the same matches: it isolates the
// router's own cost from the index's.
type fixedIndex struct{ matches []kvindex.Match }

func (f *fixedIndex) AppendLookup(dst []kvindex.Match, _ kvindex.ChainKey, _ []uint32, _ int) []kvindex.Match {
	return append(dst, f.matches...)
}
func (f *fixedIndex) AppendSpeculate(dst []uint64, _ string, _ kvindex.ChainKey, _ []uint32, _ int) []uint64 {
	return dst
}
func (f *fixedIndex) Stale(string) bool { return false }

func (f *fixedIndex) Batches(string) (uint64, bool) { return 0, false }

// BenchmarkDecision measures one full decision as the ext_proc layer makes
// it: prefix lookup through a hashing index, load reconciliation and TTFT
// prediction on 16 workers for an 8K-token prompt, the policy's choice and
// the reservation, plus ending an older assignment (release and
// calibration), with 64 assignments in flight. The body=32KiB case also
// hashes the request text for the approximate-mode history.
func BenchmarkDecision(b *testing.B) {
	for _, bc := range []struct {
		index    string
		bodySize int
	}{{"hashing", 0}, {"hashing", 32 << 10}, {"fixed", 0}} {
		bodySize := bc.bodySize
		b.Run(fmt.Sprintf("index=%s/body=%dKiB", bc.index, bodySize>>10), func(b *testing.B) {
			cfg := DefaultConfig()
			ws := pool(16)
			rng := rand.New(rand.NewPCG(1, 1))
			prompts := make([][]uint32, 256)
			for i := range prompts {
				family := i % 32
				ids := prompt(family, 0, 8192)
				copy(ids[4096:], prompt(i, 0, 4096))
				prompts[i] = ids
			}
			tok := &fakeTokens{path: "local"}
			g := newRig(b, PolicyWarmpath, cfg, tok)
			key := kvindex.ChainKey{Model: "m"}
			for i, ids := range prompts {
				g.index.store(ws[rng.IntN(16)].Name, key, ids, 4096+16*rng.IntN(256), 16, false)
				if i%4 == 0 {
					g.index.store(ws[rng.IntN(16)].Name, key, ids, 4096, 16, true)
				}
			}
			if bc.index == "fixed" {
				var ms []kvindex.Match
				for _, w := range ws[:6] {
					ms = append(ms, kvindex.Match{Worker: w.Name, GPUTokens: 4096 + 16*rng.IntN(256), OffloadedTokens: 512})
				}
				g.r.gather.index = &fixedIndex{matches: ms}
			}
			for _, w := range ws {
				g.load.reports[w.Name] = loadReport{Running: rng.IntN(8), Waiting: rng.IntN(3), HasKVUsage: true,
					KVUsage: rng.Float64(), Scraped: g.clock.Now()}
			}
			body := []byte(strings.Repeat("x", bodySize))
			ring := make([]*Decision, 64)
			b.ReportAllocs()
			i := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				tok.ids = prompts[i%len(prompts)]
				d, err := g.r.Pick(b.Context(), &Request{API: APIChat, Model: "m", Prompt: body, Body: body}, ws)
				if err != nil {
					b.Fatal(err)
				}
				slot := i % len(ring)
				if old := ring[slot]; old != nil {
					g.r.Done(old, Outcome{End: EndCompleted, TTFT: old.Chosen.PredictedTTFT * 11 / 10,
						PromptTokens: old.PromptTokens, CachedTokens: old.Chosen.CachedTokens})
				}
				ring[slot] = d
				i++
				if i%1024 == 0 {
					g.clock.Advance(10 * time.Millisecond)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPredict is the read-only decision of POST /debug/lookup.
func BenchmarkPredict(b *testing.B) {
	g := newRig(b, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(16)
	ids := prompt(1, 4096, 8192)
	g.index.store("w3", kvindex.ChainKey{Model: "m"}, ids, 4096, 16, false)
	req := &Request{Model: "m", TokenIDs: ids}
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if _, err := g.r.Predict(b.Context(), req, ws); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
