package app

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/tokenize"
)

// prefixIndex adapts the KV-cache index to what scoring consumes.
type prefixIndex struct {
	ix *kvindex.Index
	// bufs holds *[]kvindex.Match for AppendLookup, so that a lookup's
	// only allocation is the matches scoring receives.
	bufs *sync.Pool
}

func newPrefixIndex(ix *kvindex.Index) prefixIndex {
	return prefixIndex{ix: ix, bufs: &sync.Pool{New: func() any { return new([]kvindex.Match) }}}
}

func (p prefixIndex) Lookup(k scoring.CacheKey, ids []uint32, blockSize int) []scoring.PrefixMatch {
	buf := p.bufs.Get().(*[]kvindex.Match)
	defer p.bufs.Put(buf)
	ms := p.ix.AppendLookup((*buf)[:0], kvindex.ChainKey{Model: k.Model, LoRA: k.LoRA, Salt: k.Salt}, ids, blockSize)
	*buf = ms
	if len(ms) == 0 {
		return nil
	}
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
	pool    extproc.Pool
	metrics *tokenize.PipelineMetrics
	next    atomic.Uint64

	mu    sync.Mutex
	pipes map[string]*tokenize.Pipeline // configured models; others get a remote-only one on first use
}

// pipeline returns the model's pipeline, creating a remote-only one for a
// model that discovery found but the config does not list.
func (s *tokenSource) pipeline(model string) *tokenize.Pipeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pipes[model]
	if p == nil {
		p, _ = tokenize.NewPipeline(model, "", 0, s.metrics) // remote only: cannot fail
		s.pipes[model] = p
	}
	return p
}

func (s *tokenSource) Tokens(ctx context.Context, req *scoring.Request) ([]uint32, string, error) {
	p := s.pipeline(req.Model)
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

// engineLoad adapts the metrics scraper to scoring. A stale scrape is not
// reported at all: stale is unknown, never zero.
type engineLoad struct{ s *discovery.Scraper }

func (e engineLoad) Load(worker string) (scoring.LoadReport, bool) {
	l, ok := e.s.Load(worker)
	if !ok || l.Stale {
		return scoring.LoadReport{}, false
	}
	return scoring.LoadReport{
		Running: l.Running, Waiting: l.Waiting,
		KVUsage: l.KVCacheUsage, HasKVUsage: l.HasKVCacheUsage,
		KVBlocks: l.KVBlocks, Scraped: l.ScrapedAt,
	}, true
}
