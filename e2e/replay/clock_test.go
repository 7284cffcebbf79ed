package replay

import (
	"context"
	"io"
	"sync"
	"time"
)

// fakeClock is a Clock whose time moves only when told: Advance moves it,
// and SleepUntil jumps to the wake-up time at once. Safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return ctx.Err()
}

// timedReader returns one piece per Read, advancing the clock by the
// piece's delay first, as if the bytes had taken that long to arrive.
type timedReader struct {
	clock  *fakeClock
	pieces []timedPiece
}

type timedPiece struct {
	delay time.Duration
	data  string
}

func (r *timedReader) Read(p []byte) (int, error) {
	if len(r.pieces) == 0 {
		return 0, io.EOF
	}
	piece := r.pieces[0]
	r.clock.Advance(piece.delay)
	n := copy(p, piece.data)
	if n < len(piece.data) {
		r.pieces[0] = timedPiece{data: piece.data[n:]}
	} else {
		r.pieces = r.pieces[1:]
	}
	return n, nil
}
