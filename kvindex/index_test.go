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

	"github.com/warmpath/warmpath/internal/clocktest"
)

// storeEv builds a BlockStored of prompt's blocks [from, to) with engine
// hashes base+i, as a worker whose engine hashes are its own would send.
func storeEv(prompt []uint32, from, to int, base uint64, medium string) Event {
	ev := Event{Kind: BlockStored, BlockSize: testBlock, Offloaded: offloaded(medium)}
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
	return Event{Kind: BlockRemoved, BlockHashes: hashes, Offloaded: offloaded(medium)}
}

func apply(ix *Index, worker string, evs ...Event) {
	ix.Apply(Source{Worker: worker, Model: "m"}, evs)
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
				ix.Apply(Source{Worker: "a", Rank: 0, Model: "m"}, []Event{storeEv(p, 0, 2, 100, "")})
				ix.Apply(Source{Worker: "a", Rank: 1, Model: "m"}, []Event{storeEv(p, 0, 5, 100, "")})
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
			ix := newIndex(t)
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

// TestSpeculationSharedWithAPeer: the keys one replica's speculation
// entered are only those past what the worker holds, and another replica's
// index entering them sees the same cached prefix.
func TestSpeculationSharedWithAPeer(t *testing.T) {
	t.Parallel()
	here, there := newIndex(t), newIndex(t)
	p := seqTokens(1, 6*testBlock+1)
	for _, ix := range []*Index{here, there} {
		apply(ix, "a", storeEv(p, 0, 2, 100, "")) // both see the worker hold the first 2 blocks
	}
	keys := here.AppendSpeculate(nil, "a", mkey, p, testBlock)
	if len(keys) != 4 {
		t.Fatalf("entered %d keys, want the 4 blocks past the 2 held", len(keys))
	}
	if again := here.AppendSpeculate(nil, "a", mkey, p, testBlock); len(again) != 0 {
		t.Fatalf("a second speculation within half a TTL entered %d keys, want none", len(again))
	}
	if gpu, _ := cachedOn(there.Lookup(mkey, p, testBlock), "a"); gpu != 32 {
		t.Fatalf("the peer before: %d cached, want 32", gpu)
	}
	there.SpeculateKeys("a", keys)
	there.SpeculateKeys("nobody", keys) // unknown worker: ignored
	want, _ := cachedOn(here.Lookup(mkey, p, testBlock), "a")
	if gpu, _ := cachedOn(there.Lookup(mkey, p, testBlock), "a"); gpu != want || want != 96 {
		t.Fatalf("the peer after: %d cached, here %d; want 96 on both", gpu, want)
	}
}

func TestSpeculate(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Unix(1000, 0))
	ix := newIndex(t, clockAt(clock.Now), specTTL(2*time.Second))
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
	clock.Advance(time.Second)
	apply(ix, "a", storeEv(p, 0, 2, 100, ""))
	clock.Advance(1500 * time.Millisecond) // past the TTL
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
	ix := newIndex(t, budget(8))
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

// TestEntryBudgetFairShare floods the index from one worker after another
// stored a modest cache: the flood evicts its own blocks, and the other
// worker keeps what is within its fair share of the budget (half, with two
// streams), its least recent blocks going first past that.
func TestEntryBudgetFairShare(t *testing.T) {
	t.Parallel()
	const entryBudget = 1000
	tests := []struct {
		name   string
		chains int // the modest worker's, of 10 blocks each
		keep   int // blocks it must keep
	}{
		{name: "within its share", chains: 30, keep: 300},
		{name: "over its share", chains: 70, keep: entryBudget / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t, budget(entryBudget))
			prompt := func(i int) []uint32 { return seqTokens(100000*(i+1), 10*testBlock+1) }
			for i := range tc.chains {
				apply(ix, "real", storeEv(prompt(i), 0, 10, uint64(1000*i), ""))
			}
			for i := range 2000 { // 20,000 blocks, twenty times the budget
				apply(ix, "flood", storeEv(seqTokens(1<<28+100*i, 10*testBlock), 0, 10, uint64(1000*i), ""))
			}
			real, flood := statusOf(ix, Source{Worker: "real"}).Blocks, statusOf(ix, Source{Worker: "flood"}).Blocks
			if real != tc.keep || real+flood > entryBudget || flood < entryBudget/2 {
				t.Errorf("real keeps %d blocks, flood %d; want %d and the rest within %d", real, flood, tc.keep, entryBudget)
			}
			// The blocks it keeps are its most recent whole chains, found
			// by a lookup.
			var cached int
			for i := range tc.chains {
				g, _ := cachedOn(ix.Lookup(mkey, prompt(i), testBlock), "real")
				cached += g
			}
			if cached != tc.keep*testBlock {
				t.Errorf("lookups find %d tokens of real's, want %d", cached, tc.keep*testBlock)
			}
		})
	}
}

