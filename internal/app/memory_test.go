package app

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/fstest"
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

// TestSoftMemoryLimit: a share of the process's cgroup's memory limit,
// from cgroup v2 or v1, in its own cgroup or at the root; none when
// GOMEMLIMIT is set, when the cgroup has no limit, or when its file cannot
// be read or parsed.
func TestSoftMemoryLimit(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	const inNamespace = "0::/\n"
	for _, tc := range []struct {
		name       string
		gomemlimit string
		self       string // /proc/self/cgroup
		root       fstest.MapFS
		want       int64 // 0: none
	}{
		{"v2", "", inNamespace, fstest.MapFS{"memory.max": file("2147483648\n")}, 1932735283},
		{"v2 without a limit", "", inNamespace, fstest.MapFS{"memory.max": file("max\n")}, 0},
		{"v2, a systemd unit", "", "0::/system.slice/warmpath.service\n",
			fstest.MapFS{"system.slice/warmpath.service/memory.max": file("1000\n"), "memory.max": file("max\n")}, 900},
		{"v1", "", "5:devices:/\n4:memory:/\n", fstest.MapFS{"memory/memory.limit_in_bytes": file("1073741824\n")}, 966367641},
		{"v1 without a limit", "", "4:memory:/\n", fstest.MapFS{"memory/memory.limit_in_bytes": file("9223372036854771712\n")}, 0},
		{"v1, its own cgroup", "", "4:cpu,memory:/batch/wp\n",
			fstest.MapFS{"memory/batch/wp/memory.limit_in_bytes": file("2000\n"), "memory/memory.limit_in_bytes": file("9223372036854771712\n")}, 1800},
		{"v1, a container's own cgroup at the root", "", "4:memory:/docker/0123abcd\n",
			fstest.MapFS{"memory/memory.limit_in_bytes": file("1000\n")}, 900},
		{"v2 before v1", "", inNamespace, fstest.MapFS{"memory.max": file("1000\n"), "memory/memory.limit_in_bytes": file("5000\n")}, 900},
		{"no /proc/self/cgroup", "", "", fstest.MapFS{"memory.max": file("1000\n")}, 900},
		{"GOMEMLIMIT set", "1GiB", inNamespace, fstest.MapFS{"memory.max": file("2147483648\n")}, 0},
		{"not a number", "", inNamespace, fstest.MapFS{"memory.max": file("lots\n")}, 0},
		{"no cgroup files", "", inNamespace, fstest.MapFS{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := softMemoryLimit(tc.gomemlimit, tc.root, tc.self)
			if ok != (tc.want != 0) || got != tc.want {
				t.Errorf("softMemoryLimit(%q, %q) = %d, %v; want %d", tc.gomemlimit, tc.self, got, ok, tc.want)
			}
		})
	}
}
