package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/internal/app"
)

// WorkerSpec describes one simulated vLLM worker.
type WorkerSpec struct {
	// Name is the worker's name in warmpath's config. Required, unique.
	Name string
	// Profile is a vllmsim profile name ("l40s-27b-fp8", "test", …).
	Profile string
	// Tune, when set, adjusts the profile's engine configuration (speed,
	// KV budget) before the worker starts.
	Tune func(*vllmsim.EngineConfig)
}

// Setup is what every stack of a comparison shares: the workers, the
// clock, the binaries and where logs go. Only the policy differs.
type Setup struct {
	// Model is the served model name. Default "sim-model".
	Model string
	// Workers are started fresh (empty caches, same seeds) for every policy.
	Workers []WorkerSpec
	// TimeScale is simulated seconds per wall second for every simulator.
	// Default 1.
	TimeScale float64
	// Seed seeds the simulators' generated tokens (worker i gets Seed+i).
	Seed uint64
	// EnvoyBin is the real Envoy binary; Bootstrap its bootstrap file
	// (envoy/envoy.yaml). Both required.
	EnvoyBin  string
	Bootstrap string
	// Warmpath, when set, adjusts warmpath's configuration after the
	// harness filled listeners, the model, the workers and the policy.
	Warmpath func(*app.Config)
}

