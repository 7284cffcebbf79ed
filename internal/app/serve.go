package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/internal/grpcbuf"
	"github.com/warmpath/warmpath/internal/mtls"
	"github.com/warmpath/warmpath/internal/timerslack"
	"github.com/warmpath/warmpath/kvevents"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/peers"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
	"github.com/warmpath/warmpath/tokenize"
)

// healthServices are the gRPC health service names warmpath answers: the
// default, the EPP protocol's liveness/readiness, the ext_proc service and
// "inference-extension" (what the Gateway API Inference Extension's
// manifests and conformance suite probe, on the reference picker's separate
// health port; warmpath answers it on the ext_proc port). All but liveness
// follow readiness.
var healthServices = []string{"", "liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName, "inference-extension"}

// parts are warmpath's components as serve wires them, in the order a
// request meets them (README: Architecture).
type parts struct {
	log     *slog.Logger
	pool    *discovery.Pool
	scraper *discovery.Scraper
	guard   *discovery.Guard
	index   *kvindex.Index
	subs    *kvevents.Subscribers
	mesh    *peers.Mesh // nil when the ledger is not shared
	router  *scoring.Router
	tp      *telemetry.Provider
	proc    *extproc.Server
	admin   adminOptions
}

// assemble builds every component from cfg and wires them to each other,
// registering all metrics with reg. It starts nothing.
func assemble(ctx context.Context, cfg Config, eo embedOptions, reg prometheus.Registerer, stdout, stderr io.Writer) (*parts, error) {
	log := newLogger(cfg.Log, stderr)
	if st, slack, err := timerslack.Setting(); err != nil {
		log.Warn("timer slack", "status", st.String(), "slack", slack, "err", err)
	} else {
		log.Info("timer slack", "status", st.String(), "slack", slack)
	}
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		log.Info("memory limit", "bytes", limit) // GOMEMLIMIT, or its container's (runServe)
	}
	if err := (component.Options{Registerer: reg}).Register("runtime",
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	admin, err := adminOptionsOf(cfg, reg)
	if err != nil {
		return nil, err
	}

	dopts := component.Options{Logger: log.With("component", "discovery"), Registerer: reg}
	pool, err := newPool(cfg, dopts)
	if err != nil {
		return nil, err
	}
	scraper, err := discovery.NewScraper(pool, cfg.Discovery.Scrape, dopts)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	index, err := kvindex.New(cfg.KVIndex.Index, component.Options{Logger: log.With("component", "kvindex"), Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("kvindex: %w", err)
	}
	subs, err := kvevents.NewSubscribers(index, cfg.KVIndex.Events, component.Options{Logger: log.With("component", "kvevents"), Registerer: reg})
	if err != nil {
		return nil, fmt.Errorf("kvevents: %w", err)
	}
	guard, err := discovery.NewGuard(pool, scraper, discovery.GuardConfig{
		BlockSize:      cfg.blockSizeOf,
		EventBlockSize: index.BlockSizeSeen,
	}, dopts)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	tokens, err := newPipelines(cfg, reg)
	if err != nil {
		return nil, err
	}
	src := scoring.Sources{Tokens: tokens, Index: index, Load: scraper}
	var ropts []scoring.Option
	var mesh *peers.Mesh
	if cfg.Peers.Enabled() {
		var popts []peers.Option
		if cfg.Listen.TLS.Enabled() {
			tc, err := mtls.Client(cfg.Listen.TLS, log.With("component", "peers"))
			if err != nil {
				return nil, fmt.Errorf("peers: %w", err)
			}
			popts = append(popts, peers.WithDialCredentials(credentials.NewTLS(tc)))
		}
		if mesh, err = peers.New(cfg.Peers, component.Options{Logger: log.With("component", "peers"), Registerer: reg}, popts...); err != nil {
			return nil, err
		}
		src.Peers = mesh
		ropts = append(ropts, scoring.WithLedgerSink(mesh))
		if !cfg.Peers.Lessons {
			ropts = append(ropts, scoring.WithoutPeerLessons())
		}
	}
	router, err := scoring.New(cfg.Policy, cfg.scoringConfig(), src,
		component.Options{Logger: log.With("component", "scoring"), Registerer: reg}, ropts...)
	if err != nil {
		return nil, fmt.Errorf("scoring: %w", err)
	}
	tp, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "warmpath", Version: Version, Stdout: stdout,
		Logger: log.With("component", "telemetry")})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if cfg.Tenant.Trust == extproc.TrustHeader {
		log.Warn("tenant identity is taken from a request header; anyone who can set that header before Envoy can claim any tenant",
			"header", cfg.Tenant.Header)
	}
	proc, err := extproc.New(cfg.ExtProc.Config, pool, eo.picker(router), component.Options{Logger: log, Registerer: reg},
		extproc.WithHealth(pool), extproc.WithTracing(tp, cfg.Telemetry.CapturePrompts), extproc.WithTenant(cfg.Tenant))
	if err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}

	return &parts{log: log, pool: pool, scraper: scraper, guard: guard, index: index, subs: subs,
		mesh: mesh, router: router, tp: tp, proc: proc, admin: admin}, nil
}

