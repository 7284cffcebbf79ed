package scoring

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/tokenize"
)

// The gathering room: everything a decision knows before it takes the
// router's lock. It asks the token source for exact ids, the KV index for
// each candidate's cached prefix, and the scraper for each candidate's
// engine load, and hashes the prompt's text for the approximate mode. It
// holds no state between decisions beyond scratch buffers, and runs
// concurrently for concurrent requests.

// gatherer reads the sources. It is safe for concurrent use.
type gatherer struct {
	cfg    *Config
	m      *metrics
	tokens TokenSource // nil: only ids sent by the client are exact
	index  PrefixIndex // nil: no cache knowledge beyond text history
	load   EngineLoad  // nil: only warmpath's own assignments are load
	peers  PeerView    // nil: no peers
	seed   maphash.Seed
	next   atomic.Uint64 // rotates the worker asked to tokenize
	pool   sync.Pool     // *facts
}

// facts is what one decision gathered. The decision that got it from
// gather hands it back to release; it keeps nothing of it.
type facts struct {
	key       kvindex.ChainKey
	blockSize int
	// ids are the exact prompt token ids, nil when none could be had;
	// exact is set when ids were looked up in the index.
	ids   []uint32
	exact bool
	// more is the prefill, in tokens, of a completions request's prompts
	// after the first (MorePrompts.prefill), when the first's ids are
	// known; without them the prompt's size counts every prompt already.
	more float64
	// chain is the prompt's text-block chain (approximate mode), nil when
	// not needed or the prompt is shorter than one block.
	chain []uint64
	// loads and fresh are each candidate's scraped load and whether it is
	// a current measurement.
	loads []discovery.EngineLoad
	fresh []bool
	// matches is the index's answer and specKeys the block keys the
	// decision's speculation entered, kept for their storage.
	matches  []kvindex.Match
	specKeys []uint64
}

// kindOf maps a request surface to the tokenizer's request kind.
func kindOf(api API) (tokenize.Kind, bool) {
	switch api {
	case APIChat:
		return tokenize.KindChat, true
	case APIMessages:
		return tokenize.KindMessages, true
	case APICompletions:
		return tokenize.KindCompletion, true
	}
	return 0, false
}

// gather fills d's prompt size, mode and cached tokens and returns the
// facts the rest of the decision needs. commit says the decision will be
// reserved: its text chain is recorded even when exact ids exist.
func (g *gatherer) gather(ctx context.Context, req *Request, ws Workers, d *Decision, commit bool) *facts {
	f, _ := g.pool.Get().(*facts)
	if f == nil {
		f = &facts{}
	}
	f.key = kvindex.ChainKey{Model: req.Model, LoRA: req.LoRA, Salt: req.CacheSalt}
	f.blockSize = g.cfg.blockSize(req.Model)
	f.exact, f.chain = false, f.chain[:0]

	var path, reason string
	f.ids, path, reason = g.tokensOf(ctx, req, ws)
	d.TokenizePath, d.TokenizeReason = path, reason
	f.more = 0
	if f.ids != nil {
		d.PromptTokens = len(f.ids)
		f.more = req.MorePrompts.prefill(len(f.ids), f.blockSize, g.cfg.BytesPerToken)
		d.MorePrefillTokens = int(math.Round(f.more))
		if g.index == nil {
			d.TokenizeReason = "no prefix index"
		} else {
			f.exact = true
			d.Mode = ModeExact
			if path == tokenize.PathRemote {
				d.Mode = ModeRemote
			}
			f.matches = g.index.AppendLookup(f.matches[:0], f.key, f.ids, f.blockSize)
			applyMatches(d, f.matches, f.blockSize)
			for i := range ws {
				if g.index.Stale(ws[i].Name) {
					g.m.staleIndex.Inc()
				}
			}
		}
	} else {
		d.PromptTokens = int(float64(len(req.Prompt)) / g.cfg.BytesPerToken)
	}
	if (commit || f.ids == nil) && len(req.Prompt) >= g.cfg.TextChunk {
		f.chain = textChain(g.seed, f.key, req.Prompt, g.cfg.TextChunk, f.chain)
	} else {
		f.chain = nil
	}
	g.loadsOf(ws, f)
	if g.peers != nil {
		d.StalePeers = g.peers.StalePeers()
	}
	return f
}

// release returns f's storage for reuse.
func (g *gatherer) release(f *facts) {
	f.ids = nil
	g.pool.Put(f)
}

// tokensOf returns the request's exact token ids, where they came from, and
// why none came when ids is nil.
func (g *gatherer) tokensOf(ctx context.Context, req *Request, ws Workers) (ids []uint32, path, reason string) {
	if req.TokenIDs != nil {
		return req.TokenIDs, "request", ""
	}
	kind, ok := kindOf(req.API)
	switch {
	case !ok:
		return nil, "none", "the request carries no prompt"
	case g.tokens == nil:
		return nil, "none", "no tokenizer configured"
	}
	base := ""
	if len(ws) > 0 {
		base = "http://" + ws[int(g.next.Add(1)%uint64(len(ws)))].Address
	}
	body := req.Parsed
	if body == nil {
		body = tokenize.UnparsedBody(req.Body)
	}
	ids, path, err := g.tokens.Tokenize(ctx, req.Model, kind, body, base)
	switch {
	case err != nil:
		return nil, "none", err.Error()
	case ids == nil:
		return nil, "none", "tokenizer returned no token ids"
	}
	return ids, path, ""
}

// loadsOf reads every candidate's scraped load into f. A stale report is
// not a measurement: it counts as missing load, never as an idle worker.
func (g *gatherer) loadsOf(ws Workers, f *facts) {
	n := len(ws)
	f.loads, f.fresh = grow(f.loads, n), grow(f.fresh, n)
	if g.load == nil {
		return
	}
	for i := range ws {
		l, ok := g.load.Load(ws[i].Name)
		f.loads[i] = l
		f.fresh[i] = ok && !l.Stale
		switch {
		case !ok:
			g.m.loadMissing.Inc()
		case l.Stale:
			g.m.loadStale.Inc()
		default:
			g.m.loadFresh.Inc()
		}
	}
}

// speculate tells the index that the chosen worker will hold the prompt's
// blocks, and returns the block keys it entered (valid until f is
// released).
func (g *gatherer) speculate(worker string, f *facts) []uint64 {
	f.specKeys = f.specKeys[:0]
	if f.exact {
		f.specKeys = g.index.AppendSpeculate(f.specKeys, worker, f.key, f.ids, f.blockSize)
	}
	return f.specKeys
}

// applyMatches puts the index's answer on the candidates, capped as the
// engine caps its hit: at most floor((P-1)/B)·B tokens, since the last
// prompt token is always computed.
func applyMatches(d *Decision, ms []kvindex.Match, bs int) {
	limit := max(d.PromptTokens-1, 0) / bs * bs
	for _, m := range ms {
		for i := range d.Candidates {
			c := &d.Candidates[i]
			if c.Worker != m.Worker {
				continue
			}
			gpu := min(max(m.GPUTokens, 0), limit)
			off := min(max(m.OffloadedTokens, 0), limit-gpu)
			c.CachedTokens, c.OffloadedTokens = gpu+off, off
			break
		}
	}
}
