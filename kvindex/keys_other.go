//go:build !amd64 || purego

package kvindex

// chainKeys16 is chainKeys for blocks of 16 tokens; len(tokens) is
// 16·len(out).
func chainKeys16(h uint64, tokens []uint32, out []uint64) uint64 {
	return chainKeys16Go(h, tokens, out)
}
