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

// wordCache is a direct-mapped, lock-free cache of merged words: the ids
// mergeWord gave each short pre-token, so that a repeated word costs one
// hash and one cache line instead of a vocabulary lookup (a 150K-entry
// map) or a merge. A slot holds the latest word hashed to it; concurrent
// encodes share it and a collision only costs a merge.
//
// Each slot is eight words written under a sequence number (a seqlock),
// all with atomic operations: a reader that sees the sequence odd or
// changed while it read takes the slot as a miss, so it never sees a torn
// entry. The seed keeps the slots a word lands in unpredictable to
// clients, who could otherwise send words that evict each other.
type wordCache struct {
	slots []wordSlot
	shift uint // 64 − log2(len(slots))
	seed  uint64
}

// wordSlot is one cache line: [0] the sequence number (bits 16 and up, odd
// while a writer holds the slot), the word's length (bits 8–15) and the
// number of ids (bits 0–7); [1:4] the word's bytes, zero-padded; [4:8] the
// ids, two per word.
type wordSlot [8]atomic.Uint64

const wordSeqOne = 1 << 16

// newWordCache returns a cache of 2^bits slots.
func newWordCache(bits uint, seed uint64) *wordCache {
	return &wordCache{slots: make([]wordSlot, 1<<bits), shift: 64 - bits, seed: seed}
}

// packWord returns w (at most wordCacheMaxLen bytes) as three
// little-endian words, zero-padded.
func packWord(w []byte) (k [3]uint64) {
	for i := range k {
		if len(w) >= 8 {
			k[i] = binary.LittleEndian.Uint64(w)
			w = w[8:]
			continue
		}
		k[i] = loadTail(w)
		break
	}
	return k
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

func (c *wordCache) slot(k [3]uint64, n int) *wordSlot {
	h := (k[0]^c.seed)*0x9E3779B97F4A7C15 ^ k[1]*0xC2B2AE3D27D4EB4F ^ k[2]*0x165667B19E3779F9 ^ uint64(n)
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return &c.slots[h>>c.shift]
}

// get appends the cached ids of w and reports whether w was cached.
func (c *wordCache) get(w []byte, ids []uint32) ([]uint32, bool) {
	if len(w) > wordCacheMaxLen || len(w) == 0 { // an empty slot holds the empty word
		return ids, false
	}
	k := packWord(w)
	s := c.slot(k, len(w))
	v := s[0].Load()
	if v&wordSeqOne != 0 || int(v>>8&0xff) != len(w) ||
		s[1].Load() != k[0] || s[2].Load() != k[1] || s[3].Load() != k[2] {
		return ids, false
	}
	n := int(v & 0xff)
	var got [wordCacheMaxIDs / 2]uint64
	for i := range (n + 1) / 2 {
		got[i] = s[4+i].Load()
	}
	if s[0].Load() != v {
		return ids, false
	}
	ids = slices.Grow(ids, n)
	out := ids[len(ids) : len(ids)+n]
	for i := range out {
		out[i] = uint32(got[i/2] >> (32 * (i % 2)))
	}
	return ids[:len(ids)+n], true
}

// put caches the ids of w when they fit and no other writer holds the slot.
func (c *wordCache) put(w []byte, wids []uint32) {
	if len(w) > wordCacheMaxLen || len(wids) > wordCacheMaxIDs || len(w) == 0 {
		return
	}
	k := packWord(w)
	s := c.slot(k, len(w))
	v := s[0].Load()
	if v&wordSeqOne != 0 || !s[0].CompareAndSwap(v, v+wordSeqOne) {
		return
	}
	s[1].Store(k[0])
	s[2].Store(k[1])
	s[3].Store(k[2])
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
