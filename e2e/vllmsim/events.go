package vllmsim

import "fmt"

// Wire selects the KV-event layout of a vLLM release.
type Wire string

// The KV-event layouts the simulator can publish. The envelope is always the
// positional array [ts, events, data_parallel_rank].
const (
	// WireMap is vLLM ≥ 0.24: each event is a msgpack map keyed by field
	// name, tag under "type" (the layout of the real 0.31 capture).
	WireMap Wire = "map"
	// WireArray is vLLM ≈0.21–0.23: each event is a positional array, tag
	// first, with lora_name, extra_keys, group_idx and kv_cache_spec_kind.
	WireArray Wire = "array"
	// WireArrayV011 is vLLM 0.11–0.13: tag plus block_hashes,
	// parent_block_hash, token_ids, block_size, lora_id and medium.
	WireArrayV011 Wire = "array-v0.11"
)

// ParseWire returns the Wire named s.
func ParseWire(s string) (Wire, error) {
	switch w := Wire(s); w {
	case WireMap, WireArray, WireArrayV011:
		return w, nil
	}
	return "", fmt.Errorf("unknown kv-events wire %q (want map, array or array-v0.11)", s)
}

// EventKind is the tag of a KV-cache event.
type EventKind uint8

// The KV-cache event tags vLLM's block pool emits.
const (
	BlockStored EventKind = iota + 1
	BlockRemoved
	AllBlocksCleared
)

// String returns the tag as it appears on the wire.
func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one KV-cache event of an engine step.
type Event struct {
	Kind EventKind
	// Hashes are the stored or removed blocks, in chain order.
	Hashes []BlockHash
	// Parent is the hash of the block before Hashes[0] when HasParent is
	// set (BlockStored only); a chain that starts at block 0 has none.
	Parent    BlockHash
	HasParent bool
	// Tokens are the token ids of the stored blocks, BlockSize per block.
	Tokens    []uint32
	BlockSize int
	// Extra holds vLLM's extra keys per stored block (nil for none).
	Extra [][]string
}

// Batch is the events of one engine step, as vLLM's KVEventBatch.
type Batch struct {
	// TS is the wall-clock time of the step in float seconds since the epoch.
	TS     float64
	Events []Event
	// Rank is the data-parallel rank of the engine.
	Rank int
}

// AppendBatch appends the msgpack payload (ZMQ frame 2) of batch to b as a
// vLLM engine with the given wire layout would publish it; bytesHashes
// sends 32-byte digests instead of uint64 hashes. Tests of KV-event
// decoders can use it to produce engine-identical payloads.
func AppendBatch(b []byte, batch *Batch, wire Wire, bytesHashes bool) []byte {
	return eventEncoder{wire: wire, bytesHashes: bytesHashes}.appendBatch(b, batch)
}

// eventEncoder writes batches as vLLM's msgspec encoder does.
type eventEncoder struct {
	wire Wire
	// bytesHashes sends 32-byte digests instead of uint64
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	bytesHashes bool
}

// appendBatch appends the msgpack payload of batch to b.
func (e eventEncoder) appendBatch(b []byte, batch *Batch) []byte {
	b = mpArray(b, 3)
	b = mpFloat(b, batch.TS)
	b = mpArray(b, len(batch.Events))
	for i := range batch.Events {
		b = e.appendEvent(b, &batch.Events[i])
	}
	return mpInt(b, int64(batch.Rank))
}

func (e eventEncoder) appendHash(b []byte, h BlockHash) []byte {
	if e.bytesHashes {
		return mpBin(b, h[:])
	}
	return mpUint(b, h.Uint64())
}

func (e eventEncoder) appendEvent(b []byte, ev *Event) []byte {
	m := e.wire == WireMap
	key := func(b []byte, k string) []byte {
		if m {
			return mpStr(b, k)
		}
		return b
	}
	switch ev.Kind {
	case BlockStored:
		switch e.wire {
		case WireMap:
			b = mpMap(b, 11)
		case WireArray:
			b = mpArray(b, 11)
		default:
			b = mpArray(b, 7)
		}
		b = key(b, "type")
		b = mpStr(b, "BlockStored")
		b = key(b, "block_hashes")
		b = mpArray(b, len(ev.Hashes))
		for _, h := range ev.Hashes {
			b = e.appendHash(b, h)
		}
		b = key(b, "parent_block_hash")
		if ev.HasParent {
			b = e.appendHash(b, ev.Parent)
		} else {
			b = mpNil(b)
		}
		b = key(b, "token_ids")
		b = mpArray(b, len(ev.Tokens))
		for _, t := range ev.Tokens {
			b = mpUint(b, uint64(t))
		}
		b = key(b, "block_size")
		b = mpInt(b, int64(ev.BlockSize))
		b = key(b, "lora_id")
		b = mpNil(b)
		b = key(b, "medium")
		b = mpStr(b, "GPU")
		if e.wire == WireArrayV011 {
			return b
		}
		b = key(b, "lora_name")
		b = mpNil(b)
		b = key(b, "extra_keys")
		b = mpArray(b, len(ev.Hashes))
		for i := range ev.Hashes {
			var x []string
			if i < len(ev.Extra) {
				x = ev.Extra[i]
			}
			if x == nil {
				b = mpNil(b)
				continue
			}
			b = mpArray(b, len(x))
			for _, s := range x {
				b = mpStr(b, s)
			}
		}
		b = key(b, "group_idx")
		b = mpInt(b, 0)
		b = key(b, "kv_cache_spec_kind")
		return mpStr(b, "full_attention")
	case BlockRemoved:
		switch e.wire {
		case WireMap:
			b = mpMap(b, 4)
		case WireArray:
			b = mpArray(b, 4)
		default:
			b = mpArray(b, 3)
		}
		b = key(b, "type")
		b = mpStr(b, "BlockRemoved")
		b = key(b, "block_hashes")
		b = mpArray(b, len(ev.Hashes))
		for _, h := range ev.Hashes {
			b = e.appendHash(b, h)
		}
		b = key(b, "medium")
		b = mpStr(b, "GPU")
		if e.wire == WireArrayV011 {
			return b
		}
		b = key(b, "group_idx")
		return mpInt(b, 0)
	default:
		if m {
			b = mpMap(b, 1)
		} else {
			b = mpArray(b, 1)
		}
		b = key(b, "type")
		return mpStr(b, "AllBlocksCleared")
	}
}