func (s *Setup) setDefaults() {
	if s.Model == "" {
		s.Model = "sim-model"
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
}

// Validate reports every problem in s.
func (s *Setup) Validate() error {
	var errs []error
	if len(s.Workers) == 0 {
		errs = append(errs, errors.New("setup: no workers"))
	}
	names := map[string]bool{}
	for i, w := range s.Workers {
		if w.Name == "" || names[w.Name] {
			errs = append(errs, fmt.Errorf("setup: workers[%d]: name %q empty or repeated", i, w.Name))
		}
		names[w.Name] = true
		if _, err := vllmsim.ProfileByName(w.Profile); err != nil {
			errs = append(errs, fmt.Errorf("setup: workers[%d]: %w", i, err))
		}
	}
	if !(s.TimeScale > 0) {
		errs = append(errs, fmt.Errorf("setup: time scale %v must be positive", s.TimeScale))
	}
	if s.EnvoyBin == "" || s.Bootstrap == "" {
		errs = append(errs, errors.New("setup: envoy binary and bootstrap are required"))
	}
	return errors.Join(errs...)
}

// Sim is one running simulated worker.
type Sim struct {
	Name   string
	Server *vllmsim.Server
	// Engine is the engine configuration it runs (after Tune).
	Engine vllmsim.EngineConfig
}

// Policy is one routing policy to compare.
type Policy struct {
	// Name labels the policy in reports. Unless Picker is set it is also
	// warmpath's config policy (warmpath, random, round-robin, …).
	Name string
	// Picker, when set, replaces warmpath's configured policy with a picker
	// built over the running simulators (the oracle). timeScale is the
	// simulators' clock scale.
	Picker func(sims []Sim, timeScale float64) extproc.Picker
}

// Stack is one running comparison target: simulated workers, warmpath in
// this process, and Envoy in front. Every process logs into Dir.
type Stack struct {
	// URL is Envoy's listener, the replayer's base URL.
	URL string
	// Admin is warmpath's admin HTTP address.
	Admin string
	// Sims are the workers, in Setup order.
	Sims []Sim
	// Recorder saw every decision and outcome.
	Recorder *Recorder
	// Dir holds every process's log.
	Dir string

	extproc string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
	envoy   *envoyProc
	closed  bool
}

// Start brings up a stack for policy: the simulators (in this process,
// :0 ports, KV events on), warmpath (in this process, :0 ports, debug
// headers on) and Envoy (a process from setup.EnvoyBin). Logs go under dir,
// which must exist. On error everything already started is stopped, and the
// logs stay in dir.
func Start(ctx context.Context, setup Setup, policy Policy, dir string) (*Stack, error) {
	setup.setDefaults()
	if err := setup.Validate(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Stack{Dir: dir, cancel: cancel}
	if err := s.start(ctx, sctx, setup, policy); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *Stack) start(ctx, sctx context.Context, setup Setup, policy Policy) error {
	for i, w := range setup.Workers {
		sim, err := s.startSim(sctx, setup, i, w)
		if err != nil {
			return err
		}
		s.Sims = append(s.Sims, sim)
	}
	cfg := app.DefaultConfig()
	cfg.Listen = app.ListenConfig{ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0"}
	cfg.Policy = policy.Name
	if policy.Picker != nil {
		cfg.Policy = "round-robin" // never used: the picker replaces it
	}
	cfg.Models = []app.ModelConfig{{Name: setup.Model, BlockSize: s.Sims[0].Engine.BlockSize}}
	for _, sim := range s.Sims {
		w := sim.Server.Worker(sim.Name)
		w.Models = []string{setup.Model}
		cfg.Workers = append(cfg.Workers, w)
	}
	cfg.ExtProc.DebugHeaders = true
	cfg.ExtProc.DrainTimeout = 5 * time.Second
	if setup.Warmpath != nil {
		setup.Warmpath(&cfg)
	}
	if err := s.startWarmpath(ctx, sctx, cfg, policy, setup.TimeScale); err != nil {
		return err
	}
	e, err := startEnvoy(ctx, setup.EnvoyBin, setup.Bootstrap, s.extproc, s.Dir, filepath.Join(s.Dir, "envoy.log"))
	if err != nil {
		return err
	}
	s.envoy = e
	s.URL = "http://" + e.listener
	return s.probe(ctx)
}

func (s *Stack) startSim(ctx context.Context, setup Setup, i int, w WorkerSpec) (Sim, error) {
	p, _ := vllmsim.ProfileByName(w.Profile)
	cfg := vllmsim.DefaultConfig()
	cfg.Host, cfg.Port = "127.0.0.1", 0
	cfg.ServedModelNames = []string{setup.Model}
	cfg.Engine = p.Engine
	if w.Tune != nil {
		w.Tune(&cfg.Engine)
	}
	cfg.Engine.Seed = setup.Seed + uint64(i)
	cfg.TimeScale = setup.TimeScale
	kv, err := vllmsim.ParseKVEventsConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*"}`)
	if err != nil {
		return Sim{}, fmt.Errorf("sim %s: %w", w.Name, err)
	}
	cfg.KVEvents = kv
	logf, err := os.Create(filepath.Join(s.Dir, "sim-"+w.Name+".log"))
	if err != nil {
		return Sim{}, fmt.Errorf("sim %s log: %w", w.Name, err)
	}
	srv, err := vllmsim.NewServer(cfg, vllmsim.WithLogger(slog.New(slog.NewTextHandler(logf, nil))))
	if err != nil {
		logf.Close()
		return Sim{}, fmt.Errorf("sim %s: %w", w.Name, err)
	}
	fmt.Fprintf(logf, "vllm-sim %s profile=%s http=%s kv_events=%v replay=%v time_scale=%g engine=%+v\n",
		w.Name, w.Profile, srv.HTTPAddr(), srv.KVEventsEndpoints(), srv.ReplayEndpoints(), cfg.TimeScale, cfg.Engine)
	s.goRun("sim "+w.Name, func() error {
		defer logf.Close()
		return srv.Run(ctx)
	})
	return Sim{Name: w.Name, Server: srv, Engine: cfg.Engine}, nil
}

// goRun runs f under the stack's wait group and keeps its error.
func (s *Stack) goRun(what string, f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil && !errors.Is(err, context.Canceled) {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s: %w", what, err))
			s.mu.Unlock()
		}
	}()
}

func (s *Stack) startWarmpath(ctx, sctx context.Context, cfg app.Config, policy Policy, timeScale float64) error {
	logf, err := os.Create(filepath.Join(s.Dir, "warmpath.log"))
	if err != nil {
		return fmt.Errorf("warmpath log: %w", err)
	}
	outf, err := os.Create(filepath.Join(s.Dir, "warmpath-stdout.log"))
	if err != nil {
		logf.Close()
		return fmt.Errorf("warmpath log: %w", err)
	}
	pr, pw := io.Pipe()
	ready := make(chan string, 1)
	// The stdout reader ends when warmpath's goroutine closes pw.
	s.goRun("warmpath stdout", func() error {
		defer outf.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(outf, sc.Text())
			if strings.HasPrefix(sc.Text(), "warmpath ready ") {
				select {
				case ready <- sc.Text():
				default:
				}
			}
		}
		return nil
	})
	exited := make(chan error, 1)
	var sims []Sim
	sims = append(sims, s.Sims...)
	s.goRun("warmpath", func() error {
		defer logf.Close()
		defer pw.Close()
		var err error
		if policy.Picker != nil {
			p := NewRecorder(policy.Picker(sims, timeScale))
			s.setRecorder(p)
			err = app.ServeWithPicker(sctx, cfg, p, pw, logf)
		} else {
			err = app.ServeWrapped(sctx, cfg, func(inner extproc.Picker) extproc.Picker {
				p := NewRecorder(inner)
				s.setRecorder(p)
				return p
			}, pw, logf)
		}
		exited <- err
		return err
	})
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line := <-ready:
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "extproc="); ok {
				s.extproc = v
			}
			if v, ok := strings.CutPrefix(f, "admin="); ok {
				s.Admin = v
			}
		}
		return nil
	case err := <-exited:
		return fmt.Errorf("warmpath (policy %s) exited before ready: %w (log %s)", policy.Name, err, filepath.Join(s.Dir, "warmpath.log"))
	case <-ctx.Done():
		return fmt.Errorf("start warmpath: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("warmpath not ready within 30s (log %s)", filepath.Join(s.Dir, "warmpath.log"))
	}
}

