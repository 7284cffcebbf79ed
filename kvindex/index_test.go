package kvindex

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a settable clock for tests; safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// storeEv builds a BlockStored of prompt's blocks [from, to) with engine
// hashes base+i, as a worker whose engine hashes are its own would send.
func storeEv(prompt []uint32, from, to int, base uint64, medium string) Event {
	ev := Event{Kind: BlockStored, BlockSize: testBlock, Medium: medium}
	for i := from; i < to; i++ {
		ev.BlockHashes = append(ev.BlockHashes, base+uint64(i))
	}
	if from > 0 {
		ev.HasParent, ev.ParentHash = true, base+uint64(from-1)
	}
	ev.TokenIDs = prompt[from*testBlock : to*testBlock]
	return ev
}

func removeEv(medium string, hashes ...uint64) Event {
	return Event{Kind: BlockRemoved, BlockHashes: hashes, Medium: medium}
}

func apply(ix *Index, worker string, evs ...Event) {
	ix.Apply(Source{Worker: worker, Model: "m"}, &Batch{Events: evs})
}

var mkey = ChainKey{Model: "m"}

func TestLookupCases(t *testing.T) {
	t.Parallel()
	p := seqTokens(1, 8*testBlock+1) // 8 full blocks and one token
	tests := []struct {
		name   string
		setup  func(ix *Index)
		prompt []uint32
		want   map[string][2]int // worker → {gpu, offloaded}
	}{
		{
			name:   "cap leaves the last token to compute",
			setup:  func(ix *Index) { apply(ix, "a", storeEv(p, 0, 8, 100, "")) },
			prompt: p[:8*testBlock],
			want:   map[string][2]int{"a": {7 * testBlock, 0}},
		},
		{
			name:   "full hit with a trailing partial block",
			setup:  func(ix *Index) { apply(ix, "a", storeEv(p, 0, 8, 100, "GPU")) },
			prompt: p,
			want:   map[string][2]int{"a": {8 * testBlock, 0}},
		},
		{
			name: "workers differ in depth",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 8, 100, ""))
				apply(ix, "b", storeEv(p, 0, 3, 500, ""))
			},
			prompt: p,
			want:   map[string][2]int{"a": {128, 0}, "b": {48, 0}},
		},
		{
			name: "GPU prefix continued offloaded",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 4, 100, "GPU"), storeEv(p, 0, 8, 100, "CPU"))
			},
			prompt: p,
			want:   map[string][2]int{"a": {64, 64}},
		},
		{
			name: "GPU copies evicted, offloaded remain",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 4, 100, "GPU"), storeEv(p, 0, 8, 100, "cpu"),
					removeEv("GPU", 100, 101, 102, 103))
			},
			prompt: p,
			want:   map[string][2]int{"a": {0, 128}},
		},
		{
			name: "hole ends the prefix even if later blocks remain",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 8, 100, ""), removeEv("", 102))
			},
			prompt: p,
			want:   map[string][2]int{"a": {32, 0}},
		},
		{
			name: "other KV-cache group ignored",
			setup: func(ix *Index) {
				ev := storeEv(p, 0, 8, 100, "")
				ev.GroupIdx = 1
				apply(ix, "a", ev)
			},
			prompt: p,
			want:   map[string][2]int{},
		},
		{
			name: "sliding window kind ignored even in group 0",
			setup: func(ix *Index) {
				ev := storeEv(p, 0, 8, 100, "")
				ev.SpecKind = "sliding_window"
				apply(ix, "a", ev)
			},
			prompt: p,
			want:   map[string][2]int{},
		},
		{
			name: "unknown parent is unreachable, not guessed",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 2, 100, ""), storeEv(p, 3, 8, 100, ""))
			},
			prompt: p,
			want:   map[string][2]int{"a": {32, 0}},
		},
		{
			name: "ranks: the deepest wins",
			setup: func(ix *Index) {
				ix.Apply(Source{Worker: "a", Rank: 0, Model: "m"}, &Batch{Events: []Event{storeEv(p, 0, 2, 100, "")}})
				ix.Apply(Source{Worker: "a", Rank: 1, Model: "m"}, &Batch{Events: []Event{storeEv(p, 0, 5, 100, "")}})
			},
			prompt: p,
			want:   map[string][2]int{"a": {80, 0}},
		},
		{
			name: "removed worker",
			setup: func(ix *Index) {
				apply(ix, "a", storeEv(p, 0, 8, 100, ""))
				apply(ix, "b", storeEv(p, 0, 8, 100, ""))
				ix.RemoveWorker("a")
			},
			prompt: p,
			want:   map[string][2]int{"b": {128, 0}},
		},
		{
			name: "more than 64 workers",
			setup: func(ix *Index) {
				for w := range 70 {
					apply(ix, fmt.Sprintf("w%02d", w), storeEv(p, 0, 1+w%8, uint64(w)<<32, ""))
				}
			},
			prompt: p,
			want: func() map[string][2]int {
				m := make(map[string][2]int)
				for w := range 70 {
					m[fmt.Sprintf("w%02d", w)] = [2]int{(1 + w%8) * testBlock, 0}
				}
				return m
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := New()
			tc.setup(ix)
			got := make(map[string][2]int)
			for _, m := range ix.Lookup(mkey, tc.prompt, testBlock) {
				got[m.Worker] = [2]int{m.GPUTokens, m.OffloadedTokens}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			// AppendLookup keeps what dst holds and appends the same matches.
			sentinel := Match{Worker: "sentinel", GPUTokens: -1}
			app := ix.AppendLookup([]Match{sentinel}, mkey, tc.prompt, testBlock)
			if len(app) == 0 || app[0] != sentinel {
				t.Fatalf("AppendLookup dropped dst's contents: %v", app)
			}
			if want := ix.Lookup(mkey, tc.prompt, testBlock); fmt.Sprint(app[1:]) != fmt.Sprint(want) && !(len(want) == 0 && len(app) == 1) {
				t.Errorf("AppendLookup appended %v, Lookup returned %v", app[1:], want)
			}
		})
	}
}

