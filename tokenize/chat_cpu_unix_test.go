//go:build unix

package tokenize

import (
	"syscall"
	"time"
)

// processCPU returns the user+system CPU time this process has used, so
// benchmarks can report CPU per operation on a machine shared with other load.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
