//go:build amd64 && !purego

package kvindex

// block16Impls returns the block-16 chainers this machine can run, by name.
func block16Impls() map[string]func(h uint64, tokens []uint32, out []uint64) uint64 {
	impls := map[string]func(uint64, []uint32, []uint64) uint64{"go": chainKeys16Go}
	if hasAES {
		impls["aes"] = func(h uint64, tokens []uint32, out []uint64) uint64 {
			return chainKeys16AES(h, &tokens[0], len(out), &out[0])
		}
	}
	return impls
}
