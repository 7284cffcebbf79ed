package kvindex

// table maps uint64 keys to non-zero uint32 values with open addressing
// and linear probing, in 8 bytes per slot: each slot keeps the value and a
// 32-bit fingerprint of its key, not the key itself. The caller holds the
// full key elsewhere (a node's block key, an entry's engine hash) and
// confirms a fingerprint match with an eq function, so two keys that share
// a fingerprint are still told apart.
//
// Entries are placed Robin Hood style (see place). The table grows by half when it is 4/5 full and its size need not be a
// power of two (a slot's home is the fingerprint scaled to the size), so
// it stays between 8/15 and 4/5 full as it grows: about 12 bytes per
// entry on average, where a table of full keys doubling at 3/4 takes 24.
//
// Value 0 marks an empty slot, so stored values must be non-zero (node
// indices start at 1). The zero value is an empty table. A table is not
// safe for concurrent mutation.
type table struct {
	slots []uint64 // fingerprint<<32 | value
	n     int
}

const tableMinSize = 8

// fingerprint returns the bits of k that place and identify it. Keys are
// hashes already; the multiply spreads keys whose high bits are patterned.
func fingerprint(k uint64) uint32 {
	return uint32((k * 0x9e3779b97f4a7c15) >> 32)
}

// home returns the slot a fingerprint's probe run starts at.
func (t *table) home(fp uint32) int {
	return int(uint64(fp) * uint64(len(t.slots)) >> 32)
}

// get returns the value stored for k, or 0: the first value whose
// fingerprint matches k's and for which eq reports true.
func (t *table) get(k uint64, eq func(v uint32) bool) uint32 {
	if t.n == 0 {
		return 0
	}
	fp := fingerprint(k)
	for i := t.home(fp); ; {
		s := t.slots[i]
		v := uint32(s)
		if v == 0 {
			return 0
		}
		if uint32(s>>32) == fp && eq(v) {
			return v
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// insert stores v (non-zero) for k, which must not be in the table.
func (t *table) insert(k uint64, v uint32) {
	if (t.n+1)*5 > len(t.slots)*4 {
		t.resize(max(tableMinSize, len(t.slots)*3/2))
	}
	t.place(uint64(fingerprint(k))<<32 | uint64(v))
	t.n++
}

// place stores slot value s Robin Hood style: walking its probe run, it
// takes the place of the first entry closer to its own home than s is to
// s's, and carries that entry on. A run is thus ordered by home, so a
// deletion can stop shifting at the first entry that sits at its home.
func (t *table) place(s uint64) {
	dist := 0
	for i := t.home(uint32(s >> 32)); ; {
		cur := t.slots[i]
		if uint32(cur) == 0 {
			t.slots[i] = s
			return
		}
		if d := t.dist(i, cur); d < dist {
			t.slots[i], s = s, cur
			dist = d
		}
		dist++
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// dist returns how far slot value s, stored at i, sits from its home.
func (t *table) dist(i int, s uint64) int {
	d := i - t.home(uint32(s>>32))
	if d < 0 {
		d += len(t.slots)
	}
	return d
}

// del removes the entry of k for which eq reports true, shifting later
// entries of its probe run back so lookups never need tombstones.
func (t *table) del(k uint64, eq func(v uint32) bool) {
	if t.n == 0 {
		return
	}
	size := len(t.slots)
	fp := fingerprint(k)
	i := t.home(fp)
	for {
		s := t.slots[i]
		if uint32(s) == 0 {
			return
		}
		if uint32(s>>32) == fp && eq(uint32(s)) {
			break
		}
		if i++; i == size {
			i = 0
		}
	}
	t.n--
	// Shift the rest of the run back by one, up to an empty slot or an
	// entry at its home.
	for {
		j := i + 1
		if j == size {
			j = 0
		}
		s := t.slots[j]
		if uint32(s) == 0 || t.dist(j, s) == 0 {
			break
		}
		t.slots[i] = s
		i = j
	}
	t.slots[i] = 0
	if size > tableMinSize && t.n*8 < size {
		t.resize(max(tableMinSize, size/2))
	}
}

func (t *table) resize(size int) {
	old := t.slots
	t.slots = make([]uint64, size)
	for _, s := range old {
		if uint32(s) != 0 {
			t.place(s)
		}
	}
}

// each calls fn for every value; fn must not modify the table.
func (t *table) each(fn func(v uint32)) {
	for _, s := range t.slots {
		if v := uint32(s); v != 0 {
			fn(v)
		}
	}
}

// len returns the number of entries.
func (t *table) len() int { return t.n }

// reset empties the table and releases its memory.
func (t *table) reset() { *t = table{} }
