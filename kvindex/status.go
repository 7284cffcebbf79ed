package kvindex

import (
	"cmp"
	"slices"
	"time"
)

// StreamStatus is the index's view of one (worker, data-parallel rank)
// event stream, for operators (GET /debug/workers merges it with the
// subscriber's view of the same stream). It is a JSON-ready value.
type StreamStatus struct {
	Worker string `json:"worker"`
	Rank   int    `json:"rank"`
	Model  string `json:"model"`
	// Blocks counts the blocks indexed for the stream (real entries).
	Blocks int `json:"blocks_indexed"`
	// Resets counts the times the stream's entries were cleared by
	// [Index.Reset].
	Resets uint64 `json:"resets"`
	// Unreachable counts stores whose parent block was unknown.
	Unreachable uint64 `json:"unreachable_stores"`
	// Batches counts the event batches applied.
	Batches uint64 `json:"batches_applied"`
	// BlockSize is the block size the engine's events carry, 0 before any.
	BlockSize int `json:"block_size_seen"`
	// LastEventAt is when the last batch was applied; zero before any.
	LastEventAt time.Time `json:"last_event_at,omitzero"`
	// Stale is true when the stream has been silent for longer than the
	// configured stale-after time.
	Stale bool `json:"stale"`
}

// Streams returns the status of every stream, ordered by worker and rank.
func (ix *Index) Streams() []StreamStatus {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	now := ix.now()
	out := make([]StreamStatus, 0, len(ix.byName))
	for _, s := range ix.slots {
		if s == nil {
			continue
		}
		st := s.status
		st.LastEventAt = s.lastAt
		st.Stale = ix.staleLocked(s, now)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b StreamStatus) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Rank, b.Rank))
	})
	return out
}

// AddStream makes src's stream known before its first batch, as a
// subscriber does when it subscribes: the stream is listed by
// [Index.Streams], and its silence, for [Index.Stale], counts from now.
// A stream already known keeps its state, unless src names another model
// than before: its entries are then cleared, since the model roots its
// chains. It does nothing when MaxStreams are taken.
func (ix *Index) AddStream(src Source) {
	ix.lock()
	defer ix.mu.Unlock()
	ix.slotLocked(src)
}

func (ix *Index) staleLocked(s *slot, now time.Time) bool {
	if ix.staleAfter <= 0 {
		return false
	}
	last := s.lastAt
	if last.IsZero() {
		last = s.since
	}
	return now.Sub(last) > ix.staleAfter
}

// Stale reports whether every stream of worker has been silent for longer
// than the stale-after time. Unknown workers are not stale.
func (ix *Index) Stale(worker string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	now := ix.now()
	found := false
	for _, s := range ix.slots {
		if s == nil || s.name.worker != worker {
			continue
		}
		found = true
		if !ix.staleLocked(s, now) {
			return false
		}
	}
	return found
}

// Reset clears the entries of one stream and counts the reason (for
// example "seq_backwards" when the engine restarted). The entries are
// dropped a batch at a time, as Apply drops those of an AllBlocksCleared
// event.
func (ix *Index) Reset(src Source, reason string) {
	if s := ix.reset(src, reason); s != nil {
		ix.retire(s)
	}
}

func (ix *Index) reset(src Source, reason string) *slot {
	ix.lock()
	defer ix.mu.Unlock()
	s := ix.slotLocked(src)
	if s == nil {
		return nil
	}
	ix.clearSlotLocked(s)
	s.status.Resets++
	ix.m.resets.WithLabelValues(reason).Inc()
	ix.gaugesLocked()
	ix.log.Warn("kv index stream reset", "worker", src.Worker, "rank", src.Rank, "reason", reason)
	return s
}

// RemoveWorker forgets every stream of worker and its entries.
func (ix *Index) RemoveWorker(worker string) {
	ix.lock()
	defer ix.mu.Unlock()
	for i, s := range ix.slots {
		if s == nil || s.name.worker != worker {
			continue
		}
		ix.clearSlotLocked(s)
		ix.finishRetiringLocked(s) // the slot id may be reused at once
		delete(ix.byName, s.name)
		ix.slots[i] = nil
		ix.names[i] = slotName{}
		if s.name.rank > 0 {
			ix.ranked--
		}
	}
	ix.gaugesLocked()
}

// Batches returns how many event batches worker's streams have applied,
// summed over its ranks; ok is false when no stream of worker is known
// (it has no KV-event endpoint, or it left).
func (ix *Index) Batches(worker string) (n uint64, ok bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, s := range ix.slots {
		if s != nil && s.name.worker == worker {
			n += s.status.Batches
			ok = true
		}
	}
	return n, ok
}

// BlockSizeSeen returns the block size worker's events carry (the largest
// over its ranks), or 0 before any BlockStored. A value different from the
// configured block size means lookups for that worker cannot match.
func (ix *Index) BlockSizeSeen(worker string) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	bs := 0
	for _, s := range ix.slots {
		if s != nil && s.name.worker == worker {
			bs = max(bs, s.status.BlockSize)
		}
	}
	return bs
}
