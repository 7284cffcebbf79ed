package tokenize

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
)

// Bounds of the merged-word cache: a word of at most wordCacheMaxLen bytes
// whose merge gives at most wordCacheMaxIDs ids fits in one slot.
const (
	wordCacheMaxLen = 24
	wordCacheMaxIDs = 8
	wordCacheBits   = 16
)

// wordCache is a two-way set-associative, lock-free cache of merged
// words: the ids mergeWord gave each short pre-token, so that a repeated
// word costs one hash and a cache line or two instead of a vocabulary
// lookup (a 150K-entry table) or a merge. A word hashes to a set of two
// slots, side by side; a new word takes an empty one, else one of the two
// in turn. Direct-mapped, two words of one text that shared a slot evicted
// each other at every use: about 1% of the words of a long prompt, each
// then merged again. Concurrent encodes share the cache, and a collision
// only costs a merge.
//
// Each slot is eight words written under a sequence number (a seqlock),
// all with atomic operations: a reader that sees the sequence odd or
// changed while it read takes the slot as a miss, so it never sees a torn
// entry. The seed keeps the slots a word lands in unpredictable to
// clients, who could otherwise send words that evict each other.
type wordCache struct {
	sets  [][2]wordSlot
	shift uint // 64 − log2(len(sets))
	seed  uint64
}

// wordSlot is one cache line: [0] the sequence number (bits 16 and up, odd
// while a writer holds the slot), the word's length (bits 8–15) and the
// number of ids (bits 0–7); [1:4] the word's bytes as packWord gives them;
// [4:8] the ids, two per word.
type wordSlot [8]atomic.Uint64

const wordSeqOne = 1 << 16

// newWordCache returns a cache of 2^bits slots (bits ≥ 1).
func newWordCache(bits uint, seed uint64) *wordCache {
	return &wordCache{sets: make([][2]wordSlot, 1<<(bits-1)), shift: 64 - (bits - 1), seed: seed}
}

// packWord returns w (1 to wordCacheMaxLen bytes) as three words with
// overlapping loads: every byte lands in some word, so for a given length
// the three words tell the bytes apart; a word too short for a load
// leaves it zero. It returns scalars, not an array: Go returns those in
// registers, an array through memory.
func packWord(w []byte) (k0, k1, k2 uint64) {
	switch n := len(w); {
	case n > 16:
		return binary.LittleEndian.Uint64(w), binary.LittleEndian.Uint64(w[8:]), binary.LittleEndian.Uint64(w[n-8:])
	case n >= 8:
		return binary.LittleEndian.Uint64(w), binary.LittleEndian.Uint64(w[n-8:]), 0
	}
	return loadTail(w), 0, 0
}

// loadTail returns up to seven bytes as a little-endian word with
// overlapping loads: the bytes read twice land in the same place.
func loadTail(t []byte) uint64 {
	switch n := len(t); {
	case n >= 4:
		return uint64(binary.LittleEndian.Uint32(t)) | uint64(binary.LittleEndian.Uint32(t[n-4:]))<<(8*(n-4))
	case n > 0:
		return uint64(t[0]) | uint64(t[n/2])<<(8*(n/2)) | uint64(t[n-1])<<(8*(n-1))
	}
	return 0
}

func (c *wordCache) set(k0, k1, k2 uint64, n int) *[2]wordSlot {
	h := (k0^c.seed)*0x9E3779B97F4A7C15 ^ k1*0xC2B2AE3D27D4EB4F ^ k2*0x165667B19E3779F9 ^ uint64(n)
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return &c.sets[h>>c.shift]
}

// get appends the cached ids of w and reports whether w was cached. It
// copies all four id words whatever their number, and the caller's slice
// grows by a full slot before it is cut to the ids that count: no branch
// depends on the word's length or its number of ids.
func (c *wordCache) get(w []byte, ids []uint32) ([]uint32, bool) {
	if len(w) > wordCacheMaxLen || len(w) == 0 { // an empty slot holds the empty word
		return ids, false
	}
	k0, k1, k2 := packWord(w)
	set := c.set(k0, k1, k2, len(w))
	if out, ok := set[0].get(k0, k1, k2, len(w), ids); ok {
		return out, true
	}
	return set[1].get(k0, k1, k2, len(w), ids)
}

// get appends the ids of slot s when it holds the word of length n whose
// key is k0, k1, k2.
func (s *wordSlot) get(k0, k1, k2 uint64, n int, ids []uint32) ([]uint32, bool) {
	v := s[0].Load()
	if v&wordSeqOne != 0 || int(v>>8&0xff) != n ||
		s[1].Load() != k0 || s[2].Load() != k1 || s[3].Load() != k2 {
		return ids, false
	}
	g0, g1, g2, g3 := s[4].Load(), s[5].Load(), s[6].Load(), s[7].Load()
	if s[0].Load() != v {
		return ids, false
	}
	l := len(ids)
	ids = slices.Grow(ids, wordCacheMaxIDs)[:l+wordCacheMaxIDs]
	out := (*[wordCacheMaxIDs]uint32)(ids[l:])
	out[0], out[1], out[2], out[3] = uint32(g0), uint32(g0>>32), uint32(g1), uint32(g1>>32)
	out[4], out[5], out[6], out[7] = uint32(g2), uint32(g2>>32), uint32(g3), uint32(g3>>32)
	return ids[:l+int(v&0xff)], true
}

// put caches the ids of w when they fit and no other writer holds the slot.
func (c *wordCache) put(w []byte, wids []uint32) {
	if len(w) > wordCacheMaxLen || len(wids) > wordCacheMaxIDs || len(w) == 0 {
		return
	}
	k0, k1, k2 := packWord(w)
	set := c.set(k0, k1, k2, len(w))
	// An empty way, else the ways in turn: each write flips bit 17 of its
	// slot's sequence number, so the two bits' parity flips with every
	// write to the set, and nothing outside the set is written.
	v0, v1 := set[0][0].Load(), set[1][0].Load()
	way := 0
	switch {
	case v0&0xffff == 0: // empty
	case v1&0xffff == 0:
		way = 1
	default:
		way = int((v0 ^ v1) >> 17 & 1)
	}
	s := &set[way]
	v := s[0].Load()
	if v&wordSeqOne != 0 || !s[0].CompareAndSwap(v, v+wordSeqOne) {
		return
	}
	s[1].Store(k0)
	s[2].Store(k1)
	s[3].Store(k2)
	var packed [wordCacheMaxIDs / 2]uint64
	for i, id := range wids {
		packed[i/2] |= uint64(id) << (32 * (i % 2))
	}
	for i, p := range packed {
		s[4+i].Store(p)
	}
	seq := (v + 2*wordSeqOne) &^ (wordSeqOne - 1)
	s[0].Store(seq | uint64(len(w))<<8 | uint64(len(wids)))
}
