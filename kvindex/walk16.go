package kvindex

// The walk for blocks of 16 tokens (vLLM's default) over slots 0–63. Its
// kernel hashes each block and finds its node in one loop: the node below
// the previous block's (a chain stored in one event takes consecutive
// nodes), else the previous node's successor in the LRU list (lookups and
// stores leave chains there in order). It records the slots that drop out
// and the runs of nodes it found, and hands every other case back to
// find: a block neither candidate holds, a node with holders in other
// media or speculative ones, an inline node with another holder than the
// one slot left, or a full buffer. On amd64 with AES the kernel is
// assembly (walk16AES in keys_amd64.s, next to the hash it shares), which
// the Go one below specifies; on BenchmarkLookup512x64's prompt it takes
// every block, its 63 run starts and its 63 slots dropping out in one
// loop.

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

// walk16Go is the walk16 kernel in Go: the specification of the assembly
// one and the kernel on other machines. pages, tokens (from the next
// block), runs and drops are st's memory as slices; it leaves st.tokens
// as it was (the caller goes by st.at).
func walk16Go(st *walk16State, pages [][]node, tokens []uint32, runs []uint32, drops []drop) {
	node := func(ni uint64) *node { return &pages[ni>>pageShift][ni&(pageSize-1)] }
	var out [1]uint64
	for ; st.left > 0; st.left-- {
		key := chainKeys16Go(st.h, tokens[:16], out[:])
		c := st.prev - 1
		n := node(c)
		if n.key != key {
			c = uint64(node(st.prev).next)
			n = node(c)
		}
		newRun := c != st.prev-1
		shared := n.b>>61 == modeShared>>61
		// An inline node passes when its one holder is the one slot left
		// and holds it on GPU: nothing drops.
		inlineOK := n.b>>61 == modeInline>>61 && st.anyW == 1<<uint16(n.b) && uint16(n.b>>16) > 0
		if n.key != key || !shared && !inlineOK || newRun && st.nruns+2 > st.capRuns {
			st.k, st.stop = key, walk16Miss
			return
		}
		if shared && st.anyW&^n.a != 0 {
			if st.ndrops == st.capDrops {
				st.k, st.stop = key, walk16Miss
				return
			}
			drops[st.ndrops] = drop{any: st.anyW &^ n.a, gpu: st.gpuW &^ n.a, depth: st.at}
			st.ndrops++
			st.anyW &= n.a
			st.gpuW &= n.a
			if st.anyW == 0 {
				st.h, st.stop = key, walk16End
				return
			}
		}
		if newRun {
			runs[st.nruns], runs[st.nruns+1] = uint32(c), 1
			st.nruns += 2
		} else {
			runs[st.nruns-1]++
		}
		st.h, st.prev = key, c
		tokens = tokens[16:]
		st.at++
	}
	st.stop = walk16Done
}

// walk16 is walk for blocks of 16 tokens over slots 0–63.
func (w *chainWalk) walk16(runs []uint32) (int, []uint32) {
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
			walk16Kernel(&st, pages, w.tokens[16*i:16*w.blocks], room, drops[:])
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
				return i, runs
			}
			k = st.k
		} else {
			var one [1]uint64
			k = chainKeys16(h, w.tokens[16*i:16*(i+1)], one[:])
		}
		ni := w.find(pages, prev, k, i)
		if ni == 0 {
			break
		}
		runs = visit(runs, prev, ni)
		prev, h = ni, k
		i++
	}
	return i, runs
}
