package kvindex

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
)

// TestNodeForms drives an index through random stores, removals in both
// media, speculation, lookups, expiry, clears, resets, removed workers and
// evictions over more than 64 streams, so that nodes move between the
// inline, speculative and shared forms, and checks the index's invariants
// (the LRU list's among them) after every step.
func TestNodeForms(t *testing.T) {
	t.Parallel()
	cases := []indexCase{
		{"few streams", 3, 1 << 20},
		{"streams past 64", 80, 1 << 20},
		{"tight budget", 80, 40},
	}
	runIndexCases(t, cases, func(t *testing.T, tc indexCase, ix *Index, clock *clocktest.Clock) {
		rng := rand.New(rand.NewPCG(7, uint64(tc.workers)))
		prompts := make([][]uint32, 4)
		for i := range prompts {
			prompts[i] = seqTokens(1+i*1000, 8*testBlock+1)
		}
		media := []string{"", "GPU", "CPU"}
		for step := range 3000 {
			w := rng.IntN(tc.workers)
			name := fmt.Sprintf("w%d", w)
			p := rng.IntN(len(prompts))
			base := uint64(w)<<32 | uint64(p)<<16
			switch op := rng.IntN(12); {
			case op < 4:
				apply(ix, name, storeEv(prompts[p], 0, 1+rng.IntN(8), base, media[rng.IntN(3)]))
			case op < 7:
				apply(ix, name, removeEv(media[rng.IntN(3)], base+uint64(rng.IntN(8))))
			case op < 8:
				ix.Speculate(name, mkey, prompts[p], testBlock)
			case op < 9:
				clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
				checkLookup(t, ix, prompts[p], fmt.Sprintf("step %d", step))
			case op < 10:
				ix.Lookup(mkey, prompts[p], testBlock) // touches for the next writer
			case op < 11:
				switch rng.IntN(8) {
				case 0:
					ix.Reset(Source{Worker: name, Model: "m"}, "test")
				case 1:
					ix.RemoveWorker(name)
				}
			default:
				if rng.IntN(6) == 0 {
					apply(ix, name, Event{Kind: AllBlocksCleared})
				}
			}
			if err := checkIndex(ix); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	})
}

// indexCase is a scenario of the randomized index tests: how many
// streams, and the entry budget.
type indexCase struct {
	name    string
	workers int
	budget  int
}

// runIndexCases runs fn for each case in a parallel subtest, on a fresh
// index with a fake clock, the case's entry budget and a one-second
// speculative TTL.
func runIndexCases(t *testing.T, cases []indexCase, fn func(t *testing.T, tc indexCase, ix *Index, clock *clocktest.Clock)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.New(time.Unix(1000, 0))
			fn(t, tc, newIndex(t, clockAt(clock.Now), budget(tc.budget), specTTL(time.Second)), clock)
		})
	}
}

// checkLookup fails t, naming where, when Lookup and lookupSlow disagree
// on prompt.
func checkLookup(t *testing.T, ix *Index, prompt []uint32, where string) {
	t.Helper()
	got, want := ix.Lookup(mkey, prompt, testBlock), lookupSlow(ix, prompt)
	sortMatches(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: Lookup %v, reference %v", where, got, want)
	}
}

