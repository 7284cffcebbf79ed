package vllmsim

import (
	"crypto/sha256"
	"encoding/binary"
)

// DefaultHashSeed is the NONE_HASH seed vLLM uses for sha256_cbor when
// PYTHONHASHSEED is unset (vLLM PR #51875 and later).
const DefaultHashSeed = "vllm-none-hash"

// BlockHash is a prefix-cache block identity: the 32-byte SHA-256 digest of
// vLLM's sha256_cbor algorithm.
type BlockHash [32]byte

// Uint64 returns the hash as vLLM puts it on the KV-event wire in int mode
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1): the digest read big-endian and
// masked to 64 bits, which is its last eight bytes.
func (h BlockHash) Uint64() uint64 { return binary.BigEndian.Uint64(h[24:]) }

// hasher computes chained block hashes exactly as vLLM's sha256_cbor
// algorithm: hash_i = sha256(canonical_cbor([parent, tokens_i, extra_i])),
// with parent = sha256(cbor(seed)) for the first block. It reuses one
// scratch buffer, so a hasher is not safe for concurrent use.
type hasher struct {
	none BlockHash
	buf  []byte
}

func newHasher(seed string) *hasher {
	h := &hasher{}
	h.buf = cborText(h.buf[:0], seed)
	h.none = sha256.Sum256(h.buf)
	return h
}

// block returns the hash of one full block of tokens chained to parent.
// extra holds vLLM's extra keys for the block (LoRA name, then cache salt
// on block 0); nil encodes as CBOR null, as vLLM does for "no extra keys".
func (h *hasher) block(parent BlockHash, tokens []uint32, extra []string) BlockHash {
	b := h.buf[:0]
	b = append(b, 0x83)
	b = cborHead(b, 2, 32)
	b = append(b, parent[:]...)
	b = cborHead(b, 4, uint64(len(tokens)))
	for _, t := range tokens {
		b = cborHead(b, 0, uint64(t))
	}
	if extra == nil {
		b = append(b, 0xf6)
	} else {
		b = cborHead(b, 4, uint64(len(extra)))
		for _, s := range extra {
			b = cborText(b, s)
		}
	}
	h.buf = b
	return sha256.Sum256(b)
}

// chain appends to hashes the hashes of every full block of tokens from
// block index len(hashes) on, so a request's hashes can be extended as its
// tokens grow. keys returns the extra keys of block i.
func (h *hasher) chain(hashes []BlockHash, tokens []uint32, blockSize int, keys func(i int) []string) []BlockHash {
	for i := len(hashes); (i+1)*blockSize <= len(tokens); i++ {
		parent := h.none
		if i > 0 {
			parent = hashes[i-1]
		}
		hashes = append(hashes, h.block(parent, tokens[i*blockSize:(i+1)*blockSize], keys(i)))
	}
	return hashes
}

// cborHead appends a canonical (shortest form) CBOR head of the major type
// with argument n.
func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, m|27), n)
	}
}

// cborText appends s as a CBOR text string.
func cborText(b []byte, s string) []byte {
	return append(cborHead(b, 3, uint64(len(s))), s...)
}

// ChainHasher computes vLLM's sha256_cbor block hashes for tools that
// publish KV events without running an engine (load drivers). It is not
// safe for concurrent use.
type ChainHasher struct{ h *hasher }

// NewChainHasher returns a hasher with vLLM's seed (DefaultHashSeed when
// seed is empty).
func NewChainHasher(seed string) *ChainHasher {
	if seed == "" {
		seed = DefaultHashSeed
	}
	return &ChainHasher{newHasher(seed)}
}

// Extend appends to hashes the hashes of the full blocks of tokens from
// block len(hashes) on, for the base model without a cache salt.
func (c *ChainHasher) Extend(hashes []BlockHash, tokens []uint32, blockSize int) []BlockHash {
	return c.h.chain(hashes, tokens, blockSize, func(int) []string { return nil })
}
