// Command loadbench measures warmpath's decision latency and CPU under
// load, at the request level (DESIGN.md §5). It starts `warmpath serve` as
// a real process in front of fake engines that publish real vLLM KV events
// over ZeroMQ (and serve /metrics and /health), and plays Envoy: one
// ext_proc stream per request in FULL_DUPLEX_STREAMED mode over a few
// HTTP/2 connections, at a fixed open-loop rate, with the response played
// back through the stream (headers, a chunk per token, usage).
//
// It reports, per scenario and run: the decision latency from warmpath's
// own histogram (warmpath_decision_duration_seconds) and from the client's
// side (end of the request body → the routing reply), warmpath's CPU per
// request and cores, and whether the queue grew.
//
//	go run ./e2e/cmd/loadbench -out /tmp/load               # every scenario
//	go run ./e2e/cmd/loadbench -scenarios chat8k -runs 1 -duration 10s
//
// The scenarios:
//   - chat8k: 8K-token chats at -rate (500/s): 64 families of a ~7K-token
//     shared conversation, each request one of 2,048 user messages; each
//     family's prefix starts cached on 7–10 of the 16 workers.
//   - chat100k: one request at a time, 100K-token chats: cold (a new
//     conversation each time), and warm in both growth patterns (the
//     assistant's reply and a user message; a user message only). The CPU
//     of each request's exchange is reported apart from the CPU after it,
//     when the engine's KV events for the blocks it stored are applied.
//   - short: ~220-token chats at each of -short-rates, for the highest rate
//     with client p99 ≤ 2 ms; -short-tokens lengthens their streamed answers,
//     for the response watching under many concurrent streams.
//   - peers (not in the default list): chat8k at -rate on one replica
//     alone and on one whose ledger a second replica shares (a second
//     warmpath serve, to which nothing is routed), in -runs pairs: what
//     sharing costs the routing replica per request, and the peer bytes.
//
// With -echo the scenarios run against an echo processor (echo.go) that
// speaks the same exchange and decides nothing: the client-side floor of
// the driver, gRPC and the machine, against which warmpath's client
// figures are read, and in chat100k the CPU any processor spends taking a
// 100K-token body in and handing it back. By default (-floor) each chat8k
// and short run is paired with an echo run in the same minutes, since load
// from elsewhere on a shared machine moves the floor from one quarter hour
// to the next, and results.md gives warmpath's client p99 over it.
//
// CPU is read from each thread's /proc schedstat (nanoseconds; the 10 ms
// ticks of /proc/PID/stat are too coarse for one request).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/tokenize"
)

