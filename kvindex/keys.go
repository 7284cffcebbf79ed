package kvindex

import (
	"math/bits"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// ChainKey is what roots a chain of block keys: two requests can share
// cached blocks only when their ChainKeys are equal. The zero value is the
// base model with an empty name, no adapter and no salt.
type ChainKey struct {
	// Model is warmpath's served model name (what clients send).
	Model string
	// LoRA is the adapter name, empty for the base model.
	LoRA string
	// Salt is the request's cache_salt, empty when none.
	Salt string
}

// rootSeed separates warmpath's key space from plain xxh3 outputs.
const rootSeed = 0x7761726d70617468 // "warmpath"

// root returns the key a chain's first block is chained from.
func (k ChainKey) root() uint64 {
	h := xxh3.HashStringSeed(k.Model, rootSeed)
	h = xxh3.HashStringSeed(k.LoRA, h^0x6c6f7261)
	return xxh3.HashStringSeed(k.Salt, h^0x73616c74)
}

// blockKey chains the key of one full block of tokens onto its parent's
// key: a hash of the block's tokens alone, mixed with the parent's key.
// Keys are compared only within one process, so they need not be stable
// across versions or machines: blocks of 16 tokens hash differently where
// the CPU has AES instructions (keys_amd64.go).
func blockKey(parent uint64, tokens []uint32) uint64 {
	if len(tokens) == 16 {
		var out [1]uint64
		return chainKeys16(parent, tokens, out[:])
	}
	return chainKey(parent, blockHash(tokens))
}

// chainKeys fills out with the chained keys of the consecutive blocks of
// tokens, len(out) blocks of blockSize tokens, starting from parent, and
// returns the last key (parent when out is empty). It computes what
// blockKey computes, block after block; the hashes of the blocks do not
// depend on one another, so the CPU overlaps them and only the cheap
// chaining step is serial.
func chainKeys(parent uint64, tokens []uint32, blockSize int, out []uint64) uint64 {
	h := parent
	if blockSize == 16 {
		return chainKeys16(h, tokens[:16*len(out)], out)
	}
	for j := range out {
		h = blockKey(h, tokens[j*blockSize:(j+1)*blockSize])
		out[j] = h
	}
	return h
}

// asBlocks16 returns tokens, whose length is a multiple of 16, as blocks
// of 16 tokens sharing its memory.
func asBlocks16(tokens []uint32) [][16]uint32 {
	if len(tokens) < 16 {
		return nil // no block, and no pointer past tokens' memory
	}
	return unsafe.Slice((*[16]uint32)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)/16)
}

// chainKeys16Go is chainKeys for vLLM's default block size of 16 tokens,
// with blockHash written in. It is the block-16 hash on machines without
// the assembly one (keys_amd64.s); len(tokens) is 16·len(out).
func chainKeys16Go(h uint64, tokens []uint32, out []uint64) uint64 {
	blocks := asBlocks16(tokens)
	out = out[:len(blocks)]
	for j := range blocks {
		t := &blocks[j]
		c := mum(k0^pair(t[0], t[1]), k4^pair(t[2], t[3]))
		c ^= mum(k1^pair(t[4], t[5]), k4^pair(t[6], t[7]))
		c ^= mum(k2^pair(t[8], t[9]), k4^pair(t[10], t[11]))
		c ^= mum(k3^pair(t[12], t[13]), k4^pair(t[14], t[15]))
		h = chainKey(h, c^16)
		out[j] = h
	}
	return h
}

// Constants of blockHash, in the manner of wyhash. Each has bit 63 set, so
// no pair of token ids below 2³¹ cancels one out.
const (
	k0 = 0xa0761d6478bd642f
	k1 = 0xe7037ed1a0b428db
	k2 = 0x8ebc6af09c88c6e3
	k3 = 0xd89965cc75374cc3
	k4 = 0x9d8e4e27c47d124f
	k5 = 0xc2b2ae3d27d4eb4f
	k6 = 0x9e3779b97f4a7c15
)

// blockHash hashes one block's tokens, without its parent. Runs of four
// tokens go to four lanes in turn, each lane folding its runs with a
// 64×64→128-bit multiply; a last run of one to three tokens is padded with
// zeros, and the token count is mixed in so that padding cannot collide.
func blockHash(t []uint32) uint64 {
	a := [4]uint64{k0, k1, k2, k3}
	i := 0
	for ; i+4 <= len(t); i += 4 {
		l := &a[(i/4)&3]
		*l = mum(*l^pair(t[i], t[i+1]), k4^pair(t[i+2], t[i+3]))
	}
	if r := t[i:]; len(r) > 0 {
		var w [4]uint32
		copy(w[:], r)
		l := &a[(i/4)&3]
		*l = mum(*l^pair(w[0], w[1]), k4^pair(w[2], w[3]))
	}
	return a[0] ^ a[1] ^ a[2] ^ a[3] ^ uint64(len(t))
}

// chainKey mixes a block's hash into its parent's key.
func chainKey(parent, hash uint64) uint64 {
	return mum(parent^k5, hash^k6)
}

// pair packs two token ids into one word.
func pair(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }

// mum folds the 128-bit product of a and b to 64 bits.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// BlockKeys returns the chained key of every full block of tokens under k,
// with blocks of blockSize tokens. It returns nil when blockSize < 1.
func BlockKeys(k ChainKey, tokens []uint32, blockSize int) []uint64 {
	if blockSize < 1 {
		return nil
	}
	keys := make([]uint64, 0, len(tokens)/blockSize)
	keys = keys[:len(tokens)/blockSize]
	chainKeys(k.root(), tokens, blockSize, keys)
	return keys
}
