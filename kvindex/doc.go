// Package kvindex knows which vLLM worker holds which prompt prefix in its
// KV cache. It keeps an index from chains of token blocks to the workers
// (and data-parallel ranks) holding them, fed one batch of [Event] values
// at a time through [Index.Apply] by whoever receives the engines' events
// (package kvevents, which decodes vLLM's wire format and owns the
// sockets), and answers, per worker, how much of a prompt is cached. It
// decodes no wire bytes, opens no sockets and scores nothing; it is pure
// Go.
//
// # Keys
//
// warmpath does not reproduce vLLM's block hash. On BlockStored it chains
// its own 64-bit key over the event's token ids, one block at a time (a
// multiply-fold hash of the block's tokens mixed into its parent's key, so
// that the blocks of a prompt hash in parallel and only the mixing is
// serial), rooted in (model, LoRA name, cache salt): the model is the
// stream's [Source] model (warmpath's served model name for the worker),
// the LoRA name and the salt come with the event. A block's digest of its
// other extra keys ([Event.Extra]: multimodal items, prompt embeddings) is
// mixed into its key, so a request that cannot name them misses from that
// block on. A per-stream table from engine hash to block keeps
// BlockRemoved exact and refcounts duplicate stores. This works with every
// --prefix-caching-hash-algo and needs no PYTHONHASHSEED coordination. A
// store whose parent hash is unknown (missed events) is skipped and
// counted, never guessed.
//
// # Use
//
//	ix, err := kvindex.New(kvindex.WithRegisterer(reg), kvindex.WithLogger(log))
//	...
//	ix.Apply(src, events)                        // a subscriber, per batch
//	ms := ix.Lookup(kvindex.ChainKey{Model: m, LoRA: l, Salt: s}, tokens, blockSize)
//	ix.Speculate(chosen, key, tokens, blockSize) // after routing
//
// [Index.Lookup] answers, per worker, how many leading prompt tokens are
// cached, in whole blocks, capped at floor((P−1)/B)·B as vLLM caps hits,
// split between GPU and offloaded media; the best data-parallel rank of a
// worker stands for it. [Index.Speculate] enters the blocks a routed
// request will create before their events arrive. [Index.Streams] and
// [Index.Stale] serve operators and routing; [Index.AddStream],
// [Index.Reset] and [Index.RemoveWorker] let the subscriber announce a
// stream, clear one whose events were lost, and forget a departed worker.
//
// # Lookup
//
// A lookup hashes the prompt's blocks a chunk at a time, the chunks
// doubling from 16 blocks, so that the CPU overlaps the blocks' hashes and
// an early miss wastes little, and walks their nodes in Go. On amd64 with
// AES and AVX, a 16-token block (vLLM's default) hashes in a few AES
// rounds (chainKeys16AES, keys_amd64.s: plain Go assembly over the
// tokens, which reads no Go struct); elsewhere, or with -tags purego, in
// multiply-folds. A block's node is usually the one just below
// the previous block's (a chain stored in one event takes consecutive
// nodes) or the next one in the LRU list (stores and lookups leave chains
// there in order); the table is probed only when neither holds the
// block's key.
// The holders among streams 0–63 are intersected as one 64-bit word per
// block and a stream's depth is written only when it drops out, so a
// block costs the same whatever the number of workers; the walk stops at
// the first block no stream still holds. The nodes it found are logged
// as runs of consecutive nodes, which the next writer moves to the front
// of the LRU list before it does anything that can free a node. [Index.AppendLookup] over up to 64 streams, whose
// nodes form up to 256 runs, allocates nothing when its buffer has room;
// with data-parallel ranks it also builds a map from worker to match.
//
// # Memory
//
// A block is a 32-byte node without pointers; the one stream holding it,
// or the one stream's speculation on it (the form of every block of a new
// prompt until its events arrive), is kept inline, and several holders,
// or a speculation beside a holder, move to a side record. The two hash tables (block key → node, and per stream engine
// hash → node) keep 8-byte slots of a fingerprint and a node index and
// confirm matches against the node; they grow by half at 4/5 full. A
// (block, worker) entry costs 52–62 bytes when one worker holds the block,
// depending on how full the tables are, and less when several share it.
//
// The entry budget bounds them all. Past it the least recently touched
// block goes first, except a block of one stream that holds no more than
// its fair share of the budget (the budget over the streams holding
// entries): it is passed over, so a worker flooding the index with events
// evicts its own blocks, and the others keep theirs.
//
// # Metrics
//
// All under warmpath_kvindex_: events_total{type}, skipped_total{reason}
// (invalid, unreachable_parent, unknown_hash, too_many_streams),
// resets_total{reason}, entries, blocks, evictions_total and
// lookup_duration_seconds; registered only with [WithRegisterer].
package kvindex