func main() {
	if echoMain() {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

type options struct {
	scenarios  []string
	patterns   []string
	runs       int
	duration   time.Duration
	warmup     time.Duration
	rate       float64
	shortRates []float64
	// shortTokens is the tokens of each short chat's streamed answer.
	shortTokens int
	workers     int
	conns       int
	binary      string
	tokenizer   string
	out         string
	pprof       bool
	trace       time.Duration
	echo        bool
	seed        uint64
	long        int    // requests per chat100k series
	longWarmup  int    // unmeasured cold chats before the chat100k series
	peerCfg     string // stackOptions.peerCfg of the peers scenario
	env         []string
	mode        bodyMode // how request bodies are sent
	// floor pairs each chat8k and short run with a run of the echo
	// processor in the same minutes.
	floor bool
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	var o options
	scen := fs.String("scenarios", "chat8k,chat100k,short", "comma-separated: chat8k, chat100k, short, peers")
	fs.IntVar(&o.runs, "runs", 5, "runs of each rate scenario (each with a fresh warmpath)")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "measured time of a rate run")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "unmeasured load before each rate run")
	fs.Float64Var(&o.rate, "rate", 500, "chat8k requests per second")
	rates := fs.String("short-rates", "1000,2000,3000", "short-chat rates to try, requests per second")
	fs.IntVar(&o.shortTokens, "short-tokens", 4, "tokens of each short chat's streamed answer, a chunk each 10 ms (more for the response watching's cost per chunk)")
	fs.IntVar(&o.workers, "workers", 16, "fake engines")
	fs.IntVar(&o.conns, "conns", 2, "HTTP/2 connections to the ext_proc port (Envoy opens one per worker thread)")
	fs.StringVar(&o.binary, "warmpath", "", "warmpath binary (default: go build ./cmd/warmpath)")
	fs.StringVar(&o.tokenizer, "tokenizer", "tokenize/testdata/models/qwen3", "tokenizer directory of the served model")
	fs.StringVar(&o.out, "out", "", "directory for results.md and warmpath's logs (default: a temporary one)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof with mutex and block profiling (costs CPU; for profiling, not for figures)")
	fs.DurationVar(&o.trace, "trace", 0, "save a runtime execution trace this long from the middle of each rate run, as NAME.trace in -out (go tool trace; costs CPU while it records)")
	fs.BoolVar(&o.echo, "echo", false, "run the scenarios against an echo processor that decides nothing (echo.go) instead of warmpath: the client-side floor of the driver, gRPC and this machine, and in chat100k the CPU of passing the body through")
	fs.BoolVar(&o.floor, "floor", true, "pair each chat8k and short run with a run of the echo processor just before or after it (the order alternating), and report warmpath's client latency over that floor: the same minutes' reference, on a machine whose load from elsewhere moves the figures")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed")
	fs.IntVar(&o.long, "long-requests", 20, "requests per chat100k series (more for a profile with enough samples)")
	fs.IntVar(&o.longWarmup, "long-warmup", 300, "chat100k: cold 100K chats played unmeasured before the series, so warmpath's conversation caches hold what they hold in a router that has served for a while (0: measure from a fresh process)")
	env := fs.String("warmpath-env", "", "comma-separated NAME=value added to warmpath's environment (GOGC=400)")
	peerLinger := fs.Duration("peer-linger", 0, "peers scenario: both replicas' peers.linger (0: warmpath's default)")
	patterns := fs.String("patterns", "cold,reply,user", "chat100k growth patterns: cold, reply, user")
	mode := fs.String("body-mode", "full-duplex", "request_body_mode the driver plays: full-duplex (FULL_DUPLEX_STREAMED, the Inference Extension's protocol) or buffered (BUFFERED: Envoy holds a body up to its buffer limit and sends it whole; nothing of it comes back)")
	procs := fs.Int("driver-procs", 0, "GOMAXPROCS of the driver itself (0: the Go default); warmpath keeps its own")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.mode, err = parseBodyMode(*mode); err != nil {
		return err
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *env != "" {
		o.env = strings.Split(*env, ",")
	}
	if *peerLinger > 0 {
		o.peerCfg = fmt.Sprintf(", linger: %s", *peerLinger)
	}
	o.patterns = strings.Split(*patterns, ",")
	o.scenarios = strings.Split(*scen, ",")
	for _, r := range strings.Split(*rates, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil {
			return fmt.Errorf("-short-rates: %w", err)
		}
		o.shortRates = append(o.shortRates, v)
	}
	if o.shortTokens < 1 {
		return fmt.Errorf("-short-tokens %d: an answer has at least one token", o.shortTokens)
	}
	if o.out == "" {
		d, err := os.MkdirTemp("", "loadbench-out")
		if err != nil {
			return err
		}
		o.out = d
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.binary == "" && !o.echo {
		o.binary = filepath.Join(o.out, "warmpath")
		b := exec.CommandContext(ctx, "go", "build", "-o", o.binary, "github.com/warmpath/warmpath/cmd/warmpath")
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("build warmpath: %w", err)
		}
	}
	pipe, err := tokenize.NewPipeline("qwen3", o.tokenizer, 256<<20, nil)
	if err != nil {
		return err
	}
	rep := &report{}
	for _, sc := range o.scenarios {
		var err error
		switch strings.TrimSpace(sc) {
		case "chat8k":
			err = chat8k(ctx, o, pipe, rep)
		case "chat100k":
			err = chat100k(ctx, o, pipe, rep)
		case "short":
			err = short(ctx, o, pipe, rep)
		case "peers":
			err = peerPairs(ctx, o, pipe, rep)
		default:
			err = fmt.Errorf("unknown scenario %q", sc)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
	}
	md := rep.markdown(o)
	fmt.Fprint(stdout, md)
	return os.WriteFile(filepath.Join(o.out, "results.md"), []byte(md), 0o644)
}

func (o options) stackOptions(name string, capBlocks int) stackOptions {
	return stackOptions{binary: o.binary, tokenizer: o.tokenizer, workers: o.workers, conns: o.conns, capBlocks: capBlocks,
		pprof: o.pprof, trace: o.trace > 0, echo: o.echo, logPath: filepath.Join(o.out, name+".log"), env: o.env}
}

// rateRun is one run at a fixed open-loop rate.
type rateRun struct {
	scenario        string
	rate            float64
	sent, failed    int
	firstErr        string
	client          []time.Duration // routing latency seen by the driver, sorted
	firstP50        time.Duration   // client p50 over the first and last third of the run
	lastP50         time.Duration
	late            int     // requests still waiting for routing when the schedule ended
	wpP50, wpP99    float64 // seconds, from warmpath's histogram
	wpWithin        float64 // share of warmpath's decisions within the p99 budget (decisionBudget)
	chunkP50        float64 // seconds warmpath spent on a response chunk, from its histogram
	chunkP99        float64
	peerCores       float64 // the peer replica's CPU seconds per second (stack.peer)
	peerBytesPerReq float64 // peer bytes the routing replica sent per request
	cores           float64 // warmpath CPU seconds per second
	cpuPerReq       float64 // warmpath CPU seconds per request
	waitCores       float64 // seconds per second warmpath's threads waited on a run queue for a CPU
	driverCores     float64
	chunksPerSec    float64
	achievedPerSec  float64
}

// grew says whether the queue ran away: requests left waiting at the end,
// or a last third much slower than the first.
func (r *rateRun) grew() bool {
	return r.late > int(r.rate/10)+1 || r.lastP50 > 3*r.firstP50+time.Millisecond
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// drawer draws the next request of a workload.
type drawer func(rng *rand.Rand) request

// runRate plays draw at rate for warmup then duration on s and measures
// the second part.
func runRate(ctx context.Context, s *stack, o options, name string, rate float64, draw drawer, resp response) (*rateRun, error) {
	if o.warmup > 0 {
		if _, err := schedule(ctx, s, o.mode, rate, o.warmup, draw, resp, o.seed+99); err != nil {
			return nil, err
		}
	}
	hists := []string{"warmpath_decision_duration_seconds", "warmpath_response_chunk_duration_seconds"}
	var before, after []histogram
	var err error
	if !o.echo { // the echo processor keeps no histograms
		if before, err = s.scrapeHistograms(hists...); err != nil {
			return nil, err
		}
	}
	wait0 := s.runQueueWait()
	cpu0, err := s.cpu()
	if err != nil {
		return nil, err
	}
	self0 := selfCPU()
	t0 := time.Now()
	var profiled sync.WaitGroup
	if o.pprof {
		profiled.Go(func() { saveCPUProfile(s.admin, o.out, name, max(time.Second, o.duration-time.Second)) })
		if s.peerAdmin != "" {
			profiled.Go(func() { saveCPUProfile(s.peerAdmin, o.out, name+"-peer", max(time.Second, o.duration-time.Second)) })
		}
	}
	if o.trace > 0 {
		profiled.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(max(o.duration-o.trace, 0) / 2):
			}
			saveTrace(s.admin, o.out, name, o.trace)
		})
	}
	peerCPU0, peerSent0 := s.peerCPU(), s.peerBytesSent()
	res, err := schedule(ctx, s, o.mode, rate, o.duration, draw, resp, o.seed)
	profiled.Wait()
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0).Seconds()
	cpu1, _ := s.cpu()
	res.waitCores = (s.runQueueWait() - wait0) / wall
	res.peerCores = (s.peerCPU() - peerCPU0) / wall
	res.peerBytesPerReq = (s.peerBytesSent() - peerSent0) / float64(max(1, res.sent))
	res.scenario, res.rate = name, rate
	res.wpP50, res.wpP99, res.wpWithin, res.chunkP50, res.chunkP99 = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if !o.echo {
		if after, err = s.scrapeHistograms(hists...); err != nil {
			return nil, err
		}
		res.wpP50, res.wpP99 = quantile(0.5, before[0], after[0]), quantile(0.99, before[0], after[0])
		res.wpWithin = within(decisionBudget, before[0], after[0])
		res.chunkP50, res.chunkP99 = quantile(0.5, before[1], after[1]), quantile(0.99, before[1], after[1])
	} else {
		res.scenario = name + " (echo)"
	}
	res.cores = (cpu1 - cpu0) / wall
	res.cpuPerReq = (cpu1 - cpu0) / float64(max(1, res.sent))
	res.driverCores = (selfCPU() - self0) / wall
	res.chunksPerSec = float64(res.sent*(resp.tokens+1)) / wall
	return res, nil
}

