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
