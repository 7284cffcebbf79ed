package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// stack is warmpath serve as a real process in front of fake engines, with
// the driver's gRPC connections to its ext_proc port.
type stack struct {
	cmd     *exec.Cmd
	admin   string // http://host:port
	conns   []*grpc.ClientConn
	engines []*engine
	byAddr  map[string]*engine

	// peer, with stackOptions.peer, is a second replica sharing the
	// first's ledger (each follows the other), subscribed to the same
	// engines, to which the driver routes nothing: the first pays for
	// sending its decisions, the second for applying them.
	peer      *exec.Cmd
	peerAdmin string
}

// envoyWindow is Envoy's default HTTP/2 initial stream and connection
// window, which its ext_proc gRPC client advertises.
const envoyWindow = 256 << 20

type stackOptions struct {
	binary    string // warmpath executable
	tokenizer string // the qwen3 tokenizer directory
	workers   int
	conns     int
	capBlocks int
	pprof     bool
	trace     bool // serve /debug/pprof without mutex sampling, for an execution trace
	echo      bool // start the echo processor (echo.go) instead of warmpath
	logPath   string
	extra     string   // appended to the configuration
	peer      bool     // start a second replica sharing the ledger (stack.peer)
	peerCfg   string   // more fields of both replicas' peers section ("linger: 5ms")
	env       []string // added to warmpath's environment (GOGC=400)
}