// schedule sends requests with exponential gaps (a Poisson process) at
// rate for d, each on its own stream with its body sent in mode, and
// waits for all of them to end.
func schedule(ctx context.Context, s *stack, mode bodyMode, rate float64, d time.Duration, draw drawer, resp response, seed uint64) (*rateRun, error) {
	rng := rand.New(rand.NewPCG(seed, 3))
	var mu sync.Mutex
	res := &rateRun{}
	type sample struct {
		at time.Time
		d  time.Duration
	}
	var samples []sample
	var waiting atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	next := start
	end := start.Add(d)
	i := 0
	for next.Before(end) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		req := draw(rng)
		conn := s.conns[i%len(s.conns)]
		i++
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		wg.Add(1)
		waiting.Add(1)
		go func() {
			defer wg.Done()
			routed := func(ep string) int {
				waiting.Add(-1)
				e := s.byAddr[ep]
				if e == nil {
					return 0
				}
				cached := e.cached(req.hashes) * 16
				e.running.Add(1)
				time.AfterFunc(resp.ttft, func() { e.store(req.hashes, req.tokens, false) })
				return cached
			}
			o := play(ctx, conn, mode, req.body, resp, len(req.tokens), routed)
			if e := s.byAddr[o.worker]; e != nil {
				e.running.Add(-1)
			}
			mu.Lock()
			defer mu.Unlock()
			res.sent++
			if o.err != nil {
				if o.worker == "" {
					waiting.Add(-1)
				}
				res.failed++
				if res.firstErr == "" {
					res.firstErr = o.err.Error()
				}
				return
			}
			samples = append(samples, sample{o.sent, o.routing})
		}()
	}
	res.late = int(waiting.Load())
	wg.Wait()
	slices.SortFunc(samples, func(a, b sample) int { return a.at.Compare(b.at) })
	third := len(samples) / 3
	p50 := func(ss []sample) time.Duration {
		ds := make([]time.Duration, len(ss))
		for i, s := range ss {
			ds[i] = s.d
		}
		slices.Sort(ds)
		return pct(ds, 0.5)
	}
	res.firstP50, res.lastP50 = p50(samples[:third]), p50(samples[len(samples)-third:])
	for _, s := range samples {
		res.client = append(res.client, s.d)
	}
	slices.Sort(res.client)
	res.achievedPerSec = float64(len(samples)) / d.Seconds()
	return res, nil
}

