package tokenize

import (
	"math/bits"
	"sync/atomic"
)

// pairTable is an open-addressing hash table from a symbol pair to its merge
// (rank and new id). It is built once at load and read-only afterwards.
type pairTable struct {
	keys  []uint64 // pair key + 1; 0 marks an empty slot
	vals  []uint64 // rank<<32 | new id
	shift uint
	n     int
}

func newPairTable(n int) *pairTable {
	size := 1 << bits.Len(uint(n*2+1))
	return &pairTable{
		keys:  make([]uint64, size),
		vals:  make([]uint64, size),
		shift: uint(64 - bits.TrailingZeros(uint(size))),
	}
}

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

func (t *pairTable) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// put sets the merge of a pair, replacing an earlier one (as a Rust HashMap
// collected from the merge list does).
func (t *pairTable) put(a, b, rank, id uint32) {
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	t.insert(pairKey(a, b)+1, uint64(rank)<<32|uint64(id))
}

// grow doubles the table.
func (t *pairTable) grow() {
	old, oldVals := t.keys, t.vals
	*t = *newPairTable(len(old))
	for i, k := range old {
		if k != 0 {
			t.insert(k, oldVals[i])
		}
	}
}

func (t *pairTable) insert(k, v uint64) {
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		if t.keys[i] == 0 || t.keys[i] == k {
			if t.keys[i] == 0 {
				t.n++
			}
			t.keys[i] = k
			t.vals[i] = v
			return
		}
	}
}

// get returns rank<<32 | id of the merge of (a, b), or noMerge.
func (t *pairTable) get(a, b uint32) uint64 {
	k := pairKey(a, b) + 1
	mask := uint64(len(t.keys) - 1)
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i]
		case 0:
			return noMerge
		}
	}
}

const noMerge = ^uint64(0)

// bpeModel is a BPE model from tokenizer.json. Byte-level models key their
// vocabulary by raw bytes (the byte-to-unicode mapping undone), so words are
// merged as bytes; other models key it by the normalized text.
type bpeModel struct {
	vocab        vocabTable
	merges       *pairTable
	byteLevel    bool
	byteID       [256]uint32
	byteOK       [256]bool
	ignoreMerges bool
	byteFallback bool
	fallbackID   [256]uint32
	fallbackOK   bool
	unk          uint32
	hasUnk       bool
	fuseUnk      bool

	// splitRune, when not zero, is a rune before which a word may be cut
	// into independently merged parts unless the rune before it is in
	// joinBefore: no vocabulary token contains that pair, so no merge can
	// ever cross the cut. SentencePiece-style files (one word per text) use
	// it for U+2581; it changes no result, only the cost.
	splitRune  rune
	joinBefore map[rune]bool

	// whole records, per id, whether merging the token's own text yields
	// that single token (1), something else (2), or is not known yet (0).
	// Words that are one vocabulary token, the common case, then skip the
	// merge loop. Written with atomics; every value written is the same
	// for all writers, so races only repeat work.
	whole []uint32

	// words caches the ids of short merged words (see mergeWord); nil
	// disables it.
	words *wordCache
}

// sentencePieceSplit enables cutting words before U+2581 where exact.
func (m *bpeModel) sentencePieceSplit(vocab []vocabEntry) {
	const sp = '\u2581'
	if _, ok := m.vocab.get(string(sp)); !ok || m.byteLevel {
		return
	}
	m.splitRune, m.joinBefore = sp, make(map[rune]bool)
	for _, e := range vocab {
		prev := rune(-1)
		for _, r := range e.tok {
			if r == sp && prev >= 0 {
				m.joinBefore[prev] = true
			}
			prev = r
		}
	}
}

// bpeScratch is reusable per-call working memory.
type bpeScratch struct {
	syms  []uint32
	ranks []uint64
	prev  []int32
	next  []int32
	heap  []uint64
}

// smallWord is the length up to which the quadratic merge loop beats the heap.
const smallWord = 64

// encodeWord appends the ids of one pre-tokenized word.
func (m *bpeModel) encodeWord(w []byte, ids []uint32, sc *bpeScratch) []uint32 {
	if len(w) == 0 {
		return ids
	}
	if m.ignoreMerges {
		if id, ok := m.vocab.getBytes(w); ok {
			return append(ids, id)
		}
	}
	if m.splitRune != 0 {
		start, prev := 0, rune(-1)
		for i := 0; i < len(w); {
			r, n := runeAt(w, i)
			if r == m.splitRune && i > start && !m.joinBefore[prev] {
				ids = m.mergeWord(w[start:i], ids, sc)
				start = i
			}
			prev = r
			i += n
		}
		return m.mergeWord(w[start:], ids, sc)
	}
	return m.mergeWord(w, ids, sc)
}

// mergeWord appends the ids of w after all merges, from the merged-word
// cache when w was merged before.
func (m *bpeModel) mergeWord(w []byte, ids []uint32, sc *bpeScratch) []uint32 {
	if m.words == nil {
		return m.mergeUncached(w, ids, sc)
	}
	if out, ok := m.words.get(w, ids); ok {
		return out
	}
	n := len(ids)
	ids = m.mergeUncached(w, ids, sc)
	m.words.put(w, ids[n:])
	return ids
}

