package kvindex

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// fill stores chains of 16 blocks for worker, each chain's engine hashes
// its own, and returns their prompts.
func fill(ix *Index, rng *rand.Rand, worker string, chains int, base uint64) [][]uint32 {
	ps := make([][]uint32, chains)
	for c := range chains {
		ps[c] = randTokens(rng, 16*testBlock+1) // the last token is never a cached block
		apply(ix, worker, storeEv(ps[c], 0, 16, base|uint64(c)<<20, ""))
	}
	return ps
}

// withA returns an index whose worker "a" holds chains filled chains
// (engine hashes 1<<40 | chain<<20 | block), and the generator that
// drew them.
func withA(t *testing.T, seed uint64, chains int) (*Index, *rand.Rand, [][]uint32) {
	ix := newIndex(t, budget(1<<20))
	rng := rand.New(rand.NewPCG(seed, seed+1))
	return ix, rng, fill(ix, rng, "a", chains, 1<<40)
}

// chain is the tokens of a filled chain a lookup finds cached.
const chain = 16 * testBlock

// heldBy returns the tokens of p a lookup finds on worker's GPU.
func heldBy(ix *Index, p []uint32, worker string) int {
	gpu, _ := cachedOn(ix.Lookup(mkey, p, testBlock), worker)
	return gpu
}

// checkCounts checks the index's entry count against the blocks its
// streams report.
func checkCounts(t *testing.T, ix *Index, want int) {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	sum := 0
	for _, s := range ix.slots {
		if s != nil {
			sum += s.entries()
		}
	}
	if ix.entries != want || sum != want {
		t.Errorf("entries %d, streams' blocks %d, want %d", ix.entries, sum, want)
	}
}

// TestClearRetiresInBatches clears a worker of 40,960 blocks and checks
// that the write lock was let go between batches (a lookup runs at each
// pause), that nothing of the worker is left after, and that the other
// worker and the counts are intact.
func TestClearRetiresInBatches(t *testing.T) {
	t.Parallel()
	ix, rng, as := withA(t, 5, 2560)
	bs := fill(ix, rng, "b", 8, 2<<40)
	pauses := 0
	ix.retireHook = func() {
		pauses++
		if gpu := heldBy(ix, bs[0], "b"); gpu != chain {
			t.Errorf("pause %d: b holds %d tokens of its chain, want %d", pauses, gpu, chain)
		}
	}
	apply(ix, "a", Event{Kind: AllBlocksCleared})
	if pauses < 10 {
		t.Errorf("%d batches for 40,960 blocks; want them dropped a batch at a time", pauses)
	}
	for _, p := range as[:50] {
		if gpu := heldBy(ix, p, "a"); gpu != 0 {
			t.Fatalf("a still holds %d tokens after its clear", gpu)
		}
	}
	if st := statusOf(ix, Source{Worker: "a"}); st.Blocks != 0 {
		t.Errorf("a reports %d blocks after its clear", st.Blocks)
	}
	checkCounts(t, ix, 8*16)
	apply(ix, "a", storeEv(as[0], 0, 16, 1<<40, ""))
	if gpu := heldBy(ix, as[0], "a"); gpu != chain {
		t.Errorf("a stored a chain again after its clear: %d tokens, want %d", gpu, chain)
	}
	checkCounts(t, ix, 9*16)
}

// TestStoreAfterClearInOneBatch stores, after a clear in the same batch, a
// chain the worker held before: the clear's entries are retired first, so
// the new ones survive it.
func TestStoreAfterClearInOneBatch(t *testing.T) {
	t.Parallel()
	ix, _, as := withA(t, 7, 600)
	apply(ix, "a", Event{Kind: AllBlocksCleared}, storeEv(as[3], 0, 16, 1<<40|3<<20, ""))
	if gpu := heldBy(ix, as[3], "a"); gpu != chain {
		t.Errorf("the chain stored after the clear: %d tokens, want %d", gpu, chain)
	}
	if gpu := heldBy(ix, as[4], "a"); gpu != 0 {
		t.Errorf("a chain cleared: %d tokens, want 0", gpu)
	}
	checkCounts(t, ix, 16)
}

// TestRemoveWorkerDuringRetire removes the worker while its clear pauses,
// and adds it back with one chain: the paused clear stops, the new
// stream's chain stays.
func TestRemoveWorkerDuringRetire(t *testing.T) {
	t.Parallel()
	ix, rng, as := withA(t, 9, 1200)
	fill(ix, rng, "b", 4, 2<<40)
	once := sync.Once{}
	ix.retireHook = func() {
		once.Do(func() {
			ix.RemoveWorker("a")
			apply(ix, "a", storeEv(as[1], 0, 16, 1<<40|1<<20, ""))
		})
	}
	ix.Reset(Source{Worker: "a", Model: "m"}, "test")
	if gpu := heldBy(ix, as[1], "a"); gpu != chain {
		t.Errorf("the re-added stream's chain: %d tokens, want %d", gpu, chain)
	}
	if gpu := heldBy(ix, as[2], "a"); gpu != 0 {
		t.Errorf("a chain of the removed stream: %d tokens, want 0", gpu)
	}
	checkCounts(t, ix, 5*16)
}

// TestRetireConcurrently clears a large worker while other goroutines look
// up and apply events of other workers (run it with -race).
func TestRetireConcurrently(t *testing.T) {
	t.Parallel()
	ix, rng, as := withA(t, 11, 1500)
	bs := fill(ix, rng, "b", 16, 2<<40)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ix.Lookup(mkey, as[i%len(as)], testBlock)
			ix.Lookup(mkey, bs[i%len(bs)], testBlock)
		}
	})
	wg.Go(func() {
		r := rand.New(rand.NewPCG(13, 14))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			apply(ix, "c", storeEv(randTokens(r, 4*testBlock), 0, 4, 3<<40|uint64(i)<<20, ""))
		}
	})
	apply(ix, "a", Event{Kind: AllBlocksCleared})
	close(stop)
	wg.Wait()
	for _, p := range as[:100] {
		if gpu := heldBy(ix, p, "a"); gpu != 0 {
			t.Fatalf("a still holds %d tokens after its clear", gpu)
		}
	}
	ix.mu.RLock()
	c := ix.slots[ix.byName[slotName{"c", 0}]].status.Blocks
	ix.mu.RUnlock()
	checkCounts(t, ix, 16*16+c)
}

// TestRemoveWorkerDropsEverything removes a worker of thousands of blocks:
// none of its entries may outlive its slot, whose id a new stream reuses.
func TestRemoveWorkerDropsEverything(t *testing.T) {
	t.Parallel()
	ix, rng, as := withA(t, 15, 800)
	fill(ix, rng, "b", 4, 2<<40)
	ix.RemoveWorker("a")
	checkCounts(t, ix, 4*16)
	apply(ix, "d", storeEv(as[0], 0, 16, 4<<40, "")) // takes a's slot id
	if gpu := heldBy(ix, as[1], "d"); gpu != 0 {
		t.Errorf("the new stream in a's slot holds a's chain: %d tokens", gpu)
	}
	checkCounts(t, ix, 5*16)
}