// warmFamilies publishes each family's shared prefix on 7 to 10 of the
// engines, the warm pool the budgets are stated for.
func warmFamilies(s *stack, fw *familyWorkload, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	for f := range fw.families {
		n := min(len(s.engines), 7+rng.IntN(4))
		for _, i := range rng.Perm(len(s.engines))[:n] {
			s.engines[i].store(fw.prefixH[f], fw.prefix[f], true)
		}
	}
	time.Sleep(time.Second) // the events reach the index
}

// chat8kWorkload is the chat8k scenario's requests and their responses.
func chat8kWorkload(ctx context.Context, o options, pipe *tokenize.Pipeline) (*familyWorkload, response, error) {
	fw, err := newFamilyWorkload(ctx, pipe, o.seed, 64, promptWords(7000), 6, 2048, promptWords(1000), 16)
	return fw, response{ttft: 40 * time.Millisecond, itl: 15 * time.Millisecond, tokens: 16}, err
}

func chat8k(ctx context.Context, o options, pipe *tokenize.Pipeline, rep *report) error {
	fw, resp, err := chat8kWorkload(ctx, o, pipe)
	if err != nil {
		return err
	}
	for r := range o.runs {
		if err := measureRate(ctx, o, rep, fmt.Sprintf("chat8k-%d", r), "chat8k", o.rate, r, fw, resp); err != nil {
			return err
		}
	}
	return nil
}

