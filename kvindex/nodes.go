package kvindex

// Node storage. Nodes live in fixed pages, so a node's address never
// changes and growth copies nothing; node 0 is never used, so 0 means
// "none". A node is 32 bytes without pointers, which the garbage collector
// does not scan. A block held by one stream keeps that holder inline; a
// block held by several streams, or speculated on, keeps its holders in a
// nodeExt, except the GPU bitset of streams 0–63, which stays in the node so
// that a lookup over a GPU-only block touches the node alone.
//
// Pages are slices of pageSize nodes, not pointers to arrays: indexing a
// page through a pointer makes the compiler check it for nil by reading
// the page's first byte (a node may lie past the guard page), a second
// cache line, and often a second TLB entry, for every node read.

const (
	pageShift = 12
	pageSize  = 1 << pageShift
)

// node is one block key, its place in the LRU list and its holders.
//
// Its holders take one of four forms, told by b:
//   - none: b == 0 (a node about to be freed);
//   - inline (b&modeInline): one stream holds the block and nothing is
//     speculative; a is its engine hash and b packs its slot id (bits 0–15)
//     and its GPU and other-medium reference counts (bits 16–31, 32–47);
//   - speculative (b&modeSpec): one stream's speculation and nothing else,
//     the form of every block of a new prompt until the engine's events
//     for it arrive; a is its expiry (unix nanos) and b's bits 0–15 the
//     slot id;
//   - shared (b&modeShared): a is the GPU bitset of slots 0–63 and the low 32
//     bits of b index ix.exts; b&sharedRare says the ext has any other bit
//     set (other media, speculation, slots ≥ 64).
type node struct {
	key  uint64
	prev uint32
	next uint32
	a    uint64
	b    uint64
}

const (
	modeInline = 1 << 63
	modeShared = 1 << 62
	sharedRare = 1 << 61
	modeSpec   = 1 << 60
)

// nodeExt holds a shared node's entries and its bitsets other than the
// GPU word of slots 0–63.
type nodeExt struct {
	entries   []entry
	off       uint64 // other-medium bitset of slots 0–63
	spec      uint64 // speculative bitset of slots 0–63
	specUntil int64  // unix nanos; the latest expiry among spec bits
	// hi holds further words of the bitsets by kind (bGPU, bOff, bSpec);
	// nil until a slot ≥ 64 needs one, which keeps the common ext small.
	hi *[3][]uint64
}

// hiWords returns words 1… of bitset k.
func (x *nodeExt) hiWords(k int) []uint64 {
	if x.hi == nil {
		return nil
	}
	return x.hi[k]
}

// entry is one slot's hold on a node: its engine hash and reference counts
// per medium (vLLM may store the same hash more than once).
type entry struct {
	hash uint64
	slot uint16
	gpu  uint16
	off  uint16
}

// Bitset kinds of a node.
const (
	bGPU  = iota // held on GPU
	bOff         // held in another medium
	bSpec        // speculative (GPU)
)

func (ix *Index) node(ni uint32) *node {
	return &ix.pages[ni>>pageShift][ni&(pageSize-1)]
}

// newNode returns a free node index.
func (ix *Index) newNode() uint32 {
	if k := len(ix.free); k > 0 {
		ni := ix.free[k-1]
		ix.free = ix.free[:k-1]
		return ni
	}
	ni := ix.nnodes
	if int(ni>>pageShift) == len(ix.pages) {
		ix.pages = append(ix.pages, make([]node, pageSize))
	}
	ix.nnodes++
	return ni
}

func inlineState(e entry) uint64 {
	return modeInline | uint64(e.off)<<32 | uint64(e.gpu)<<16 | uint64(e.slot)
}

func inlineEntry(n *node) entry {
	return entry{hash: n.a, slot: uint16(n.b), gpu: uint16(n.b >> 16), off: uint16(n.b >> 32)}
}

func (ix *Index) ext(n *node) *nodeExt { return &ix.exts[uint32(n.b)] }

