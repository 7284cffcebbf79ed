package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/scoring"
)

func TestReplicaRunLabels(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range replicaRuns {
		if seen[c.label()] {
			t.Errorf("label %s twice", c.label())
		}
		seen[c.label()] = true
	}
	for _, want := range []string{"warmpath-x1", "warmpath-x2", "warmpath-x4", "warmpath-x2-noshare", "prefix-max-x1", "prefix-max-x2-noshare"} {
		if !seen[want] {
			t.Errorf("no run labelled %s", want)
		}
	}
	if b := (replicaRun{"warmpath", 4, true}).baseline(); b.label() != "warmpath-x1" {
		t.Errorf("baseline %s", b.label())
	}
}

// fakeReplicaResult is a run whose requests all took ttft, in round.
func fakeReplicaResult(c replicaRun, round int, ttft time.Duration, n int, slo replay.SLO) replicaResult {
	var reqs []replay.Result
	for range n {
		reqs = append(reqs, replay.Result{Status: 200, TTFT: ttft, E2E: 2 * ttft})
	}
	rep := &replay.Report{Runs: []replay.RunReport{{Requests: reqs, Summary: replay.Summary{Requests: n, Succeeded: n,
		TTFT: replay.Stats{P50: ttft.Seconds(), P90: ttft.Seconds()}, E2E: replay.Stats{P50: 2 * ttft.Seconds()}}}}}
	var records []harness.Record
	for i := range n {
		records = append(records, harness.Record{Seq: i, PredictedTTFT: ttft * 11 / 10, Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: ttft}})
	}
	res := harness.PolicyResult{Policy: c.label(), Replicas: c.replicas, SharedPeers: c.share, Report: rep, Records: records}
	if c.share {
		res.PeerBytesSent = float64(1000 * n * (c.replicas - 1))
	}
	sc := scenario{replay: replay.Config{SLO: slo}}
	return measureReplicas(c, round, res, sc)
}

// TestReplicaTables: the tables compare each run with its policy's one
// replica in the same round, and the criteria read every round.
func TestReplicaTables(t *testing.T) {
	t.Parallel()
	slo := mustSLO("ttft:p90<=2s")
	ms := time.Millisecond
	ttft := map[string][2]time.Duration{
		"warmpath-x1": {300 * ms, 400 * ms}, "warmpath-x2": {330 * ms, 480 * ms}, "warmpath-x4": {360 * ms, 560 * ms},
		"warmpath-x2-noshare": {3 * time.Second, 300 * ms}, "prefix-max-x1": {300 * ms, 300 * ms}, "prefix-max-x2-noshare": {300 * ms, 300 * ms},
	}
	var all []replicaResult
	for round := 1; round <= 2; round++ {
		for _, c := range replicaRuns {
			all = append(all, fakeReplicaResult(c, round, ttft[c.label()][round-1], 10, slo))
		}
	}
	var md bytes.Buffer
	writeReplicaRuns(&md, all, slo, 0)
	writeReplicaSummary(&md, all, replicaRuns)
	writeReplicaCriteria(&md, all)
	out := md.String()
	for _, want := range []string{
		"| warmpath-x4 | 2 | 4 | on | 10 | 0 | 0.56 s |", // a run's row
		"3000 B | 1000 B |",                        // x4: bytes per decision, per follower
		"| 1.40× | +0.000 |",                       // x4 in round 2 against x1
		"| warmpath-x2 | 0.41 s (0.33 s–0.48 s) |", // median and range
		"| median TTFT ≤ 1.25× one replica's | warmpath-x2 | 1.10× / 1.20× | yes |", // both rounds within
		"| median TTFT ≤ 1.25× one replica's | warmpath-x4 | 1.20× / 1.40× | no |",  // one round out
		"| prediction error median ≤ 15% | warmpath-x4 | 10.0% / 10.0% | yes |",
		"SLO attainment no lower than prefix-max-x2-noshare's (difference) | warmpath-x2-noshare | -1.000 / +0.000 | no |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tables lack %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	if err := plotReplicas(dir, all, "test"); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".svg", ".png"} {
		if st, err := os.Stat(filepath.Join(dir, plotReplicaQuality+ext)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", ext, err)
		}
	}
}

func TestSpread(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		xs   []float64
		want string
	}{
		{"none", nil, "–"},
		{"one", []float64{0.5}, "0.50 s"},
		{"even count", []float64{0.4, 0.2}, "0.30 s (0.20 s–0.40 s)"},
		{"a range of one value", []float64{0.301, 0.299}, "0.30 s"},
		{"a negative value that rounds to zero", []float64{-0.001}, "0.00 s"},
		{"odd count, NaN left out", []float64{0.3, math.NaN(), 0.1, 0.2}, "0.20 s (0.10 s–0.30 s)"},
	}
	for _, tc := range tests {
		if got := spread(tc.xs, secs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
