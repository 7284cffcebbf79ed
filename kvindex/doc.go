// Package kvindex knows which vLLM worker holds which prompt prefix in its
// KV cache. It decodes vLLM's KV-cache events (ZeroMQ PUB messages carrying
// msgpack KVEventBatch payloads, every layout from vLLM 0.9 to the map-era
// events of 0.24 and later), subscribes to every worker and data-parallel
// rank with gap replay over the engine's ROUTER socket, and keeps an index
// from chains of token blocks to the workers holding them.
//
// warmpath does not reproduce vLLM's block hash. On BlockStored it chains
// its own 64-bit key (xxh3) over the event's token ids, one block at a time,
// rooted in the worker's model, the event's LoRA name and the cache salt
// found in block 0's extra keys; a per-stream map from engine hash to block
// keeps BlockRemoved exact. This works with every
// --prefix-caching-hash-algo and needs no PYTHONHASHSEED coordination. The
// model is warmpath's served model name for the worker (the first of
// discovery.Worker.Models unless the caller chooses otherwise), so lookups
// pass the model name clients send.
//
// [Index.Lookup] answers, per worker, how many leading prompt tokens are
// cached (in whole blocks, capped as vLLM caps hits, split between GPU and
// offloaded media). [Index.Speculate] enters the blocks a routed request
// will create before their events arrive. [Subscribers] feeds the index
// from live sockets. The package scores and routes nothing.
package kvindex