func TestStale(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(time.Unix(1000, 0))
	ix := newIndex(t, clockAt(clock.Now), staleAfter(time.Minute))
	src := Source{Worker: "a", Model: "m"}
	ix.Apply(src, nil)
	ix.AddStream(Source{Worker: "a", Rank: 1, Model: "m"}) // subscribed, silent
	if ix.Stale("a") || ix.Stale("nobody") {
		t.Fatal("fresh worker or unknown worker stale")
	}
	if st := statusOf(ix, Source{Worker: "a", Rank: 1}); st.Model != "m" || !st.LastEventAt.IsZero() {
		t.Fatalf("added stream %+v, want model m and no event yet", st)
	}
	clock.Advance(2 * time.Minute)
	if !ix.Stale("a") {
		t.Fatal("silent worker not stale")
	}
	ix.Apply(src, nil)
	if ix.Stale("a") {
		t.Fatal("rank 0 spoke; worker still stale")
	}
	if st := statusOf(ix, Source{Worker: "a", Rank: 1}); !st.Stale {
		t.Error("rank 1, added and silent for two minutes, not stale")
	}
}

// TestAddStreamModelChange checks that a stream added again under another
// model loses its entries, which that model's chains cannot reach.
func TestAddStreamModelChange(t *testing.T) {
	t.Parallel()
	ix := newIndex(t)
	p := seqTokens(1, 4*testBlock+1)
	apply(ix, "a", storeEv(p, 0, 4, 100, ""))
	ix.AddStream(Source{Worker: "a", Model: "m"})
	if gpu, _ := cachedOn(ix.Lookup(mkey, p, testBlock), "a"); gpu != 64 {
		t.Fatalf("same model added again: %d cached, want 64", gpu)
	}
	ix.AddStream(Source{Worker: "a", Model: "other"})
	if st := statusOf(ix, Source{Worker: "a"}); st.Blocks != 0 || st.Model != "other" {
		t.Errorf("after a model change: %+v, want no blocks under model other", st)
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
		{"extra digests misaligned", Event{Kind: BlockStored, BlockHashes: []uint64{1}, TokenIDs: p[:16], BlockSize: 16, Extra: []uint64{0, 0}}, func(m *metrics) prometheus.Counter { return m.skipInvalid }},
		{"unknown kind", Event{Kind: 9, BlockHashes: []uint64{1}}, func(m *metrics) prometheus.Counter { return m.skipInvalid }},
		{"unknown parent", Event{Kind: BlockStored, BlockHashes: []uint64{1}, HasParent: true, ParentHash: 9, TokenIDs: p[:16], BlockSize: 16}, func(m *metrics) prometheus.Counter { return m.skipUnreachable }},
		{"unknown removal", Event{Kind: BlockRemoved, BlockHashes: []uint64{77}}, func(m *metrics) prometheus.Counter { return m.skipUnknownHash }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t)
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
		ix := newIndex(t)
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
						_ = ix.Streams()
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

// TestMetricsExposition applies a known sequence of events to four
// streams and checks the exposition: 7 stores (one unreachable, one
// invalid), 2 removals (one of an unknown block), a clear and a reset
// leave w0's 10 blocks and the 4 of them w3 shares, 14 entries.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	ix := newIndex(t, registerer(reg))
	p := seqTokens(1, 12*testBlock)
	apply(ix, "w0", storeEv(p, 0, 8, 100, ""), storeEv(p, 8, 12, 100, ""), removeEv("", 110, 111), removeEv("", 999),
		Event{Kind: BlockStored, BlockHashes: []uint64{1}, HasParent: true, ParentHash: 5555, TokenIDs: p[:testBlock], BlockSize: testBlock},
		Event{Kind: BlockStored, BlockHashes: []uint64{2}, TokenIDs: p[:testBlock]})
	apply(ix, "w1", storeEv(p, 0, 8, 200, ""), Event{Kind: AllBlocksCleared})
	apply(ix, "w2", storeEv(p, 0, 3, 300, "CPU"))
	ix.Reset(Source{Worker: "w2", Model: "m"}, "seq_backwards")
	apply(ix, "w3", storeEv(p, 0, 4, 400, ""))
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
	ix := newIndex(t, budget(1<<20))
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

// TestChainRoots checks what roots a chain and what is folded into its
// keys: the adapter and the salt root a chain as a request's ChainKey
// names them, a continued chain keeps its root's, and an extra-key digest
// ends what a plain request can match from its block on, while workers
// that stored the same item share that block and those that stored
// different items do not.
func TestChainRoots(t *testing.T) {
	t.Parallel()
	p := seqTokens(300, 4*testBlock+1)
	root := func(lora, salt string, extra []uint64) Event {
		ev := storeEv(p, 0, 4, 100, "")
		ev.LoRA, ev.Salt, ev.Extra = lora, salt, extra
		return ev
	}
	continued := storeEv(p, 2, 4, 100, "")
	continued.LoRA, continued.Salt = "sql", "tenant-a"
	tenantA := ChainKey{Model: "m", LoRA: "sql", Salt: "tenant-a"}
	tests := []struct {
		name   string
		events map[string][]Event // by worker
		key    ChainKey
		want   map[string]int // GPU tokens cached, by worker
		blocks int            // distinct blocks indexed
	}{
		{name: "adapter and salt root the chain", events: map[string][]Event{"a": {root("sql", "tenant-a", nil)}},
			key: tenantA, want: map[string]int{"a": 64}, blocks: 4},
		{name: "no salt", events: map[string][]Event{"a": {root("sql", "tenant-a", nil)}},
			key: ChainKey{Model: "m", LoRA: "sql"}, want: map[string]int{}, blocks: 4},
		{name: "other salt", events: map[string][]Event{"a": {root("sql", "tenant-a", nil)}},
			key: ChainKey{Model: "m", LoRA: "sql", Salt: "tenant-b"}, want: map[string]int{}, blocks: 4},
		{name: "base model", events: map[string][]Event{"a": {root("sql", "tenant-a", nil)}},
			key: ChainKey{Model: "m", Salt: "tenant-a"}, want: map[string]int{}, blocks: 4},
		{name: "a continued chain keeps its root's", events: map[string][]Event{"a": {storeEv(p, 0, 2, 100, ""), continued}},
			key: mkey, want: map[string]int{"a": 64}, blocks: 4},
		{name: "an extra digest ends a plain request's match", events: map[string][]Event{"a": {root("", "", []uint64{0, 0, 7, 0})}},
			key: mkey, want: map[string]int{"a": 32}, blocks: 4},
		{name: "the same item on two workers shares keys",
			events: map[string][]Event{"a": {root("", "", []uint64{0, 0, 7, 0})}, "b": {root("", "", []uint64{0, 0, 7, 0})}},
			key:    mkey, want: map[string]int{"a": 32, "b": 32}, blocks: 4},
		{name: "different items differ",
			events: map[string][]Event{"a": {root("", "", []uint64{0, 0, 7, 0})}, "b": {root("", "", []uint64{0, 0, 8, 0})}},
			key:    mkey, want: map[string]int{"a": 32, "b": 32}, blocks: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t)
			for w, evs := range tc.events {
				apply(ix, w, evs...)
			}
			got := map[string]int{}
			for _, m := range ix.Lookup(tc.key, p, testBlock) {
				got[m.Worker] = m.GPUTokens
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("cached %v, want %v", got, tc.want)
			}
			if n := ix.keys.len(); n != tc.blocks {
				t.Errorf("%d distinct blocks, want %d", n, tc.blocks)
			}
		})
	}
}