// share turns node ni into a shared node and returns its ext. A node in
// the speculative form hands its expiry to its slot's specAt, where the
// shared form keeps each slot's.
func (ix *Index) share(ni uint32) *nodeExt {
	n := ix.node(ni)
	if n.b&modeShared != 0 {
		return ix.ext(n)
	}
	var xi uint32
	if k := len(ix.freeExt); k > 0 {
		xi = ix.freeExt[k-1]
		ix.freeExt = ix.freeExt[:k-1]
	} else {
		ix.exts = append(ix.exts, nodeExt{})
		xi = uint32(len(ix.exts) - 1)
	}
	old := *n
	n.a, n.b = 0, modeShared|uint64(xi)
	switch {
	case old.b&modeInline != 0:
		e := inlineEntry(&old)
		x := ix.ext(n)
		x.entries = append(x.entries, e)
		ix.setBit(n, bGPU, e.slot, e.gpu > 0)
		ix.setBit(n, bOff, e.slot, e.off > 0)
	case old.b&modeSpec != 0:
		ix.ext(n).specUntil = int64(old.a)
		ix.setBit(n, bSpec, uint16(old.b), true)
		ix.slots[uint16(old.b)].specAt[ni] = int64(old.a)
	}
	return ix.ext(n)
}

// compact turns a shared node back into an inline one when one entry and
// no speculation is left, or empties it when nothing is.
func (ix *Index) compact(n *node) {
	if n.b&modeShared == 0 {
		return
	}
	x := ix.ext(n)
	if x.spec != 0 || len(x.entries) > 1 {
		return
	}
	for _, w := range x.hiWords(bSpec) {
		if w != 0 {
			return
		}
	}
	xi := uint32(n.b)
	if len(x.entries) == 1 {
		e := x.entries[0]
		n.a, n.b = e.hash, inlineState(e)
	} else {
		n.a, n.b = 0, 0
	}
	ix.exts[xi] = nodeExt{entries: x.entries[:0]}
	ix.freeExt = append(ix.freeExt, xi)
}

// release drops whatever holders n has left, without accounting.
func (ix *Index) release(n *node) {
	if n.b&modeShared != 0 {
		xi := uint32(n.b)
		ix.exts[xi] = nodeExt{entries: ix.exts[xi].entries[:0]}
		ix.freeExt = append(ix.freeExt, xi)
	}
	n.a, n.b = 0, 0
}

// setBit sets or clears slot id's bit of kind k on a shared node.
func (ix *Index) setBit(n *node, k int, id uint16, on bool) {
	w, bit := int(id)/64, uint64(1)<<(id%64)
	if k == bGPU && w == 0 {
		if on {
			n.a |= bit
		} else {
			n.a &^= bit
		}
		return
	}
	x := ix.ext(n)
	var p *uint64
	switch {
	case w == 0 && k == bOff:
		p = &x.off
	case w == 0:
		p = &x.spec
	default:
		if x.hi == nil {
			if !on {
				return
			}
			x.hi = new([3][]uint64)
		}
		for on && len(x.hi[k]) < w {
			x.hi[k] = append(x.hi[k], 0)
		}
		if w-1 >= len(x.hi[k]) {
			return
		}
		p = &x.hi[k][w-1]
	}
	if on {
		*p |= bit
	} else {
		*p &^= bit
	}
	rare := x.off|x.spec != 0
	for k := range 3 {
		for _, v := range x.hiWords(k) {
			rare = rare || v != 0
		}
	}
	if rare {
		n.b |= sharedRare
	} else {
		n.b &^= sharedRare
	}
}

// words returns word w of n's GPU, other-medium and speculative bitsets.
func (ix *Index) words(n *node, w int) (gpu, off, spec uint64) {
	switch {
	case n.b&modeInline != 0:
		id := uint16(n.b)
		if int(id)/64 != w {
			return 0, 0, 0
		}
		bit := uint64(1) << (id % 64)
		if uint16(n.b>>16) > 0 {
			gpu = bit
		}
		if uint16(n.b>>32) > 0 {
			off = bit
		}
		return gpu, off, 0
	case n.b&modeSpec != 0:
		if id := uint16(n.b); int(id)/64 == w {
			return 0, 0, 1 << (id % 64)
		}
		return 0, 0, 0
	case n.b&modeShared == 0:
		return 0, 0, 0
	}
	if w == 0 {
		gpu = n.a
	}
	if n.b&sharedRare == 0 {
		return gpu, 0, 0
	}
	x := ix.ext(n)
	if w == 0 {
		return gpu, x.off, x.spec
	}
	hi := func(k int) uint64 {
		if ws := x.hiWords(k); w-1 < len(ws) {
			return ws[w-1]
		}
		return 0
	}
	return hi(bGPU), hi(bOff), hi(bSpec)
}

