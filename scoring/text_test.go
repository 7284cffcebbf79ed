package scoring

import (
	"hash/maphash"
	"math"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/kvindex"
)

func TestTextChain(t *testing.T) {
	t.Parallel()
	seed := maphash.MakeSeed()
	key := kvindex.ChainKey{Model: "m"}
	a := []byte(strings.Repeat("a", 64) + strings.Repeat("b", 64) + "tail")
	b := []byte(strings.Repeat("a", 64) + strings.Repeat("c", 64))
	ca := textChain(seed, key, a, 64, nil)
	cb := textChain(seed, key, b, 64, nil)
	if len(ca) != 2 || len(cb) != 2 {
		t.Fatalf("chain lengths %d, %d; want whole chunks only", len(ca), len(cb))
	}
	if ca[0] != cb[0] || ca[1] == cb[1] {
		t.Errorf("shared first chunk must hash equal, differing second not: %x %x", ca, cb)
	}
	// The same chunk after a different prefix hashes differently.
	c := []byte(strings.Repeat("c", 64) + strings.Repeat("b", 64))
	if cc := textChain(seed, key, c, 64, nil); cc[1] == ca[1] {
		t.Error("chunk hash does not depend on its prefix")
	}
	if cs := textChain(seed, kvindex.ChainKey{Model: "m", Salt: "s"}, a, 64, nil); cs[0] == ca[0] {
		t.Error("chunk hash does not depend on the cache salt")
	}
	if n := len(textChain(seed, key, []byte("short"), 64, nil)); n != 0 {
		t.Errorf("short body gave %d chunks", n)
	}
}

func TestTextHistory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		record   [][]uint64
		at       int64
		query    []uint64
		want     int
	}{
		{name: "full match", capacity: 8, record: [][]uint64{{1, 2, 3}}, query: []uint64{1, 2, 3, 4}, want: 3},
		{name: "prefix only", capacity: 8, record: [][]uint64{{1, 2, 3}}, query: []uint64{1, 9, 3}, want: 1},
		{name: "nothing", capacity: 8, record: [][]uint64{{1, 2, 3}}, query: []uint64{9}, want: 0},
		{name: "expired", capacity: 8, record: [][]uint64{{1, 2, 3}}, at: 11, query: []uint64{1, 2}, want: 0},
		{name: "within ttl", capacity: 8, record: [][]uint64{{1, 2, 3}}, at: 10, query: []uint64{1, 2}, want: 2},
		{name: "oldest forgotten past capacity", capacity: 3, record: [][]uint64{{1, 2, 3}, {4}}, query: []uint64{1, 2}, want: 0},
		{name: "newer kept past capacity", capacity: 3, record: [][]uint64{{1, 2, 3}, {4}}, query: []uint64{2, 3}, want: 2},
		{name: "re-recording does not grow", capacity: 3, record: [][]uint64{{1, 2, 3}, {1, 2, 3}}, query: []uint64{1, 2, 3}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newTextHistory(tt.capacity)
			for _, r := range tt.record {
				h.record(r, 0)
			}
			if got := h.match(tt.query, tt.at, 10); got != tt.want {
				t.Errorf("match = %d, want %d", got, tt.want)
			}
			if len(h.seen) > tt.capacity || len(h.ring) > tt.capacity {
				t.Errorf("history holds %d/%d entries, capacity %d", len(h.seen), len(h.ring), tt.capacity)
			}
		})
	}
}

func TestGapTracker(t *testing.T) {
	t.Parallel()
	var g gapTracker
	for i := range 19 {
		if c := g.observe(512, 0, 0.2, 20); c != gapSame {
			t.Fatalf("gap changed after %d outcomes, before the minimum", i+1)
		}
	}
	if c := g.observe(512, 0, 0.2, 20); c != gapOpened || g.bias != 512 {
		t.Fatalf("20th miss: change %v, bias %v", c, g.bias)
	}
	if c := g.observe(512, 0, 0.2, 20); c != gapSame {
		t.Fatalf("open gap reopened")
	}
	closedAfter := 0
	for i := range 100 {
		if g.observe(512, 512, 0.2, 20) == gapClosed {
			closedAfter = i + 1
			break
		}
	}
	if closedAfter == 0 || closedAfter < 10 {
		t.Errorf("gap closed after %d matches, want after the rate halves (≥ 10)", closedAfter)
	}
	// Occasional misses under the threshold never open it.
	var h gapTracker
	for i := range 200 {
		actual := 512
		if i%10 == 0 {
			actual = 496
		}
		if h.observe(512, actual, 0.2, 20) == gapOpened {
			t.Fatalf("10%% misses opened a gap at outcome %d", i)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tweak func(*Config)
		want  string
	}{
		{name: "defaults", tweak: func(*Config) {}},
		{name: "shadow known", tweak: func(c *Config) { c.Shadow = PolicyNames() }},
		{name: "shadow unknown", tweak: func(c *Config) { c.Shadow = []string{"oracle"} }, want: "shadow"},
		{name: "block size", tweak: func(c *Config) { c.BlockSizes = map[string]int{"m": 0} }, want: "block size of model m"},
		{name: "prior negative", tweak: func(c *Config) { c.Prior.DecodePerSeq = -1 }, want: "prior: parameter 2"},
		{name: "prior NaN", tweak: func(c *Config) { c.Prior.StepOverhead = math.NaN() }, want: "prior: parameter 0"},
		{name: "prefill zero", tweak: func(c *Config) { c.Prior.PrefillPerToken = 0 }, want: "prefill_seconds_per_token"},
		{name: "budget", tweak: func(c *Config) { c.Budgets = map[string]int{"w0": -5} }, want: "budgets[w0]"},
		{name: "forgetting", tweak: func(c *Config) { c.Forgetting = 0.5 }, want: "forgetting"},
		{name: "kv high", tweak: func(c *Config) { c.KVHigh = 1 }, want: "kv_high"},
		{name: "offload", tweak: func(c *Config) { c.OffloadCost = 2 }, want: "offload_cost"},
		{name: "text", tweak: func(c *Config) { c.TextChunk = 0 }, want: "text_chunk"},
		{name: "affinity", tweak: func(c *Config) { c.PeakPrefillRate = 0 }, want: "peak_prefill_rate"},
		{name: "several joined", tweak: func(c *Config) { c.NoiseRel = 0; c.HuberK = 0 }, want: "noise_rel: 0 is not positive\nhuber_k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.tweak(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
