package clocktest

import (
	"context"
	"sync"
	"time"
)

// Clock is a clock that moves only when told to. It is safe for concurrent
// use: a test may move it while the code under test reads it from other
// goroutines. The zero value is a clock stopped at the zero time. A Clock
// must not be copied after first use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock stopped at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time. A method value c.Now can stand in for
// time.Now, as in component.Options{Clock: c.Now}.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d; a negative d moves it back.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t, forward or back.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// SleepUntil is a sleep that takes no time: it moves the clock to t, unless
// t is earlier than the clock's time, and returns nil at once. When ctx is
// already done it returns ctx's error and leaves the clock where it is, as
// a real sleep that was cancelled would. It never blocks, so a test cannot
// use it to hold a sleeper until the test advances the clock.
func (c *Clock) SleepUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
	return nil
}
