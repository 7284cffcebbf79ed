package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
)

// replicaRun is one configuration of a replicas scenario: a policy routed
// by so many warmpath replicas behind one Envoy, sharing their in-flight
// ledgers or not.
type replicaRun struct {
	policy   string
	replicas int
	share    bool
}

// label names the run in tables, reports and log directories.
func (c replicaRun) label() string {
	l := fmt.Sprintf("%s-x%d", c.policy, c.replicas)
	if c.replicas > 1 && !c.share {
		l += "-noshare"
	}
	return l
}

// baseline is the run c is compared with: the same policy on one replica.
func (c replicaRun) baseline() replicaRun { return replicaRun{policy: c.policy, replicas: 1} }

// replicaRuns are a replicas scenario's configurations, in table order:
// warmpath on 1, 2 and 4 sharing replicas and on 2 that do not share, and
// prefix-max (which keeps no load model) on 1 and 2.
var replicaRuns = []replicaRun{
	{"warmpath", 1, false}, {"warmpath", 2, true}, {"warmpath", 4, true}, {"warmpath", 2, false},
	{"prefix-max", 1, false}, {"prefix-max", 2, false},
}

// replicaResult is one run of a replicas scenario, measured.
type replicaResult struct {
	run   replicaRun
	round int
	res   harness.PolicyResult
	// attainment is the share of requests within the SLO's limits.
	attainment float64
	acc        harness.Accuracy
	// bytesPerDecision is the peer bytes sent, summed over replicas, per
	// decision (NaN with no decision).
	bytesPerDecision float64
}

func (r replicaResult) summary() replay.Summary { return r.res.Report.Runs[0].Summary }

// perFollower is bytesPerDecision over the followers each replica sends
// to; NaN for one replica.
func (r replicaResult) perFollower() float64 {
	if r.run.replicas < 2 {
		return math.NaN()
	}
	return r.bytesPerDecision / float64(r.run.replicas-1)
}

// runReplicas runs every configuration of sc.replicaRuns whose policy is
// in policies, rounds times (round r replays seed+r, its own trace when sc
// has one to prepare), and writes reports, the plot and the tables.
func runReplicas(ctx context.Context, sc *scenario, policies []string, dir string, setup harness.Setup, rounds int, md, progress io.Writer) error {
	var runs []replicaRun
	for _, c := range sc.replicaRuns {
		if slices.Contains(policies, c.policy) {
			runs = append(runs, c)
		}
	}
	fmt.Fprintf(md, "\n## %s\n\n%s\n\n", sc.title, sc.about)
	writeWorkers(md, sc)
	var all []replicaResult
	var took []string
	for round := range rounds {
		started := time.Now()
		rsc := *sc
		rsc.replay.Seed = sc.replay.Seed + int64(round)
		rdir := filepath.Join(dir, fmt.Sprintf("round-%d", round+1))
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return fmt.Errorf("output dir: %w", err)
		}
		if rsc.prepare != nil {
			if err := rsc.prepare(&rsc, rdir); err != nil {
				return err
			}
		}
		for _, c := range runs {
			runtime.GC()
			debug.FreeOSMemory()
			st := setup
			st.Replicas, st.SharePeers = c.replicas, c.share
			res, err := harness.RunPolicy(ctx, st, harness.Policy{Name: c.policy, Label: c.label()}, rsc.replay,
				filepath.Join(rdir, "logs", c.label()), harness.Options{Progress: progress})
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, c.label(), err)
			}
			// Each run's reports as it ends, so an interrupted round keeps them.
			if err := writeReports(rdir, []harness.PolicyResult{*res}); err != nil {
				return err
			}
			all = append(all, measureReplicas(c, round+1, *res, rsc))
		}
		took = append(took, time.Since(started).Round(time.Second).String())
	}
	writeReplicaRuns(md, all, sc.replay.SLO, sc.accuracyWarmup)
	writeReplicaSummary(md, all, runs)
	writeReplicaCriteria(md, all)
	if err := plotReplicas(dir, all, sc.name); err != nil {
		return err
	}
	fmt.Fprintf(md, "\n![%s %s](e2e/cmd/bench/results/%s-%s.svg)\n", sc.name, plotReplicaQuality, sc.name, plotReplicaQuality)
	fmt.Fprintf(md, "\nWall time per round: %s.\n", strings.Join(took, ", "))
	return nil
}

