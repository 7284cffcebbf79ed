package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChainKeysMatchBlockKey checks that the written-in 16-token path of
// chainKeys and its general path compute what blockKey computes.
func TestChainKeysMatchBlockKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := randTokens(rng, 40*64)
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
		block := randTokens(rng, bs)
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
		block := randTokens(rng, 16)
		add(blockKey(rng.Uint64(), block), "random block")
	}
}

// TestBlock16Impls checks each way of chaining 16-token blocks that this
// machine can run (the assembly one and the Go one): chaining a prompt at
// once or in pieces gives the same keys, and changing any token by one
// bit, swapping two tokens, or changing the parent changes the key.
func TestBlock16Impls(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	tokens := randTokens(rng, 16*40)
	for name, chain := range block16Impls() {
		t.Run(name, func(t *testing.T) {
			whole := make([]uint64, 40)
			last := chain(42, tokens, whole)
			if last != whole[39] {
				t.Fatalf("returned %x, last key %x", last, whole[39])
			}
			h := uint64(42)
			for _, cut := range [][2]int{{0, 1}, {1, 8}, {8, 9}, {9, 40}} {
				part := make([]uint64, cut[1]-cut[0])
				h = chain(h, tokens[16*cut[0]:16*cut[1]], part)
				for j, k := range part {
					if k != whole[cut[0]+j] {
						t.Fatalf("block %d: %x in pieces, %x at once", cut[0]+j, k, whole[cut[0]+j])
					}
				}
			}
			seen := make(map[uint64]string)
			key := func(parent uint64, block []uint32, what string) {
				t.Helper()
				var out [1]uint64
				k := chain(parent, block, out[:])
				if prev, ok := seen[k]; ok {
					t.Fatalf("%s: key %x, as for %s", what, k, prev)
				}
				seen[k] = what
			}
			block := tokens[:16]
			key(7, block, "base")
			key(8, block, "other parent")
			for i := range 16 {
				for bit := range 32 {
					b := slices.Clone(block)
					b[i] ^= 1 << bit
					key(7, b, fmt.Sprintf("token %d bit %d", i, bit))
				}
				for j := i + 1; j < 16; j++ {
					if block[i] != block[j] {
						b := slices.Clone(block)
						b[i], b[j] = b[j], b[i]
						key(7, b, fmt.Sprintf("tokens %d and %d swapped", i, j))
					}
				}
			}
			for n := range 1 << 15 {
				b := randTokens(rng, 16)
				key(rng.Uint64(), b, fmt.Sprintf("random block %d", n))
			}
		})
	}
}
