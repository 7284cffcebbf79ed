package app

import (
	"context"
	"runtime/debug"
	"time"
)

// Returning memory: the Go runtime hands freed heap back to the system
// slowly (its scavenger keeps most of a peak for minutes), so after a
// burst of large request bodies the process would keep the peak's RSS
// long after the streams closed. When the buffers held fall from a peak of
// at least releaseAbove to a small remainder, the heap is returned at once.

// releaseAbove is the peak of buffered bytes worth returning memory after;
// releaseBelow the remainder at which the burst counts as over.
const (
	releaseAbove = 64 << 20
	releaseBelow = 8 << 20
)

// returnMemory checks buffered every interval until ctx ends, and returns
// freed memory to the system (free) after each burst.
func returnMemory(ctx context.Context, buffered func() int64, interval time.Duration, free func()) error {
	if free == nil {
		free = func() {
			// Twice: pooled buffers (gRPC's received messages) live in
			// sync.Pools, whose victim caches survive one collection.
			debug.FreeOSMemory()
			debug.FreeOSMemory()
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var peak int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n := buffered()
		peak = max(peak, n)
		if peak >= releaseAbove && n <= releaseBelow {
			free()
			peak = 0
		}
	}
}