// measureRate runs scenario at rate on a fresh stack whose engines hold
// fw's families, as run r; with -floor, a run of the echo processor on a
// fresh stack goes just before or after it, alternating with r, and the
// two are paired in the report. tag names the run's log and profiles.
func measureRate(ctx context.Context, o options, rep *report, tag, scenario string, rate float64, r int, fw *familyWorkload, resp response) error {
	order := []bool{o.echo}
	if o.floor && !o.echo {
		order = []bool{r%2 == 1, r%2 == 0}
	}
	var pair floorPair
	for _, echo := range order {
		ro, name := o, tag
		ro.echo = echo
		if echo && !o.echo {
			name += "-echo"
		}
		s, err := startStack(ctx, ro.stackOptions(name, 40000))
		if err != nil {
			return err
		}
		warmFamilies(s, fw, o.seed+uint64(r))
		res, err := runRate(ctx, s, ro, scenario, rate, fw.next, resp)
		if o.pprof && err == nil && !echo {
			err = saveProfiles(s, o.out, name)
		}
		s.close()
		if err != nil {
			return err
		}
		rep.rate = append(rep.rate, res)
		fmt.Fprintf(os.Stderr, "%s %g/s run %d: %s\n", res.scenario, rate, r, res.line())
		if echo {
			pair.floor = res
		} else {
			pair.warmpath = res
		}
	}
	if pair.floor != nil && pair.warmpath != nil {
		rep.floors = append(rep.floors, pair)
	}
	return nil
}

// peerPairs runs chat8k at -rate on one replica alone and on one whose
// ledger a second replica shares (stack.peer), in pairs of fresh stacks
// whose order alternates: the decision's cost of being shared, at the
// request, where the benchmarks of one decision leave out the body, the
// tokenizer and the transport that the request pays anyway.
func peerPairs(ctx context.Context, o options, pipe *tokenize.Pipeline, rep *report) error {
	fw, resp, err := chat8kWorkload(ctx, o, pipe)
	if err != nil {
		return err
	}
	for r := range o.runs {
		var pair [2]*rateRun
		for _, peer := range []bool{r%2 == 1, r%2 == 0} {
			name := "chat8k-alone"
			if peer {
				name = "chat8k-peer"
			}
			so := o.stackOptions(fmt.Sprintf("peers-%d-%v", r, peer), 40000)
			so.peer, so.peerCfg = peer, o.peerCfg
			s, err := startStack(ctx, so)
			if err != nil {
				return err
			}
			warmFamilies(s, fw, o.seed+uint64(r))
			res, err := runRate(ctx, s, o, name, o.rate, fw.next, resp)
			s.close()
			if err != nil {
				return err
			}
			rep.rate = append(rep.rate, res)
			pair[map[bool]int{false: 0, true: 1}[peer]] = res
			fmt.Fprintf(os.Stderr, "%s run %d: %s; peer %.2f cores, %.0f B/request\n", name, r, res.line(), res.peerCores, res.peerBytesPerReq)
		}
		rep.pairs = append(rep.pairs, pair)
	}
	return nil
}

func short(ctx context.Context, o options, pipe *tokenize.Pipeline, rep *report) error {
	fw, err := newFamilyWorkload(ctx, pipe, o.seed, 16, promptWords(150), 0, 4096, promptWords(70), 8)
	if err != nil {
		return err
	}
	resp := response{ttft: 20 * time.Millisecond, itl: 10 * time.Millisecond, tokens: o.shortTokens}
	runs := max(1, o.runs/2)
	for _, rate := range o.shortRates {
		for r := range runs {
			if err := measureRate(ctx, o, rep, fmt.Sprintf("short-%g-%d", rate, r), "short", rate, r, fw, resp); err != nil {
				return err
			}
		}
	}
	return nil
}

