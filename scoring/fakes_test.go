package scoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/tokenize"
)

// fakeTokens returns fixed ids, or err when set.
type fakeTokens struct {
	ids  []uint32
	path string
	err  error
}

func (f *fakeTokens) Tokenize(context.Context, string, tokenize.Kind, *tokenize.Body, string) ([]uint32, string, error) {
	if f.err != nil {
		return nil, "", f.err
	}
	return f.ids, f.path, nil
}

// fakeIndex is a small but real prefix index: block keys are chained hashes
// of block_size token chunks seeded by the cache key, and each key maps to
// the set of workers holding it, as a bitmask. It is safe for concurrent use.
type fakeIndex struct {
	seed maphash.Seed

	mu     sync.Mutex
	bit    map[string]int
	names  []string
	blocks map[uint64]holders
	stale  map[string]bool
	// batches counts the event batches of each worker with a stream; a
	// worker missing from it has none.
	batches map[string]uint64
	specs   []string // workers Speculate was called for, in order
	// last memoises the keys of the last Lookup, which Speculate for the
	// same ids reuses, as an adapter over the real index can.
	lastIDs  *uint32
	lastN    int
	lastKeys []uint64
	lastGPU  map[string]int // GPU prefix per worker of the last Lookup
}

// holders are the workers holding a block on GPU and on an offload tier.
type holders struct{ gpu, off uint64 }

func newFakeIndex() *fakeIndex {
	return &fakeIndex{seed: maphash.MakeSeed(), bit: map[string]int{}, blocks: map[uint64]holders{}, stale: map[string]bool{},
		lastGPU: map[string]int{}}
}

func (f *fakeIndex) keys(key kvindex.ChainKey, ids []uint32, bs int) []uint64 {
	h := maphash.String(f.seed, key.Model+"\x00"+key.LoRA+"\x00"+key.Salt)
	out := make([]uint64, 0, len(ids)/bs)
	for off := 0; off+bs <= len(ids); off += bs {
		// The block's ids as bytes in host order, without a copy.
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&ids[off])), 4*bs)
		h = mix(h ^ maphash.Bytes(f.seed, buf))
		out = append(out, h)
	}
	return out
}

func (f *fakeIndex) workerBit(w string) uint64 {
	b, ok := f.bit[w]
	if !ok {
		b = len(f.names)
		f.bit[w] = b
		f.names = append(f.names, w)
	}
	return 1 << b
}

// store marks the first n tokens of ids as cached on worker (offloaded
// when off is set).
func (f *fakeIndex) store(worker string, key kvindex.ChainKey, ids []uint32, n, bs int, off bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.workerBit(worker)
	for _, k := range f.keys(key, ids[:n], bs) {
		h := f.blocks[k]
		if off {
			h.off |= b
		} else {
			h.gpu |= b
		}
		f.blocks[k] = h
	}
}

func (f *fakeIndex) AppendLookup(out []kvindex.Match, key kvindex.ChainKey, ids []uint32, bs int) []kvindex.Match {
	ks := f.keys(key, ids, bs)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ids) > 0 {
		f.lastIDs, f.lastN, f.lastKeys = &ids[0], len(ids), ks
	}
	gpu := make([]int, len(f.names))
	all := make([]int, len(f.names))
	// Walk the chain once; when a worker drops out of the alive set, its
	// prefix ended at the previous block.
	aliveGPU, alive := uint64(1)<<len(f.names)-1, uint64(1)<<len(f.names)-1
	end := func(dropped uint64, n int, into []int) {
		for w := range f.names {
			if dropped&(1<<w) != 0 {
				into[w] = n
			}
		}
	}
	for i, k := range ks {
		h := f.blocks[k]
		if na := aliveGPU & h.gpu; na != aliveGPU {
			end(aliveGPU&^na, i*bs, gpu)
			aliveGPU = na
		}
		if na := alive & (h.gpu | h.off); na != alive {
			end(alive&^na, i*bs, all)
			alive = na
		}
		if alive == 0 {
			break
		}
	}
	end(aliveGPU, len(ks)*bs, gpu)
	end(alive, len(ks)*bs, all)
	clear(f.lastGPU)
	for w, name := range f.names {
		f.lastGPU[name] = gpu[w]
		if all[w] > 0 {
			out = append(out, kvindex.Match{Worker: name, GPUTokens: min(gpu[w], all[w]), OffloadedTokens: all[w] - min(gpu[w], all[w])})
		}
	}
	return out
}

