//go:build amd64 && !purego

package kvindex

import "golang.org/x/sys/cpu"

// hasAES says whether chainKeys16 may use the AES-round block hash of
// keys_amd64.s, which needs AES-NI and the AVX (VEX) encoding. It is read
// once, at start, so every key of a process is made the same way.
var hasAES = cpu.X86.HasAES && cpu.X86.HasAVX

// chainKeys16 is chainKeys for blocks of 16 tokens; len(tokens) is
// 16·len(out).
//
// With AES instructions, a block's 64 bytes go through AES rounds as round
// keys of one 128-bit state: the first 16 bytes are mixed into the state,
// each further 16 bytes are one round's key, and two rounds with fixed keys
// follow, so that every bit of the last 16 bytes has gone through two full
// rounds. The state's low 64 bits are the block's hash c, and the block's
// key is parent·M + c mod 2⁶⁴ for an odd M: for a fixed parent distinct
// hashes give distinct keys, for a fixed hash distinct parents do, and a
// difference in two blocks cancels only if their hashes differ by an exact
// multiple, which pseudo-random 64-bit hashes do about once in 2⁶⁴. Per
// block that is six AES rounds, a multiply and an add, against five
// 128-bit multiplies and their moves in chainKeys16Go; the serial
// multiply-add is what bounds it.
func chainKeys16(h uint64, tokens []uint32, out []uint64) uint64 {
	if !hasAES || len(out) == 0 {
		return chainKeys16Go(h, tokens, out)
	}
	return chainKeys16AES(h, &tokens[0], len(out), &out[0])
}

// chainKeys16AES writes the n chained keys of the n blocks of 16 tokens at
// tokens to out and returns the last; n ≥ 1.
//
//go:noescape
func chainKeys16AES(parent uint64, tokens *uint32, n int, out *uint64) uint64