// TestLookupLongChain looks up chains of up to 16,384 blocks (256K tokens
// of 16-token blocks), whole and cut: the walk hashes chunks of doubling
// size, which once overflowed and panicked past about 3,900 blocks.
func TestLookupLongChain(t *testing.T) {
	t.Parallel()
	ix := newIndex(t, budget(1<<20))
	for _, blocks := range []int{3000, 3900, 4000, 8192, 16384} {
		prompt := seqTokens(blocks*100_000, blocks*16+1)
		ev := Event{Kind: BlockStored, BlockSize: 16}
		for i := range blocks {
			ev.BlockHashes = append(ev.BlockHashes, uint64(blocks)<<32+uint64(i))
		}
		ev.TokenIDs = prompt[:blocks*16]
		apply(ix, "w", ev)
		got, _ := cachedOn(ix.Lookup(mkey, prompt, 16), "w")
		if got != blocks*16 {
			t.Errorf("%d blocks stored: lookup found %d tokens, want %d", blocks, got, blocks*16)
		}
		if got, _ := cachedOn(ix.Lookup(mkey, prompt[:blocks*8+1], 16), "w"); got != blocks*8 {
			t.Errorf("%d blocks stored, half looked up: %d tokens, want %d", blocks, got, blocks*8)
		}
	}
}

