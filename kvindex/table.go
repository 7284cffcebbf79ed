package kvindex

// table maps uint64 keys to non-zero uint32 values with open addressing
// and linear probing, in 8 bytes per slot: each slot keeps the value and a
// 32-bit fingerprint of its key, not the key itself. The caller holds the
// full key elsewhere (a node's block key, an entry's engine hash) and
// confirms a fingerprint match with an eq function, so two keys that share
// a fingerprint are still told apart.
//
// Entries are placed Robin Hood style (see place). The table grows by half
// when it is 4/5 full and its size need not be a power of two (a slot's
// home is the fingerprint scaled to the size), so it stays between 8/15
// and 4/5 full as it grows: about 12 bytes per entry on average, where a
// table of full keys doubling at 3/4 takes 24.
//
// A resize is incremental. Rehashing a table of millions of entries at
// once takes tens of milliseconds, all of it under the index's write lock
// that every routing decision's lookup waits on; instead the old slots are
// kept and each later insert or delete moves the entries of the next
// drainStep homes across. A slot's home is monotone in its fingerprint and
// a Robin Hood run is ordered by home, so the entries of one home lie
// together and "home in the old slots below drained" tells, for any key,
// which of the two arrays holds it. The old slots take at most
// size/drainStep inserts before they are drained, so they never fill.
//
// Value 0 marks an empty slot, so stored values must be non-zero (node
// indices start at 1). The zero value is an empty table. A table is not
// safe for concurrent mutation.
type table struct {
	slots []uint64 // fingerprint<<32 | value
	n     int      // entries in slots and old
	// old is the slots being drained into slots, nil when none; the
	// entries of its homes below drained have moved.
	old     []uint64
	drained int
}

const (
	tableMinSize = 8
	// drainStep is the homes of the old slots moved per insert or delete
	// while a resize is under way.
	drainStep = 16
)

// fingerprint returns the bits of k that place and identify it. Keys are
// hashes already; the multiply spreads keys whose high bits are patterned.
func fingerprint(k uint64) uint32 {
	return uint32((k * 0x9e3779b97f4a7c15) >> 32)
}

// home returns the slot a fingerprint's probe run starts at in slots.
func home(slots []uint64, fp uint32) int {
	return int(uint64(fp) * uint64(len(slots)) >> 32)
}

// slotsOf returns the array that holds a key with fingerprint fp, and
// does with it.
func (t *table) slotsOf(fp uint32) []uint64 {
	if t.old != nil && home(t.old, fp) >= t.drained {
		return t.old
	}
	return t.slots
}

