package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	le := []float64{0.001, 0.002, 0.004, math.Inf(1)}
	before := histogram{le: le, count: []float64{10, 10, 10, 10}}
	after := histogram{le: le, count: []float64{60, 110, 110, 111}} // +50 in ≤1 ms, +50 in 1–2 ms, +1 above 4 ms
	tests := []struct{ q, want float64 }{
		{0.25, 0.001 * (0.25 * 101) / 50},
		{0.5, 0.001 + 0.001*(0.5*101-50)/50},
		{0.999, 0.004}, // in +Inf: the highest finite bound
	}
	for _, tc := range tests {
		if got := quantile(tc.q, before, after); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(0.5, after, after); !math.IsNaN(got) {
		t.Errorf("no observations between the scrapes: %v, want NaN", got)
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	le := []float64{0.001, 0.002, 0.004, math.Inf(1)}
	before := histogram{le: le, count: []float64{10, 10, 10, 10}}
	after := histogram{le: le, count: []float64{60, 110, 110, 111}}
	if got, want := within(0.002, before, after), 100.0/101; math.Abs(got-want) > 1e-12 {
		t.Errorf("within(2 ms) = %v, want %v", got, want)
	}
	if got := within(0.003, before, after); !math.IsNaN(got) {
		t.Errorf("within a value that is not a bound = %v, want NaN", got)
	}
	if got := within(0.002, after, after); !math.IsNaN(got) {
		t.Errorf("no observations between the scrapes: %v, want NaN", got)
	}
}

// runBrief runs loadbench with args after one unwarmed run of each
// scenario on 4 fake engines, and returns its results.md.
func runBrief(t *testing.T, args ...string) []byte {
	t.Helper()
	out := t.TempDir()
	var stdout strings.Builder
	args = append([]string{"-runs", "1", "-warmup", "0s", "-workers", "4",
		"-tokenizer", filepath.Join("..", "..", "..", "tokenize", "testdata", "models", "qwen3"), "-out", out}, args...)
	if err := run(t.Context(), args, &stdout); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// TestMain serves as the echo processor when a test started this binary
// as one (stack.go re-executes the running binary).
func TestMain(m *testing.M) {
	if echoMain() {
		return
	}
	os.Exit(m.Run())
}

// TestEchoSmoke runs chat8k briefly against the echo processor: every
// request routed to one of the workers, the row marked as the echo's,
// warmpath's own figures left empty.
func TestEchoSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a second process")
	}
	md := runBrief(t, "-echo", "-scenarios", "chat8k", "-duration", "1s", "-rate", "40")
	var row string
	for _, line := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(line, "| chat8k (echo) | 40 | 1 |") {
			row = line
		}
	}
	if row == "" {
		t.Fatalf("results.md lacks the echo row:\n%s", md)
	}
	cells := strings.Split(row, "|")
	if failed := strings.TrimSpace(cells[len(cells)-2]); failed != "0" {
		t.Errorf("failed requests: %s", row)
	}
	if wp := strings.TrimSpace(cells[5]); wp != "–" {
		t.Errorf("warmpath p50 of the echo processor = %q, want –", wp)
	}
}

// TestBufferedSmoke plays request bodies in BUFFERED mode, briefly,
// against a real warmpath process and against the echo processor: every
// request routed by the body's reply, none failed, the mode named.
func TestBufferedSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs warmpath")
	}
	for _, tc := range []struct{ name, row string }{{"warmpath", "| chat8k | 40 | 1 |"}, {"echo", "| chat8k (echo) | 40 | 1 |"}} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-body-mode", "buffered", "-scenarios", "chat8k", "-duration", "1s", "-rate", "40", "-floor=false"}
			if tc.name == "echo" {
				args = append(args, "-echo")
			}
			md := string(runBrief(t, args...))
			if !strings.Contains(md, "request bodies BUFFERED") {
				t.Errorf("results.md does not name the body mode:\n%s", md)
			}
			var row string
			for _, line := range strings.Split(md, "\n") {
				if strings.HasPrefix(line, tc.row) {
					row = line
				}
			}
			if row == "" {
				t.Fatalf("results.md lacks %q:\n%s", tc.row, md)
			}
			cells := strings.Split(row, "|")
			if failed := strings.TrimSpace(cells[len(cells)-2]); failed != "0" {
				t.Errorf("failed requests: %s", row)
			}
		})
	}
}

