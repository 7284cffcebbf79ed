package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/kvindex"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
	"github.com/warmpath/warmpath/tokenize"
)

// healthServices are the gRPC health service names warmpath answers: the
// default, the EPP protocol's liveness/readiness and the ext_proc service.
var healthServices = []string{"", "liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

// serve runs warmpath until ctx ends: the ext_proc gRPC server, the admin
// HTTP server and the background loops, all under one errgroup.
func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg.Log, stderr)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	pool := newStaticPool(cfg.DiscoveryWorkers())
	index := kvindex.New(
		kvindex.WithEntryBudget(cfg.KVIndex.EntryBudget),
		kvindex.WithStaleAfter(time.Duration(cfg.KVIndex.StaleAfter)),
		kvindex.WithSpeculativeTTL(time.Duration(cfg.KVIndex.SpeculativeTTL)),
		kvindex.WithRegisterer(reg),
		kvindex.WithLogger(log.With("component", "kvindex")),
	)
	subs := kvindex.NewSubscribers(index,
		kvindex.WithTopic(cfg.KVIndex.Topic),
		kvindex.WithReplayTimeout(time.Duration(cfg.KVIndex.ReplayTimeout)))
	subs.Update(pool.workers)
	tokens, err := newTokenSource(cfg, pool, reg)
	if err != nil {
		return err
	}
	router, err := scoring.New(cfg.Policy, cfg.scoringConfig(), scoring.Deps{
		Tokens:     tokens,
		Index:      prefixIndex{index},
		Registerer: reg,
		Logger:     log.With("component", "scoring"),
	})
	if err != nil {
		return fmt.Errorf("scoring: %w", err)
	}
	tp, err := telemetry.Setup(ctx, telemetry.Options{ServiceName: "warmpath", Version: Version, Stdout: stdout})
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	if cfg.Tenant.Trust == "header" {
		log.Warn("tenant identity is taken from a request header; anyone who can set that header before Envoy can claim any tenant",
			"header", cfg.Tenant.Header)
	}
	proc := extproc.New(extprocConfig(cfg), pool, router, reg, log,
		extproc.WithTracing(tp, cfg.Telemetry.CapturePrompts), extproc.WithTenant(tenantConfig(cfg.Tenant)))

	gs := grpc.NewServer(
		grpc.MaxRecvMsgSize(cfg.ExtProc.MaxRecvMsgBytes),
		// Envoy pings per its cluster's connection_keepalive; answering those
		// with GOAWAY too_many_pings would drop every stream on the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	extprocv3.RegisterExternalProcessorServer(gs, proc)
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
	ready := func() bool { return !stopping.Load() && anyUsable(pool.workers, index) }
	admin := &http.Server{
		Handler:           newAdminHandler(reg, ready, pool, proc, router, index),
		ReadHeaderTimeout: 10 * time.Second,
	}

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
	g.Go(func() error { return proc.Run(gctx) })
	g.Go(func() error { return subs.Run(gctx) })
	g.Go(func() error { return followReadiness(gctx, hs, ready) })
	g.Go(func() error {
		<-gctx.Done()
		stopping.Store(true)
		hs.Shutdown() // every service NOT_SERVING: Envoy's health check drains us
		log.Info("shutting down", "in_flight", proc.InFlight(), "drain_timeout", time.Duration(cfg.ExtProc.DrainTimeout))
		drain(gs, time.Duration(cfg.ExtProc.DrainTimeout))
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(admin.Shutdown(sctx), tp.Shutdown(sctx))
	})

	fmt.Fprintf(stdout, "warmpath ready extproc=%s admin=%s\n", grpcLis.Addr(), adminLis.Addr())
	log.Info("serving", "extproc", grpcLis.Addr().String(), "admin", adminLis.Addr().String(),
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

func extprocConfig(cfg Config) extproc.Config {
	reqMode, respMode := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if cfg.ExtProc.BodyMode == "buffered" {
		reqMode, respMode = filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED
	}
	ns := cfg.ExtProc.MetadataNamespace
	if ns == "-" {
		ns = ""
	}
	return extproc.Config{
		DestinationHeader:   cfg.ExtProc.DestinationHeader,
		MetadataNamespace:   ns,
		MaxBodyBytes:        cfg.ExtProc.MaxBodyBytes,
		MaxResponseBytes:    cfg.ExtProc.MaxResponseBytes,
		DefaultRequestMode:  reqMode,
		DefaultResponseMode: respMode,
		DebugHeaders:        cfg.ExtProc.DebugHeaders,
		RetryAfter:          cfg.ExtProc.RetryAfter,
		AssignmentTTL:       time.Duration(cfg.ExtProc.AssignmentTTL),
	}
}

func tenantConfig(t TenantConfig) extproc.TenantConfig {
	return extproc.TenantConfig{
		Trust: extproc.TenantTrust(t.Trust), Attribute: t.Attribute,
		MetadataNamespace: t.Metadata.Namespace, MetadataPath: t.Metadata.Path,
		TrimPrefix: t.TrimPrefix, Header: t.Header, Labels: t.Labels, Allow: t.Allow,
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

// staticPool serves the configured worker list; every worker counts as
// healthy.
type staticPool struct {
	workers []discovery.Worker
	models  []string
}

func newStaticPool(ws []discovery.Worker) *staticPool {
	p := &staticPool{workers: ws}
	for _, w := range ws {
		for _, m := range w.Models {
			if !slices.Contains(p.models, m) {
				p.models = append(p.models, m)
			}
		}
	}
	return p
}

func (p *staticPool) Candidates(model string) ([]discovery.Worker, bool) {
	if model == "" {
		return p.workers, true
	}
	var ws []discovery.Worker
	for _, w := range p.workers {
		if w.Serves(model) {
			ws = append(ws, w)
		}
	}
	return ws, len(ws) > 0
}

func (p *staticPool) Models() []string { return p.models }

// newTokenSource builds one tokenization pipeline per served model: local
// when the model names a tokenizer directory, the workers' /tokenize
// otherwise.
func newTokenSource(cfg Config, pool extproc.Pool, reg prometheus.Registerer) (*tokenSource, error) {
	m, err := tokenize.NewPipelineMetrics(reg)
	if err != nil {
		return nil, err
	}
	ts := &tokenSource{pipes: map[string]*tokenize.Pipeline{}, pool: pool}
	for _, mc := range cfg.Models {
		p, err := tokenize.NewPipeline(mc.Name, mc.Tokenizer, mc.TokenizerCacheMiB<<20, m)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		ts.pipes[mc.Name] = p
	}
	for _, name := range pool.Models() {
		if ts.pipes[name] == nil {
			p, _ := tokenize.NewPipeline(name, "", 0, m) // remote only: cannot fail
			ts.pipes[name] = p
		}
	}
	return ts, nil
}

// anyUsable reports whether some worker can be routed to with a current
// view: it publishes no KV events, or the index has caught up with them
// (its first replay is done), so a restarted warmpath does not route blind.
func anyUsable(ws []discovery.Worker, ix *kvindex.Index) bool {
	for _, w := range ws {
		if w.KVEvents == "" || ix.CaughtUp(w.Name) {
			return true
		}
	}
	return false
}