// adminOptionsOf reads the debug endpoints' settings from cfg, checking
// that a token file is readable now rather than at the first request.
func adminOptionsOf(cfg Config, reg prometheus.Registerer) (adminOptions, error) {
	o := adminOptions{Debug: cfg.Debug.debugEndpoints(cfg.Listen.Admin), PProf: cfg.Debug.PProf,
		Unauthorized: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "admin", Name: "unauthorized_total",
			Help: "Requests to the admin port's /debug/ endpoints refused for a missing or wrong bearer token (debug.token_file).",
		})}
	if err := (component.Options{Registerer: reg}).Register("admin", o.Unauthorized); err != nil {
		return adminOptions{}, err
	}
	if cfg.Debug.TokenFile != "" {
		o.Token = readToken(cfg.Debug.TokenFile)
		if _, err := o.Token(); err != nil {
			return adminOptions{}, fmt.Errorf("debug.token_file: %w", err)
		}
	}
	return o, nil
}

// streamWorkers is how many goroutines serve gRPC streams, each one stream
// at a time for its whole life (a request and its response).
const streamWorkers = 256

// A long prompt's body arrives as one stream's data. grpc-go's 64 KiB
// windows (a loopback round trip is too short for its bandwidth estimate
// to widen them) made a 300 KB body cost five more reads and five more
// writes, each a wake-up, than these windows (strace of a seen 100K-token
// chat series): 2-5% of warmpath's CPU per 100K-token chat on an idle
// machine, 8-12% with four more warmpath processes running beside it
// (BENCHMARKS.md). These windows let such a body arrive whole; they
// bound what a connection can hold unread at what grpc-go's own estimate
// may reach (its ceiling is 16 MiB).
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// serve runs warmpath until ctx ends: the ext_proc gRPC server, the admin
// HTTP server and the background loops, all under one errgroup.
func serve(ctx context.Context, cfg Config, eo embedOptions, stdout, stderr io.Writer) error {
	if cfg.Debug.PProf {
		// The process's own profiling rates: warmpath is the only user.
		runtime.SetMutexProfileFraction(cfg.Debug.MutexProfileFraction)
		runtime.SetBlockProfileRate(cfg.Debug.BlockProfileRate)
	}
	reg := prometheus.NewRegistry()
	p, err := assemble(ctx, cfg, eo, reg, stdout, stderr)
	if err != nil {
		return err
	}
	// Bodies go back to Envoy in 64 KiB chunks; grpc-go's default pool
	// would clear a 1 MiB buffer for each.
	pool := &grpcbuf.Pool{}
	sopts := []grpc.ServerOption{
		experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(grpcbuf.Codec{Pool: pool}),
		// A stream on a worker keeps the stack earlier streams grew (the
		// chat template's render goes deep); a new goroutine per stream grew
		// and copied its stack on every request, 6% of the CPU at 2,000
		// short chats/s. Streams beyond the workers get goroutines of their
		// own, as without them.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.MaxRecvMsgSize(cfg.ExtProc.MaxRecvMsgBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Envoy pings per its cluster's connection_keepalive; answering those
		// with GOAWAY too_many_pings would drop every stream on the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if cfg.Listen.TLS.Enabled() {
		tc, err := mtls.Server(cfg.Listen.TLS, p.log.With("component", "tls"))
		if err != nil {
			return fmt.Errorf("listen.tls: %w", err)
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gs := grpc.NewServer(sopts...)
	extprocv3.RegisterExternalProcessorServer(gs, p.proc)
	if p.mesh != nil {
		p.mesh.Register(gs)
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	for _, svc := range healthServices {
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	hs.SetServingStatus("liveness", healthpb.HealthCheckResponse_SERVING)

	grpcLis, err := net.Listen("tcp", cfg.Listen.ExtProc)
	if err != nil {
		return fmt.Errorf("listen ext_proc: %w", err)
	}
	adminLis, err := net.Listen("tcp", cfg.Listen.Admin)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("listen admin: %w", err)
	}

	var stopping atomic.Bool
	ready := func() bool {
		return !stopping.Load() && p.pool.ReadyWhere(func(w discovery.Worker) bool { return w.KVEvents == "" || p.subs.CaughtUp(w.Name) })
	}
	status := func() any {
		st := map[string]any{"workers": discovery.Status(p.pool, p.scraper, p.guard), "index": mergeStreams(p.index.Streams(), p.subs.Streams()),
			"in_flight": p.router.InFlight(), "kv_events_silent": slices.Sorted(slices.Values(p.router.KVSilent()))}
		if p.mesh != nil {
			st["peers"], st["peer_in_flight"] = p.mesh.Status(), p.router.PeerInFlight()
		}
		return st
	}
	admin := &http.Server{
		Handler:           newAdminHandler(reg, ready, p.pool, p.router, status, p.admin),
		ReadHeaderTimeout: 10 * time.Second,
	}

	// The background loops (discovery, scrapes, KV events, peers) run until
	// the drain is over, not until the signal: a draining replica still
	// routes the requests it is sent.
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := gs.Serve(grpcLis); err != nil {
			return fmt.Errorf("ext_proc server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		if err := admin.Serve(adminLis); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("admin server: %w", err)
		}
		return nil
	})
	g.Go(func() error { return p.subs.Run(loops) })
	g.Go(func() error { return returnMemory(loops, p.proc.BufferedBytes, time.Second, nil) })
	if p.mesh != nil {
		p.mesh.SetAdvertise(grpcLis.Addr().String())
		g.Go(func() error { return p.mesh.Run(loops, p.router, p.index) })
	}
	g.Go(func() error { return p.pool.Run(loops) })
	g.Go(func() error { return p.scraper.Run(loops) })
	g.Go(func() error { return p.guard.Run(loops) })
	g.Go(func() error {
		// The index and the router follow the worker set: subscribe and
		// unsubscribe, and forget what was learned about departed workers.
		prev := map[string]bool{}
		for ws := range p.pool.Watch(loops) {
			p.subs.Update(ws)
			now := map[string]bool{}
			for _, w := range ws {
				now[w.Name] = true
			}
			for name := range prev {
				if !now[name] {
					p.router.Forget(name)
				}
			}
			prev = now
		}
		return nil
	})
	g.Go(func() error { return followReadiness(gctx, hs, ready) })
	g.Go(func() error {
		defer stopLoops()
		<-gctx.Done()
		stopping.Store(true)
		hs.Shutdown() // every service NOT_SERVING: Envoy's health check drains us
		if ctx.Err() != nil && cfg.ExtProc.DrainDelay > 0 {
			// Told to stop (not failing): serve on until the proxy has seen
			// NOT_SERVING and sends its new streams elsewhere.
			p.log.Info("draining: serving new streams while health reports NOT_SERVING", "drain_delay", cfg.ExtProc.DrainDelay)
			time.Sleep(cfg.ExtProc.DrainDelay)
		}
		p.log.Info("shutting down", "in_flight", p.proc.InFlight(), "drain_timeout", cfg.ExtProc.DrainTimeout)
		drain(gs, cfg.ExtProc.DrainTimeout)
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(admin.Shutdown(sctx), p.tp.Shutdown(sctx))
	})

	fmt.Fprintf(stdout, "warmpath ready extproc=%s admin=%s\n", grpcLis.Addr(), adminLis.Addr())
	p.log.Info("serving", "extproc", grpcLis.Addr().String(), "admin", adminLis.Addr().String(),
		"policy", cfg.Policy, "workers", len(cfg.Workers), "version", Version)
	err = g.Wait()
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// drain stops the gRPC server gracefully, letting in-flight streams finish,
// and forces it after the deadline.
func drain(gs *grpc.Server, deadline time.Duration) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(deadline)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}

// followReadiness mirrors ready() into the gRPC health service until ctx ends.
func followReadiness(ctx context.Context, hs *health.Server, ready func() bool) error {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	last := -1
	for {
		now := 0
		if ready() {
			now = 1
		}
		if now != last {
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if now == 1 {
				st = healthpb.HealthCheckResponse_SERVING
			}
			for _, svc := range healthServices {
				if svc != "liveness" {
					hs.SetServingStatus(svc, st)
				}
			}
			last = now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated in Config.Validate
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// newPool builds the worker pool over the configured source: Kubernetes
// when discovery.kubernetes.namespace is set, else the config file's
// workers list, reloaded when the file changes.
func newPool(cfg Config, opts component.Options) (*discovery.Pool, error) {
	var src discovery.Source
	switch k := cfg.Discovery.Kubernetes; {
	case k.Namespace != "":
		cs, dyn, err := discovery.KubeClients(k.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes discovery: %w", err)
		}
		kube, err := discovery.NewKubernetes(cs, dyn, k, opts)
		if err != nil {
			return nil, err
		}
		src = kube
	case cfg.path != "":
		load := func(path string) ([]discovery.Worker, error) {
			c, err := LoadConfig(path)
			if err != nil {
				return nil, err
			}
			return c.DiscoveryWorkers(), nil
		}
		st, err := discovery.NewStatic(cfg.path, load, cfg.Discovery.StaticReload, opts)
		if err != nil {
			return nil, err
		}
		src = st
	}
	p, err := discovery.NewPool(src, cfg.Discovery.Health, opts)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	if src == nil { // a Config built in code: its workers are the set
		p.Apply(cfg.DiscoveryWorkers())
	}
	return p, nil
}

// newPipelines builds one tokenization pipeline per served model: local
// when the model names a tokenizer directory, the workers' /tokenize
// otherwise.
func newPipelines(cfg Config, reg prometheus.Registerer) (*tokenize.Pipelines, error) {
	m, err := tokenize.NewPipelineMetrics(component.Options{Registerer: reg})
	if err != nil {
		return nil, err
	}
	var ps []*tokenize.Pipeline
	for _, mc := range cfg.Models {
		p, err := tokenize.NewPipeline(mc.Name, mc.Tokenizer, mc.TokenizerCacheMiB<<20, m)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		ps = append(ps, p)
	}
	return tokenize.NewPipelines(m, ps...), nil
}
