package kvindex

import "fmt"

// EventKind is the type of one change to a stream's KV cache.
type EventKind uint8

// The kinds of change [Index.Apply] takes.
const (
	// BlockStored: the engine stored blocks, continuing a chain or
	// starting one.
	BlockStored EventKind = iota + 1
	// BlockRemoved: the engine evicted blocks.
	BlockRemoved
	// AllBlocksCleared: the engine dropped its whole cache.
	AllBlocksCleared
)

// String returns the kind's name, vLLM's tag for its events, which is
// also its label value in warmpath_kvindex_events_total.
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

// Event is one change to a stream's KV cache, as [Index.Apply] takes it.
// It carries no wire details: whoever decoded it (package kvevents) has
// named the adapter, found the cache salt, digested the other extra keys,
// and dropped the events of KV-cache groups prefix routing does not
// follow. Apply reads an Event's slices and keeps none of them.
type Event struct {
	Kind EventKind
	// BlockHashes are the engine's hashes of the blocks stored or removed,
	// 64 bits each. They name blocks in later events of the same stream
	// and are never compared across streams.
	BlockHashes []uint64
	// ParentHash is the engine hash of the block before the first stored
	// one, when HasParent is true. BlockStored only.
	ParentHash uint64
	HasParent  bool
	// TokenIDs covers the stored blocks, BlockSize tokens each.
	// BlockStored only.
	TokenIDs  []uint32
	BlockSize int
	// LoRA is the adapter's name, empty for the base model. With the
	// stream's model and Salt it roots a chain without a parent; a
	// continued chain keeps its root's.
	LoRA string
	// Salt is the cache salt of a chain's first block, empty when none;
	// ignored when HasParent is true.
	Salt string
	// Extra holds, per stored block, a digest of that block's extra hash
	// keys other than the adapter and the salt (multimodal items, prompt
	// embeddings), 0 when it has none; nil when no block has any. A
	// digest is folded into its block's key, so that a request, which
	// cannot name those keys, misses from that block on; equal items must
	// give equal digests, so that workers holding the same item share
	// keys. Extra's length, when not nil, must be len(BlockHashes).
	Extra []uint64
	// Offloaded is true for blocks in a medium other than GPU memory (CPU
	// memory, disk): hits that must be loaded before they serve.
	Offloaded bool
}
