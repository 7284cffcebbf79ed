package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestChainKeysMatchBlockKey checks that the written-in 16-token path of
// chainKeys and its general path compute what blockKey computes.
func TestChainKeysMatchBlockKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := make([]uint32, 40*64)
	for i := range tokens {
		tokens[i] = uint32(rng.IntN(150000))
	}
	for _, bs := range []int{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 64} {
		n := len(tokens) / bs
		got := make([]uint64, n)
		last := chainKeys(42, tokens, bs, got)
		h := uint64(42)
		for j := range n {
			h = blockKey(h, tokens[j*bs:(j+1)*bs])
			if got[j] != h {
				t.Fatalf("block size %d, block %d: chainKeys %x, blockKey %x", bs, j, got[j], h)
			}
		}
		if last != h {
			t.Fatalf("block size %d: chainKeys returned %x, want %x", bs, last, h)
		}
	}
}

// TestBlockKeyDistinct checks that changing any one token, the parent,
// the block's length, or swapping two tokens changes the key, and that many random blocks give
// distinct keys.
func TestBlockKeyDistinct(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	seen := make(map[uint64]bool)
	add := func(k uint64, what string) {
		t.Helper()
		if seen[k] {
			t.Fatalf("%s: key %x seen before", what, k)
		}
		seen[k] = true
	}
	for _, bs := range []int{1, 3, 16, 32, 33} {
		block := make([]uint32, bs)
		for i := range block {
			block[i] = uint32(rng.IntN(150000))
		}
		add(blockKey(7, block), "base block")
		add(blockKey(8, block), "other parent")
		add(blockKey(7, append(block[:bs:bs], 0)), "zero appended")
		for i := range bs {
			for _, d := range []uint32{1, 1 << 17, 1 << 31} {
				b := append([]uint32(nil), block...)
				b[i] ^= d
				add(blockKey(7, b), "one token changed")
			}
			if j := (i + 1) % bs; block[i] != block[j] {
				b := append([]uint32(nil), block...)
				b[i], b[j] = b[j], b[i]
				add(blockKey(7, b), "two tokens swapped")
			}
		}
	}
	for range 1 << 16 {
		block := make([]uint32, 16)
		for i := range block {
			block[i] = uint32(rng.IntN(150000))
		}
		add(blockKey(rng.Uint64(), block), "random block")
	}
}
