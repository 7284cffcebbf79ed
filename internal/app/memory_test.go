package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestReturnMemoryAfterABurst: memory is returned once per burst of
// buffered bytes, after it has fallen, never for small or ongoing ones.
func TestReturnMemoryAfterABurst(t *testing.T) {
	t.Parallel()
	var held atomic.Int64
	steps := []int64{1 << 20, releaseAbove / 2, 0, releaseAbove, releaseAbove * 2, releaseAbove, releaseBelow, 0, 0}
	var freed atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tick := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- returnMemory(ctx, func() int64 { n := held.Load(); tick <- struct{}{}; return n }, time.Millisecond, func() { freed.Add(1) })
	}()
	want := []int32{0, 0, 0, 0, 0, 0, 1, 1, 1}
	for i, n := range steps {
		held.Store(n)
		// The first read may have loaded the previous value, the second
		// loaded n, and the third comes after the second was acted on.
		<-tick
		<-tick
		<-tick
		if got := freed.Load(); got != want[i] {
			t.Fatalf("after %d bytes (step %d): freed %d times, want %d", n, i, got, want[i])
		}
	}
	cancel()
	go func() {
		for range tick {
		}
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