// TestSmoke runs every scenario but chat100k briefly against a real
// warmpath process with 4 fake engines (and, for peers, a second one
// sharing its ledger): every request routed, no failure, the tables
// written, peer bytes sent, each chat8k and short run paired with the
// echo processor's.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs warmpath")
	}
	md := runBrief(t, "-scenarios", "chat8k,short,peers", "-duration", "2s", "-rate", "40", "-short-rates", "80")
	for _, want := range []string{"| chat8k | 40 | 1 |", "| short | 80 | 1 |", "| chat8k-alone | 40 | 1 |", "| chat8k-peer | 40 | 1 |",
		"| chat8k (echo) | 40 | 1 |", "| short (echo) | 80 | 1 |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	pairs, floors := false, 0
	const runColumns, floorColumns = 19, 10
	for _, line := range strings.Split(string(md), "\n") {
		cells := strings.Split(line, "|")
		run := strings.HasPrefix(line, "| chat8k") || strings.HasPrefix(line, "| short")
		switch {
		case run && len(cells) == runColumns+2:
			if strings.TrimSpace(cells[len(cells)-2]) != "0" {
				t.Errorf("failed requests: %s", line)
			}
		case run && len(cells) == floorColumns+2:
			floors++
			if over := strings.TrimSpace(cells[8]); over == "–" || over == "" {
				t.Errorf("no client p99 over the floor: %s", line)
			}
		}
		if strings.HasPrefix(line, "| 1 |") && len(cells) == 10 {
			pairs = true
			if b := strings.TrimSpace(cells[7]); b == "0" || b == "–" {
				t.Errorf("the routing replica sent no peer bytes: %s", line)
			}
		}
	}
	if !pairs {
		t.Errorf("results.md lacks the peers table:\n%s", md)
	}
	if floors != 2 {
		t.Errorf("results.md has %d rows over the floor, want chat8k's and short's:\n%s", floors, md)
	}
}

// TestSchedStat reads this process's threads: some run time, a wait that
// is not negative.
func TestSchedStat(t *testing.T) {
	t.Parallel()
	run, wait, ok := schedStat(os.Getpid())
	if !ok {
		t.Skip("no /proc/PID/task/*/schedstat here")
	}
	if run <= 0 || wait < 0 {
		t.Errorf("schedStat = run %v ns, wait %v ns", run, wait)
	}
}

// TestMinorFaults reads this process's page faults, which grow when it
// first touches fresh memory.
func TestMinorFaults(t *testing.T) {
	before := minorFaults(os.Getpid())
	if math.IsNaN(before) {
		t.Skip("no /proc/PID/stat here")
	}
	fresh := make([]byte, 64<<20)
	for i := 0; i < len(fresh); i += 4096 {
		fresh[i] = 1
	}
	// 16,384 pages of 4 KiB, or 32 of 2 MiB where huge pages are the rule.
	if after := minorFaults(os.Getpid()); after-before < 16 {
		t.Errorf("%v faults after touching 64 MiB of fresh memory, want at least 16", after-before)
	}
	runtime.KeepAlive(fresh)
}

func TestShortTokensAtLeastOne(t *testing.T) {
	var stdout strings.Builder
	err := run(t.Context(), []string{"-short-tokens", "0", "-out", t.TempDir()}, &stdout)
	if err == nil || !strings.Contains(err.Error(), "-short-tokens 0") {
		t.Fatalf("run with -short-tokens 0: %v", err)
	}
}
