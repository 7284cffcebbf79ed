package kvindex

import (
	"syscall"
	"time"
	"unsafe"
)

// The build machine is shared, so benchmarks also report CPU time, which
// other processes do not inflate the way they inflate wall-clock time.

// threadCPU returns the calling thread's CPU time. The caller must hold
// its OS thread (runtime.LockOSThread).
func threadCPU() time.Duration {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}