// checkIndex verifies the index's internal invariants.
func checkIndex(ix *Index) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	free := make(map[uint32]bool)
	for _, ni := range ix.free {
		if free[ni] {
			return fmt.Errorf("node %d is on the free list twice", ni)
		}
		free[ni] = true
	}
	entries := 0
	specs := make(map[uint16]int) // per slot, its speculations on nodes
	for ni := uint32(1); ni < ix.nnodes; ni++ {
		n := ix.node(ni)
		if free[ni] {
			if *n != (node{}) {
				return fmt.Errorf("free node %d not zero", ni)
			}
			continue
		}
		if got := ix.nodeOf(n.key); got != ni {
			return fmt.Errorf("node %d: key resolves to %d", ni, got)
		}
		switch {
		case n.b&modeInline != 0:
			e := inlineEntry(n)
			if e.gpu == 0 && e.off == 0 {
				return fmt.Errorf("node %d: inline entry without references", ni)
			}
			entries++
		case n.b&modeShared != 0:
			x := ix.ext(n)
			var gpu, off, spec [MaxStreams / 64]uint64
			for _, e := range x.entries {
				if e.gpu > 0 {
					gpu[e.slot/64] |= 1 << (e.slot % 64)
				}
				if e.off > 0 {
					off[e.slot/64] |= 1 << (e.slot % 64)
				}
			}
			nspec := 0
			for w := range len(spec) {
				g, o, s := ix.words(n, w)
				if g != gpu[w] || o != off[w] {
					return fmt.Errorf("node %d word %d: bits %x/%x, entries say %x/%x", ni, w, g, o, gpu[w], off[w])
				}
				spec[w] = s
				nspec += bits.OnesCount64(s)
				for ; s != 0; s &= s - 1 {
					id := uint16(w*64 + bits.TrailingZeros64(s))
					if _, ok := ix.slots[id].specAt[ni]; !ok {
						return fmt.Errorf("node %d: slot %d speculates on it in the shared form without an expiry in specAt", ni, id)
					}
					specs[id]++
				}
			}
			rare := x.off|x.spec != 0
			for k := range 3 {
				rare = rare || slices.ContainsFunc(x.hiWords(k), func(v uint64) bool { return v != 0 })
			}
			if rare != (n.b&sharedRare != 0) {
				return fmt.Errorf("node %d: rare flag %v, bits say %v", ni, !rare, rare)
			}
			if len(x.entries) < 2 && nspec == 0 {
				return fmt.Errorf("node %d: shared with %d entries and no speculation", ni, len(x.entries))
			}
			entries += len(x.entries) + nspec
		case n.b&modeSpec != 0:
			id := uint16(n.b)
			if int(id) >= len(ix.slots) || ix.slots[id] == nil {
				return fmt.Errorf("node %d: speculative form names slot %d, which is free", ni, id)
			}
			if _, ok := ix.slots[id].specAt[ni]; ok {
				return fmt.Errorf("node %d: speculative form for slot %d, which keeps an expiry for it in specAt", ni, id)
			}
			specs[id]++
			entries++
		default:
			return fmt.Errorf("node %d: neither free nor held", ni)
		}
	}
	// The LRU list links every live node once, both ways.
	live := int(ix.nnodes) - 1 - len(free)
	seen, prev := 0, uint32(0)
	for ni := ix.head; ni != 0; ni = ix.node(ni).next {
		if free[ni] {
			return fmt.Errorf("free node %d is in the LRU list", ni)
		}
		if ix.node(ni).prev != prev {
			return fmt.Errorf("LRU node %d links back to %d, not %d", ni, ix.node(ni).prev, prev)
		}
		if seen++; seen > live {
			return fmt.Errorf("the LRU list is longer than the %d live nodes", live)
		}
		prev = ni
	}
	if seen != live || ix.tail != prev {
		return fmt.Errorf("the LRU list holds %d of %d live nodes, ends at %d, tail %d", seen, live, prev, ix.tail)
	}
	if entries != ix.entries {
		return fmt.Errorf("%d entries on nodes, index counts %d", entries, ix.entries)
	}
	for _, s := range ix.slots {
		if s == nil {
			continue
		}
		if s.nspec != specs[s.id] {
			return fmt.Errorf("slot %d: counts %d speculations, the nodes hold %d", s.id, s.nspec, specs[s.id])
		}
		for ni := range s.specAt {
			if n := ix.node(ni); n.b&modeShared == 0 || !ix.has(n, bSpec, s.id) {
				return fmt.Errorf("slot %d: specAt names node %d, which is not shared with its speculation", s.id, ni)
			}
		}
		n := 0
		var err error
		s.blocks.each(func(ni uint32) {
			n++
			e, ok := ix.entryOf(ix.node(ni), s.id)
			if !ok {
				err = fmt.Errorf("slot %d: block table names node %d without its entry", s.id, ni)
			} else if got := ix.blockOf(s, e.hash); got != ni {
				err = fmt.Errorf("slot %d: hash %x resolves to %d, want %d", s.id, e.hash, got, ni)
			}
		})
		if err != nil {
			return err
		}
		if n != s.status.Blocks {
			return fmt.Errorf("slot %d: %d blocks in its table, status says %d", s.id, n, s.status.Blocks)
		}
	}
	return nil
}

