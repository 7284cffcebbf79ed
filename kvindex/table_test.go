package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap drives the table and a Go map with the same random
// operations, with keys that share fingerprints and probe runs.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"random keys", func(r *rand.Rand) uint64 { return r.Uint64() }},
		{"small key space", func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) }},
		{"patterned low bits", func(r *rand.Rand) uint64 { return uint64(r.IntN(500)) << 32 }},
		// k·c differs by i: one fingerprint for all, told apart by eq.
		{"shared fingerprints", func(r *rand.Rand) uint64 { return 12345 + uint64(r.IntN(40))*fingerprintInverse() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, 2))
			var tb table
			ref := make(map[uint64]uint32)
			keyOf := make(map[uint32]uint64) // the caller's side of the table
			eq := func(k uint64) func(v uint32) bool {
				return func(v uint32) bool { return keyOf[v] == k }
			}
			for i := range 200000 {
				k := tc.key(r)
				switch r.IntN(3) {
				case 0, 1:
					if old, ok := ref[k]; ok {
						tb.del(k, eq(k))
						delete(keyOf, old)
					}
					v := uint32(i + 1)
					tb.insert(k, v)
					ref[k], keyOf[v] = v, k
				default:
					tb.del(k, eq(k))
					delete(keyOf, ref[k])
					delete(ref, k)
				}
				if got := tb.get(k, eq(k)); got != ref[k] {
					t.Fatalf("op %d: get(%d) = %d, want %d", i, k, got, ref[k])
				}
				if i%4999 == 0 || (tb.old != nil && i%211 == 0) { // every key, often in mid-resize
					checkTable(t, &tb)
					for k, v := range ref {
						if got := tb.get(k, eq(k)); got != v {
							t.Fatalf("op %d (resizing %v): get(%d) = %d, want %d", i, tb.old != nil, k, got, v)
						}
					}
				}
			}
			if tb.len() != len(ref) {
				t.Fatalf("len %d, want %d", tb.len(), len(ref))
			}
			n := 0
			tb.each(func(v uint32) {
				n++
				if ref[keyOf[v]] != v {
					t.Errorf("each: %d, want %d", v, ref[keyOf[v]])
				}
			})
			if n != len(ref) {
				t.Errorf("each visited %d, want %d", n, len(ref))
			}
			for k := range ref {
				tb.del(k, eq(k))
			}
			if tb.len() != 0 || tb.get(tc.key(r), func(uint32) bool { return true }) != 0 {
				t.Error("table not empty after deleting everything")
			}
		})
	}
}

// TestTableResizesIncrementally grows and shrinks a large table and checks
// that no single insert or delete moves more than drainStep homes' worth
// of the old slots, that every key is found while both arrays hold
// entries, and that the old slots are dropped once drained.
func TestTableResizesIncrementally(t *testing.T) {
	t.Parallel()
	var tb table
	const n = 200000
	keys := make([]uint64, n)
	r := rand.New(rand.NewPCG(3, 4))
	keyOf := make(map[uint32]uint64, n)
	eq := func(k uint64) func(v uint32) bool { return func(v uint32) bool { return keyOf[v] == k } }
	check := func(upTo int) {
		t.Helper()
		for i := range upTo {
			if keys[i] != 0 && tb.get(keys[i], eq(keys[i])) != uint32(i+1) {
				t.Fatalf("key %d lost (resizing %v, %d of %d homes drained)", i, tb.old != nil, tb.drained, len(tb.old))
			}
		}
	}
	resizes := 0
	for i := range n {
		keys[i] = r.Uint64() | 1
		keyOf[uint32(i+1)] = keys[i]
		wasDraining, drained := tb.old != nil, tb.drained
		tb.insert(keys[i], uint32(i+1))
		if tb.old != nil && !wasDraining {
			resizes++
			if len(tb.old) >= 50000 {
				check(i + 1) // just after a large resize began
			}
		}
		if wasDraining && tb.old != nil && tb.drained-drained > drainStep {
			t.Fatalf("one insert drained %d homes", tb.drained-drained)
		}
		if len(tb.old) >= 50000 && i%97 == 0 {
			checkTable(t, &tb)
		}
	}
	if resizes < 20 {
		t.Fatalf("%d resizes began; want the table to have grown by steps", resizes)
	}
	// Delete most keys: the table shrinks, again by steps.
	for i := range n - 1000 {
		wasDraining, drained := tb.old != nil, tb.drained
		tb.del(keys[i], eq(keys[i]))
		keys[i] = 0
		if wasDraining && tb.old != nil && tb.drained-drained > drainStep {
			t.Fatalf("one delete drained %d homes", tb.drained-drained)
		}
		if tb.old != nil && i%1013 == 0 {
			check(n)
		}
	}
	check(n)
	if tb.len() != 1000 || len(tb.slots) > 16*1000 {
		t.Fatalf("after deleting all but 1,000: len %d, %d slots", tb.len(), len(tb.slots))
	}
}

