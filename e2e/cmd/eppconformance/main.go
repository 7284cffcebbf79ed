// Command eppconformance runs the endpoint-picker conformance suite
// (package eppconformance) through a real Envoy against one or more
// pickers and writes a Markdown report with a column per picker.
//
// Against any picker, given by address (it must be configured with the
// endpoints given, which the suite serves with its fake model servers, and
// with the Inference Extension's test hooks on for the hook cases):
//
//	go run ./e2e/cmd/eppconformance -addr 127.0.0.1:9002 -endpoints 127.0.0.1:18000,127.0.0.1:18001,127.0.0.1:18002
//
// Against pickers it starts itself, each over a fresh pool: warmpath
// (-warmpath BIN) and the Inference Extension's reference picker built by
// e2e/eppconformance/lwepp (-lwepp BIN):
//
//	go run ./e2e/cmd/eppconformance -warmpath bin/warmpath -lwepp bin/lwepp -report e2e/eppconformance/REPORT.md
package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/warmpath/warmpath/e2e/envoytest"
	"github.com/warmpath/warmpath/e2e/eppconformance"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "eppconformance:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eppconformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "ext_proc address (host:port, plaintext) of a running picker to test")
	endpoints := fs.String("endpoints", "", "with -addr: the comma-separated ip:port endpoints the picker is configured with; the suite serves them")
	health := fs.String("health", "", "with -addr: comma-separated gRPC health addresses (default: -addr)")
	shed := fs.String("shed", "", "with -addr: ext_proc address of the same picker configured to shed every request (reject/429-body)")
	name := fs.String("name", "picker", "with -addr: the picker's column name")
	warmpathBin := fs.String("warmpath", "", "run warmpath (this binary) over a fresh pool")
	lweppBin := fs.String("lwepp", "", "run the reference picker (a binary built from e2e/eppconformance/lwepp) over a fresh pool")
	envoyBin := fs.String("envoy", "", "Envoy binary (default: $WARMPATH_ENVOY, the project's .venv, PATH)")
	report := fs.String("report", "", "write the Markdown report here (default: stdout)")
	only := fs.String("run", "", "run only the cases whose ID matches this regular expression")
	planes := fs.String("data-planes", string(eppconformance.FullDuplex), "comma-separated data planes to run the picker of -addr and warmpath behind: "+
		string(eppconformance.FullDuplex)+" (what the protocol requires), "+string(eppconformance.StreamedEarlyBody))
	lweppPlanes := fs.String("lwepp-data-planes", string(eppconformance.FullDuplex)+","+string(eppconformance.StreamedEarlyBody),
		"the data planes to run the reference picker behind (the second shows what it implements besides full-duplex streaming)")
	timeout := fs.Duration("timeout", 30*time.Minute, "bound on the whole run, pickers' start included")
	caseTimeout := fs.Duration("case-timeout", 2*time.Minute, "bound on each case")
	strict := fs.Bool("strict", false, "exit 1 when a required case fails")
	verbose := fs.Bool("v", false, "print Envoy's and the pickers' logs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" && *warmpathBin == "" && *lweppBin == "" {
		return errors.New("give -addr (with -endpoints), -warmpath or -lwepp")
	}
	if *addr != "" && *endpoints == "" {
		return errors.New("-addr needs -endpoints: the suite must serve the picker's endpoints")
	}
	if *envoyBin == "" {
		root, _ := envoytest.Root()
		var err error
		if *envoyBin, err = envoytest.Find(root); err != nil {
			return err
		}
	}
	var filter func(string) bool
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return err
		}
		filter = re.MatchString
	}
	log := io.Discard
	if *verbose {
		log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "eppconformance")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := eppconformance.Options{Envoy: *envoyBin, Dir: dir, Log: log, Only: filter, CaseTimeout: *caseTimeout}

	var results []*eppconformance.Result
	// runOne runs t behind each data plane of planes; why, when not nil,
	// explains its failures behind each.
	type explain func(eppconformance.DataPlane) map[string]string
	runOne := func(t eppconformance.Target, pool *eppconformance.Pool, planes string, why explain) error {
		opts.Pool = pool
		for _, dp := range strings.Split(planes, ",") {
			o, tt := opts, t
			o.DataPlane = eppconformance.DataPlane(dp)
			if o.DataPlane != eppconformance.FullDuplex {
				tt.Name += ", " + dp
			}
			if why != nil {
				tt.Why = why(o.DataPlane)
			}
			r, err := eppconformance.Run(ctx, tt, o)
			if err != nil {
				return fmt.Errorf("%s: %w", tt.Name, err)
			}
			results = append(results, r)
			fmt.Fprintf(stderr, "%s: %d cases, %d failed\n", tt.Name, len(r.Cases), len(r.Failed()))
		}
		return nil
	}
	if *addr != "" {
		pool, err := eppconformance.StartPool(strings.Split(*endpoints, ","))
		if err != nil {
			return err
		}
		t := eppconformance.Target{Name: *name, ExtProc: *addr, Shed: *shed}
		if *health != "" {
			t.Health = strings.Split(*health, ",")
		}
		err = runOne(t, pool, *planes, nil)
		pool.Close()
		if err != nil {
			return err
		}
	}
	if *warmpathBin != "" {
		run := func(t eppconformance.Target, p *eppconformance.Pool) error { return runOne(t, p, *planes, nil) }
		if err := runWarmpath(ctx, *warmpathBin, dir, log, run); err != nil {
			return err
		}
	}
	if *lweppBin != "" {
		run := func(t eppconformance.Target, p *eppconformance.Pool) error {
			return runOne(t, p, *lweppPlanes, lweppWhy)
		}
		if err := runLWEPP(ctx, *lweppBin, log, run); err != nil {
			return err
		}
	}

	out := stdout
	if *report != "" {
		f, err := os.Create(*report)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	if err := eppconformance.Markdown(out, "Endpoint picker conformance", intro(*envoyBin), results...); err != nil {
		return err
	}
	if *strict {
		for _, r := range results {
			if f := r.Failed(eppconformance.Required); len(f) > 0 {
				return fmt.Errorf("%s: %d required cases failed", r.Target.Name, len(f))
			}
		}
	}
	return nil
}