// lookupSlow is a reference for Lookup over rank-0 streams: per stream,
// the leading blocks it holds in any medium and on GPU (speculation
// counting as GPU while live), read through Index.words one block at a
// time.
func lookupSlow(ix *Index, prompt []uint32) []Match {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	limit := (len(prompt) - 1) / testBlock
	keys := BlockKeys(mkey, prompt, testBlock)[:limit]
	now := ix.now().UnixNano()
	var out []Match
	for _, s := range ix.slots {
		if s == nil {
			continue
		}
		w, bit := int(s.id)/64, uint64(1)<<(s.id%64)
		anyDepth, gpuDepth := 0, 0
		anyOn, gpuOn := true, true
		for _, k := range keys {
			ni := ix.nodeOf(k)
			if ni == 0 {
				break
			}
			n := ix.node(ni)
			g, o, sp := ix.words(n, w)
			if ix.specLive(n, now) {
				g |= sp
			}
			gpuOn = gpuOn && g&bit != 0
			anyOn = anyOn && (g|o)&bit != 0
			if !anyOn {
				break
			}
			anyDepth++
			if gpuOn {
				gpuDepth++
			}
		}
		if anyDepth > 0 {
			out = append(out, Match{Worker: s.name.worker, GPUTokens: gpuDepth * testBlock,
				OffloadedTokens: (anyDepth - gpuDepth) * testBlock})
		}
	}
	sortMatches(out)
	return out
}

// TestLookupLongChains checks Lookup against lookupSlow on prompts long
// enough to cross the walk's chunks and to leave both of its guesses at a
// block's node (the node below the previous block's, the next one in the
// LRU list) wrong at times: prompts share prefixes of varying length,
// workers store them in pieces, in both media, remove blocks, speculate,
// and run into the entry budget.
func TestLookupLongChains(t *testing.T) {
	t.Parallel()
	cases := []indexCase{
		{"few streams", 3, 1 << 20},
		{"streams past 64", 70, 1 << 20},
		{"tight budget", 8, 700},
	}
	runIndexCases(t, cases, func(t *testing.T, tc indexCase, ix *Index, clock *clocktest.Clock) {
		rng := rand.New(rand.NewPCG(11, uint64(tc.workers)))
		const blocks = 300
		shared := seqTokens(1, blocks*testBlock)
		prompts := make([][]uint32, 6)
		hashes := make([][]uint64, len(prompts))
		for p := range prompts {
			cut := rng.IntN(blocks)
			prompt := append([]uint32(nil), shared[:cut*testBlock]...)
			prompt = append(prompt, seqTokens(1_000_000+p*10_000, (blocks-cut)*testBlock)...)
			prompts[p] = append(prompt, 7) // one more token, so the cap allows every block
			hashes[p] = contentHashes(prompts[p])
		}
		media := []string{"", "GPU", "CPU"}
		for step := range 600 {
			name := fmt.Sprintf("w%d", rng.IntN(tc.workers))
			p := rng.IntN(len(prompts))
			switch op := rng.IntN(10); {
			case op < 4:
				to := 1 + rng.IntN(blocks)
				from := 0
				if rng.IntN(3) == 0 {
					from = rng.IntN(to) // an unknown parent is skipped
				}
				apply(ix, name, storeChain(prompts[p], hashes[p], from, to, media[rng.IntN(3)]))
			case op < 6:
				apply(ix, name, removeEv(media[rng.IntN(3)], hashes[p][rng.IntN(blocks)]))
			case op < 7:
				ix.Speculate(name, mkey, prompts[p][:rng.IntN(blocks)*testBlock], testBlock)
			case op < 8:
				clock.Advance(300 * time.Millisecond)
			default:
				for q, prompt := range prompts {
					checkLookup(t, ix, prompt, fmt.Sprintf("step %d, prompt %d", step, q))
				}
			}
		}
		if err := checkIndex(ix); err != nil {
			t.Fatal(err)
		}
	})
}