// longRun is the CPU of one request at a time on 100K-token chats.
type longRun struct {
	pattern   string
	tokens    int
	cpuPerReq []float64 // seconds, per run
	// afterPerReq is warmpath's CPU in the 50 ms after an exchange (the
	// KV events of the blocks the request stored, collecting what it
	// allocated), seconds per request, per run.
	afterPerReq []float64
	// faultsPerReq is the page faults warmpath took over an exchange
	// (mostly fresh heap pages, whose kernel time cpuPerReq includes),
	// per run.
	faultsPerReq []float64
	client       []time.Duration
}

// longExchange is what chat100k measures of one request: warmpath's CPU
// seconds over its exchange and in the 50 ms after it (when the engine's
// KV events for the stored blocks are applied), both less its idle
// background, the page faults it took over the exchange, the client's
// wait for the routing reply, and the prompt's tokens.
type longExchange struct {
	cpu, after, faults float64
	client             time.Duration
	tokens             int
}

// chat100kBlocks is what each engine of the chat100k scenario holds:
// 524K tokens, about what an 80 GB GPU keeps of an 8B model's KV cache.
// Its warm-up fills the engines, which then evict as real ones do, so the
// index holds what a pool of that size lets it hold.
const chat100kBlocks = 1 << 15

func chat100k(ctx context.Context, o options, pipe *tokenize.Pipeline, rep *report) error {
	n := o.long
	resp := response{ttft: 5 * time.Millisecond, itl: time.Millisecond, tokens: 2}
	for r := range max(1, o.runs/2+1) {
		s, err := startStack(ctx, o.stackOptions(fmt.Sprintf("chat100k-%d", r), chat100kBlocks))
		if err != nil {
			return err
		}
		// The process's own background work (scrapes, health checks, index
		// upkeep) is measured idle and taken out.
		c0, _ := s.cpu()
		time.Sleep(3 * time.Second)
		c1, _ := s.cpu()
		idle := (c1 - c0) / 3
		fmt.Fprintf(os.Stderr, "chat100k run %d: warmpath idle with %d engines: %.3f cores\n", r, o.workers, idle)
		// one plays a request and returns what it measured of it.
		one := func(body []byte) (longExchange, error) {
			ids, _, err := pipe.Tokenize(ctx, tokenize.KindChat, body, "")
			if err != nil {
				return longExchange{}, err
			}
			req := request{body: body, tokens: ids}
			req.hashes = vllmsim.NewChainHasher("").Extend(nil, ids, 16)
			f0 := s.faults()
			a, _ := s.cpu()
			t0 := time.Now()
			var e *engine
			out := play(ctx, s.conns[0], o.mode, body, resp, len(ids), func(ep string) int {
				e = s.byAddr[ep]
				if e == nil {
					return 0
				}
				return e.cached(req.hashes) * 16
			})
			wall := time.Since(t0).Seconds()
			b, _ := s.cpu()
			faults := s.faults() - f0
			if out.err != nil {
				return longExchange{}, out.err
			}
			t1 := time.Now()
			if e != nil {
				e.store(req.hashes, req.tokens, false)
			}
			time.Sleep(50 * time.Millisecond) // the events arrive before the next turn
			c, _ := s.cpu()
			return longExchange{cpu: b - a - idle*wall, after: c - b - idle*time.Since(t1).Seconds(),
				faults: faults, client: out.routing, tokens: len(ids)}, nil
		}
		// A router that has served for a while holds as many conversations
		// as its caches allow, and its heap has grown to that size: without
		// this the series would count the fresh pages of the caches filling.
		for i := range o.longWarmup {
			if _, err := one(newConversation(o.seed*1000+uint64(1_000_000+r*o.longWarmup+i), 100_000).body()); err != nil {
				s.close()
				return err
			}
		}
		for _, pattern := range o.patterns {
			var total, after, faults float64
			var lats []time.Duration
			var tokens int
			conv := newConversation(o.seed*1000+uint64(r), 100_000)
			if pattern != "cold" {
				if _, err := one(conv.body()); err != nil { // the first turn, seen before
					s.close()
					return err
				}
			}
			var profiled sync.WaitGroup
			if o.pprof {
				profiled.Go(func() { saveCPUProfile(s.admin, o.out, "chat100k-"+pattern, time.Duration(n)*200*time.Millisecond) })
			}
			for i := range n {
				if pattern == "cold" {
					conv = newConversation(o.seed*1000+uint64(r*n+i+1), 100_000)
				} else {
					conv.grow(pattern)
				}
				x, err := one(conv.body())
				if err != nil {
					s.close()
					return err
				}
				total += x.cpu
				after += x.after
				faults += x.faults
				lats = append(lats, x.client)
				tokens = x.tokens
			}
			profiled.Wait()
			slices.Sort(lats)
			lr := rep.long(pattern)
			lr.tokens = tokens
			lr.cpuPerReq = append(lr.cpuPerReq, total/float64(n))
			lr.afterPerReq = append(lr.afterPerReq, after/float64(n))
			lr.faultsPerReq = append(lr.faultsPerReq, faults/float64(n))
			lr.client = append(lr.client, lats...)
			fmt.Fprintf(os.Stderr, "chat100k %s run %d: %d tokens, CPU %.1f ms/request (%.1f ms after it), %.0f page faults/request, client p50 %s\n", pattern, r, tokens, 1e3*total/float64(n), 1e3*after/float64(n), faults/float64(n), pct(lats, 0.5))
		}
		if o.pprof {
			if err := saveProfiles(s, o.out, fmt.Sprintf("chat100k-%d", r)); err != nil {
				s.close()
				return err
			}
		}
		s.close()
	}
	return nil
}

