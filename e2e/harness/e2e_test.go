package harness_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/e2e/vllmsim"
)

// envoyOrSkip returns the real Envoy binary and the repo root, skipping the
// test when there is no Envoy (failing under CI).
func envoyOrSkip(t *testing.T) (bin, root string) {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err = harness.FindEnvoy(root)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin, root
}

// dumpLogs prints the tail of every process log under dir.
func dumpLogs(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		lines := strings.Split(string(b), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("==== %s\n%s", p, strings.Join(lines, "\n"))
	}
}

// TestRoutingComparison is the short version of the benchmark: every
// policy and the oracle, through real Envoy and in-process warmpath, on
// three L40S-like simulators whose caches each hold about a third of the
// shared prefixes, with the same seeded workload and arrivals. It asserts
// how the policies order, never how fast anything is.
func TestRoutingComparison(t *testing.T) {
	bin, root := envoyOrSkip(t)
	setup := harness.Setup{
		Workers: []harness.WorkerSpec{
			{Name: "w0", Profile: "l40s-27b-fp8", Tune: smallCache},
			{Name: "w1", Profile: "l40s-27b-fp8", Tune: smallCache},
			{Name: "w2", Profile: "l40s-27b-fp8", Tune: smallCache},
		},
		TimeScale: 40,
		Seed:      1,
		EnvoyBin:  bin,
		Bootstrap: filepath.Join(root, "envoy/envoy.yaml"),
	}
	rc := replay.Config{
		Seed: 7,
		Workload: replay.WorkloadConfig{Kind: replay.WorkloadSharedPrefix, API: replay.APICompletions, Model: "sim-model", TokenIDs: true,
			SharedPrefix: replay.SharedPrefixConfig{Groups: 6, PromptsPerGroup: 12, SystemPromptLen: 6000,
				Question: replay.Dist{Mean: 256}, Output: replay.Dist{Mean: 32}}},
		Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.6},
	}
	names := append(append([]string(nil), harness.ProductPolicies...), "oracle")
	logDir := t.TempDir()
	results, err := harness.RunPolicies(t.Context(), setup, harness.Policies(names...), rc, logDir, harness.Options{})
	if err != nil {
		dumpLogs(t, logDir)
		t.Fatal(err)
	}
	by := map[string]harness.PolicyResult{}
	for _, r := range results {
		s := r.Report.Runs[0].Summary
		by[r.Policy] = r
		t.Logf("%-13s TTFT p50 %6.2fs p90 %6.2fs  hit %5.1f%%  workers %v  leaked %v  step lag %v  send lag p90 %.2fs",
			r.Policy, s.TTFT.P50, s.TTFT.P90, s.CacheHitRate*100, s.Workers, r.Leaked, r.StepLag, harness.SendLag(r.Report.Runs[0], 0.9))
		t.Run(r.Policy+" leaks nothing and fails nothing", func(t *testing.T) {
			if r.Leaked != 0 {
				t.Errorf("%v assignments still in flight after the run", r.Leaked)
			}
			if s.Failed != 0 || s.Succeeded != s.Requests {
				t.Errorf("%d of %d requests failed: %v", s.Failed, s.Requests, s.Errors)
			}
			if len(r.Records) < s.Requests {
				t.Errorf("recorder saw %d decisions for %d requests", len(r.Records), s.Requests)
			}
		})
	}
	orderings := []struct {
		better, worse string
		metric        string
		get           func(replay.Summary) float64
	}{
		{"warmpath", "random", "median TTFT", func(s replay.Summary) float64 { return s.TTFT.P50 }},
		{"warmpath", "round-robin", "median TTFT", func(s replay.Summary) float64 { return s.TTFT.P50 }},
		{"oracle", "random", "median TTFT", func(s replay.Summary) float64 { return s.TTFT.P50 }},
		{"warmpath", "random", "cache miss rate", func(s replay.Summary) float64 { return 1 - s.CacheHitRate }},
		{"prefix-max", "random", "cache miss rate", func(s replay.Summary) float64 { return 1 - s.CacheHitRate }},
	}
	for _, o := range orderings {
		t.Run(fmt.Sprintf("%s beats %s on %s", o.better, o.worse, o.metric), func(t *testing.T) {
			b, w := by[o.better], by[o.worse]
			ok := func() bool { return o.get(b.Report.Runs[0].Summary) < o.get(w.Report.Runs[0].Summary) }
			// A comparison whose runs fell behind their schedule (at time
			// scale 40 every wall millisecond is 40 simulated ones) says
			// nothing about routing: run those two policies again once.
			if !ok() && (b.FellBehind() || w.FellBehind()) {
				t.Logf("%s and %s: a run fell behind (step lag %v, %v; send lag p90 %.2fs, %.2fs); running both again",
					o.better, o.worse, b.StepLag, w.StepLag, harness.SendLag(b.Report.Runs[0], 0.9), harness.SendLag(w.Report.Runs[0], 0.9))
				again, err := harness.RunPolicies(t.Context(), setup, harness.Policies(o.better, o.worse), rc, t.TempDir(), harness.Options{})
				if err != nil {
					t.Fatal(err)
				}
				b, w = again[0], again[1]
			}
			if !ok() {
				t.Errorf("%s %s %.3f, %s %.3f (step lag %v, %v)", o.better, o.metric,
					o.get(b.Report.Runs[0].Summary), o.worse, o.get(w.Report.Runs[0].Summary), b.StepLag, w.StepLag)
			}
		})
	}
	if t.Failed() {
		dumpLogs(t, logDir)
	}
}

