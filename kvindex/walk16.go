//go:build amd64 && !purego

package kvindex

// The walk for blocks of 16 tokens (vLLM's default) over slots 0–63, on
// amd64 with AES and AVX. Its kernel hashes each block and finds its node
// in one loop: the node below the previous block's (a chain stored in one
// event takes consecutive nodes), else the previous node's successor in
// the LRU list (lookups and stores leave chains there in order). It
// records the slots that drop out and the runs of nodes it found, and
// hands every other case back, for step to take: a block neither
// candidate holds, a node with holders in other media or speculative
// ones, an inline node with another holder than the one slot left, or a
// full buffer. The kernel is assembly (walk16AES in keys_amd64.s, next to
// the hash it shares; TestWalk16Kernel holds it to a model); on
// BenchmarkLookup512x64's prompt it takes every block, its 63 run starts
// and its 63 slots dropping out in one loop. Elsewhere walk takes
// walkChunks.

// walk16State is what a walk16 kernel reads and updates. The assembly
// kernel reads it at fixed offsets, which TestWalk16StateLayout checks.
type walk16State struct {
	h        uint64  // key of the previous block; of the last one walked
	tokens   *uint32 // the next block's first token
	left     int     // blocks left to walk
	prev     uint64  // node of the previous block, ≥ 1
	pages    *[]node // the index's pages
	anyW     uint64  // slots 0–63 still holding every block, any medium
	gpuW     uint64  // and on GPU
	runs     *uint32 // logTouches' runs so far; the last one is open
	nruns    int     // uint32s of runs used
	capRuns  int     // and available
	drops    *drop   // slots dropped
	ndrops   int     // drops recorded
	capDrops int     // and available
	at       int     // index of the next block
	k        uint64  // on walk16Miss, the key of block at
	stop     int     // why the kernel returned
}

// drop records the slots that stopped holding the prompt at a block:
// depth is the number of blocks they hold.
type drop struct {
	any, gpu uint64
	depth    int
}

// Why a walk16 kernel returned.
const (
	walk16Done = iota // no blocks left
	walk16End         // no slot holds block at
	walk16Miss        // block at, of key k, is find's to look up
)

// walkKernel is walk for blocks of 16 tokens over slots 0–63 where the
// kernel runs; ok is false, and nothing done, where it does not.
func (w *chainWalk) walkKernel(runs []uint32) (blocks int, _ []uint32, ok bool) {
	if !hasAES || w.blockSize != 16 || w.hiAny != nil {
		return 0, runs, false
	}
	pages := w.ix.pages
	h := w.h
	i := 0
	var prev uint32 // the node of the previous block
	var drops [32]drop
	for i < w.blocks {
		var k uint64 // block i's key
		if prev != 0 {
			room := runs[:cap(runs)]
			st := walk16State{h: h, tokens: &w.tokens[16*i], left: w.blocks - i, prev: uint64(prev),
				pages: &pages[0], anyW: w.anyW, gpuW: w.gpuW,
				runs: &room[0], nruns: len(runs), capRuns: len(room),
				drops: &drops[0], capDrops: len(drops), at: i}
			walk16AES(&st)
			for _, d := range drops[:st.ndrops] {
				setDepth(w.depthAny, 0, d.any, d.depth)
				setDepth(w.depthGPU, 0, d.gpu, d.depth)
			}
			runs = room[:st.nruns]
			w.anyW, w.gpuW = st.anyW, st.gpuW
			i, prev, h = st.at, uint32(st.prev), st.h
			switch st.stop {
			case walk16Done:
				continue
			case walk16End:
				return i, runs, true
			}
			k = st.k
		} else {
			var one [1]uint64
			k = chainKeys16(h, w.tokens[16*i:16*(i+1)], one[:])
		}
		// What the kernel hands back, it has already probed for in find's
		// way: straight to step.
		ni := w.step(prev, k, i)
		if ni == 0 {
			break
		}
		runs = visit(runs, prev, ni)
		prev, h = ni, k
		i++
	}
	return i, runs, true
}
