package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/scoring"
)

func TestWriteSkewedTrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for _, p := range []string{a, b} {
		if err := writeSkewedTrace(p, 500, 2, 0.8, 3, 3); err != nil {
			t.Fatal(err)
		}
	}
	ba, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if string(ba) != string(bb) {
		t.Fatal("same seed wrote different traces")
	}
	recs, err := replay.ParseMooncake(mustOpen(t, a))
	if err != nil {
		t.Fatal(err)
	}
	hot := 0
	last := -1
	for _, r := range recs {
		if len(r.HashIDs) == 19 && slices.Equal(r.HashIDs[:16], []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
			hot++
		}
		if r.InputTokens != 512*len(r.HashIDs) {
			t.Fatalf("input length %d for %d ids", r.InputTokens, len(r.HashIDs))
		}
		if ms := int(r.Arrival / time.Millisecond); ms < last {
			t.Fatalf("timestamps go backwards: %d after %d", ms, last)
		} else {
			last = ms
		}
	}
	if len(recs) != 500 || hot < 350 || hot > 450 {
		t.Fatalf("%d records, %d hot; want 500 and about 400", len(recs), hot)
	}
}

func TestOverride(t *testing.T) {
	t.Parallel()
	all := scenarios(t.TempDir())
	seed := all[slices.IndexFunc(all, func(s *scenario) bool { return s.name == "seed-shaped" })]
	mooncake := all[slices.IndexFunc(all, func(s *scenario) bool { return s.name == "mooncake" })]
	sweep := *seed.sweep
	override([]*scenario{seed, mooncake}, 3, 0.55)
	if seed.timeScale != 3 || mooncake.timeScale != 3 || !strings.Contains(mooncake.about, "time scale: 3") {
		t.Errorf("time scales %g, %g, about %q; want 3, said", seed.timeScale, mooncake.timeScale, mooncake.about)
	}
	if seed.replay.Load.Rate != 0.55 || !strings.Contains(seed.about, "0.55 requests/s") {
		t.Errorf("seed-shaped rate %g, about %q; want 0.55, said", seed.replay.Load.Rate, seed.about)
	}
	if !slices.Equal(seed.sweep.Rates, sweep.Rates) {
		t.Error("the rate override changed the sweep")
	}
	if mooncake.replay.Load.Kind != replay.LoadTrace || mooncake.replay.Load.Rate != 0 {
		t.Errorf("trace scenario got rate %g", mooncake.replay.Load.Rate)
	}
}

func TestSweepSessions(t *testing.T) {
	t.Parallel()
	window := replay.LoadConfig{Rates: []float64{0.2, 4, 1}, MaxDuration: replay.Duration(time.Minute), MinSessions: 80}
	if n := sweepSessions(window, 150); n != 240 {
		t.Errorf("60 s at up to 4/s: %d sessions, want 240", n)
	}
	window.Rates = []float64{0.2, 1}
	if n := sweepSessions(window, 150); n != 80 {
		t.Errorf("60 s at up to 1/s with at least 80: %d sessions, want 80", n)
	}
	if n := sweepSessions(replay.LoadConfig{Rates: []float64{1, 2}}, 150); n != 80 {
		t.Errorf("no window: %d sessions, want 80", n)
	}
}

func mustOpen(t *testing.T, p string) *bufio.Reader {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return bufio.NewReader(f)
}

func TestScenariosAreValid(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, sc := range scenarios("/nonexistent") {
		if seen[sc.name] {
			t.Errorf("scenario %s listed twice", sc.name)
		}
		seen[sc.name] = true
		rc := sc.replay
		rc.Label, rc.BaseURL = "x", "http://127.0.0.1:1"
		rc.SetDefaults()
		if sc.prepare == nil && rc.Workload.Kind != replay.WorkloadMooncake {
			if err := rc.Validate(); err != nil {
				t.Errorf("scenario %s: %v", sc.name, err)
			}
		}
		if len(sc.workers) == 0 || !(sc.timeScale > 0) {
			t.Errorf("scenario %s: no workers or no time scale", sc.name)
		}
	}
	if !seen["demo"] || !seen["seed-shaped"] {
		t.Error("demo or seed-shaped scenario missing")
	}
}

func TestRunRejectsUnknownNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
	}{
		{"unknown scenario", []string{"-scenarios", "nope"}},
		{"unknown policy", []string{"-policies", "fastest"}},
		{"bad flag", []string{"-frobnicate"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut nopWriter
			if err := run(t.Context(), tc.args, &out, &errOut); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// TestWriteRecordsInfiniteScore: a policy that rules a candidate out gives
// it an infinite score, which JSON cannot hold; it is written as null.
func TestWriteRecordsInfiniteScore(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "d.jsonl")
	c := scoring.Candidate{Worker: "w0", Score: math.Inf(1)}
	rs := []harness.Record{{Seq: 0, Worker: "w1", Chosen: scoring.Candidate{Worker: "w1", Score: 2}, Candidates: []scoring.Candidate{c}}}
	if err := writeRecords(p, rs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Chosen     struct{ Score *float64 }
		Candidates []struct {
			Worker string
			Score  *float64
		}
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Chosen.Score == nil || *got.Chosen.Score != 2 || len(got.Candidates) != 1 || got.Candidates[0].Score != nil || got.Candidates[0].Worker != "w0" {
		t.Errorf("decoded %s", b)
	}
}

func TestTradeoffPlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rep := func(ttft, e2e float64) *replay.Report {
		return &replay.Report{Runs: []replay.RunReport{{Summary: replay.Summary{TTFT: replay.Stats{P50: ttft}, E2E: replay.Stats{P50: e2e}}}}}
	}
	reports := map[string]*replay.Report{"warmpath": rep(0.9, 10), "warmpath-ttft": rep(0.6, 14), "least-request": rep(1.1, 11)}
	pts := tradeoffPoints([]string{"warmpath", "warmpath-ttft", "missing", "least-request"}, reports)
	if len(pts) != 3 || pts[1] != (tradeoffPoint{"warmpath-ttft", 0.6, 14}) {
		t.Fatalf("points %+v", pts)
	}
	if err := plotTradeoff(dir, "s", pts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, plotTradeoffName+".svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("warmpath-ttft")) || !bytes.Contains(b, []byte("least-request")) {
		t.Error("the plot does not name its policies")
	}
}
