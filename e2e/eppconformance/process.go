package eppconformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Process is a picker the suite started: a binary that prints one line
// "<name> ready key=value …" on stdout once it listens.
type Process struct {
	// Fields are the ready line's key=value pairs (extproc=ADDR, …).
	Fields map[string]string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartProcess runs bin with args, its stderr going to log, and waits for
// its ready line (a line holding " ready ") until ctx ends.
func StartProcess(ctx context.Context, log io.Writer, bin string, args ...string) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " ready ") {
				select {
				case ready <- sc.Text():
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.exited) }()
	select {
	case line := <-ready:
		p.Fields = map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				p.Fields[k] = v
			}
		}
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before it was ready", bin)
	case <-ctx.Done():
		p.Stop()
		return nil, fmt.Errorf("%s not ready: %w", bin, ctx.Err())
	}
}

// Stop interrupts the process and waits for it, killing it after 10 s.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// WarmpathConfig is warmpath's configuration for the suite: the pool as
// static workers, two fallbacks, endpoint scores and the conformance test
// hooks on; shed makes it shed every request (shed_ttft of 1 ns).
func WarmpathConfig(pool *Pool, shed bool) string {
	var b strings.Builder
	b.WriteString(`policy: warmpath
models:
  - name: ` + model + `
extproc:
  fallbacks: 2
  endpoint_scores: true
  conformance_test_hooks: true   # the suite's hooks: never in production
  drain_timeout: 1s
`)
	if shed {
		b.WriteString("  shed_ttft: 1ns\n")
	}
	b.WriteString(`discovery:
  scrape: {interval: 200ms, max_age: 2s}
  health: {active_interval: 500ms}
workers:
`)
	for i, ep := range pool.Endpoints {
		fmt.Fprintf(&b, "  - {name: b%d, address: %q, models: [%s]}\n", i, ep, model)
	}
	return b.String()
}

// StartWarmpath runs the warmpath binary with WarmpathConfig (written under
// dir) and waits, until ctx ends, for it to be ready to route: its gRPC
// health service readiness reports SERVING (it follows /readyz a tick
// later).
func StartWarmpath(ctx context.Context, log io.Writer, bin, dir string, pool *Pool, shed bool) (*Process, error) {
	name := "warmpath.yaml"
	if shed {
		name = "warmpath-shed.yaml"
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(WarmpathConfig(pool, shed)), 0o644); err != nil {
		return nil, err
	}
	p, err := StartProcess(ctx, log, bin, "serve", "--config", path, "--extproc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--drain-delay", "0s")
	if err != nil {
		return nil, err
	}
	conn, err := dial(p.Fields["extproc"])
	if err != nil {
		p.Stop()
		return nil, err
	}
	defer conn.Close()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	for err == nil {
		var r *healthpb.HealthCheckResponse
		if r, err = w.Recv(); err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return p, nil
		}
	}
	p.Stop()
	return nil, fmt.Errorf("warmpath not ready: %w", err)
}
