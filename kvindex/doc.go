// Package kvindex knows which vLLM worker holds which prompt prefix in its
// KV cache. It decodes vLLM's KV-cache events (ZeroMQ PUB messages carrying
// msgpack KVEventBatch payloads, every layout from vLLM 0.9 to the map-era
// events of 0.24 and later), subscribes to every worker and data-parallel
// rank with gap replay over the engine's ROUTER socket, and keeps an index
// from chains of token blocks to the workers holding them. It scores and
// routes nothing.
//
// # Keys
//
// warmpath does not reproduce vLLM's block hash. On BlockStored it chains
// its own 64-bit key over the event's token ids, one block at a time (a
// multiply-fold hash of the block's tokens mixed into its parent's key, so
// that the blocks of a prompt hash in parallel and only the mixing is
// serial), rooted in (model, LoRA name, cache salt): the model is warmpath's
// served model name for the worker (by default the first of
// discovery.Worker.Models, see [WithModelOf]), the LoRA name comes from the
// event, and the salt from block 0's extra keys. Other extra keys
// (multimodal items, prompt embeddings) are folded into their block's key,
// so a request that cannot name them misses from that block on. A
// per-stream table from engine hash to block keeps BlockRemoved exact and
// refcounts duplicate stores. This works with every
// --prefix-caching-hash-algo and needs no PYTHONHASHSEED coordination. A
// store whose parent hash is unknown (missed events) is skipped and
// counted, never guessed. Only full-attention blocks (group 0, or
// kv_cache_spec_kind "full_attention") are indexed.
//
// # Use
//
//	ix := kvindex.New(kvindex.WithRegisterer(reg), kvindex.WithLogger(log))
//	subs := kvindex.NewSubscribers(ix, kvindex.WithTopic(topic))
//	g.Go(func() error { return subs.Run(ctx) }) // owned by the app's errgroup
//	subs.Update(workers)                        // on every discovery snapshot
//	ms := ix.Lookup(kvindex.ChainKey{Model: m, LoRA: l, Salt: s}, tokens, blockSize)
//	ix.Speculate(chosen, key, tokens, blockSize) // after routing
//
// [Index.Lookup] answers, per worker, how many leading prompt tokens are
// cached, in whole blocks, capped at floor((P−1)/B)·B as vLLM caps hits,
// split between GPU and offloaded media; the best data-parallel rank of a
// worker stands for it. [Index.Speculate] enters the blocks a routed
// request will create before their events arrive. [Index.DebugWorkers],
// [Index.Stale] and [Index.CaughtUp] serve operators and readiness.
//
// # Lookup
//
// A lookup hashes the prompt's blocks and walks their nodes. For 16-token
// blocks over up to 64 streams on amd64 with AES, one assembly loop hashes
// each block and finds its node (walk16.go), so that the hash of one block
// overlaps the node reads of the last; elsewhere the walk hashes a chunk
// of blocks at a time in Go. A block's node is usually the one just below
// the previous block's (a chain stored in one event takes consecutive
// nodes) or the next one in the LRU list (stores and lookups leave chains
// there in order); the table is probed only when neither holds the
// block's key.
// The holders among streams 0–63 are intersected as one 64-bit word per
// block and a stream's depth is written only when it drops out, so a
// block costs the same whatever the number of workers; the walk stops at
// the first block no stream still holds. The nodes it found are logged
// as runs of consecutive nodes, which the next writer moves to the front
// of the LRU list. [Index.AppendLookup] over up to 64 streams, whose
// nodes form up to 256 runs, allocates nothing when its buffer has room;
// with data-parallel ranks it also builds a map from worker to match.
//
// # Streams
//
// Each (worker, rank) stream tracks its sequence numbers. At start, and on
// a gap, it replays from the engine's replay endpoint while buffering live
// messages, then applies the buffered ones deduplicated by seq. A
// sequence that goes backwards (engine restart), a replay that no longer
// starts at the requested seq, a failed replay, or a gap without a replay
// endpoint clears that stream's entries, with a log line and a count in
// warmpath_kvindex_resets_total.
//
// # Memory
//
// A block is a 32-byte node without pointers; the one stream holding it
// is kept inline, and several holders or speculation move to a side
// record. The two hash tables (block key → node, and per stream engine
// hash → node) keep 8-byte slots of a fingerprint and a node index and
// confirm matches against the node; they grow by half at 4/5 full. A
// (block, worker) entry costs 52–62 bytes when one worker holds the block,
// depending on how full the tables are, and less when several share it.
//
// # Metrics
//
// All under warmpath_kvindex_: events_total{type}, skipped_total{reason},
// decode_errors_total, gaps_total, replays_total{result},
// resets_total{reason}, entries, blocks, evictions_total and
// lookup_duration_seconds; registered only with [WithRegisterer].
package kvindex
