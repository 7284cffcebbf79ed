package harness

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
// clock, the binaries, how many warmpath replicas run and where logs go.
// Only the policy differs.
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
	// harness filled listeners, the model, the workers and the policy
	// (before the peers section of SharePeers, which it cannot change).
	Warmpath func(*app.Config)
	// Replicas is how many warmpath servers run behind Envoy, each in this
	// process with the same configuration but its own listeners, log and
	// Recorder; Envoy's warmpath cluster balances ext_proc streams over
	// them round robin (envoy/envoy.yaml). Default 1.
	Replicas int
	// SharePeers gives the replicas a peers section, so that they share
	// their in-flight ledgers: a token file in the stack's directory, each
	// replica listing the earlier ones' ext_proc addresses as static peers
	// (the earlier ones learn the later ones), heartbeat 100ms, stale_after
	// 500ms, expire_after 3s. It needs Replicas ≥ 2. Without it the
	// replicas know nothing of one another.
	SharePeers bool
}

func (s *Setup) setDefaults() {
	if s.Model == "" {
		s.Model = "sim-model"
	}
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if s.Replicas == 0 {
		s.Replicas = 1
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
	if s.Replicas < 0 {
		errs = append(errs, fmt.Errorf("setup: %d replicas", s.Replicas))
	}
	if s.SharePeers && s.Replicas < 2 {
		errs = append(errs, fmt.Errorf("setup: sharing peers needs at least 2 replicas, have %d", s.Replicas))
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
	// Label, when set, labels the run in reports and names its log
	// directory instead of Name, so that one policy can run in several
	// setups of one comparison.
	Label string
	// Picker, when set, replaces warmpath's configured policy with a picker
	// built over the running simulators (the oracle). timeScale is the
	// simulators' clock scale.
	Picker func(sims []Sim, timeScale float64) extproc.Picker
	// Config, when set, changes warmpath's configuration for this policy
	// after Setup.Warmpath; timeScale is the simulators' clock scale.
	Config func(c *app.Config, timeScale float64)
}

// label returns what names p's run: Label, or else Name.
func (p Policy) label() string {
	if p.Label != "" {
		return p.Label
	}
	return p.Name
}

// Stack is one running comparison target: simulated workers, warmpath in
// this process (one server per replica), and Envoy in front. Every process
// logs into Dir.
type Stack struct {
	// URL is Envoy's listener, the replayer's base URL.
	URL string
	// Admin is the first warmpath replica's admin HTTP address.
	Admin string
	// Replicas are the warmpath servers, in start order.
	Replicas []*Replica
	// Sims are the workers, in Setup order.
	Sims []Sim
	// Dir holds every process's log.
	Dir string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex // guards errs, closed and each replica's recorder
	errs   []error
	envoy  *envoyProc
	closed bool
}

// Replica is one running warmpath server of a stack.
type Replica struct {
	// ExtProc and Admin are its ext_proc gRPC and admin HTTP addresses.
	ExtProc, Admin string
	// name is the stem of its files in the stack's directory: "warmpath"
	// alone, "warmpath-<i>" among several.
	name     string
	recorder *Recorder
}

// replicaName returns the file-name stem of replica i of n.
func replicaName(i, n int) string {
	if n == 1 {
		return "warmpath"
	}
	return fmt.Sprintf("warmpath-%d", i)
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
	cfg.ExtProc.DrainDelay = 0 // the stack stops with its Envoy: nothing to drain away from
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
	if policy.Config != nil {
		policy.Config(&cfg, setup.TimeScale)
	}
	token := ""
	if setup.SharePeers {
		token = filepath.Join(s.Dir, "peer-token")
		if err := writeToken(token); err != nil {
			return err
		}
	}
	seq := new(atomic.Int64)
	var extprocs []string
	for i := range setup.Replicas {
		r, err := s.startWarmpath(ctx, sctx, replicaConfig(cfg, token, extprocs), replicaName(i, setup.Replicas), policy, setup.TimeScale,
			func(inner extproc.Picker) *Recorder { return newReplicaRecorder(inner, i, seq) })
		if err != nil {
			return err
		}
		s.Replicas = append(s.Replicas, r)
		extprocs = append(extprocs, r.ExtProc)
	}
	s.Admin = s.Replicas[0].Admin
	if err := s.waitReplicas(ctx, setup.SharePeers); err != nil {
		return err
	}
	e, err := startEnvoy(ctx, setup.EnvoyBin, setup.Bootstrap, extprocs, s.Dir, filepath.Join(s.Dir, "envoy.log"))
	if err != nil {
		return err
	}
	s.envoy = e
	s.URL = "http://" + e.listener
	if err := e.waitHealthy(ctx, "warmpath", extprocs, 30*time.Second); err != nil {
		return err
	}
	return s.probe(ctx)
}

// replicaConfig returns one replica's configuration: base, and when token
// (a file) is set a peers section sharing the ledger with the earlier
// replicas at their ext_proc addresses.
func replicaConfig(base app.Config, token string, earlier []string) app.Config {
	cfg := base
	cfg.Models = slices.Clone(base.Models)
	cfg.Workers = slices.Clone(base.Workers)
	if token != "" {
		cfg.Peers.TokenFile = token
		cfg.Peers.Static = slices.Clone(earlier)
		cfg.Peers.Heartbeat, cfg.Peers.StaleAfter, cfg.Peers.ExpireAfter = 100*time.Millisecond, 500*time.Millisecond, 3*time.Second
	}
	return cfg
}

// writeToken writes a fresh random peer token to path.
func writeToken(path string) error {
	if err := os.WriteFile(path, []byte(rand.Text()+"\n"), 0o600); err != nil {
		return fmt.Errorf("peer token: %w", err)
	}
	return nil
}

// waitReplicas waits until every replica's gRPC health service says its
// ext_proc service is serving, so that Envoy's first health check passes
// (a host that fails it is not checked again for a minute while the
// cluster has no traffic), and with shared ledgers until each replica
// follows every other.
func (s *Stack) waitReplicas(ctx context.Context, shared bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range s.Replicas {
		conn, err := grpc.NewClient(r.ExtProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("%s health: %w", r.name, err)
		}
		hc := healthpb.NewHealthClient(conn)
		for {
			ok, err := s.replicaReady(ctx, r, hc, shared)
			if err != nil {
				conn.Close()
				return err
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				conn.Close()
				return fmt.Errorf("%s not serving, or not following its %d peers, within 30s (log %s)", r.name, len(s.Replicas)-1,
					filepath.Join(s.Dir, r.name+".log"))
			}
			select {
			case <-ctx.Done():
				conn.Close()
				return fmt.Errorf("wait for %s: %w", r.name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		conn.Close()
	}
	return nil
}

// replicaReady reports whether r's ext_proc service is serving and, when
// shared, whether r follows every other replica.
func (s *Stack) replicaReady(ctx context.Context, r *Replica, hc healthpb.HealthClient, shared bool) (bool, error) {
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: extprocv3.ExternalProcessor_ServiceDesc.ServiceName})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, nil
	}
	if !shared {
		return true, nil
	}
	n, err := scrapeSum(ctx, "http://"+r.Admin+"/metrics", "warmpath_peers", `state="connected"`)
	if err != nil {
		return false, err
	}
	return int(n) == len(s.Replicas)-1, nil
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

// startWarmpath starts one warmpath replica named name (its files'
// stem) with cfg, its picker wrapped by the recorder record returns, and
// returns once it printed its ready line.
func (s *Stack) startWarmpath(ctx, sctx context.Context, cfg app.Config, name string, policy Policy, timeScale float64,
	record func(extproc.Picker) *Recorder) (*Replica, error) {
	r := &Replica{name: name}
	logPath := filepath.Join(s.Dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	outf, err := os.Create(filepath.Join(s.Dir, name+"-stdout.log"))
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	pr, pw := io.Pipe()
	ready := make(chan string, 1)
	// The stdout reader ends when warmpath's goroutine closes pw.
	s.goRun(name+" stdout", func() error {
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
	s.goRun(name, func() error {
		defer logf.Close()
		defer pw.Close()
		var err error
		if policy.Picker != nil {
			p := record(policy.Picker(sims, timeScale))
			s.setRecorder(r, p)
			err = app.ServeWithPicker(sctx, cfg, p, pw, logf)
		} else {
			err = app.ServeWrapped(sctx, cfg, func(inner extproc.Picker) extproc.Picker {
				p := record(inner)
				s.setRecorder(r, p)
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
				r.ExtProc = v
			}
			if v, ok := strings.CutPrefix(f, "admin="); ok {
				r.Admin = v
			}
		}
		return r, nil
	case err := <-exited:
		return nil, fmt.Errorf("%s (policy %s) exited before ready: %w (log %s)", name, policy.Name, err, logPath)
	case <-ctx.Done():
		return nil, fmt.Errorf("start %s: %w", name, ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("%s not ready within 30s (log %s)", name, logPath)
	}
}

func (s *Stack) setRecorder(r *Replica, rec *Recorder) {
	s.mu.Lock()
	r.recorder = rec
	s.mu.Unlock()
}

// Records returns every replica's finished decisions next to their
// outcomes, in decision order (Record.Seq counts across replicas).
func (s *Stack) Records() []Record {
	s.mu.Lock()
	var rs []*Recorder
	for _, r := range s.Replicas {
		if r.recorder != nil {
			rs = append(rs, r.recorder)
		}
	}
	s.mu.Unlock()
	return mergeRecords(rs...)
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

// InFlight returns warmpath_assignments_in_flight summed over workers and
// replicas (each counts its own assignments), read from their /metrics.
func (s *Stack) InFlight(ctx context.Context) (float64, error) {
	total, _, err := s.scrapeReplicas(ctx, "warmpath_assignments_in_flight")
	return total, err
}

// KVEvents returns the KV-cache events the replicas' indexes applied so
// far, every type together, read from their /metrics: the sum over
// replicas, and the fewest one replica applied.
func (s *Stack) KVEvents(ctx context.Context) (total, fewest float64, err error) {
	return s.scrapeReplicas(ctx, "warmpath_kvindex_events_total")
}

// PeerBytesSent returns the bytes of ledger frames the replicas sent to
// their followers (warmpath_peer_bytes_total{direction="sent"}), summed
// over replicas; 0 when they do not share.
func (s *Stack) PeerBytesSent(ctx context.Context) (float64, error) {
	total, _, err := s.scrapeReplicas(ctx, "warmpath_peer_bytes_total", `direction="sent"`)
	return total, err
}

// scrapeReplicas sums the samples of name with the labels on every
// replica and returns the total and the smallest replica's sum.
func (s *Stack) scrapeReplicas(ctx context.Context, name string, labels ...string) (total, fewest float64, err error) {
	for i, r := range s.Replicas {
		v, err := scrapeSum(ctx, "http://"+r.Admin+"/metrics", name, labels...)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", r.name, err)
		}
		total += v
		if i == 0 || v < fewest {
			fewest = v
		}
	}
	return total, fewest, nil
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

// Snapshot writes every replica's /metrics and /debug/workers as they are
// now into the stack's log directory (warmpath-metrics.txt and
// warmpath-workers.json, warmpath-<i>-… among several replicas), for
// reading a run after it ended.
func (s *Stack) Snapshot(ctx context.Context) error {
	for _, r := range s.Replicas {
		for path, file := range map[string]string{"/metrics": "-metrics.txt", "/debug/workers": "-workers.json"} {
			req, err := http.NewRequestWithContext(ctx, "GET", "http://"+r.Admin+path, nil)
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
			if err := os.WriteFile(filepath.Join(s.Dir, r.name+file), b, 0o644); err != nil {
				return fmt.Errorf("snapshot %s: %w", path, err)
			}
		}
	}
	return nil
}

// scrapeSum sums every sample of the metric name whose labels include
// each of labels (`key="value"`) in a Prometheus text exposition at url.
func scrapeSum(ctx context.Context, url, name string, labels ...string) (float64, error) {
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
	return sumMetric(resp.Body, name, labels...)
}

// sumMetric sums the samples of one metric in a Prometheus text
// exposition whose labels include each of labels (`key="value"`; none:
// every sample). A line that names the metric but has no number is an
// error.
func sumMetric(r io.Reader, name string, labels ...string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	total := 0.0
	for sc.Scan() {
		ln := sc.Text()
		if !strings.HasPrefix(ln, name+"{") && !strings.HasPrefix(ln, name+" ") {
			continue
		}
		rest, set := ln[len(name):], ""
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest, set = rest[i+1:], rest[:i+1]
		}
		if !hasLabels(set, labels) {
			continue
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

// hasLabels reports whether a sample's label set ("{k=\"v\",…}") holds
// every one of labels.
func hasLabels(set string, labels []string) bool {
	for _, l := range labels {
		if !strings.Contains(set, "{"+l) && !strings.Contains(set, ","+l) {
			return false
		}
	}
	return true
}
