package extproc

import "sync/atomic"

// The buffer budget: one bound on the bytes every stream's buffers hold
// together (the request bodies kept until the routing reply and the
// non-streamed response bodies kept to read their usage), so that many
// large bodies at once cannot take the process's memory. Each exchange
// accounts its own buffers' capacity and gives it back when it drops them
// or ends.

// budget counts the bytes held against a limit. It is safe for concurrent
// use.
type budget struct {
	limit int64
	held  atomic.Int64
}

// acquire takes n more bytes, or reports false and takes nothing when they
// would exceed the limit.
func (b *budget) acquire(n int) bool {
	for {
		h := b.held.Load()
		if h+int64(n) > b.limit {
			return false
		}
		if b.held.CompareAndSwap(h, h+int64(n)) {
			return true
		}
	}
}

// release gives n bytes back.
func (b *budget) release(n int) { b.held.Add(-int64(n)) }

// holding is one buffer's share of a budget: the capacity it accounted.
type holding struct{ n int }

// grow accounts a buffer now of capacity c; it reports false, accounting
// nothing more, when the budget has no room for the growth.
func (h *holding) grow(b *budget, c int) bool {
	if d := c - h.n; d > 0 {
		if !b.acquire(d) {
			return false
		}
		h.n = c
	}
	return true
}

// drop gives the buffer's share back.
func (h *holding) drop(b *budget) {
	b.release(h.n)
	h.n = 0
}
