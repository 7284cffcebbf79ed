package app

import (
	"context"
	"io/fs"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
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

// The container's memory limit: without a soft limit the Go runtime
// collects when the heap has doubled, whatever the container allows, so a
// burst of buffered bodies (up to extproc.max_buffered_bytes) on top of a
// warm heap and its garbage can cross the container's limit, and the
// kernel kills the process. `warmpath serve` gives the runtime a soft limit
// of containerLimitShare of the cgroup's memory limit, unless GOMEMLIMIT
// sets one: near it the collector runs more often (at most half the CPU, by
// the runtime's own cap) instead of the process dying.

// containerLimitShare is the share of the container's memory limit given to
// the Go heap; the rest is for stacks, ZeroMQ's buffers in C and the
// runtime's own.
const containerLimitShare = 0.9

// cgroupMemoryLimit returns the memory limit in bytes of this process's
// cgroup. root holds the cgroup files (/sys/fs/cgroup); self is
// /proc/self/cgroup, which names the process's cgroup in each hierarchy.
// It reads cgroup v2's memory.max, else v1's memory.limit_in_bytes, each
// first in the process's own cgroup (a systemd unit's, or a container's
// with a cgroup namespace, where the path is "/"), then at the root (a
// container that sees only its own cgroup there). It returns false when
// none can be read, or the limit is none ("max", or v1's largest value).
func cgroupMemoryLimit(root fs.FS, self string) (int64, bool) {
	var v2, v1 string
	for _, line := range strings.Split(self, "\n") {
		id, rest, _ := strings.Cut(line, ":")
		controllers, cgroup, ok := strings.Cut(rest, ":")
		switch {
		case !ok: // not a hierarchy's line
		case id == "0" && controllers == "":
			v2 = cgroup
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			v1 = cgroup
		}
	}
	for _, name := range []string{
		path.Join(strings.TrimPrefix(v2, "/"), "memory.max"), "memory.max",
		path.Join("memory", strings.TrimPrefix(v1, "/"), "memory.limit_in_bytes"), "memory/memory.limit_in_bytes",
	} {
		b, err := fs.ReadFile(root, name)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false // "max", or v1's unlimited 9223372036854771712
		}
		return n, true
	}
	return 0, false
}

// softMemoryLimit returns the soft memory limit `warmpath serve` sets, or
// false to leave the runtime's: GOMEMLIMIT (its value, gomemlimit) wins,
// and with no cgroup limit (cgroupMemoryLimit of root and self) there is
// nothing to follow.
func softMemoryLimit(gomemlimit string, root fs.FS, self string) (int64, bool) {
	if gomemlimit != "" {
		return 0, false
	}
	limit, ok := cgroupMemoryLimit(root, self)
	if !ok {
		return 0, false
	}
	return int64(containerLimitShare * float64(limit)), true
}
