//go:build !amd64 || purego

package kvindex

// chainKeys16 is chainKeys for blocks of 16 tokens; len(tokens) is
// 16·len(out).
func chainKeys16(h uint64, tokens []uint32, out []uint64) uint64 {
	return chainKeys16Go(h, tokens, out)
}

// hashDescend16 is described in keys_amd64.go.
func hashDescend16(h uint64, tokens []uint32, page []node, all uint64) (int, uint64) {
	return hashDescend16Go(h, tokens, page, all)
}
