package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/scoring"
)

// allPolicies is every policy in table order: the product's, then the oracle.
var allPolicies = append(append([]string(nil), harness.ProductPolicies...), "oracle")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "e2e/out/bench", "output directory (reports, plots, logs, results.md)")
	only := fs.String("scenarios", "seed-shaped,llm-d-shared-prefix,skewed-hot-prefix,skewed-heavy,independent,heterogeneous,mooncake,accuracy",
		"comma-separated scenarios to run (also: demo, and the replicas scenarios replicas, replicas-skewed)")
	pols := fs.String("policies", strings.Join(allPolicies, ","), "comma-separated policies (warmpath's config names, warmpath-<objective> for warmpath under the ttft, e2e or slo objective, and oracle)")
	scale := fs.Float64("time-scale", 0, "override every scenario's simulator time scale (simulated seconds per wall second)")
	rate := fs.Float64("rate", 0, "override the main run's arrival rate (simulated requests/s) of every scenario with constant or Poisson arrivals")
	noSweep := fs.Bool("no-sweep", false, "skip the goodput sweeps")
	sweepOnly := fs.Bool("sweep-only", false, "run only the goodput sweeps (of the scenarios that have one)")
	publish := fs.String("publish", "", "also copy results.md and the SVG plots into this directory")
	again := fs.Bool("replot", false, "run nothing: draw the plots of the chosen scenarios again from the reports under -out (and publish them with -publish)")
	rounds := fs.Int("rounds", 2, "rounds of every configuration in the replicas scenarios (round r replays seed + r − 1)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bench [flags]\n\nRuns the routing benchmark scenarios once per policy through real Envoy and writes reports, plots and Markdown tables.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: want at least 1", *rounds)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	policies := splitList(*pols)
	for _, p := range policies {
		if !harness.IsPolicy(p) {
			return fmt.Errorf("unknown policy %q (have %s)", p, strings.Join(allPolicies, ", "))
		}
	}
	all := scenarios(root)
	var chosen []*scenario
	for _, name := range splitList(*only) {
		i := slices.IndexFunc(all, func(s *scenario) bool { return s.name == name })
		if i < 0 {
			return fmt.Errorf("unknown scenario %q", name)
		}
		chosen = append(chosen, all[i])
	}
	if *again {
		if err := replot(*out, chosen); err != nil {
			return err
		}
		if *publish != "" {
			return publishPlots(*out, *publish, chosen)
		}
		return nil
	}
	envoyBin, err := harness.FindEnvoy(root)
	if err != nil {
		return err
	}
	override(chosen, *scale, *rate)
	var md bytes.Buffer
	writeHeader(&md, chosen)
	started := time.Now()
	for _, sc := range chosen {
		dir := filepath.Join(*out, sc.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("output dir: %w", err)
		}
		fmt.Fprintf(stderr, "bench: scenario %s (time scale %g), results in %s\n", sc.name, sc.timeScale, dir)
		if *sweepOnly && sc.sweep == nil {
			continue
		}
		if err := runScenario(ctx, sc, policies, dir, root, envoyBin, !*noSweep, *sweepOnly, *rounds, &md, stderr); err != nil {
			return fmt.Errorf("scenario %s: %w", sc.name, err)
		}
		// Write what is done so far, so an interrupted run keeps its tables.
		if err := os.WriteFile(filepath.Join(*out, "results.md"), md.Bytes(), 0o644); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}
	fmt.Fprintf(&md, "\nBenchmark wall time: %s.\n", time.Since(started).Round(time.Second))
	resPath := filepath.Join(*out, "results.md")
	if err := os.WriteFile(resPath, md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	stdout.Write(md.Bytes())
	fmt.Fprintf(stdout, "\nTables: %s\nPlots and reports: %s/<scenario>/ (ttft-cdf.svg/.png, goodput.svg/.png, report-<policy>.json)\n", resPath, *out)
	if *publish != "" {
		if err := publishResults(*out, *publish, chosen); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Published tables and SVG plots to %s\n", *publish)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// override applies the -time-scale and -rate flags (when > 0) to the
// chosen scenarios, and each scenario's description says so. The rate
// replaces the main run's rate where arrivals are constant or Poisson.
func override(chosen []*scenario, scale, rate float64) {
	for _, sc := range chosen {
		if scale > 0 {
			sc.timeScale = scale
			sc.about += fmt.Sprintf(" This run overrides the time scale: %g.", scale)
		}
		if k := sc.replay.Load.Kind; rate > 0 && (k == replay.LoadConstant || k == replay.LoadPoisson) {
			sc.replay.Load.Rate = rate
			sc.about += fmt.Sprintf(" This run overrides the main run's rate: %g requests/s.", rate)
		}
	}
}

// sweepSessions is how many sessions a synthetic sweep generates per
// run. With a window per rate (MaxDuration), enough for the top rate's
// window, and at least MinSessions (each run sends those, then what
// arrives within the window); without, the main run's count up to 80.
func sweepSessions(l replay.LoadConfig, requests int) int {
	window := time.Duration(l.MaxDuration).Seconds()
	if window <= 0 {
		return min(requests, 80)
	}
	top := slices.Max(append([]float64{0}, l.Rates...))
	return max(l.MinSessions, int(math.Ceil(top*window)))
}

// runScenario runs one scenario for every policy (and its sweep, or only
// its sweep), or a replicas scenario for each configuration and round,
// writes its files into dir and its tables to md.
func runScenario(ctx context.Context, sc *scenario, policies []string, dir, root, envoyBin string, sweep, sweepOnly bool, rounds int, md, progress io.Writer) error {
	setup := harness.Setup{Workers: sc.workers, TimeScale: sc.timeScale, Seed: 1, EnvoyBin: envoyBin,
		Bootstrap: filepath.Join(root, "envoy/envoy.yaml")}
	if sc.replicaRuns != nil {
		return runReplicas(ctx, sc, policies, dir, setup, rounds, md, progress)
	}
	if sc.prepare != nil {
		if err := sc.prepare(sc, dir); err != nil {
			return err
		}
	}
	opt := harness.Options{Progress: progress}
	fmt.Fprintf(md, "\n## %s\n\n%s\n\n", sc.title, sc.about)
	writeWorkers(md, sc)
	if !sweepOnly {
		results, err := harness.RunPolicies(ctx, setup, sc.policies(policies...), sc.replay, filepath.Join(dir, "logs"), opt)
		if err != nil {
			return err
		}
		if err := writeReports(dir, results); err != nil {
			return err
		}
		writeTable(md, results, sc.replay.SLO)
		writeAccuracy(md, results, sc.accuracyWarmup)
		if err := plots(dir, results, md, sc.name); err != nil {
			return err
		}
	}
	if sc.sweep != nil && sweep {
		var sp []string
		for _, p := range sc.sweepPolicies {
			if slices.Contains(policies, p) {
				sp = append(sp, p)
			}
		}
		rc := sc.replay
		rc.Load = *sc.sweep
		if rc.Workload.Kind == replay.WorkloadSynthetic {
			rc.Workload.Synthetic.Requests = sweepSessions(rc.Load, rc.Workload.Synthetic.Requests)
		}
		sres, err := harness.RunPolicies(ctx, setup, harness.Policies(sp...), rc, filepath.Join(dir, "sweep", "logs"), opt)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		if err := writeReports(filepath.Join(dir, "sweep"), sres); err != nil {
			return err
		}
		writeSweep(md, sres, rc.SLO)
		if err := plots(filepath.Join(dir, "sweep"), sres, md, sc.name+"/sweep"); err != nil {
			return err
		}
	}
	return nil
}

func writeReports(dir string, results []harness.PolicyResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write reports: %w", err)
	}
	for _, r := range results {
		f, err := os.Create(filepath.Join(dir, "report-"+r.Policy+".json"))
		if err != nil {
			return fmt.Errorf("write reports: %w", err)
		}
		err = replay.WriteJSON(f, r.Report)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := writeRecords(filepath.Join(dir, "decisions-"+r.Policy+".jsonl"), r.Records); err != nil {
			return err
		}
	}
	return nil
}

// recordJSON is a harness.Record as JSON can hold it: a policy's score
// may be infinite (a candidate it rules out), which is written as null.
type recordJSON struct {
	harness.Record
	Chosen     candidateJSON
	Candidates []candidateJSON
}

type candidateJSON struct {
	scoring.Candidate
	Score *float64
}

func candidateOf(c scoring.Candidate) candidateJSON {
	out := candidateJSON{Candidate: c}
	if !math.IsInf(c.Score, 0) && !math.IsNaN(c.Score) {
		out.Score = &c.Score
	}
	return out
}

// writeRecords writes one JSON line per routed request: what the picker
// predicted for the chosen worker (in wall time, as warmpath measured it)
// next to what happened.
func writeRecords(path string, rs []harness.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write decisions: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range rs {
		rec := recordJSON{Record: rs[i], Chosen: candidateOf(rs[i].Chosen)}
		for _, c := range rs[i].Candidates {
			rec.Candidates = append(rec.Candidates, candidateOf(c))
		}
		if err := enc.Encode(&rec); err != nil {
			f.Close()
			return fmt.Errorf("write decisions: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write decisions: %w", err)
	}
	return f.Close()
}

// plots draws the comparison's plots into dir and links them from md.
func plots(dir string, results []harness.PolicyResult, md io.Writer, rel string) error {
	reports := map[string]*replay.Report{}
	for _, r := range results {
		reports[r.Policy] = r.Report
	}
	base := ""
	if _, ok := reports["random"]; ok {
		base = "random"
	}
	cmp, err := replay.Compare(reports, base)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := replay.WriteMarkdown(&buf, cmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "comparison.md"), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write comparison: %w", err)
	}
	if _, err := replay.WritePlots(dir, cmp); err != nil {
		return err
	}
	names := []string{replay.PlotTTFTCDF, replay.PlotE2ECDF, plotTradeoffName}
	if strings.HasSuffix(rel, "/sweep") {
		names = []string{replay.PlotGoodput}
	} else {
		labels := make([]string, len(results))
		for i, r := range results {
			labels[i] = r.Policy
		}
		if err := plotTradeoff(dir, rel, tradeoffPoints(labels, reports)); err != nil {
			return err
		}
	}
	for _, name := range names {
		fmt.Fprintf(md, "\n![%s](%s)\n", rel+" "+name, "e2e/cmd/bench/results/"+strings.ReplaceAll(rel, "/", "-")+"-"+name+".svg")
	}
	return nil
}

// publishResults copies results.md and each scenario's SVG plots (renamed
// <scenario>[-sweep]-<plot>.svg) into dst.
func publishResults(out, dst string, chosen []*scenario) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := copyFile(filepath.Join(out, "results.md"), filepath.Join(dst, "results.md")); err != nil {
		return err
	}
	return publishPlots(out, dst, chosen)
}

