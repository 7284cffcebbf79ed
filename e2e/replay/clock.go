package replay

import (
	"context"
	"time"
)

// Clock tells time and waits. The runner takes every timestamp from it, so
// tests can substitute a fake.
type Clock interface {
	Now() time.Time
	// SleepUntil blocks until t or until ctx is done, returning ctx's error
	// in that case.
	SleepUntil(ctx context.Context, t time.Time) error
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