func measureReplicas(c replicaRun, round int, res harness.PolicyResult, sc scenario) replicaResult {
	r := replicaResult{run: c, round: round, res: res, bytesPerDecision: math.NaN(),
		attainment: sc.replay.SLO.Attainment(res.Report.Runs[0].Requests), acc: harness.MeasureAccuracy(res.Records, sc.accuracyWarmup)}
	if len(res.Records) > 0 {
		r.bytesPerDecision = res.PeerBytesSent / float64(len(res.Records))
	}
	return r
}

// find returns the result of run c in round, or nil.
func find(all []replicaResult, c replicaRun, round int) *replicaResult {
	for i := range all {
		if all[i].run == c && all[i].round == round {
			return &all[i]
		}
	}
	return nil
}

// vsBaseline returns r's median TTFT over its baseline's and its SLO
// attainment minus the baseline's, NaN without a baseline.
func vsBaseline(all []replicaResult, r replicaResult) (ratio, diff float64) {
	b := find(all, r.run.baseline(), r.round)
	if b == nil || b.summary().TTFT.P50 == 0 {
		return math.NaN(), math.NaN()
	}
	return r.summary().TTFT.P50 / b.summary().TTFT.P50, r.attainment - b.attainment
}

func writeReplicaRuns(w io.Writer, all []replicaResult, slo replay.SLO, warmup int) {
	fmt.Fprintf(w, "Every run; SLO attainment is the share of requests within `%s`'s limit; prediction error is the absolute "+
		"error of the chosen worker's predicted TTFT against the TTFT warmpath observed, after %d warm-up decisions (all "+
		"replicas' decisions in one order); peer bytes are the ledger frames the replicas sent one another "+
		"(`warmpath_peer_bytes_total{direction=\"sent\"}` summed over replicas, heartbeats and snapshots included) per decision, "+
		"and that divided by the followers each replica sends to (replicas − 1); "+
		"the last two columns compare with the same policy on one replica in the same round:\n\n", slo, warmup)
	fmt.Fprintln(w, "| run | round | replicas | sharing | requests | failed | TTFT p50 | TTFT p90 | SLO attainment | E2E p50 | req/min | cache hit | "+
		"pred. error p50 | pred. error p90 | peer bytes/decision | per follower | leaked | send lag p90 | step lag | TTFT p50 vs 1 replica | SLO attainment vs 1 replica |")
	fmt.Fprintln(w, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	behind := false
	for _, r := range all {
		s := r.summary()
		name := r.run.label()
		if r.res.FellBehind() {
			name += " †"
			behind = true
		}
		share := "–"
		if r.run.replicas > 1 {
			share = map[bool]string{true: "on", false: "off"}[r.run.share]
		}
		ratio, diff := vsBaseline(all, r)
		fmt.Fprintf(w, "| %s | %d | %d | %s | %d | %d | %s | %s | %s | %s | %.1f | %.1f%% | %s | %s | %s | %s | %v | %s | %.0f ms | %s | %s |\n",
			name, r.round, r.run.replicas, share, s.Requests, s.Failed, secs(s.TTFT.P50), secs(s.TTFT.P90), frac(r.attainment),
			secs(s.E2E.P50), s.RequestsPerMinute, s.CacheHitRate*100, pct(r.acc.MedianAPE), pct(r.acc.P90APE), bytesOf(r.bytesPerDecision),
			bytesOf(r.perFollower()), r.res.Leaked, secs(harness.SendLag(r.res.Report.Runs[0], 0.9)), r.res.StepLag.Seconds()*1000, times(ratio), signed(diff))
	}
	if behind {
		fmt.Fprintln(w, "\n† the harness fell behind in this run (client send lag p90 over 1 s or mean engine step lag over 100 ms, simulated).")
	}
	fmt.Fprintln(w)
}

// writeReplicaSummary writes each configuration's median over rounds
// with the range.
func writeReplicaSummary(w io.Writer, all []replicaResult, runs []replicaRun) {
	fmt.Fprintln(w, "Medians over the rounds (range in brackets):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| run | TTFT p50 | TTFT p90 | SLO attainment | E2E p50 | pred. error p50 | peer bytes/decision | TTFT p50 vs 1 replica | SLO attainment vs 1 replica |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range runs {
		var p50, p90, att, e2e, ape, bytes, ratio, diff []float64
		for _, r := range all {
			if r.run != c {
				continue
			}
			s := r.summary()
			rt, d := vsBaseline(all, r)
			p50, p90, att, e2e = append(p50, s.TTFT.P50), append(p90, s.TTFT.P90), append(att, r.attainment), append(e2e, s.E2E.P50)
			ape, bytes, ratio, diff = append(ape, r.acc.MedianAPE), append(bytes, r.bytesPerDecision), append(ratio, rt), append(diff, d)
		}
		if len(p50) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.label(), spread(p50, secs), spread(p90, secs), spread(att, frac),
			spread(e2e, secs), spread(ape, pct), spread(bytes, bytesOf), spread(ratio, times), spread(diff, signed))
	}
	fmt.Fprintln(w)
}

