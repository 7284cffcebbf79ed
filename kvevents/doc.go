// Package kvevents receives vLLM's KV-cache events and feeds them to a
// [kvindex.Index]. It decodes the engines' messages (ZeroMQ PUB messages
// carrying msgpack KVEventBatch payloads, every layout from vLLM 0.9 to
// the map-era events of 0.24 and later), subscribes to every worker and
// data-parallel rank with gap replay over the engine's ROUTER socket, and
// turns each wire event into the index's [kvindex.Event]. It indexes,
// scores and routes nothing. It is warmpath's only user of cgo: its
// sockets are libczmq's, through goczmq.
//
// # Decoding
//
// A [Decoder] reads a payload into a [Batch] of [Event] values that keep
// every wire detail: block hashes folded to 64 bits (ints as their two's
// complement bit pattern, bytes as their last 8 bytes read big-endian,
// which equals vLLM's int mode), the parent hash, token ids, the LoRA
// name or deprecated integer id, the medium, the raw msgpack of each
// block's extra keys, the KV-cache group and spec kind. Unknown event
// types and fields are skipped and counted, never an error; malformed
// msgpack is an error wrapping [ErrPayload]. [DecodeValue] shows raw
// fields such as the extra keys as plain Go values. The decoder reuses
// its buffers and does not allocate per event once warm.
//
// # From the wire to the index
//
// Before an event reaches the index, the subscriber resolves what is wire
// knowledge: only full-attention blocks (group 0, or kv_cache_spec_kind
// "full_attention") are indexed, so events of other KV-cache groups are
// dropped and counted; the adapter is the LoRA name, or "lora-id:N" for
// the integer id of engines before ≈0.11.1; the cache salt is found among
// block 0's extra keys (the last string that is not the LoRA name) of a
// chain's first block; every other extra key of a block (multimodal items,
// prompt embeddings) goes into that block's digest, which the index folds
// into the block's key, so that a request, which cannot name them, misses
// from that block on, while workers holding the same item share keys; and
// the medium comes down to GPU or offloaded.
//
// # Streams
//
// [Subscribers] keep one subscription per (worker, rank) stream and one
// goroutine each, owned by [Subscribers.Run]. A stream waits for its
// messages on Go's network poller (a duplicate of the SUB socket's ZMQ_FD),
// not inside libzmq, so a waiting stream holds no OS thread. Each stream
// tracks its sequence numbers (unsigned 64-bit, as sent). At start, and on
// a gap, it replays from the engine's replay endpoint while buffering live
// messages, then applies the buffered ones deduplicated by seq. The
// engine's ROUTER drops what overflows the pipe to the client, the end
// marker included (vLLM sends its whole ring in one loop), so a replay runs
// in rounds: each applies what follows the last applied batch, holds what
// arrives after a hole, and the next round asks again from the first hole,
// while rounds bring new batches; a round whose data stopped without an end
// marker ends after a short quiet. A replay is complete when a round ends
// with the marker, nothing is held, and the live messages follow on. The
// stream is caught up only after a complete replay from the start: an
// initial one that stays incomplete is retried from scratch a few times
// with a backoff, then the stream goes on from live messages, not caught
// up, and replays the whole buffer again every 30 seconds until one
// completes. A sequence that goes backwards (engine restart), a replay that
// no longer starts at the requested seq, an incomplete or failed replay, or
// a gap without a replay endpoint clears that stream's entries through
// [kvindex.Index.Reset], with a log line and a count in
// warmpath_kvindex_resets_total. A batch's events are applied before its
// seq is recorded, so a reader that sees a stream's last seq sees its
// events in the index. The subscribers own the stream facts (last seq,
// gaps, replays, whether the initial replay is done: see
// [Subscribers.Streams] and [Subscribers.CaughtUp], which readiness uses);
// the index owns the entries and their status.
//
// Data-parallel ranks publish on their own endpoints: [RankEndpoint]
// derives rank r's from rank 0's as vLLM does. [Tail] prints one
// endpoint's messages for an operator (warmpath kvevents tail).
//
// # Use
//
//	ix, err := kvindex.New(kvindex.WithRegisterer(reg))
//	...
//	subs, err := kvevents.NewSubscribers(ix, kvevents.WithTopic(topic),
//		kvevents.WithRegisterer(reg), kvevents.WithLogger(log))
//	...
//	g.Go(func() error { return subs.Run(ctx) }) // owned by the app's errgroup
//	subs.Update(workers)                        // on every discovery snapshot
//
// # Metrics
//
// All under warmpath_kvevents_: decode_errors_total, gaps_total,
// replays_total{result}, replay_rounds_total, streams_not_caught_up and
// skipped_total{reason} (unknown_event,
// unknown_field, other_group); registered only with [WithRegisterer].
package kvevents