func TestSpeculate(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	ix := New(WithClock(clock.now), WithSpeculativeTTL(2*time.Second))
	p := seqTokens(1, 4*testBlock+1)
	q := seqTokens(5000, 4*testBlock+1)
	apply(ix, "a", storeEv(q, 0, 1, 900, "")) // worker known, different prompt
	if got := ix.Lookup(mkey, p, testBlock); len(got) != 0 {
		t.Fatalf("before speculation: %v", got)
	}
	ix.Speculate("a", mkey, p, testBlock)
	ix.Speculate("nobody", mkey, p, testBlock) // unknown worker: ignored
	if gpu, _ := cachedOn(ix.Lookup(mkey, p, testBlock), "a"); gpu != 64 {
		t.Fatalf("speculated: %d cached, want 64", gpu)
	}
	if _, ok := cachedOnOK(ix.Lookup(mkey, p, testBlock), "nobody"); ok {
		t.Fatal("unknown worker matched")
	}
	// The real event arrives for the first two blocks; the rest stays speculative.
	clock.advance(time.Second)
	apply(ix, "a", storeEv(p, 0, 2, 100, ""))
	clock.advance(1500 * time.Millisecond) // past the TTL
	if gpu, _ := cachedOn(ix.Lookup(mkey, p, testBlock), "a"); gpu != 32 {
		t.Fatalf("after TTL: %d cached, want the 32 really stored", gpu)
	}
	apply(ix, "a") // a writer sweeps expired speculation
	if st := statusOf(ix, Source{Worker: "a"}); st.Blocks != 3 {
		t.Errorf("blocks indexed %d, want 3", st.Blocks)
	}
	if n := testutil.ToFloat64(ix.m.entries); n != 3 {
		t.Errorf("entries gauge %v, want 3", n)
	}
}

func cachedOnOK(ms []Match, worker string) (Match, bool) {
	for _, m := range ms {
		if m.Worker == worker {
			return m, true
		}
	}
	return Match{}, false
}