// has reports whether slot id's bit of kind k is set on n.
func (ix *Index) has(n *node, k int, id uint16) bool {
	g, o, s := ix.words(n, int(id)/64)
	return [3]uint64{g, o, s}[k]&(1<<(id%64)) != 0
}

// holders returns word w of the slots holding n on GPU, speculation
// included while live at now, and in any medium.
func (ix *Index) holders(n *node, w int, now int64) (gpu, all uint64) {
	g, o, sp := ix.words(n, w)
	if ix.specLive(n, now) {
		g |= sp
	}
	return g, g | o
}

// specLive reports whether n's speculative bits are unexpired.
func (ix *Index) specLive(n *node, now int64) bool {
	if n.b&modeSpec != 0 {
		return int64(n.a) > now
	}
	return n.b&sharedRare != 0 && ix.ext(n).specUntil > now
}

// entryOf returns slot id's entry on n.
func (ix *Index) entryOf(n *node, id uint16) (entry, bool) {
	switch {
	case n.b&modeInline != 0:
		e := inlineEntry(n)
		return e, e.slot == id
	case n.b&modeShared != 0:
		for _, e := range ix.ext(n).entries {
			if e.slot == id {
				return e, true
			}
		}
	}
	return entry{}, false
}

// anyEntry returns one of n's entries.
func (ix *Index) anyEntry(n *node) (entry, bool) {
	switch {
	case n.b&modeInline != 0:
		return inlineEntry(n), true
	case n.b&modeShared != 0:
		if es := ix.ext(n).entries; len(es) > 0 {
			return es[len(es)-1], true
		}
	}
	return entry{}, false
}

// putEntry inserts or updates e, whose counts are not both zero, on node
// ni.
func (ix *Index) putEntry(ni uint32, e entry) {
	n := ix.node(ni)
	if n.b == 0 || (n.b&modeInline != 0 && uint16(n.b) == e.slot) {
		n.a, n.b = e.hash, inlineState(e)
		return
	}
	x := ix.share(ni)
	i := 0
	for i < len(x.entries) && x.entries[i].slot != e.slot {
		i++
	}
	if i == len(x.entries) {
		x.entries = append(x.entries, e)
	} else {
		x.entries[i] = e
	}
	ix.setBit(n, bGPU, e.slot, e.gpu > 0)
	ix.setBit(n, bOff, e.slot, e.off > 0)
}

// delEntry removes slot id's entry from n and reports whether it had one.
func (ix *Index) delEntry(n *node, id uint16) bool {
	switch {
	case n.b&modeInline != 0:
		if uint16(n.b) != id {
			return false
		}
		n.a, n.b = 0, 0
		return true
	case n.b&modeShared != 0:
		x := ix.ext(n)
		for i := range x.entries {
			if x.entries[i].slot == id {
				last := len(x.entries) - 1
				x.entries[i] = x.entries[last]
				x.entries = x.entries[:last]
				ix.setBit(n, bGPU, id, false)
				ix.setBit(n, bOff, id, false)
				ix.compact(n)
				return true
			}
		}
	}
	return false
}

// setSpec marks slot id's speculative entry on node ni, live until until.
func (ix *Index) setSpec(ni uint32, id uint16, until int64) {
	n := ix.node(ni)
	switch {
	case n.b == 0:
		n.a, n.b = uint64(until), modeSpec|uint64(id)
		return
	case n.b&modeSpec != 0 && uint16(n.b) == id:
		n.a = max(n.a, uint64(until))
		return
	}
	x := ix.share(ni)
	x.specUntil = max(x.specUntil, until)
	ix.setBit(n, bSpec, id, true)
	ix.slots[id].specAt[ni] = until
}

// clearSpec drops slot id's speculative entry on node ni.
func (ix *Index) clearSpec(ni uint32, id uint16) {
	n := ix.node(ni)
	if n.b&modeSpec != 0 {
		if uint16(n.b) == id {
			n.a, n.b = 0, 0
		}
		return
	}
	if n.b&modeShared == 0 {
		return
	}
	delete(ix.slots[id].specAt, ni)
	ix.setBit(n, bSpec, id, false)
	ix.compact(n)
}

// specExpiry returns the expiry of slot s's speculation on node ni, and
// false when s has none there.
func (ix *Index) specExpiry(s *slot, ni uint32) (int64, bool) {
	if n := ix.node(ni); n.b&modeSpec != 0 {
		return int64(n.a), uint16(n.b) == s.id
	}
	at, ok := s.specAt[ni]
	return at, ok
}