// saveCPUProfile writes warmpath's CPU profile over the next d.
func saveCPUProfile(admin, dir, name string, d time.Duration) {
	saveURL(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())), filepath.Join(dir, name+".cpu.pprof"))
}

// saveURL writes what url answers to path; a profile that could not be
// taken is left out of the results, not an error of the run.
func saveURL(url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(path, b, 0o644)
}

// saveTrace writes a runtime execution trace of d from admin as NAME.trace.
func saveTrace(admin, dir, name string, d time.Duration) {
	saveURL(fmt.Sprintf("%s/debug/pprof/trace?seconds=%g", admin, d.Seconds()), filepath.Join(dir, name+".trace"))
}

// saveProfiles writes warmpath's heap, mutex and block profiles.
func saveProfiles(s *stack, dir, name string) error {
	for _, p := range []string{"mutex", "block", "heap", "goroutine"} {
		resp, err := http.Get(s.admin + "/debug/pprof/" + p)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"."+p+".pprof"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (r *rateRun) line() string {
	s := fmt.Sprintf("%d sent, %d failed, client p50 %s p99 %s, warmpath p50 %.3f ms p99 %.3f ms (%.2f%% within 2 ms), chunk p50 %.1f µs p99 %.1f µs, %.2f cores (%.2f waiting for a CPU), %.2f ms CPU/request, driver %.2f cores, queue grew %v (first/last third p50 %s/%s, %d late)",
		r.sent, r.failed, pct(r.client, 0.5), pct(r.client, 0.99), 1e3*r.wpP50, 1e3*r.wpP99, 100*r.wpWithin, 1e6*r.chunkP50, 1e6*r.chunkP99, r.cores, r.waitCores, 1e3*r.cpuPerReq, r.driverCores, r.grew(), r.firstP50, r.lastP50, r.late)
	if r.firstErr != "" {
		s += "; first error: " + r.firstErr
	}
	return s
}

var errNoRuns = errors.New("no runs")

// decisionBudget is the decision's p99 budget (DESIGN.md §5), one of
// warmpath's histogram bounds: the share of decisions within it is
// counted.
const decisionBudget = 0.002

func median(v []float64) (med, lo, hi float64, err error) {
	if len(v) == 0 {
		return 0, 0, 0, errNoRuns
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m, s[0], s[len(s)-1], nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