func TestEntryBudget(t *testing.T) {
	t.Parallel()
	ix := New(WithEntryBudget(8))
	a := seqTokens(1, 4*testBlock+1)
	b := seqTokens(1000, 4*testBlock+1)
	c := seqTokens(2000, 4*testBlock+1)
	apply(ix, "w", storeEv(a, 0, 4, 100, ""))
	apply(ix, "w", storeEv(b, 0, 4, 200, ""))
	ix.Lookup(mkey, a, testBlock) // a is now more recent than b
	apply(ix, "w", storeEv(c, 0, 4, 300, ""))
	apply(ix, "w", storeEv(c, 0, 1, 300, "CPU")) // a second medium is no new entry
	gpu := func(p []uint32) int { g, _ := cachedOn(ix.Lookup(mkey, p, testBlock), "w"); return g }
	if gpu(a) != 64 || gpu(c) != 64 || gpu(b) != 0 {
		t.Errorf("a=%d b=%d c=%d, want b evicted", gpu(a), gpu(b), gpu(c))
	}
	// One more block: the least recent chain loses its tail first.
	d := seqTokens(3000, testBlock+1)
	apply(ix, "w", storeEv(d, 0, 1, 400, ""))
	if gpu(d) != 16 || gpu(a)+gpu(c) != 64+48 {
		t.Errorf("a=%d c=%d d=%d, want one tail block dropped", gpu(a), gpu(c), gpu(d))
	}
	if got := statusOf(ix, Source{Worker: "w"}).Blocks; got != 8 {
		t.Errorf("blocks indexed %d, want 8", got)
	}
	// Evicted blocks' engine hashes are forgotten: removing them is unknown.
	before := testutil.ToFloat64(ix.m.skipUnknownHash)
	apply(ix, "w", removeEv("", 200))
	if testutil.ToFloat64(ix.m.skipUnknownHash) != before+1 {
		t.Error("removal of an evicted block not counted as unknown")
	}
}

func TestStaleAndCaughtUp(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	ix := New(WithClock(clock.now), WithStaleAfter(time.Minute))
	src := Source{Worker: "a", Model: "m"}
	ix.Apply(src, &Batch{})
	ix.update(Source{Worker: "a", Rank: 1, Model: "m"}, func(st *SlotStatus) { st.CaughtUp = true })
	if ix.Stale("a") || ix.CaughtUp("a") || ix.CaughtUp("nobody") || ix.Stale("nobody") {
		t.Fatal("fresh worker stale, or caught up before rank 0 is")
	}
	ix.update(src, func(st *SlotStatus) { st.CaughtUp = true })
	if !ix.CaughtUp("a") {
		t.Fatal("not caught up")
	}
	clock.advance(2 * time.Minute)
	if !ix.Stale("a") {
		t.Fatal("silent worker not stale")
	}
	ix.Apply(src, &Batch{})
	if ix.Stale("a") {
		t.Fatal("rank 0 spoke; worker still stale")
	}
}

func TestInvalidEventsCounted(t *testing.T) {
	t.Parallel()
	p := seqTokens(1, 4*testBlock)
	tests := []struct {
		name    string
		ev      Event
		counter func(m *metrics) prometheus.Counter
	}{
		{"token count mismatch", Event{Kind: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: p[:20], BlockSize: 16}, func(m *metrics) prometheus.Counter { return m.skipInvalid }},
		{"zero block size", Event{Kind: BlockStored, BlockHashes: []uint64{1}, TokenIDs: p[:16]}, func(m *metrics) prometheus.Counter { return m.skipInvalid }},
		{"extra keys misaligned", Event{Kind: BlockStored, BlockHashes: []uint64{1}, TokenIDs: p[:16], BlockSize: 16, ExtraKeys: [][]byte{nil, nil}}, func(m *metrics) prometheus.Counter { return m.skipInvalid }},
		{"unknown parent", Event{Kind: BlockStored, BlockHashes: []uint64{1}, HasParent: true, ParentHash: 9, TokenIDs: p[:16], BlockSize: 16}, func(m *metrics) prometheus.Counter { return m.skipUnreachable }},
		{"unknown removal", Event{Kind: BlockRemoved, BlockHashes: []uint64{77}}, func(m *metrics) prometheus.Counter { return m.skipUnknownHash }},
		{"other group removal", Event{Kind: BlockRemoved, BlockHashes: []uint64{77}, GroupIdx: 2}, func(m *metrics) prometheus.Counter { return m.skipOtherGroup }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := New()
			apply(ix, "a", tc.ev)
			if got := testutil.ToFloat64(tc.counter(ix.m)); got != 1 {
				t.Errorf("counter = %v, want 1", got)
			}
			if st := statusOf(ix, Source{Worker: "a"}); st.Blocks != 0 {
				t.Errorf("%d blocks indexed", st.Blocks)
			}
		})
	}
}

