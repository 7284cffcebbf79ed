package scoring

import (
	"context"
	"time"
)

// TokenSource yields the exact prompt token ids of a request, as the engine
// will see them. Path says where they came from ("local" or "remote"). An
// error means no exact tokens are available; the router then falls back to
// approximate mode and puts the error text on the decision as its
// TokenizeReason. Implementations must be safe for concurrent use.
type TokenSource interface {
	Tokens(ctx context.Context, req *Request) (ids []uint32, path string, err error)
}

// CacheKey names the cache namespace a prompt's blocks live in: the engine
// only shares blocks between requests with equal keys.
type CacheKey struct {
	Model string
	LoRA  string
	Salt  string
}

// PrefixMatch is how much of a prompt one worker holds, in tokens: GPU
// tokens are device blocks, Offloaded tokens are further blocks held by a
// slower tier (CPU, storage). Both are whole blocks.
type PrefixMatch struct {
	Worker          string
	GPUTokens       int
	OffloadedTokens int
}

// PrefixIndex is the KV-cache index as the router consumes it.
// Implementations must be safe for concurrent use.
//
// Lookup returns, for the workers holding any of the prompt's leading blocks,
// the cached prefix of ids in tokens; workers holding nothing may be absent.
// Speculate records that worker was just assigned ids, so that requests
// decided before its KV events arrive see those blocks as (soon) cached, as
// the engine itself does. Stale reports whether the index's view of worker
// is known to be incomplete (lost events not yet replayed).
type PrefixIndex interface {
	Lookup(key CacheKey, ids []uint32, blockSize int) []PrefixMatch
	Speculate(worker string, key CacheKey, ids []uint32, blockSize int)
	Stale(worker string) bool
}

// LoadReport is one scrape of a worker's engine gauges.
type LoadReport struct {
	// Running and Waiting are vllm:num_requests_running and _waiting,
	// summed over the worker's engines.
	Running int
	Waiting int
	// KVUsage is vllm:kv_cache_usage_perc (0..1); HasKVUsage is false when
	// the scrape did not report it. Missing usage is not zero usage.
	KVUsage    float64
	HasKVUsage bool
	// KVBlocks is the engine's KV cache size in blocks (num_gpu_blocks of
	// vllm:cache_config_info, summed over ranks); 0 when unknown.
	KVBlocks int
	// Scraped is when the scrape completed.
	Scraped time.Time
}

// EngineLoad reports the last scraped load of a worker; ok is false when no
// scrape succeeded yet. Implementations must be safe for concurrent use.
type EngineLoad interface {
	Load(worker string) (r LoadReport, ok bool)
}
