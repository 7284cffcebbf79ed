package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestTableMatchesMap drives the table and a Go map with the same random
// operations, with keys that collide in their probe runs.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  func(r *rand.Rand) uint64
	}{
		{"random keys", func(r *rand.Rand) uint64 { return r.Uint64() }},
		{"small key space", func(r *rand.Rand) uint64 { return uint64(r.IntN(300)) }},
		{"patterned low bits", func(r *rand.Rand) uint64 { return uint64(r.IntN(500)) << 32 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, 2))
			var tb table
			ref := make(map[uint64]uint32)
			for i := range 200000 {
				k := tc.key(r)
				switch r.IntN(3) {
				case 0, 1:
					v := uint32(i + 1)
					tb.put(k, v)
					ref[k] = v
				default:
					tb.del(k)
					delete(ref, k)
				}
				if got := tb.get(k); got != ref[k] {
					t.Fatalf("op %d: get(%d) = %d, want %d", i, k, got, ref[k])
				}
			}
			if tb.len() != len(ref) {
				t.Fatalf("len %d, want %d", tb.len(), len(ref))
			}
			n := 0
			tb.each(func(k uint64, v uint32) {
				n++
				if ref[k] != v {
					t.Errorf("each: %d → %d, want %d", k, v, ref[k])
				}
			})
			if n != len(ref) {
				t.Errorf("each visited %d, want %d", n, len(ref))
			}
			for k := range ref {
				tb.del(k)
			}
			if tb.len() != 0 || tb.get(tc.key(r)) != 0 {
				t.Error("table not empty after deleting everything")
			}
		})
	}
}
