package kvindex

import (
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
// key. The tokens are hashed as their in-memory bytes; keys are compared
// only within one process, so byte order does not matter.
func blockKey(parent uint64, tokens []uint32) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, parent)
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), len(tokens)*4)
	return xxh3.HashSeed(b, parent)
}

// BlockKeys returns the chained key of every full block of tokens under k,
// with blocks of blockSize tokens. It returns nil when blockSize < 1.
func BlockKeys(k ChainKey, tokens []uint32, blockSize int) []uint64 {
	if blockSize < 1 {
		return nil
	}
	keys := make([]uint64, 0, len(tokens)/blockSize)
	h := k.root()
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		h = blockKey(h, tokens[i:i+blockSize])
		keys = append(keys, h)
	}
	return keys
}
