package clocktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestClock(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		start   *Clock
		step    func(*Clock) error
		want    time.Time
		wantErr error
	}{
		{name: "new stands still", start: New(t0), step: func(*Clock) error { return nil }, want: t0},
		{name: "zero value", start: &Clock{}, step: func(*Clock) error { return nil }, want: time.Time{}},
		{name: "zero value advances", start: &Clock{},
			step: func(c *Clock) error { c.Advance(time.Second); return nil }, want: time.Time{}.Add(time.Second)},
		{name: "advance", start: New(t0),
			step: func(c *Clock) error { c.Advance(90 * time.Second); return nil }, want: t0.Add(90 * time.Second)},
		{name: "advance back", start: New(t0),
			step: func(c *Clock) error { c.Advance(-time.Hour); return nil }, want: t0.Add(-time.Hour)},
		{name: "set forward", start: New(t0),
			step: func(c *Clock) error { c.Set(t0.Add(time.Minute)); return nil }, want: t0.Add(time.Minute)},
		{name: "set back", start: New(t0.Add(time.Hour)),
			step: func(c *Clock) error { c.Set(t0); return nil }, want: t0},
		{name: "sleep until later", start: New(t0),
			step: func(c *Clock) error { return c.SleepUntil(context.Background(), t0.Add(time.Hour)) }, want: t0.Add(time.Hour)},
		{name: "sleep until earlier", start: New(t0),
			step: func(c *Clock) error { return c.SleepUntil(context.Background(), t0.Add(-time.Hour)) }, want: t0},
		{name: "sleep until now", start: New(t0),
			step: func(c *Clock) error { return c.SleepUntil(context.Background(), t0) }, want: t0},
		{name: "sleep cancelled", start: New(t0),
			step: func(c *Clock) error { return c.SleepUntil(cancelled, t0.Add(time.Hour)) }, want: t0, wantErr: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.start
			if err := tc.step(c); !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if got := c.Now(); !got.Equal(tc.want) {
				t.Fatalf("Now() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestConcurrent moves the clock from several goroutines while others read
// it; run under -race. Every advance must count and no reader may see time
// go back.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		move func(c *Clock, i int)
	}{
		{name: "advance", move: func(c *Clock, _ int) { c.Advance(time.Millisecond) }},
		{name: "sleep", move: func(c *Clock, i int) { _ = c.SleepUntil(t.Context(), t0.Add(time.Duration(i+1)*time.Millisecond)) }},
	}
	const writers, steps, readers = 4, 1000, 4
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := New(t0)
			var wg, moving sync.WaitGroup
			moving.Add(writers)
			for w := range writers {
				wg.Go(func() {
					defer moving.Done()
					for s := range steps {
						tc.move(c, w*steps+s)
					}
				})
			}
			done := make(chan struct{})
			errs := make(chan error, readers)
			for range readers {
				wg.Go(func() {
					last := c.Now()
					for {
						now := c.Now()
						if now.Before(last) {
							errs <- errors.New("time went back from " + last.String() + " to " + now.String())
							return
						}
						last = now
						select {
						case <-done:
							return
						default:
						}
					}
				})
			}
			moving.Wait()
			close(done)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			want := t0.Add(writers * steps * time.Millisecond)
			if got := c.Now(); !got.Equal(want) {
				t.Fatalf("after %d moves Now() = %v, want %v", writers*steps, got, want)
			}
		})
	}
}
