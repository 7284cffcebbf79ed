package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/tokenize"
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

// tokenSource adapts the per-model tokenization pipelines to scoring: it
// picks the request kind from the API and, for the remote path, a worker
// serving the model.
type tokenSource struct {
	pipes map[string]*tokenize.Pipeline
	pool  extproc.Pool
	next  atomic.Uint64
}

// errNoPipeline means a model has no tokenization configured at all.
var errNoPipeline = errors.New("no tokenizer for this model")

func (s *tokenSource) Tokens(ctx context.Context, req *scoring.Request) ([]uint32, string, error) {
	p := s.pipes[req.Model]
	if p == nil {
		return nil, "none", errNoPipeline
	}
	var kind tokenize.Kind
	switch req.API {
	case scoring.APIChat:
		kind = tokenize.KindChat
	case scoring.APIMessages:
		kind = tokenize.KindMessages
	case scoring.APICompletions:
		kind = tokenize.KindCompletion
	default:
		return nil, "none", fmt.Errorf("api %s carries no prompt", req.API)
	}
	base := ""
	if ws, _ := s.pool.Candidates(req.Model); len(ws) > 0 {
		base = "http://" + ws[int(s.next.Add(1)%uint64(len(ws)))].Address
	}
	return p.Tokenize(ctx, kind, req.Body, base)
}
