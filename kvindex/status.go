package kvindex

import (
	"cmp"
	"slices"
	"time"
)

// SlotStatus describes one (worker, data-parallel rank) event stream for
// operators (GET /debug/workers). It is a JSON-ready value.
type SlotStatus struct {
	Worker string `json:"worker"`
	Rank   int    `json:"rank"`
	Model  string `json:"model"`
	// Blocks counts the blocks indexed for the stream (real entries).
	Blocks int `json:"blocks_indexed"`
	// LastSeq is the last applied sequence number, -1 before any.
	LastSeq int64 `json:"last_seq"`
	// Gaps, Replays and Resets count sequence gaps, replays performed and
	// times the stream's entries were cleared.
	Gaps    uint64 `json:"gaps"`
	Replays uint64 `json:"replays"`
	Resets  uint64 `json:"resets"`
	// Unreachable counts stores whose parent block was unknown.
	Unreachable uint64 `json:"unreachable_stores"`
	// BlockSize is the block size the engine's events carry, 0 before any.
	BlockSize int `json:"block_size_seen"`
	// CaughtUp is true once the initial replay (or, without a replay
	// endpoint, the subscription) is done.
	CaughtUp bool `json:"caught_up"`
	// LastEventAt is when the last batch arrived; zero before any.
	LastEventAt time.Time `json:"last_event_at,omitzero"`
	// Stale is true when the stream has been silent for longer than the
	// configured stale-after time.
	Stale bool `json:"stale"`
}

// DebugWorkers returns the status of every stream, ordered by worker and
// rank. The result is JSON-encodable.
func (ix *Index) DebugWorkers() []SlotStatus {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	now := ix.now()
	out := make([]SlotStatus, 0, len(ix.byName))
	for _, s := range ix.slots {
		if s == nil {
			continue
		}
		st := s.status
		st.LastEventAt = s.lastAt
		st.Stale = ix.staleLocked(s, now)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b SlotStatus) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Rank, b.Rank))
	})
	return out
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

// CaughtUp reports whether every stream of worker has finished its
// initial replay. Unknown workers are not caught up.
func (ix *Index) CaughtUp(worker string) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	found := false
	for _, s := range ix.slots {
		if s == nil || s.name.worker != worker {
			continue
		}
		found = true
		if !s.status.CaughtUp {
			return false
		}
	}
	return found
}

// Reset clears the entries of one stream and counts the reason (for
// example "seq_backwards" when the engine restarted).
func (ix *Index) Reset(src Source, reason string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.slotLocked(src)
	if s == nil {
		return
	}
	ix.clearSlotLocked(s)
	s.status.Resets++
	ix.m.resets.WithLabelValues(reason).Inc()
	ix.gaugesLocked()
	ix.log.Warn("kv index stream reset", "worker", src.Worker, "rank", src.Rank, "reason", reason)
}

// RemoveWorker forgets every stream of worker and its entries.
func (ix *Index) RemoveWorker(worker string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, s := range ix.slots {
		if s == nil || s.name.worker != worker {
			continue
		}
		ix.clearSlotLocked(s)
		delete(ix.byName, s.name)
		ix.slots[i] = nil
		ix.names[i] = slotName{}
		if s.name.rank > 0 {
			ix.ranked--
		}
	}
	ix.gaugesLocked()
}

// update runs fn on the status of src's stream under the write lock.
func (ix *Index) update(src Source, fn func(st *SlotStatus)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if s := ix.slotLocked(src); s != nil {
		fn(&s.status)
	}
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
