//go:build amd64 && !purego

package kvindex

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestWalk16StateLayout checks the offsets keys_amd64.s reads.
func TestWalk16StateLayout(t *testing.T) {
	var st walk16State
	var d drop
	got := []uintptr{unsafe.Offsetof(st.h), unsafe.Offsetof(st.tokens), unsafe.Offsetof(st.left),
		unsafe.Offsetof(st.prev), unsafe.Offsetof(st.pages), unsafe.Offsetof(st.anyW), unsafe.Offsetof(st.gpuW),
		unsafe.Offsetof(st.runs), unsafe.Offsetof(st.nruns), unsafe.Offsetof(st.capRuns),
		unsafe.Offsetof(st.drops), unsafe.Offsetof(st.ndrops), unsafe.Offsetof(st.capDrops),
		unsafe.Offsetof(st.at), unsafe.Offsetof(st.k), unsafe.Offsetof(st.stop),
		unsafe.Sizeof(d), unsafe.Offsetof(d.gpu), unsafe.Offsetof(d.depth)}
	want := []uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 24, 8, 16}
	if !slices.Equal(got, want) {
		t.Fatalf("offsets %v, keys_amd64.s reads %v", got, want)
	}
}

// TestWalk16Kernel runs the assembly walk16 kernel over random node
// layouts and checks it against a walk worked out here: it follows the
// chain through the node below and the LRU successor, records runs and
// drops, passes inline nodes of the one slot left, and returns at the
// first block it must hand back, with that block's key.
func TestWalk16Kernel(t *testing.T) {
	t.Parallel()
	if !hasAES {
		t.Skip("no AES and AVX here: walk takes walkChunks")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var stops [3]int
	inline := 0
	for trial := range 400 {
		if stop, n, ok := checkWalk16(t, trial, rng); ok {
			stops[stop]++
			inline += n
		}
	}
	if stops[walk16Done] < 20 || stops[walk16End] < 3 || stops[walk16Miss] < 50 || inline < 50 {
		t.Fatalf("layouts checked by how the walk stopped (done, end, miss): %v; inline nodes passed: %d", stops, inline)
	}
}

// checkWalk16 checks one random layout and returns how the walk stopped
// and how many inline nodes it walked past; it reports false, checking
// nothing, when the layout it drew reuses a node.
func checkWalk16(t *testing.T, trial int, rng *rand.Rand) (stop, inline int, ok bool) {
	t.Helper()
	const blocks = 48
	tokens := randTokens(rng, 16*blocks)
	keys := make([]uint64, blocks)
	chainKeys16AES(7, &tokens[0], blocks, &keys[0])
	// Two pages. Block 0's node is the walk's prev; the others follow in
	// runs going down, each run's first node the LRU successor of the one
	// before; some nodes are spoilt.
	pages := [][]node{make([]node, pageSize), make([]node, pageSize)}
	at := func(ni uint32) *node { return &pages[ni>>pageShift][ni&(pageSize-1)] }
	ni := uint32(100 + rng.IntN(pageSize-200))
	cross := trial%4 == 0 // the chain's first blocks cross into page 0
	if cross {
		ni = uint32(pageSize + 1 + rng.IntN(8))
	}
	all := uint64(0b1111_0110)
	if rng.IntN(4) == 0 {
		all = 0b0110 // two slots, which may both drop out
	}
	held := all
	nodes := make([]uint32, blocks)
	for j := range blocks {
		if j > 0 {
			if nodes[j-1] == 1 || rng.IntN(6) == 0 && !(cross && j < 12) {
				next := uint32(1 + rng.IntN(2*pageSize-1))
				for at(next).b != 0 || next == nodes[j-1]-1 {
					next = uint32(1 + rng.IntN(2*pageSize-1))
				}
				at(nodes[j-1]).next = next
				ni = next
			} else {
				ni = nodes[j-1] - 1
				if at(ni).b != 0 {
					return 0, 0, false
				}
				at(nodes[j-1]).next = ni
			}
		}
		if rng.IntN(10) == 0 {
			held &^= 1 << (1 + rng.IntN(7))
		}
		nodes[j] = ni
		*at(ni) = node{key: keys[j], a: held | 1<<40, b: modeShared | 3}
		if bits.OnesCount64(held) == 1 && rng.IntN(3) == 0 {
			// Held by one stream: inline, on GPU or (rarely) only in
			// another medium.
			gpu := uint64(1 + rng.IntN(2))
			if rng.IntN(8) == 0 {
				gpu = 0
			}
			*at(ni) = node{key: keys[j], a: 0xabc, b: modeInline | 1<<32 | gpu<<16 | uint64(bits.TrailingZeros64(held))}
		}
	}
	if rng.IntN(3) == 0 {
		f := 1 + rng.IntN(blocks-1)
		switch rng.IntN(3) {
		case 0:
			at(nodes[f]).key++
		case 1:
			at(nodes[f]).b = modeInline | 1<<16
		case 2:
			at(nodes[f]).b |= sharedRare
		}
	}

	// The walk worked out here, from block 1 with block 0's node as prev.
	capRuns, capDrops := 2+2*rng.IntN(6), rng.IntN(4) // small: a buffer fills
	if rng.IntN(3) > 0 {
		capRuns, capDrops = 2*blocks, blocks
	}
	wantRuns := []uint32{nodes[0], 1}
	var wantDrops []drop
	anyW, gpuW := all, all&^0b1000_0000
	wantAt, wantStop, wantK := blocks, walk16Done, uint64(0)
	inlinePassed := 0
	prev := nodes[0]
	for j := 1; j < blocks; j++ {
		c := prev - 1
		if at(c).key != keys[j] {
			c = at(prev).next
		}
		n := at(c)
		newRun := c != prev-1
		shared := n.b>>61 == modeShared>>61
		inline := n.b>>61 == modeInline>>61
		inlineOK := inline && anyW == 1<<(n.b&0xffff) && n.b>>16&0xffff > 0
		miss := n.key != keys[j] || !shared && !inlineOK || newRun && len(wantRuns)+2 > capRuns ||
			shared && anyW&^n.a != 0 && len(wantDrops) == capDrops
		if miss {
			wantAt, wantStop, wantK = j, walk16Miss, keys[j]
			break
		}
		if inlineOK {
			inlinePassed++
		}
		if shared && anyW&^n.a != 0 {
			wantDrops = append(wantDrops, drop{anyW &^ n.a, gpuW &^ n.a, j})
			anyW &= n.a
			gpuW &= n.a
			if anyW == 0 {
				wantAt, wantStop = j, walk16End
				break
			}
		}
		if newRun {
			wantRuns = append(wantRuns, c, 1)
		} else {
			wantRuns[len(wantRuns)-1]++
		}
		prev = c
	}

	runs := make([]uint32, max(capRuns, 2))
	runs[0], runs[1] = nodes[0], 1
	drops := make([]drop, capDrops+1)
	st := walk16State{h: keys[0], tokens: &tokens[16], left: blocks - 1, prev: uint64(nodes[0]),
		pages: &pages[0], anyW: all, gpuW: all &^ 0b1000_0000,
		runs: &runs[0], nruns: 2, capRuns: capRuns, drops: &drops[0], capDrops: capDrops, at: 1}
	walk16AES(&st)
	if st.at != wantAt || st.stop != wantStop || wantStop == walk16Miss && st.k != wantK {
		t.Fatalf("trial %d: stopped at block %d (%d, key %x), want %d (%d, key %x)", trial, st.at, st.stop, st.k, wantAt, wantStop, wantK)
	}
	if st.left != blocks-wantAt || st.anyW != anyW || st.gpuW != gpuW || uint32(st.prev) != prev {
		t.Fatalf("trial %d: left %d anyW %b gpuW %b prev %d, want %d %b %b %d", trial, st.left, st.anyW, st.gpuW, st.prev, blocks-wantAt, anyW, gpuW, prev)
	}
	if wantStop == walk16Done && st.h != keys[blocks-1] {
		t.Fatalf("trial %d: h %x, want the last key %x", trial, st.h, keys[blocks-1])
	}
	if !slices.Equal(runs[:st.nruns], wantRuns) {
		t.Fatalf("trial %d: runs %v, want %v", trial, runs[:st.nruns], wantRuns)
	}
	if !slices.Equal(drops[:st.ndrops], wantDrops) {
		t.Fatalf("trial %d: drops %v, want %v", trial, drops[:st.ndrops], wantDrops)
	}
	return wantStop, inlinePassed, true
}
