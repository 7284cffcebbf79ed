package tokenize

import (
	"hash/maphash"
	"math"
	"math/bits"
)

// vocabTable maps a model's token keys to ids as a map[string]uint32
// would, but gives the garbage collector nothing to follow per key: the
// keys are substrings of one string and the slots are plain integers. As
// a Go map with a []string beside it, qwen3's vocabulary of 151K tokens
// was 148K live objects that every collection marked: 5.4 ms of CPU per
// collection (BenchmarkCollectLoaded), in a router that collects every
// few seconds under load. Built once by vocabBuilder, it is read-only and
// safe for concurrent use.
type vocabTable struct {
	keys  string
	slots []vocabSlot // open addressing, linear probing, a power of two
	seed  maphash.Seed
}

// vocabSlot is one key: keys[off:off+n&^slotUsed] maps to id. A slot
// whose n is zero is empty.
type vocabSlot struct {
	off, n, id uint32
}

// slotUsed marks a slot that holds a key, so that an empty key can be one.
const slotUsed = 1 << 31

// get returns the id of key.
func (t *vocabTable) get(key string) (uint32, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	s := t.find(key)
	return s.id, s.n != 0
}

// find returns the slot that holds key, or the empty slot where it would
// go. The table has slots and is never full.
func (t *vocabTable) find(key string) *vocabSlot {
	mask := uint64(len(t.slots) - 1)
	n := uint32(len(key)) | slotUsed
	for i := maphash.String(t.seed, key) & mask; ; i = (i + 1) & mask {
		if s := &t.slots[i]; s.n == 0 || s.n == n && t.keys[s.off:s.off+n&^slotUsed] == key {
			return s
		}
	}
}

// getBytes is get for a key the caller holds as bytes.
func (t *vocabTable) getBytes(key []byte) (uint32, bool) {
	return t.get(unsafeString(key))
}

// len returns the number of keys.
func (t *vocabTable) len() int {
	n := 0
	for _, s := range t.slots {
		if s.n != 0 {
			n++
		}
	}
	return n
}

// vocabBuilder collects the keys of a vocabTable; a key added twice maps
// to the id added last, as a map's later assignment wins.
type vocabBuilder struct {
	keys []byte
	ends []uint32 // ends[i] is where key i ends in keys
	ids  []uint32
}

// add adds key with id. It reports false, adding nothing, when the keys
// would pass the table's 2 GiB of key bytes.
func (b *vocabBuilder) add(key []byte, id uint32) bool {
	if uint64(len(b.keys))+uint64(len(key)) >= slotUsed {
		return false
	}
	b.keys = append(b.keys, key...)
	b.ends = append(b.ends, uint32(len(b.keys)))
	b.ids = append(b.ids, id)
	return true
}

// build returns the table of the keys added, at most three quarters full.
func (b *vocabBuilder) build() vocabTable {
	size := 1 << bits.Len(uint(len(b.ids)*4/3))
	t := vocabTable{keys: string(b.keys), slots: make([]vocabSlot, size), seed: maphash.MakeSeed()}
	start := uint32(0)
	for k, end := range b.ends {
		*t.find(t.keys[start:end]) = vocabSlot{off: start, n: (end - start) | slotUsed, id: b.ids[k]}
		start = end
	}
	return t
}

// idStrings holds a string per id, as a []string would, in one string:
// the string of id i is all[ends[i−1]:ends[i]], empty for an id without
// one.
type idStrings struct {
	all  string
	ends []uint32
}

// newIDStrings returns the strings of ids 0…len(byID)−1; false when
// together they pass the 4 GiB its offsets can address.
func newIDStrings(byID []string) (idStrings, bool) {
	n := 0
	for _, s := range byID {
		n += len(s)
	}
	if uint64(n) > math.MaxUint32 {
		return idStrings{}, false
	}
	all := make([]byte, 0, n)
	ends := make([]uint32, len(byID))
	for i, s := range byID {
		all = append(all, s...)
		ends[i] = uint32(len(all))
	}
	return idStrings{all: string(all), ends: ends}, true
}

// get returns the string of id, empty when it has none.
func (s *idStrings) get(id uint32) string {
	if int(id) >= len(s.ends) {
		return ""
	}
	start := uint32(0)
	if id > 0 {
		start = s.ends[id-1]
	}
	return s.all[start:s.ends[id]]
}

// len returns one more than the largest id.
func (s *idStrings) len() int { return len(s.ends) }