// get returns the value stored for k, or 0: the first value whose
// fingerprint matches k's and for which eq reports true.
func (t *table) get(k uint64, eq func(v uint32) bool) uint32 {
	if t.n == 0 {
		return 0
	}
	fp := fingerprint(k)
	slots := t.slotsOf(fp)
	for i := home(slots, fp); ; {
		s := slots[i]
		v := uint32(s)
		if v == 0 {
			return 0
		}
		if uint32(s>>32) == fp && eq(v) {
			return v
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// warm reads the home slot of each key and returns the reads folded
// together, which the caller keeps so that the reads are not dropped. In a
// table of millions of entries each home is a cache miss, and often a TLB
// miss; a loop of nothing but independent reads has many in flight at
// once, where the same reads spread over a loop of inserts and lookups
// wait for each other. Warm a few hundred keys at a time: their slots must
// still be cached when the real work reaches them.
func (t *table) warm(keys []uint64) uint64 {
	if t.n == 0 {
		return 0
	}
	var sum uint64
	for _, k := range keys {
		fp := fingerprint(k)
		slots := t.slotsOf(fp)
		sum ^= slots[home(slots, fp)]
	}
	return sum
}

// insert stores v (non-zero) for k, which must not be in the table.
func (t *table) insert(k uint64, v uint32) {
	switch {
	case t.old != nil:
		t.drain()
	case (t.n+1)*5 > len(t.slots)*4:
		t.resize(max(tableMinSize, len(t.slots)*3/2))
	}
	fp := fingerprint(k)
	place(t.slotsOf(fp), uint64(fp)<<32|uint64(v))
	t.n++
}

// place stores slot value s in slots Robin Hood style: walking its probe
// run, it takes the place of the first entry closer to its own home than s
// is to s's, and carries that entry on. A run is thus ordered by home, so
// a deletion can stop shifting at the first entry that sits at its home.
func place(slots []uint64, s uint64) {
	dist := 0
	for i := home(slots, uint32(s>>32)); ; {
		cur := slots[i]
		if uint32(cur) == 0 {
			slots[i] = s
			return
		}
		if d := distance(slots, i, cur); d < dist {
			slots[i], s = s, cur
			dist = d
		}
		dist++
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// distance returns how far slot value s, stored at i, sits from its home.
func distance(slots []uint64, i int, s uint64) int {
	d := i - home(slots, uint32(s>>32))
	if d < 0 {
		d += len(slots)
	}
	return d
}

// del removes the entry of k for which eq reports true.
func (t *table) del(k uint64, eq func(v uint32) bool) {
	if t.n == 0 {
		return
	}
	if t.old != nil {
		t.drain()
	}
	fp := fingerprint(k)
	slots := t.slotsOf(fp)
	i := home(slots, fp)
	for {
		s := slots[i]
		if uint32(s) == 0 {
			return
		}
		if uint32(s>>32) == fp && eq(uint32(s)) {
			break
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
	removeAt(slots, i)
	t.n--
	if size := len(t.slots); t.old == nil && size > tableMinSize && t.n*8 < size {
		t.resize(max(tableMinSize, size/2))
	}
}

// removeAt empties slot i, shifting the rest of its probe run back by one
// (up to an empty slot or an entry at its home), so lookups never need
// tombstones.
func removeAt(slots []uint64, i int) {
	for {
		j := i + 1
		if j == len(slots) {
			j = 0
		}
		s := slots[j]
		if uint32(s) == 0 || distance(slots, j, s) == 0 {
			break
		}
		slots[i] = s
		i = j
	}
	slots[i] = 0
}

// resize starts moving the entries to new slots of size, and moves the
// first drainStep homes' worth.
func (t *table) resize(size int) {
	if len(t.slots) == 0 { // the zero table: nothing to move
		t.slots = make([]uint64, size)
		return
	}
	t.old, t.drained = t.slots, 0
	t.slots = make([]uint64, size)
	t.drain()
}

// drain moves the entries of the next drainStep homes of the old slots,
// and drops the old slots once all have moved. Those homes' entries lie
// together in their probe runs (a run is ordered by home): before them
// only entries of homes that come earlier cyclically (those that wrapped
// from the end of the slots), after them entries of later homes. One walk
// from the first home takes them out and shifts each later entry of the
// run back as far as its home allows, so a run is compacted once per
// drain, not once per entry moved.
func (t *table) drain() {
	old := t.old
	lo := t.drained
	span := min(drainStep, len(old)-lo) // the homes lo, …, lo+span−1
	gap := -1                           // the first emptied slot of the run, as an offset from lo; −1 when none
	for off := 0; ; off++ {
		i := lo + off
		if i >= len(old) {
			i -= len(old)
		}
		s := old[i]
		if uint32(s) == 0 {
			if off >= span {
				break
			}
			gap = -1 // a new run
			continue
		}
		switch h := off - distance(old, i, s); {
		case h < 0:
			// A home that wrapped from the end: it stays, and comes
			// before anything this run gives up.
		case h < span:
			place(t.slots, s)
			old[i] = 0
			if gap < 0 {
				gap = off
			}
		default:
			// A later home: its slot is past the drained homes'.
			to := max(gap, h)
			if gap < 0 || to == off {
				// Nothing before it was emptied, or it sits at its home:
				// the rest of the run stays too.
				t.finishDrain(lo + span)
				return
			}
			j := lo + to
			if j >= len(old) {
				j -= len(old)
			}
			old[j], old[i] = s, 0
			gap = to + 1
		}
	}
	t.finishDrain(lo + span)
}

// finishDrain records the old slots' homes below drained as moved, and
// drops the old slots once all have.
func (t *table) finishDrain(drained int) {
	t.drained = drained
	if drained == len(t.old) {
		t.old, t.drained = nil, 0
	}
}

// each calls fn for every value; fn must not modify the table.
func (t *table) each(fn func(v uint32)) {
	for _, slots := range [2][]uint64{t.old, t.slots} {
		for _, s := range slots {
			if v := uint32(s); v != 0 {
				fn(v)
			}
		}
	}
}

// span returns the number of slots, the old ones included, that at reads.
func (t *table) span() int { return len(t.old) + len(t.slots) }

// at returns the value in slot i of the old slots followed by the new, 0
// for an empty one. With span it walks a table that no longer changes a
// piece at a time.
func (t *table) at(i int) uint32 {
	if i < len(t.old) {
		return uint32(t.old[i])
	}
	return uint32(t.slots[i-len(t.old)])
}

// len returns the number of entries.
func (t *table) len() int { return t.n }
