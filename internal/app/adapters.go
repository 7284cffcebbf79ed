package app

import (
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
)

// prefixIndex adapts the KV-cache index to what scoring consumes.
type prefixIndex struct{ ix *kvindex.Index }

func (p prefixIndex) Lookup(k scoring.CacheKey, ids []uint32, blockSize int) []scoring.PrefixMatch {
	ms := p.ix.Lookup(kvindex.ChainKey{Model: k.Model, LoRA: k.LoRA, Salt: k.Salt}, ids, blockSize)
	out := make([]scoring.PrefixMatch, len(ms))
	for i, m := range ms {
		out[i] = scoring.PrefixMatch{Worker: m.Worker, GPUTokens: m.GPUTokens, OffloadedTokens: m.OffloadedTokens}
	}
	return out
}

func (p prefixIndex) Speculate(worker string, k scoring.CacheKey, ids []uint32, blockSize int) {
	p.ix.Speculate(worker, kvindex.ChainKey{Model: k.Model, LoRA: k.LoRA, Salt: k.Salt}, ids, blockSize)
}

func (p prefixIndex) Stale(worker string) bool { return p.ix.Stale(worker) }