// writeReplicaCriteria checks the replicas issue's bars in every round.
func writeReplicaCriteria(w io.Writer, all []replicaResult) {
	fmt.Fprintln(w, "The issue's bars, checked in every round (values by round):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| criterion | run | measured | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	rounds := 0
	for _, r := range all {
		rounds = max(rounds, r.round)
	}
	row := func(criterion string, c replicaRun, value func(r replicaResult) (float64, bool), format func(float64) string) {
		var vals []string
		met, seen := true, false
		for round := 1; round <= rounds; round++ {
			r := find(all, c, round)
			if r == nil {
				continue
			}
			v, ok := value(*r)
			vals, met, seen = append(vals, format(v)), met && ok, true
		}
		if !seen {
			return
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", criterion, c.label(), strings.Join(vals, " / "), map[bool]string{true: "yes", false: "no"}[met])
	}
	for _, n := range []int{2, 4} {
		c := replicaRun{"warmpath", n, true}
		row("median TTFT ≤ 1.25× one replica's", c, func(r replicaResult) (float64, bool) {
			ratio, _ := vsBaseline(all, r)
			return ratio, ratio <= 1.25
		}, times)
		row("SLO attainment at most 0.05 below one replica's", c, func(r replicaResult) (float64, bool) {
			_, diff := vsBaseline(all, r)
			return diff, diff >= -0.05
		}, signed)
		row("prediction error median ≤ 15%", c, func(r replicaResult) (float64, bool) {
			return r.acc.MedianAPE, r.acc.MedianAPE <= 15
		}, pct)
	}
	alone, pm := replicaRun{"warmpath", 2, false}, replicaRun{"prefix-max", 2, false}
	against := func(get func(replicaResult) float64, better func(a, b float64) bool) func(replicaResult) (float64, bool) {
		return func(r replicaResult) (float64, bool) {
			o := find(all, pm, r.round)
			if o == nil {
				return math.NaN(), false
			}
			return get(r) - get(*o), better(get(r), get(*o))
		}
	}
	lower := func(a, b float64) bool { return a <= b }
	row("sharing off: median TTFT no higher than prefix-max-x2-noshare's (difference)", alone,
		against(func(r replicaResult) float64 { return r.summary().TTFT.P50 }, lower), signedSecs)
	row("sharing off: TTFT p90 no higher than prefix-max-x2-noshare's (difference)", alone,
		against(func(r replicaResult) float64 { return r.summary().TTFT.P90 }, lower), signedSecs)
	row("sharing off: SLO attainment no lower than prefix-max-x2-noshare's (difference)", alone,
		against(func(r replicaResult) float64 { return r.attainment }, func(a, b float64) bool { return a >= b }), signed)
	fmt.Fprintln(w)
}

// spread formats the median of xs (NaN left out) with the range, "m
// (lo–hi)", or only m where the range formats as one value.
func spread(xs []float64, f func(float64) string) string {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return "–"
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	lo, hi := f(v[0]), f(v[len(v)-1])
	if lo == hi {
		return f(m)
	}
	return fmt.Sprintf("%s (%s–%s)", f(m), lo, hi)
}
