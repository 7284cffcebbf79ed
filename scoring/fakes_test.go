package scoring

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/discovery"
)

// fakeTokens returns fixed ids, or err when set.
type fakeTokens struct {
	ids  []uint32
	path string
	err  error
}

func (f *fakeTokens) Tokens(context.Context, *Request) ([]uint32, string, error) {
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

	mu      sync.Mutex
	bit     map[string]int
	names   []string
	blocks  map[uint64]uint64
	offload map[uint64]uint64
	stale   map[string]bool
	specs   []string // workers Speculate was called for, in order
}

func newFakeIndex() *fakeIndex {
	return &fakeIndex{seed: maphash.MakeSeed(), bit: map[string]int{}, blocks: map[uint64]uint64{},
		offload: map[uint64]uint64{}, stale: map[string]bool{}}
}

func (f *fakeIndex) keys(key CacheKey, ids []uint32, bs int) []uint64 {
	h := maphash.String(f.seed, key.Model+"\x00"+key.LoRA+"\x00"+key.Salt)
	var buf [8]byte
	out := make([]uint64, 0, len(ids)/bs)
	var mh maphash.Hash
	mh.SetSeed(f.seed)
	for off := 0; off+bs <= len(ids); off += bs {
		mh.Reset()
		binary.LittleEndian.PutUint64(buf[:], h)
		mh.Write(buf[:])
		for _, id := range ids[off : off+bs] {
			binary.LittleEndian.PutUint32(buf[:4], id)
			mh.Write(buf[:4])
		}
		h = mh.Sum64()
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
func (f *fakeIndex) store(worker string, key CacheKey, ids []uint32, n, bs int, off bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.blocks
	if off {
		m = f.offload
	}
	b := f.workerBit(worker)
	for _, k := range f.keys(key, ids[:n], bs) {
		m[k] |= b
	}
}

func (f *fakeIndex) Lookup(key CacheKey, ids []uint32, bs int) []PrefixMatch {
	ks := f.keys(key, ids, bs)
	f.mu.Lock()
	defer f.mu.Unlock()
	gpu := make([]int, len(f.names))
	all := make([]int, len(f.names))
	aliveGPU, alive := ^uint64(0), ^uint64(0)
	for i, k := range ks {
		aliveGPU &= f.blocks[k]
		alive &= f.blocks[k] | f.offload[k]
		if alive == 0 {
			break
		}
		for w := range f.names {
			if aliveGPU&(1<<w) != 0 {
				gpu[w] = (i + 1) * bs
			}
			if alive&(1<<w) != 0 {
				all[w] = (i + 1) * bs
			}
		}
	}
	var out []PrefixMatch
	for w, name := range f.names {
		if all[w] > 0 {
			out = append(out, PrefixMatch{Worker: name, GPUTokens: gpu[w], OffloadedTokens: all[w] - gpu[w]})
		}
	}
	return out
}

func (f *fakeIndex) Speculate(worker string, key CacheKey, ids []uint32, bs int) {
	ks := f.keys(key, ids, bs)
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.workerBit(worker)
	for _, k := range ks {
		f.blocks[k] |= b
	}
	f.specs = append(f.specs, worker)
}

func (f *fakeIndex) Stale(w string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale[w]
}

// fakeLoad serves fixed load reports.
type fakeLoad struct {
	mu      sync.Mutex
	reports map[string]LoadReport
}

func (f *fakeLoad) Load(w string) (LoadReport, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.reports[w]
	return r, ok
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
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
	clock *fakeClock
	logs  *bytes.Buffer
}

func newRig(t testing.TB, policy string, cfg Config, tok TokenSource) *rig {
	t.Helper()
	g := &rig{reg: prometheus.NewRegistry(), index: newFakeIndex(), load: &fakeLoad{reports: map[string]LoadReport{}},
		clock: newFakeClock(), logs: &bytes.Buffer{}}
	deps := Deps{Tokens: tok, Index: g.index, Load: g.load, Registerer: g.reg,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: g.logs}, nil))}
	r, err := New(policy, cfg, deps, WithClock(g.clock.Now), WithSeed(7))
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
