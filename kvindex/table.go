package kvindex

// table maps uint64 keys to uint32 values with open addressing and linear
// probing. Keys are hashes already, so the low bits index the slots
// directly after one multiply. It takes 12 bytes per slot at a load factor
// of at most 3/4, less than half of a Go map's footprint for this shape,
// and a lookup usually reads a single cache line.
//
// Value 0 marks an empty slot, so stored values must be non-zero (node and
// block indices start at 1). The zero value is an empty table. A table is
// not safe for concurrent mutation.
type table struct {
	keys []uint64
	vals []uint32
	n    int
}

const tableMinSize = 8

func (t *table) slot(k uint64) int {
	// Fibonacci hashing spreads keys whose low bits are patterned.
	return int((k * 0x9e3779b97f4a7c15) >> 32 & uint64(len(t.keys)-1))
}

// get returns the value stored for k, or 0.
func (t *table) get(k uint64) uint32 {
	if t.n == 0 {
		return 0
	}
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		v := t.vals[i]
		if v == 0 {
			return 0
		}
		if t.keys[i] == k {
			return v
		}
	}
}

// put stores v (non-zero) for k.
func (t *table) put(k uint64, v uint32) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.grow()
	}
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		if t.vals[i] == 0 {
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		}
		if t.keys[i] == k {
			t.vals[i] = v
			return
		}
	}
}

// del removes k, shifting later entries of its probe run back so lookups
// never need tombstones.
func (t *table) del(k uint64) {
	if t.n == 0 {
		return
	}
	mask := len(t.keys) - 1
	i := t.slot(k)
	for {
		if t.vals[i] == 0 {
			return
		}
		if t.keys[i] == k {
			break
		}
		i = (i + 1) & mask
	}
	t.n--
	for j := (i + 1) & mask; t.vals[j] != 0; j = (j + 1) & mask {
		home := t.slot(t.keys[j])
		// Move j into the hole at i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i], t.vals[i] = 0, 0
	if len(t.keys) > tableMinSize && t.n*8 < len(t.keys) {
		t.resize(len(t.keys) / 2)
	}
}

func (t *table) grow() {
	t.resize(max(tableMinSize, len(t.keys)*2))
}

func (t *table) resize(size int) {
	keys, vals := t.keys, t.vals
	t.keys, t.vals, t.n = make([]uint64, size), make([]uint32, size), 0
	for i, v := range vals {
		if v != 0 {
			t.put(keys[i], v)
		}
	}
}

// each calls fn for every entry; fn must not modify the table.
func (t *table) each(fn func(k uint64, v uint32)) {
	for i, v := range t.vals {
		if v != 0 {
			fn(t.keys[i], v)
		}
	}
}

// len returns the number of entries.
func (t *table) len() int { return t.n }

// reset empties the table and releases its memory.
func (t *table) reset() { *t = table{} }