func (s *Stack) setRecorder(r *Recorder) {
	s.mu.Lock()
	s.Recorder = r
	s.mu.Unlock()
}

// recorder returns the recorder once warmpath built it.
func (s *Stack) recorder() *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Recorder
}

// probe waits until a request through Envoy reaches a worker: Envoy's
// ext_proc cluster and the routing path are up.
func (s *Stack) probe(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/models", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return fmt.Errorf("probe: %w", ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("probe through envoy never succeeded: %s (logs in %s)", last, s.Dir)
}

// InFlight returns warmpath's warmpath_assignments_in_flight summed over
// workers, read from its /metrics.
func (s *Stack) InFlight(ctx context.Context) (float64, error) {
	return scrapeSum(ctx, "http://"+s.Admin+"/metrics", "warmpath_assignments_in_flight")
}

// KVEvents returns the KV-cache events warmpath's index applied so far,
// every type together, read from its /metrics.
func (s *Stack) KVEvents(ctx context.Context) (float64, error) {
	return scrapeSum(ctx, "http://"+s.Admin+"/metrics", "warmpath_kvindex_events_total")
}

// StepLag returns the mean wall-time lag of the simulators' engine steps
// (vllmsim_step_lag_seconds sum over count, all workers together).
func (s *Stack) StepLag(ctx context.Context) (time.Duration, error) {
	var sum, n float64
	for _, sim := range s.Sims {
		url := "http://" + sim.Server.HTTPAddr() + "/metrics"
		v, err := scrapeSum(ctx, url, "vllmsim_step_lag_seconds_sum")
		if err != nil {
			return 0, err
		}
		c, err := scrapeSum(ctx, url, "vllmsim_step_lag_seconds_count")
		if err != nil {
			return 0, err
		}
		sum, n = sum+v, n+c
	}
	if n == 0 {
		return 0, nil
	}
	return time.Duration(sum / n * float64(time.Second)), nil
}

// WaitIdle polls InFlight until it reads 0 or timeout passes, and returns
// the last value read: the leaked assignments.
func (s *Stack) WaitIdle(ctx context.Context, timeout time.Duration) (float64, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := s.InFlight(ctx)
		if err != nil {
			return v, err
		}
		if v == 0 || time.Now().After(deadline) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops Envoy, warmpath and the simulators and returns the errors any
// of them reported. It is safe to call twice.
func (s *Stack) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.envoy != nil {
		s.envoy.stop()
	}
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// Snapshot writes warmpath's /metrics and /debug/workers as they are now
// into the stack's log directory (warmpath-metrics.txt,
// warmpath-workers.json), for reading a run after it ended.
func (s *Stack) Snapshot(ctx context.Context) error {
	for path, file := range map[string]string{"/metrics": "warmpath-metrics.txt", "/debug/workers": "warmpath-workers.json"} {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.Admin+path, nil)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", path, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", path, err)
		}
		if err := os.WriteFile(filepath.Join(s.Dir, file), b, 0o644); err != nil {
			return fmt.Errorf("snapshot %s: %w", path, err)
		}
	}
	return nil
}

// scrapeSum sums every sample of the metric name in a Prometheus text
// exposition at url.
func scrapeSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: status %d", name, resp.StatusCode)
	}
	return sumMetric(resp.Body, name)
}

// sumMetric sums the samples of one metric (any labels) in a Prometheus
// text exposition. A line that names the metric but has no number is an
// error.
func sumMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	total := 0.0
	for sc.Scan() {
		ln := sc.Text()
		if !strings.HasPrefix(ln, name+"{") && !strings.HasPrefix(ln, name+" ") {
			continue
		}
		rest := ln[len(name):]
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, fmt.Errorf("metric %s: no value in %q", name, ln)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		total += v
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("metric %s: %w", name, err)
	}
	return total, nil
}