// mergeUncached is mergeWord without the merged-word cache: a word that is
// one vocabulary token skips the merge loop once that is known.
func (m *bpeModel) mergeUncached(w []byte, ids []uint32, sc *bpeScratch) []uint32 {
	if len(w) <= smallWord {
		if id, ok := m.vocab.getBytes(w); ok && int(id) < len(m.whole) {
			switch atomic.LoadUint32(&m.whole[id]) {
			case 1:
				return append(ids, id)
			case 0:
				n := len(ids)
				ids = m.merge(w, ids, sc)
				state := uint32(2)
				if len(ids) == n+1 && ids[n] == id {
					state = 1
				}
				atomic.StoreUint32(&m.whole[id], state)
				return ids
			}
		}
	}
	return m.merge(w, ids, sc)
}

// merge appends the ids of w after all merges, without shortcuts.
func (m *bpeModel) merge(w []byte, ids []uint32, sc *bpeScratch) []uint32 {
	syms := m.initialSymbols(w, sc.syms[:0])
	sc.syms = syms
	if len(syms) <= smallWord {
		return append(ids, m.mergeSmall(syms, sc)...)
	}
	return m.mergeHeap(syms, ids, sc)
}

// initialSymbols splits w into the model's initial symbols: bytes for
// byte-level models, characters (with byte fallback or unknown) otherwise.
func (m *bpeModel) initialSymbols(w []byte, syms []uint32) []uint32 {
	if m.byteLevel {
		for _, b := range w {
			if m.byteOK[b] {
				syms = append(syms, m.byteID[b])
			}
		}
		return syms
	}
	pendingUnk := false
	for i := 0; i < len(w); {
		_, n := runeAt(w, i)
		ch := w[i : i+n]
		i += n
		if id, ok := m.vocab.getBytes(ch); ok {
			if pendingUnk {
				syms = append(syms, m.unk)
				pendingUnk = false
			}
			syms = append(syms, id)
			continue
		}
		if m.byteFallback && m.fallbackOK {
			if pendingUnk {
				syms = append(syms, m.unk)
				pendingUnk = false
			}
			for _, b := range ch {
				syms = append(syms, m.fallbackID[b])
			}
			continue
		}
		if m.hasUnk {
			if pendingUnk && !m.fuseUnk {
				syms = append(syms, m.unk)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		syms = append(syms, m.unk)
	}
	return syms
}

// mergeSmall applies merges, lowest rank first and leftmost among equals,
// to a short symbol list in place and returns it.
func (m *bpeModel) mergeSmall(syms []uint32, sc *bpeScratch) []uint32 {
	if len(syms) < 2 {
		return syms
	}
	ranks := sc.ranks[:0]
	for k := 0; k+1 < len(syms); k++ {
		ranks = append(ranks, m.merges.get(syms[k], syms[k+1]))
	}
	sc.ranks = ranks
	for {
		best, bk := noMerge, -1
		for k, r := range ranks {
			if r < best {
				best, bk = r, k
			}
		}
		if bk < 0 {
			return syms
		}
		syms[bk] = uint32(best)
		syms = append(syms[:bk+1], syms[bk+2:]...)
		ranks = append(ranks[:bk], ranks[bk+1:]...)
		if bk > 0 {
			ranks[bk-1] = m.merges.get(syms[bk-1], syms[bk])
		}
		if bk < len(ranks) {
			ranks[bk] = m.merges.get(syms[bk], syms[bk+1])
		}
	}
}

// mergeHeap is mergeSmall for long words: a min-heap of (rank, position)
// over a linked list of symbols, as the Rust library does.
func (m *bpeModel) mergeHeap(syms []uint32, ids []uint32, sc *bpeScratch) []uint32 {
	n := len(syms)
	prev := grow32(sc.prev, n)
	next := grow32(sc.next, n)
	sc.prev, sc.next = prev, next
	h := sc.heap[:0]
	for k := 0; k < n; k++ {
		prev[k] = int32(k - 1)
		next[k] = int32(k + 1)
		if k+1 < n {
			if v := m.merges.get(syms[k], syms[k+1]); v != noMerge {
				h = heapPush(h, v>>32<<32|uint64(k))
			}
		}
	}
	next[n-1] = -1
	const dead = ^uint32(0)
	for len(h) > 0 {
		var top uint64
		h, top = heapPop(h)
		rank, pos := uint32(top>>32), int32(uint32(top))
		if syms[pos] == dead || next[pos] < 0 {
			continue
		}
		nx := next[pos]
		v := m.merges.get(syms[pos], syms[nx])
		if v == noMerge || uint32(v>>32) != rank {
			continue
		}
		syms[pos] = uint32(v)
		syms[nx] = dead
		next[pos] = next[nx]
		if next[nx] >= 0 {
			prev[next[nx]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if v := m.merges.get(syms[p], syms[pos]); v != noMerge {
				h = heapPush(h, v>>32<<32|uint64(p))
			}
		}
		if q := next[pos]; q >= 0 {
			if v := m.merges.get(syms[pos], syms[q]); v != noMerge {
				h = heapPush(h, v>>32<<32|uint64(pos))
			}
		}
	}
	sc.heap = h
	for k := int32(0); k >= 0; k = next[k] {
		ids = append(ids, syms[k])
	}
	return ids
}

func grow32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) ([]uint64, uint64) {
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	n := len(h)
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h[r] < h[l] {
			c = r
		}
		if h[c] >= last {
			break
		}
		h[i] = h[c]
		i = c
	}
	if n > 0 {
		h[i] = last
	}
	return h, top
}