// smallCache gives a worker 1500 blocks (24K tokens): room for about two
// of the six 6K-token prefixes besides the requests running.
func smallCache(e *vllmsim.EngineConfig) { e.NumGPUBlocks = 1500 }

// TestReplicas runs two warmpath replicas behind one real Envoy, sharing
// their ledgers and not: both route (Envoy balances ext_proc streams over
// them), their decisions come back merged in one order, nothing leaks, and
// only sharing replicas send one another ledger frames.
func TestReplicas(t *testing.T) {
	bin, root := envoyOrSkip(t)
	rc := replay.Config{
		Seed: 3,
		Workload: replay.WorkloadConfig{Kind: replay.WorkloadSharedPrefix, API: replay.APICompletions, Model: "sim-model", TokenIDs: true,
			SharedPrefix: replay.SharedPrefixConfig{Groups: 2, PromptsPerGroup: 10, SystemPromptLen: 2000,
				Question: replay.Dist{Mean: 128}, Output: replay.Dist{Mean: 16}}},
		Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 2},
	}
	for _, share := range []bool{true, false} {
		t.Run(fmt.Sprintf("sharing %v", share), func(t *testing.T) {
			setup := harness.Setup{
				Workers:   []harness.WorkerSpec{{Name: "w0", Profile: "l40s-27b-fp8"}, {Name: "w1", Profile: "l40s-27b-fp8"}},
				TimeScale: 10, Seed: 1, EnvoyBin: bin, Bootstrap: filepath.Join(root, "envoy/envoy.yaml"),
				Replicas: 2, SharePeers: share,
			}
			dir := t.TempDir()
			r, err := harness.RunPolicy(t.Context(), setup, harness.Policy{Name: "warmpath", Label: "warmpath-x2"}, rc, dir, harness.Options{})
			if err != nil {
				dumpLogs(t, filepath.Dir(dir))
				t.Fatal(err)
			}
			s := r.Report.Runs[0].Summary
			if s.Failed != 0 || r.Leaked != 0 || r.Policy != "warmpath-x2" || r.Replicas != 2 {
				t.Fatalf("%d failed, %v leaked, label %q, %d replicas", s.Failed, r.Leaked, r.Policy, r.Replicas)
			}
			per := map[int]int{}
			for i, rec := range r.Records {
				if rec.Seq != i {
					t.Fatalf("record %d has seq %d", i, rec.Seq)
				}
				per[rec.Replica]++
			}
			if len(r.Records) < s.Requests || per[0] == 0 || per[1] == 0 {
				t.Fatalf("%d decisions for %d requests, by replica %v: want both to route", len(r.Records), s.Requests, per)
			}
			if share != (r.PeerBytesSent > 0) {
				t.Fatalf("sharing %v, %v peer bytes sent", share, r.PeerBytesSent)
			}
			for _, f := range []string{"warmpath-0.log", "warmpath-1.log", "warmpath-1-metrics.txt"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("replica file: %v", err)
				}
			}
		})
	}
}
