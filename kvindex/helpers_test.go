package kvindex

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/internal/component"
)

// testBlock is the block size of the tests' events, vLLM's default.
const testBlock = 16

// indexOption changes the configuration or the component options a test
// index is built with.
type indexOption func(*Config, *component.Options)

func budget(n int) indexOption { return func(c *Config, _ *component.Options) { c.EntryBudget = n } }
func staleAfter(d time.Duration) indexOption {
	return func(c *Config, _ *component.Options) { c.StaleAfter = d }
}
func specTTL(d time.Duration) indexOption {
	return func(c *Config, _ *component.Options) { c.SpeculativeTTL = d }
}
func clockAt(now func() time.Time) indexOption {
	return func(_ *Config, o *component.Options) { o.Clock = now }
}
func registerer(reg prometheus.Registerer) indexOption {
	return func(_ *Config, o *component.Options) { o.Registerer = reg }
}

// newIndex returns New over DefaultConfig changed by opts, failing tb if it
// fails.
func newIndex(tb testing.TB, opts ...indexOption) *Index {
	tb.Helper()
	cfg, o := DefaultConfig(), component.Options{}
	for _, opt := range opts {
		opt(&cfg, &o)
	}
	ix, err := New(cfg, o)
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}

// offloaded reports whether medium, as a test names it ("" for none, which
// means GPU), is another medium than GPU memory.
func offloaded(medium string) bool {
	return medium != "" && !strings.EqualFold(medium, "GPU")
}

// cachedOn returns worker's GPU and offloaded tokens among ms.
func cachedOn(ms []Match, worker string) (gpu, off int) {
	for _, m := range ms {
		if m.Worker == worker {
			return m.GPUTokens, m.OffloadedTokens
		}
	}
	return 0, 0
}

// statusOf returns the index's status of src's stream, or a zero one.
func statusOf(ix *Index, src Source) StreamStatus {
	for _, st := range ix.Streams() {
		if st.Worker == src.Worker && st.Rank == src.Rank {
			return st
		}
	}
	return StreamStatus{}
}

// touchedNodes returns the nodes of the first chain in ix's touch log,
// root first, expanding its runs.
func touchedNodes(ix *Index) []uint32 {
	var nodes []uint32
	for r := 0; ix.touchLog[r] != 0; r += 2 {
		for k := range ix.touchLog[r+1] {
			nodes = append(nodes, ix.touchLog[r]-k)
		}
	}
	return nodes
}

// randTokens returns n token ids drawn from rng, in a 150K vocabulary.
func randTokens(rng *rand.Rand, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(rng.IntN(150000))
	}
	return out
}

func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}