// publishPlots copies each scenario's SVG plots, renamed
// <scenario>[-sweep]-<plot>.svg, into dst.
func publishPlots(out, dst string, chosen []*scenario) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	for _, sc := range chosen {
		for _, sub := range []string{"", "sweep"} {
			for _, name := range []string{replay.PlotTTFTCDF, replay.PlotE2ECDF, plotTradeoffName, replay.PlotGoodput, plotReplicaQuality} {
				src := filepath.Join(out, sc.name, sub, name+".svg")
				if _, err := os.Stat(src); err != nil {
					continue
				}
				tag := sc.name
				if sub != "" {
					tag += "-" + sub
				}
				if err := copyFile(src, filepath.Join(dst, tag+"-"+name+".svg")); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

func writeHeader(w io.Writer, chosen []*scenario) {
	fmt.Fprintf(w, "# Routing benchmark results\n\nGenerated by `go run ./e2e/cmd/bench` on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Hardware: %s, %d CPUs visible to Go, %s/%s, %s. Everything runs on this one machine: the simulated workers "+
		"and warmpath in the benchmark process, Envoy as a separate process.\n\n", cpuModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(w, "All times are **simulated seconds**: the simulators run faster than real time (the time scale of each "+
		"scenario), the replayer measures wall time, and the reports are multiplied back by the time scale. Envoy, "+
		"ext_proc and HTTP overheads (about 4–10 ms of wall time per request on this machine) are multiplied too, so short "+
		"TTFTs carry tens of simulated milliseconds of harness overhead.\n")
	var names []string
	for _, s := range chosen {
		names = append(names, s.name)
	}
	fmt.Fprintf(w, "\nScenarios: %s.\n", strings.Join(names, ", "))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(ln, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func writeWorkers(w io.Writer, sc *scenario) {
	fmt.Fprintf(w, "Workers (time scale %g):\n\n| worker | profile | KV blocks | budget | step overhead | prefill/token | decode/seq |\n|---|---|---:|---:|---:|---:|---:|\n", sc.timeScale)
	for _, ws := range sc.workers {
		p, err := vllmsim.ProfileByName(ws.Profile)
		if err != nil {
			continue
		}
		e := p.Engine
		if ws.Tune != nil {
			ws.Tune(&e)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %s |\n", ws.Name, ws.Profile, e.NumGPUBlocks, e.MaxNumBatchedTokens,
			e.Step.Overhead, e.Step.PrefillPerToken, e.Step.DecodePerSeq)
	}
	fmt.Fprintln(w)
}

func writeTable(w io.Writer, results []harness.PolicyResult, slo replay.SLO) {
	var base *replay.Summary
	for _, r := range results {
		if r.Policy == "random" && len(r.Report.Runs) > 0 {
			base = &r.Report.Runs[0].Summary
		}
	}
	fmt.Fprintf(w, "| policy | requests | failed | TTFT p50 | TTFT p90 | TTFT p99 | TPOT p50 | TPOT p90 | E2E p50 | E2E p90 | req/min | goodput/min (`%s`) | cache hit | TTFT p50 vs random | leaked | send lag p90 | step lag |\n", slo)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	behind := false
	for _, r := range results {
		if len(r.Report.Runs) == 0 {
			continue
		}
		s := r.Report.Runs[0].Summary
		vs := "–"
		if base != nil && base.TTFT.P50 > 0 {
			vs = fmt.Sprintf("%.2f×", s.TTFT.P50/base.TTFT.P50)
		}
		name := r.Policy
		if r.FellBehind() {
			name += " †"
			behind = true
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f%% | %s | %v | %s | %.0f ms |\n",
			name, s.Requests, s.Failed, secs(s.TTFT.P50), secs(s.TTFT.P90), secs(s.TTFT.P99), millis(s.ITL.P50), millis(s.ITL.P90),
			secs(s.E2E.P50), secs(s.E2E.P90), s.RequestsPerMinute, s.Goodput*60, s.CacheHitRate*100, vs, r.Leaked,
			secs(harness.SendLag(r.Report.Runs[0], 0.9)), r.StepLag.Seconds()*1000)
	}
	if !behind {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, "\n† the harness fell behind in this run (client send lag p90 over 1 s or mean engine step lag over 100 ms, simulated): "+
		"the machine could not keep the simulators on schedule, so this row is pessimistic for that policy.")
	fmt.Fprintln(w)
}

func writeSweep(w io.Writer, results []harness.PolicyResult, slo replay.SLO) {
	fmt.Fprintf(w, "\nGoodput sweep (`%s`):\n\n| policy | offered req/s | requests | TTFT p50 | TTFT p90 | E2E p50 | completed req/min | SLO |\n|---|---:|---:|---:|---:|---:|---:|---|\n", slo)
	for _, r := range results {
		for _, run := range r.Report.Runs {
			s := run.Summary
			met := "met"
			if !s.SLOMet {
				met = "missed"
			}
			fmt.Fprintf(w, "| %s | %.2f | %d | %s | %s | %s | %.1f | %s |\n", r.Policy, run.Rate, s.Requests, secs(s.TTFT.P50), secs(s.TTFT.P90), secs(s.E2E.P50), s.RequestsPerMinute, met)
		}
	}
	fmt.Fprintf(w, "\n| policy | peak goodput (req/min meeting the SLO) |\n|---|---:|\n")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %.1f |\n", r.Policy, r.Report.PeakGoodput)
	}
	fmt.Fprintln(w)
}

// writeAccuracy writes each policy's prediction accuracy after warmup
// decisions, or after the first quarter of them when warmup is 0.
func writeAccuracy(w io.Writer, results []harness.PolicyResult, warmup int) {
	if warmup == 0 && len(results) > 0 {
		warmup = len(results[0].Records) / 4
	}
	fmt.Fprintf(w, "Prediction accuracy after %d warm-up decisions (predicted TTFT and TPOT of the chosen worker against those warmpath observed; predicted cached tokens against the response's `cached_tokens`). TPOT counts the responses that ended under load, by the last decision; *drained* are those that ended after it, when nothing arrived any more, and the last column gives the TPOT error with them:\n\n", warmup)
	fmt.Fprintln(w, "| policy | TTFT samples | TTFT median abs. error | TTFT p90 abs. error | TTFT median bias | TPOT samples | TPOT median abs. error | TPOT p90 abs. error | TPOT median bias | cached-token samples | cached tokens exact | TPOT drained | TPOT median / p90 with them |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		a := harness.MeasureAccuracy(r.Records, warmup)
		if a.TTFTSamples == 0 && a.CachedSamples == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d | %s | %s | %s | %d | %s | %d | %s / %s |\n", r.Policy, a.TTFTSamples, pct(a.MedianAPE), pct(a.P90APE), pct(a.MedianBias),
			a.TPOTSamples, pct(a.TPOTMedianAPE), pct(a.TPOTP90APE), pct(a.TPOTMedianBias), a.CachedSamples, pct(a.CachedExact*100),
			a.TPOTDrained, pct(a.TPOTAllMedianAPE), pct(a.TPOTAllP90APE))
	}
	fmt.Fprintln(w)
}

// The tables' number formats; each writes "–" for NaN or infinity.
var (
	secs       = formatted("%.2f s")
	millis     = func(s float64) string { return formatted("%.0f ms")(s * 1000) }
	signedSecs = formatted("%+.2f s")
	pct        = formatted("%.1f%%")
	frac       = formatted("%.3f")
	signed     = formatted("%+.3f")
	times      = formatted("%.2f×")
	bytesOf    = formatted("%.0f B")
)

// formatted returns a formatter of one number with format, "–" for NaN
// or infinity.
func formatted(format string) func(float64) string {
	return func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "–"
		}
		s := fmt.Sprintf(format, v)
		if s == fmt.Sprintf(format, math.Copysign(0, -1)) {
			return fmt.Sprintf(format, 0.0) // a value that rounds to zero has no sign
		}
		return s
	}
}