// TestTableDrainWrappedRun drains the first homes of slots whose probe
// run wraps from the end past them: the wrapped entries and a later
// home's entry behind them must stay where they are.
func TestTableDrainWrappedRun(t *testing.T) {
	t.Parallel()
	const size = 64
	keyAt := func(h, i int) uint64 { // a key whose home in size slots is h
		return (uint64(h)<<26 | uint64(i)) << 32 * fingerprintInverse()
	}
	tb := table{slots: make([]uint64, size)}
	keyOf := map[uint32]uint64{}
	add := func(k uint64) {
		v := uint32(len(keyOf) + 1)
		keyOf[v] = k
		place(tb.slots, uint64(fingerprint(k))<<32|uint64(v))
		tb.n++
	}
	for i := range 24 {
		add(keyAt(60, i)) // slots 60–63 and 0–19
	}
	add(keyAt(17, 0)) // slot 20, behind them
	add(keyAt(40, 0))
	checkTable(t, &tb)
	tb.resize(size * 3 / 2)
	if tb.old == nil || tb.drained != drainStep {
		t.Fatalf("drained %d homes, want %d still draining", tb.drained, drainStep)
	}
	checkTable(t, &tb)
	for v, k := range keyOf {
		if got := tb.get(k, func(u uint32) bool { return keyOf[u] == k }); got != v {
			t.Fatalf("key of value %d: got %d", v, got)
		}
	}
}

// checkTable fails t unless every entry of both arrays can be reached
// from its home (no empty slot between them), every run is ordered by
// home as Robin Hood placement leaves it, and the old slots hold no entry
// of a drained home.
func checkTable(t *testing.T, tb *table) {
	t.Helper()
	for a, slots := range [2][]uint64{tb.old, tb.slots} {
		for i, s := range slots {
			if uint32(s) == 0 {
				continue
			}
			d := distance(slots, i, s)
			for k := 1; k <= d; k++ {
				if uint32(slots[(i-k+len(slots))%len(slots)]) == 0 {
					t.Fatalf("slot %d of %d: an empty slot %d before it, %d from its home", i, len(slots), k, d)
				}
			}
			if prev := slots[(i-1+len(slots))%len(slots)]; uint32(prev) != 0 && d > 0 && distance(slots, (i-1+len(slots))%len(slots), prev) < d-1 {
				t.Fatalf("slot %d of %d: its run is out of home order", i, len(slots))
			}
			if a == 0 && home(slots, uint32(s>>32)) < tb.drained {
				t.Fatalf("old slot %d holds an entry of drained home %d (drained %d)", i, home(slots, uint32(s>>32)), tb.drained)
			}
		}
	}
}

// sink keeps a benchmark's warming reads from being optimised away.
var sink uint64

// TestTableSharedFingerprint stores keys whose fingerprints are equal and
// checks that eq, not the fingerprint, decides.
func TestTableSharedFingerprint(t *testing.T) {
	t.Parallel()
	a := uint64(12345)
	b := a + fingerprintInverse()
	if fingerprint(a) != fingerprint(b) {
		t.Fatalf("no shared fingerprint: %x %x", fingerprint(a), fingerprint(b))
	}
	var tb table
	keyOf := map[uint32]uint64{1: a, 2: b}
	eq := func(k uint64) func(v uint32) bool { return func(v uint32) bool { return keyOf[v] == k } }
	tb.insert(a, 1)
	tb.insert(b, 2)
	if tb.get(a, eq(a)) != 1 || tb.get(b, eq(b)) != 2 {
		t.Fatal("keys with one fingerprint confused")
	}
	tb.del(a, eq(a))
	if tb.get(a, eq(a)) != 0 || tb.get(b, eq(b)) != 2 {
		t.Fatal("deleting one key of a fingerprint lost the other")
	}
}

// fingerprintInverse returns d with d·c = 1 modulo 2^64 for fingerprint's
// multiplier c: keys k and k+i·d get products k·c+i, so they share a
// fingerprint unless the low half carries.
func fingerprintInverse() uint64 {
	const c = 0x9e3779b97f4a7c15
	inv := uint64(c)
	for range 6 {
		inv *= 2 - c*inv // Newton's iteration doubles the correct bits
	}
	return inv
}

// BenchmarkTableGrow inserts a million keys into an empty table, as a new
// process's index grows: every insert of the growth drains part of a
// resize. As the index does, it warms the slots of the next warmChunk
// keys before inserting them.
func BenchmarkTableGrow(b *testing.B) {
	const n = 1 << 20
	r := rand.New(rand.NewPCG(5, 6))
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	for b.Loop() {
		var tb table
		var sum uint64
		for lo := 0; lo < n; lo += warmChunk {
			sum ^= tb.warm(keys[lo : lo+warmChunk])
			for i, k := range keys[lo : lo+warmChunk] {
				tb.insert(k, uint32(lo+i+1))
			}
		}
		sink = sum
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/insert")
}