func startStack(ctx context.Context, o stackOptions) (*stack, error) {
	s := &stack{byAddr: map[string]*engine{}}
	var cfg strings.Builder
	tok, err := filepath.Abs(o.tokenizer)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(&cfg, "listen: {extproc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nmodels:\n  - {name: qwen3, tokenizer: %q, block_size: 16}\nworkers:\n", tok)
	for i := range o.workers {
		e, err := startEngine(ctx, fmt.Sprintf("w%02d", i), o.capBlocks)
		if err != nil {
			s.close()
			return nil, err
		}
		s.engines = append(s.engines, e)
		s.byAddr[e.addr] = e
		fmt.Fprintf(&cfg, "  - {name: %s, address: %q, models: [qwen3], kv_events: %q}\n", e.name, e.addr, e.events)
	}
	cfg.WriteString("log: {level: warn}\n")
	switch {
	case o.pprof:
		cfg.WriteString("debug: {pprof: true, mutex_profile_fraction: 20}\n")
	case o.trace:
		cfg.WriteString("debug: {pprof: true}\n")
	}
	cfg.WriteString(o.extra)
	dir, err := os.MkdirTemp("", "loadbench")
	if err != nil {
		s.close()
		return nil, err
	}
	base := cfg.String()
	token := filepath.Join(dir, "peer-token")
	if o.peer {
		if err := os.WriteFile(token, []byte("loadbench-peer-token\n"), 0o600); err != nil {
			s.close()
			return nil, err
		}
		base += fmt.Sprintf("peers: {token_file: %q%s}\n", token, o.peerCfg)
	}
	var extproc string
	binary, env := o.binary, o.env
	if o.echo {
		if binary, err = os.Executable(); err != nil {
			s.close()
			return nil, err
		}
		addrs := make([]string, len(s.engines))
		for i, e := range s.engines {
			addrs[i] = e.addr
		}
		env = []string{echoEnv + "=" + strings.Join(addrs, ",")}
	}
	s.cmd, extproc, s.admin, err = startWarmpath(ctx, binary, filepath.Join(dir, "warmpath.yaml"), base, o.logPath, env)
	if err != nil {
		s.close()
		return nil, err
	}
	if o.peer {
		cfg := strings.Replace(base, fmt.Sprintf("peers: {token_file: %q%s}\n", token, o.peerCfg),
			fmt.Sprintf("peers: {token_file: %q%s, static: [%q]}\n", token, o.peerCfg, extproc), 1)
		s.peer, _, s.peerAdmin, err = startWarmpath(ctx, o.binary, filepath.Join(dir, "peer.yaml"), cfg,
			strings.TrimSuffix(o.logPath, ".log")+"-peer.log", o.env)
		if err != nil {
			s.close()
			return nil, err
		}
	}
	for range o.conns {
		c, err := grpc.NewClient(extproc, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
			// Envoy's HTTP/2 windows (its default initial stream and
			// connection windows, 256 MiB): warmpath never waits on the
			// driver's window updates to send a body back, as it never does
			// on Envoy's.
			grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow))
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, c)
	}
	for _, admin := range []string{s.admin, s.peerAdmin} {
		if admin == "" {
			continue
		}
		if err := waitReady(admin); err != nil {
			s.close()
			return nil, err
		}
	}
	if o.peer {
		// Each replica follows the other once the follower connected.
		deadline := time.Now().Add(30 * time.Second)
		for {
			a, _ := scrapeValue(s.admin, "warmpath_peer_followers")
			b, _ := scrapeValue(s.peerAdmin, "warmpath_peer_followers")
			if a >= 1 && b >= 1 {
				break
			}
			if time.Now().After(deadline) {
				s.close()
				return nil, errors.New("the replicas do not follow each other after 30 s")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return s, nil
}

// startWarmpath writes cfg to path and starts warmpath serve on it with env
// added to the driver's environment, returning once it says it is ready,
// with its ext_proc address and admin URL.
func startWarmpath(ctx context.Context, binary, path, cfg, logPath string, env []string) (*exec.Cmd, string, string, error) {
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, "", "", err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", "", err
	}
	cmd := exec.CommandContext(ctx, binary, "serve", "--config", path, "--drain-delay", "0s")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("start warmpath: %w", err)
	}
	ready := regexp.MustCompile(`warmpath ready extproc=(\S+) admin=(\S+)`)
	sc := bufio.NewScanner(out)
	var extproc, admin string
	for sc.Scan() {
		if m := ready.FindStringSubmatch(sc.Text()); m != nil {
			extproc, admin = m[1], "http://"+m[2]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if extproc == "" {
		_ = cmd.Wait()
		return nil, "", "", fmt.Errorf("warmpath exited before it was ready (log: %s)", logPath)
	}
	return cmd, extproc, admin, nil
}

// peerBytesSent returns the peer bytes the routing replica has sent (0
// without a peer).
func (s *stack) peerBytesSent() float64 {
	if s.peer == nil {
		return 0
	}
	v, _ := scrapeValue(s.admin, `warmpath_peer_bytes_total{direction="sent"}`)
	return v
}

// scrapeValue returns the value of one series on admin's /metrics, named
// as the exposition writes it (name{labels}).
func scrapeValue(admin, series string) (float64, error) {
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s on %s/metrics", series, admin)
}

// waitReady waits until admin's /readyz answers 200.
func waitReady(admin string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("warmpath not ready after 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) close() {
	for _, c := range s.conns {
		c.Close()
	}
	for _, cmd := range []*exec.Cmd{s.peer, s.cmd} {
		if cmd == nil || cmd.Process == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	for _, e := range s.engines {
		e.close()
	}
}

// cpu returns the CPU seconds (user and system) warmpath has used.
func (s *stack) cpu() (float64, error) { return processCPU(s.cmd.Process.Pid) }

// faults returns the minor page faults warmpath has taken: mostly the
// first touch of each fresh page of its heap, whose kernel time the CPU
// figures include (NaN when they cannot be read).
func (s *stack) faults() float64 { return minorFaults(s.cmd.Process.Pid) }

// minorFaults returns the minor page faults pid has taken, or NaN.
func minorFaults(pid int) float64 {
	f, err := statFields(pid)
	if err != nil || len(f) < 8 {
		return math.NaN()
	}
	n, err := strconv.ParseFloat(f[7], 64) // minflt
	if err != nil {
		return math.NaN()
	}
	return n
}

// statFields returns the fields of /proc/PID/stat after the command name
// (which may hold spaces), from state on: the third field of proc(5) is
// the first here.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])), nil
}

// peerCPU returns the CPU seconds the peer replica has used (0 without).
func (s *stack) peerCPU() float64 {
	if s.peer == nil {
		return 0
	}
	c, _ := processCPU(s.peer.Process.Pid)
	return c
}

// processCPU returns the CPU seconds (user and system) pid has used.
func processCPU(pid int) (float64, error) {
	if ns, ok := schedCPU(pid); ok {
		return ns / 1e9, nil
	}
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// schedCPU returns the nanoseconds pid's threads have run, from each
// thread's schedstat: exact, where /proc/PID/stat counts 10 ms ticks, too
// coarse for a request of a few milliseconds. Go keeps its threads, so
// none that ran is missing from the sum.
func schedCPU(pid int) (float64, bool) {
	run, _, ok := schedStat(pid)
	return run, ok
}

// schedStat returns the nanoseconds pid's threads have run and have
// waited on a run queue for a CPU, summed over its threads' schedstat.
func schedStat(pid int) (run, wait float64, ok bool) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread ended between the listing and the read
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, false
		}
		r, err1 := strconv.ParseFloat(f[0], 64)
		w, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			return 0, 0, false
		}
		run, wait = run+r, wait+w
	}
	return run, wait, true
}

