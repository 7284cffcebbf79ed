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

// hashDescend16Impls returns the hashDescend16 kernels this machine can
// run, by name, each with the block-16 chainer whose keys it makes.
func hashDescend16Impls() map[string]hashDescender {
	impls := map[string]hashDescender{"go": {hashDescend16Go, chainKeys16Go}}
	if hasAES {
		impls["aes"] = hashDescender{
			func(h uint64, tokens []uint32, page []node, all uint64) (int, uint64) {
				return hashDescend16AES(h, &tokens[0], len(tokens)/16, &page[len(page)-1], all)
			},
			block16Impls()["aes"],
		}
	}
	return impls
}