// TestSpeculateLongPrompt speculates prompts of several chunks (specChunk
// blocks each, entered under separate holds of the lock) on a worker that
// really holds a prefix of them: every block past the prefix is entered
// once, and the chain reads whole.
func TestSpeculateLongPrompt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ blocks, held int }{
		{specChunk * 3, 100},             // stops inside the first chunk from the root
		{specChunk*2 + 1, specChunk + 1}, // stops exactly at a chunk's tail
		{specChunk * 2, 0},               // nothing held: every chunk
	} {
		ix := newIndex(t, budget(1<<20))
		p := seqTokens(tc.blocks*1000, tc.blocks*testBlock+1)
		apply(ix, "a", storeEv(p, 0, max(1, tc.held), 1<<20, ""))
		if tc.held == 0 {
			apply(ix, "a", removeEv("", 1<<20))
		}
		keys := ix.AppendSpeculate(nil, "a", mkey, p, testBlock)
		if want := tc.blocks - tc.held; len(keys) != want {
			t.Errorf("%d blocks, %d held: entered %d keys, want %d", tc.blocks, tc.held, len(keys), want)
		}
		if all := BlockKeys(mkey, p, testBlock); !slices.Equal(keys, all[tc.held:]) {
			t.Errorf("%d blocks, %d held: the entered keys are not the chain past the held prefix", tc.blocks, tc.held)
		}
		if gpu, _ := cachedOn(ix.Lookup(mkey, p, testBlock), "a"); gpu != tc.blocks*testBlock {
			t.Errorf("%d blocks, %d held: lookup found %d tokens, want %d", tc.blocks, tc.held, gpu, tc.blocks*testBlock)
		}
		if again := ix.AppendSpeculate(nil, "a", mkey, p, testBlock); len(again) != 0 {
			t.Errorf("%d blocks: a second speculation entered %d keys, want none", tc.blocks, len(again))
		}
	}
}