// runQueueWait returns the seconds warmpath's threads have waited for a
// CPU while runnable (NaN where schedstat is missing).
func (s *stack) runQueueWait() float64 {
	if _, wait, ok := schedStat(s.cmd.Process.Pid); ok {
		return wait / 1e9
	}
	return math.NaN()
}

// selfCPU returns the CPU seconds the driver has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// histogram is a Prometheus histogram's cumulative buckets as scraped.
type histogram struct {
	le    []float64
	count []float64
}

var bucketLine = regexp.MustCompile(`^(\w+)_bucket\{le="([^"]+)"\} (\S+)$`)

// scrapeHistograms reads the named histograms from one scrape of
// warmpath's /metrics, in the order given.
func (s *stack) scrapeHistograms(names ...string) ([]histogram, error) {
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	hs := make([]histogram, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := bucketLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		i := slices.Index(names, m[1])
		if i < 0 {
			continue
		}
		le, _ := strconv.ParseFloat(m[2], 64)
		if m[2] == "+Inf" {
			le = math.Inf(1)
		}
		c, _ := strconv.ParseFloat(m[3], 64)
		hs[i].le, hs[i].count = append(hs[i].le, le), append(hs[i].count, c)
	}
	for i, h := range hs {
		if len(h.le) == 0 {
			return nil, fmt.Errorf("no histogram %s on /metrics", names[i])
		}
	}
	return hs, sc.Err()
}

// within returns the share of the observations between two scrapes that
// were at most bound, which must be one of the histogram's bucket bounds
// (NaN otherwise, or when there were none): a budget checked by counting,
// not by interpolating a quantile.
func within(bound float64, before, after histogram) float64 {
	i := slices.Index(after.le, bound)
	n := len(after.le)
	if i < 0 || n == 0 {
		return math.NaN()
	}
	d := func(j int) float64 {
		c := after.count[j]
		if j < len(before.count) {
			c -= before.count[j]
		}
		return c
	}
	if d(n-1) == 0 {
		return math.NaN()
	}
	return d(i) / d(n-1)
}

// quantile is histogram_quantile over the observations between two scrapes:
// linear within the bucket that holds the q-th observation.
func quantile(q float64, before, after histogram) float64 {
	n := len(after.le)
	d := make([]float64, n)
	for i := range n {
		d[i] = after.count[i]
		if i < len(before.count) {
			d[i] -= before.count[i]
		}
	}
	total := d[n-1]
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	i, _ := slices.BinarySearchFunc(d, rank, func(c, r float64) int {
		if c < r {
			return -1
		}
		return 1
	})
	if i >= n-1 {
		return after.le[n-2] // in +Inf: the highest finite bound
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = after.le[i-1], d[i-1]
	}
	return lo + (after.le[i]-lo)*(rank-below)/(d[i]-below)
}
