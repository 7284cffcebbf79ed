// Package timerslack sets the process's timer slack before the Go runtime
// starts, so that every thread has it, the runtime's monitor among them.
//
// Why: the Go runtime's monitor thread (sysmon) sleeps 20 µs between its
// checks for a while after the process wakes from idle through a system
// call, which a router does on every request that finds it idle. Each of
// those sleeps is a timer the kernel programs and fires; on a virtual
// machine that cost 14–18 µs of CPU per wake-up, measured on this
// project's 2-vCPU VM, and the monitor woke about 50 times per 100K-token
// request (BENCHMARKS.md, "the runtime's monitor"). The kernel may fire a
// timer up to the thread's slack late and merge it with others; the
// default slack is 50 µs, with which the monitor's sleeps lasted 143 µs
// on average; a larger slack makes them longer and fewer.
//
// Nothing in warmpath sleeps for less than a millisecond on purpose: Go's
// timers already wait on the network poller in whole milliseconds. The
// slack is a process-wide setting and can only be set for the monitor
// before it starts, hence the C constructor: it runs when the program is
// loaded, before the Go runtime, and every thread created later inherits
// its slack.
//
// WARMPATH_TIMERSLACK_NS sets it in nanoseconds; 0 leaves the slack the
// process inherited. Unset, it is DefaultNS.
package timerslack

/*
#include <errno.h>
#include <stdlib.h>
#include <sys/prctl.h>

// DEFAULT_NS is DefaultNS; a test checks they agree.
#define DEFAULT_NS 250000UL

static int status;          // a Status
static unsigned long asked; // the slack asked for, in nanoseconds
static int failed;          // prctl's errno when it failed

__attribute__((constructor)) static void warmpath_set_timerslack(void) {
	const char *s = getenv("WARMPATH_TIMERSLACK_NS");
	asked = DEFAULT_NS;
	status = 1; // Default
	if (s != NULL) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0 || v > 1000000000ULL) {
			status = 4; // Invalid: the inherited slack stays
			return;
		}
		if (v == 0) {
			status = 3; // Inherited
			return;
		}
		asked = (unsigned long)v;
		status = 2; // FromEnv
	}
	if (prctl(PR_SET_TIMERSLACK, asked, 0, 0, 0) != 0) {
		failed = errno;
		status = 5; // Failed
	}
}

static int timerslack_status(void) { return status; }
static unsigned long timerslack_asked(void) { return asked; }
static int timerslack_errno(void) { return failed; }
static unsigned long timerslack_default(void) { return DEFAULT_NS; }
*/
import "C"

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultNS is the slack set when WARMPATH_TIMERSLACK_NS is unset: a
// quarter of a millisecond, a quarter of the poller's millisecond. It
// halved the monitor's wake-ups against the default 50 µs; a whole
// millisecond saved little more (BENCHMARKS.md).
const DefaultNS = 250_000

// Status says what the constructor did.
type Status int

const (
	Default   Status = 1 // set to DefaultNS
	FromEnv   Status = 2 // set to WARMPATH_TIMERSLACK_NS
	Inherited Status = 3 // WARMPATH_TIMERSLACK_NS=0: left as inherited
	Invalid   Status = 4 // WARMPATH_TIMERSLACK_NS is not a count of nanoseconds up to 1 s: left as inherited
	Failed    Status = 5 // prctl refused it: left as inherited
)

func (s Status) String() string {
	switch s {
	case Default:
		return "default"
	case FromEnv:
		return "WARMPATH_TIMERSLACK_NS"
	case Inherited:
		return "inherited"
	case Invalid:
		return "invalid WARMPATH_TIMERSLACK_NS, inherited"
	case Failed:
		return "prctl failed, inherited"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Setting reports what the constructor did and the slack the calling
// thread has now (every thread has the same unless something changed its
// own). err is set when the constructor's request failed or was invalid.
func Setting() (Status, time.Duration, error) {
	st := Status(C.timerslack_status())
	var err error
	switch st {
	case Invalid:
		err = fmt.Errorf("WARMPATH_TIMERSLACK_NS is not a count of nanoseconds from 0 to 1e9; the timer slack stays as inherited")
	case Failed:
		err = fmt.Errorf("set timer slack to %d ns: %w", uint64(C.timerslack_asked()), syscall.Errno(C.timerslack_errno()))
	}
	ns, gerr := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if gerr != nil {
		return st, 0, fmt.Errorf("read timer slack: %w", gerr)
	}
	return st, time.Duration(ns), err
}

func defaultNS() uint64 { return uint64(C.timerslack_default()) }
