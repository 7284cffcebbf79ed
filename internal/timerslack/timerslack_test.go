package timerslack

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDefaultsAgree(t *testing.T) {
	if got := defaultNS(); got != DefaultNS {
		t.Fatalf("the constructor's default is %d ns, DefaultNS %d", got, DefaultNS)
	}
}

// TestReport is run by TestEnvironment in a child process: it prints what
// the constructor did there.
func TestReport(t *testing.T) {
	if os.Getenv("TIMERSLACK_REPORT") != "1" {
		t.Skip("run by TestEnvironment in a child process")
	}
	st, slack, err := Setting()
	fmt.Printf("REPORT %d %d %v\n", st, slack.Nanoseconds(), err != nil)
}

func TestEnvironment(t *testing.T) {
	inherited, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const unset = "(unset)"
	for _, c := range []struct {
		env    string // unset leaves it out of the environment
		status Status
		slack  int
		err    bool
	}{
		{unset, Default, DefaultNS, false},
		{"1000000", FromEnv, 1_000_000, false},
		{"0", Inherited, inherited, false},
		{"abc", Invalid, inherited, true},
		{"-5", Invalid, inherited, true},
		{"", Invalid, inherited, true},
		{"12x", Invalid, inherited, true},
		{"2000000000", Invalid, inherited, true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReport$", "-test.v")
		cmd.Env = append(without(os.Environ(), "WARMPATH_TIMERSLACK_NS"), "TIMERSLACK_REPORT=1")
		if c.env != unset {
			cmd.Env = append(cmd.Env, "WARMPATH_TIMERSLACK_NS="+c.env)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("WARMPATH_TIMERSLACK_NS=%q: %v\n%s", c.env, err, out)
		}
		want := fmt.Sprintf("REPORT %d %d %v", c.status, c.slack, c.err)
		if !strings.Contains(string(out), want) {
			t.Errorf("WARMPATH_TIMERSLACK_NS=%q: want %q in\n%s", c.env, want, out)
		}
	}
}

// without returns env less every entry for name.
func without(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// TestEveryThread checks that threads the runtime starts later have the
// slack too: they inherit it from the thread that made them.
func TestEveryThread(t *testing.T) {
	_, want, err := Setting()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WARMPATH_TIMERSLACK_NS") == "" && want != DefaultNS*time.Nanosecond {
		t.Fatalf("this process's slack is %v, want %v", want, DefaultNS*time.Nanosecond)
	}
	const n = 16
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Go(func() {
			runtime.LockOSThread() // a thread of its own, ended with the goroutine
			got[i], _ = unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
			time.Sleep(10 * time.Millisecond)
		})
	}
	wg.Wait()
	for i, g := range got {
		if time.Duration(g) != want {
			t.Errorf("thread %d has slack %d ns, want %v", i, g, want)
		}
	}
}