func (f *fakeIndex) AppendSpeculate(dst []uint64, worker string, key kvindex.ChainKey, ids []uint32, bs int) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	ks := f.lastKeys
	if len(ids) == 0 || &ids[0] != f.lastIDs || len(ids) != f.lastN {
		ks = f.keys(key, ids, bs)
	} else {
		// Blocks the worker already holds need no write.
		ks = ks[f.lastGPU[worker]/bs:]
	}
	b := f.workerBit(worker)
	for _, k := range ks {
		h := f.blocks[k]
		h.gpu |= b
		f.blocks[k] = h
	}
	f.specs = append(f.specs, worker)
	return append(dst, ks...)
}

// setKey adds or removes one block key of worker, as a KV event would.
func (f *fakeIndex) setKey(worker string, k uint64, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.workerBit(worker)
	h := f.blocks[k]
	if on {
		h.gpu |= b
	} else {
		h.gpu &^= b
	}
	f.blocks[k] = h
}

func (f *fakeIndex) Stale(w string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale[w]
}

func (f *fakeIndex) Batches(w string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.batches[w]
	return n, ok
}

// published makes worker's stream known with n batches applied.
func (f *fakeIndex) published(worker string, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.batches == nil {
		f.batches = make(map[string]uint64)
	}
	f.batches[worker] = n
}

// loadReport is one worker's scraped gauges as a test writes them.
type loadReport struct {
	Running, Waiting int
	KVUsage          float64
	HasKVUsage       bool
	KVBlocks         int
	Scraped          time.Time
	// The engine's own first-token histogram: count and seconds.
	TTFTCount, TTFTSeconds float64
	HasTTFT                bool
}

// fakeLoad serves fixed load reports, stale past maxAge on clock, as the
// scraper marks them.
type fakeLoad struct {
	clock  *clocktest.Clock
	maxAge time.Duration

	mu      sync.Mutex
	reports map[string]loadReport
}

func (f *fakeLoad) Load(w string) (discovery.EngineLoad, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reports[w]
	if !ok {
		return discovery.EngineLoad{}, false
	}
	return discovery.EngineLoad{
		EngineMetrics: discovery.EngineMetrics{Running: r.Running, Waiting: r.Waiting,
			KVCacheUsage: r.KVUsage, HasKVCacheUsage: r.HasKVUsage, KVBlocks: r.KVBlocks,
			TTFTCount: r.TTFTCount, TTFTSeconds: r.TTFTSeconds, HasTTFT: r.HasTTFT},
		ScrapedAt: r.Scraped,
		Stale:     f.clock.Now().Sub(r.Scraped) > f.maxAge,
	}, true
}

// pool returns n workers named w0…w(n-1) serving model "m".
func pool(n int) Workers {
	ws := make(Workers, n)
	for i := range ws {
		ws[i] = discovery.Worker{Name: fmt.Sprintf("w%d", i), Address: fmt.Sprintf("10.0.0.%d:8000", i), Models: []string{"m"}}
	}
	return ws
}

// prompt returns n token ids; prompts with equal seed share a prefix of
// shared tokens, then differ.
func prompt(seed, shared, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		if i < shared {
			ids[i] = uint32(1000 + i*7%50000)
		} else {
			ids[i] = uint32(seed*100003+i*13) % 150000
		}
	}
	return ids
}

var errTokenize = errors.New("tokenize: no tokenizer for model")

// rig is a router with its fakes.
type rig struct {
	r     *Router
	reg   *prometheus.Registry
	index *fakeIndex
	load  *fakeLoad
	clock *clocktest.Clock
	logs  *bytes.Buffer
}

func newRig(t testing.TB, policy string, cfg Config, tok TokenSource) *rig {
	t.Helper()
	g := &rig{reg: prometheus.NewRegistry(), index: newFakeIndex(), clock: clocktest.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)), logs: &bytes.Buffer{}}
	g.load = &fakeLoad{clock: g.clock, maxAge: 5 * time.Second, reports: map[string]loadReport{}}
	o := component.Options{Registerer: g.reg, Clock: g.clock.Now,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: g.logs}, nil))}
	r, err := New(policy, cfg, Sources{Tokens: tok, Index: g.index, Load: g.load}, o, WithSeed(7))
	if err != nil {
		t.Fatalf("New(%q): %v", policy, err)
	}
	g.r = r
	return g
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ttftConfig is the default configuration with the TTFT objective, for the
// tests of how the TTFT model weighs cache against queue and of what
// builds on single picks (shadows, explanations, idle relaxation); the
// e2e and slo objectives have their own tests (objective_test.go).
func ttftConfig() Config {
	c := DefaultConfig()
	c.Objective = ObjectiveTTFT
	return c
}