// TestIndexConcurrent is the index's contract under -race: one writer per
// stream (as the subscribers run) and concurrent lookups and speculation;
// the result equals applying each stream's events alone.
func TestIndexConcurrent(t *testing.T) {
	t.Parallel()
	const workers, rounds = 6, 300
	prompts := make([][]uint32, 8)
	for i := range prompts {
		prompts[i] = seqTokens(1+i%3*10000+i*64, 6*testBlock+1) // shared prefixes for some
	}
	script := func(w int) [][]Event {
		rng := rand.New(rand.NewPCG(uint64(w), 9))
		var out [][]Event
		for range rounds {
			p := rng.IntN(len(prompts))
			base := uint64(p) << 20
			n := 1 + rng.IntN(6)
			evs := []Event{storeEv(prompts[p], 0, n, base, "")}
			if rng.IntN(3) == 0 {
				q := rng.IntN(len(prompts))
				evs = append(evs, removeEv("", uint64(q)<<20+uint64(rng.IntN(6))))
			}
			out = append(out, evs)
		}
		return out
	}
	run := func(concurrent bool) *Index {
		ix := New()
		var wg sync.WaitGroup
		for w := range workers {
			name := fmt.Sprintf("w%d", w)
			evs := script(w)
			body := func() {
				for _, e := range evs {
					apply(ix, name, e...)
				}
			}
			if concurrent {
				wg.Go(body)
			} else {
				body()
			}
		}
		if concurrent {
			for r := range 3 {
				wg.Go(func() {
					for i := range rounds {
						ix.Lookup(mkey, prompts[(i+r)%len(prompts)], testBlock)
						_ = ix.DebugWorkers()
					}
				})
			}
		}
		wg.Wait()
		return ix
	}
	want, got := run(false), run(true)
	for i, p := range prompts {
		g, w := got.Lookup(mkey, p, testBlock), want.Lookup(mkey, p, testBlock)
		sortMatches(g)
		sortMatches(w)
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("prompt %d: concurrent %v, sequential %v", i, g, w)
		}
	}
}

func sortMatches(ms []Match) {
	slices.SortFunc(ms, func(a, b Match) int { return strings.Compare(a.Worker, b.Worker) })
}

func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	ix := New(WithRegisterer(reg))
	applyCapture(t, ix, Source{Worker: "w0", Model: "qwen3"}, 99)
	applyCapture(t, ix, Source{Worker: "w1", Model: "qwen3"}, 0)
	applyCapture(t, ix, Source{Worker: "w2", Model: "qwen3"}, 0)
	ix.Reset(Source{Worker: "w2", Model: "qwen3"}, "seq_backwards")
	f, err := os.Open("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f,
		"warmpath_kvindex_events_total", "warmpath_kvindex_skipped_total",
		"warmpath_kvindex_resets_total", "warmpath_kvindex_entries", "warmpath_kvindex_blocks"); err != nil {
		t.Error(err)
	}
}

// TestLookupManyRuns stores a prompt one block per event, with another
// chain's block stored between, so that no two of its blocks have
// consecutive nodes: the walk finds 400 runs, more than its stack array
// holds, and still matches every block and logs every node it touched.
func TestLookupManyRuns(t *testing.T) {
	t.Parallel()
	const blocks = 400
	ix := New(WithEntryBudget(1 << 20))
	prompt := seqTokens(1, blocks*testBlock+1)
	other := seqTokens(1_000_000, blocks*testBlock)
	for i := range blocks {
		apply(ix, "w", storeEv(prompt, i, i+1, 0, ""))
		apply(ix, "w", storeEv(other, i, i+1, 1<<32, ""))
	}
	if gpu, _ := cachedOn(ix.Lookup(mkey, prompt, testBlock), "w"); gpu != blocks*testBlock {
		t.Fatalf("cached %d tokens, want %d", gpu, blocks*testBlock)
	}
	touched := len(touchedNodes(ix))
	if runs := (len(ix.touchLog) - 2) / 2; runs <= 256 || touched != blocks {
		t.Fatalf("touch log holds %d runs of %d nodes, want more than 256 runs of %d", runs, touched, blocks)
	}
	apply(ix, "w") // drains the log
	if gpu, _ := cachedOn(ix.Lookup(mkey, prompt, testBlock), "w"); gpu != blocks*testBlock {
		t.Fatalf("after the drain: cached %d tokens, want %d", gpu, blocks*testBlock)
	}
}