func runWarmpath(ctx context.Context, bin, dir string, log io.Writer, runOne func(eppconformance.Target, *eppconformance.Pool) error) error {
	pool, err := eppconformance.StartPool([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer pool.Close()
	wp, err := eppconformance.StartWarmpath(ctx, log, bin, dir, pool, false)
	if err != nil {
		return err
	}
	defer wp.Stop()
	shed, err := eppconformance.StartWarmpath(ctx, log, bin, dir, pool, true)
	if err != nil {
		return err
	}
	defer shed.Stop()
	return runOne(eppconformance.Target{Name: "warmpath", ExtProc: wp.Fields["extproc"], Shed: shed.Fields["extproc"],
		Notes: []string{"warmpath built from this tree, run by eppconformance.StartWarmpath with the configuration of " +
			"eppconformance.WarmpathConfig: the pool as static workers, `fallbacks: 2`, `endpoint_scores: true`, " +
			"`conformance_test_hooks: true`; the shedding instance adds `shed_ttft: 1ns`."}}, pool)
}

func runLWEPP(ctx context.Context, bin string, log io.Writer, runOne func(eppconformance.Target, *eppconformance.Pool) error) error {
	pool, err := eppconformance.StartPool([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := eppconformance.StartProcess(ctx, log, bin, "-extproc", "127.0.0.1:0", "-health", "127.0.0.1:0",
		"-endpoints", strings.Join(pool.Endpoints, ","))
	if err != nil {
		return err
	}
	defer p.Stop()
	version := "unknown version"
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		for _, d := range bi.Deps {
			if d.Path == "sigs.k8s.io/gateway-api-inference-extension" {
				version = d.Version
			}
		}
	}
	return runOne(eppconformance.Target{Name: "reference (LWEPP " + version + ")", ExtProc: p.Fields["extproc"],
		Health: []string{p.Fields["extproc"], p.Fields["health"]},
		Notes: append([]string{"The Inference Extension's reference endpoint picker, `sigs.k8s.io/gateway-api-inference-extension` " +
			version + " from the Go module proxy, `pkg/lwepp` (its `cmd/` holds only `lwepp` at this version). Its own " +
			"main needs a Kubernetes API server (its datastore is filled by controller-runtime reconcilers of the " +
			"InferencePool and its Pods), so `e2e/eppconformance/lwepp`, a module of its own, fills the same datastore " +
			"through its exported API (one pool, one Ready pod per endpoint host with the `inference.networking.k8s.io/active-ports` " +
			"annotation) and serves the reference's unmodified `handlers.StreamingServer` on loopback, with the health " +
			"services as the reference's `ExtProcServerRunner` wires them (the ext_proc service name on the ext_proc port, " +
			"`inference-extension` on a separate health port). It never sheds, so reject/429-body is skipped. " +
			"It is run behind the full-duplex data plane, which the protocol requires, and behind streamed-early-body " +
			"(STREAMED both ways, the body sent without waiting for the header reply), where an empty body reply is " +
			"allowed, to show what it implements besides full-duplex streaming. Each failure names its causes below."}, lweppCauses...)}, pool)
}

func intro(envoyBin string) []string {
	ev := "unknown"
	if out, err := exec.Command(envoyBin, "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) > 0 {
			ev = strings.TrimSpace(f[len(f)-1])
		}
	}
	return []string{
		"Written by `go tool task conformance:report` (`go run ./e2e/cmd/eppconformance`); do not edit. " +
			"Each case drives a real Envoy (" + ev + ") in front of the picker and three fake model servers " +
			"(and, where Envoy cannot produce a case, a scripted ext_proc stream: the cases marked direct). " +
			"Levels: required is what the Endpoint Picker protocol v1.0.0 requires or what keeps the HTTP exchange " +
			"whole; optional is allowed but not demanded (fallback lists, v0.4); test hook is the Inference " +
			"Extension conformance suite's test-only hooks. The cases are listed in package eppconformance (cases.go).",
	}
}
