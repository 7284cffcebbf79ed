package scoring

import (
	"context"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/tokenize"
)

// The sources the gathering room reads before a decision. Each is declared
// here, by its consumer, and implemented elsewhere: *tokenize.Pipelines,
// *kvindex.Index and *discovery.Scraper. Implementations must be safe for
// concurrent use.

// TokenSource yields the exact prompt token ids of a request body of the
// given kind, as the engine serving model will see them. remoteBase is the
// base URL (http://host:port) of a candidate worker that may be asked to
// tokenize when local tokenization cannot be exact; empty forbids asking.
// path says where the ids came from ("local" or "remote"). An error means no
// exact ids are available; the router then steps down to the approximate
// mode and puts the error's text on the decision. The router only reads
// ids; a source may share them with its own cache.
type TokenSource interface {
	Tokenize(ctx context.Context, model string, kind tokenize.Kind, body *tokenize.Body, remoteBase string) (ids []uint32, path string, err error)
}

// PrefixIndex is the KV-cache index.
//
// AppendLookup appends, for the workers holding any of the prompt's leading
// blocks, their cached prefix of ids in tokens. AppendSpeculate records that
// worker was just assigned ids, so that requests decided before its KV
// events arrive see those blocks as (soon) cached, as the engine itself
// does, and appends the block keys it entered (for peers). Stale reports
// whether the index's view of worker is known to be incomplete. Batches
// counts the event batches applied from worker, ok false when the index
// has no stream of it.
type PrefixIndex interface {
	AppendLookup(dst []kvindex.Match, key kvindex.ChainKey, ids []uint32, blockSize int) []kvindex.Match
	AppendSpeculate(dst []uint64, worker string, key kvindex.ChainKey, ids []uint32, blockSize int) []uint64
	Stale(worker string) bool
	Batches(worker string) (n uint64, ok bool)
}

// EngineLoad reports the last scraped engine gauges of a worker; ok is
// false before any scrape succeeded. A report marked Stale is not a
// measurement: the router treats it as missing, never as an idle worker.
type EngineLoad interface {
	Load(worker string) (l discovery.EngineLoad, ok bool)
}

// PeerView says how current the peers' part of the ledger is: StalePeers
// is the number of peers whose assignments the ledger holds but from whom
// nothing came for a while. *peers.Mesh implements it.
type PeerView interface {
	StalePeers() int
}