// storeChain builds a BlockStored of prompt's blocks [from, to) with the
// engine hashes given per block.
func storeChain(prompt []uint32, hashes []uint64, from, to int, medium string) Event {
	ev := Event{Kind: BlockStored, BlockSize: testBlock, Offloaded: offloaded(medium),
		BlockHashes: hashes[from:to], TokenIDs: prompt[from*testBlock : to*testBlock]}
	if from > 0 {
		ev.HasParent, ev.ParentHash = true, hashes[from-1]
	}
	return ev
}

// TestClearAfterSpeculationReplaced clears a stream whose speculations
// were replaced by its events and whose blocks were then removed: their
// nodes are free, and the clear must not free them a second time through
// the speculation queue's stale items.
func TestClearAfterSpeculationReplaced(t *testing.T) {
	ix := newIndex(t)
	prompt, other := seqTokens(1, 4*testBlock+1), seqTokens(1000, 4*testBlock+1)
	apply(ix, "w") // the stream's slot, for Speculate to find
	ix.Speculate("w", mkey, prompt, testBlock)
	ix.Speculate("w", mkey, other, testBlock) // stays speculative: the queue is kept
	apply(ix, "w", storeEv(prompt, 0, 4, 100, ""))
	apply(ix, "w", removeEv("", 100, 101, 102, 103))
	if err := checkIndex(ix); err != nil {
		t.Fatalf("before the clear: %v", err)
	}
	apply(ix, "w", Event{Kind: AllBlocksCleared})
	if err := checkIndex(ix); err != nil {
		t.Fatalf("after the clear: %v", err)
	}
}

// TestWritersDrainTouchesBeforeFreeing has a lookup log the nodes of a
// speculated chain, then a writer free them: each writer must replay the
// lookups' touches first, or the replay links free nodes back into the
// LRU list.
func TestWritersDrainTouchesBeforeFreeing(t *testing.T) {
	prompt, other := seqTokens(1, 6*testBlock+1), seqTokens(5000, 2*testBlock+1) // other takes fewer nodes than a sweep frees
	cases := []struct {
		name string
		free func(ix *Index, clock *clocktest.Clock)
	}{
		{"a speculation's sweep", func(ix *Index, clock *clocktest.Clock) {
			clock.Advance(2 * time.Second)
			ix.Speculate("w", mkey, other, testBlock)
		}},
		{"a batch's sweep", func(ix *Index, clock *clocktest.Clock) {
			clock.Advance(2 * time.Second)
			apply(ix, "v")
		}},
		{"a reset", func(ix *Index, _ *clocktest.Clock) { ix.Reset(Source{Worker: "w", Model: "m"}, "test") }},
		{"a removed worker", func(ix *Index, _ *clocktest.Clock) { ix.RemoveWorker("w") }},
		{"a new model", func(ix *Index, _ *clocktest.Clock) { ix.AddStream(Source{Worker: "w", Model: "m2"}) }},
		{"a new model's batch", func(ix *Index, _ *clocktest.Clock) { ix.Apply(Source{Worker: "w", Model: "m2"}, nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktest.New(time.Unix(1000, 0))
			ix := newIndex(t, clockAt(clock.Now), specTTL(time.Second))
			apply(ix, "w")
			apply(ix, "v")
			ix.Speculate("w", mkey, prompt, testBlock)
			if ms := ix.Lookup(mkey, prompt, testBlock); len(ms) != 1 {
				t.Fatalf("lookup of the speculated chain: %v", ms)
			}
			tc.free(ix, clock)
			apply(ix, "v") // a writer that replays whatever is logged
			if err := checkIndex(ix); err != nil {
				t.Fatal(err)
			}
		})
	}
}
