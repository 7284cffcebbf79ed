package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/scoring"
)

// writeLog writes records as a decision log, the chosen candidate's score
// null as the benchmark writes a score that is not finite.
func writeLog(t *testing.T, path string, rs []harness.Record) {
	t.Helper()
	var b strings.Builder
	for _, r := range rs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(strings.Replace(string(line), `"Score":0`, `"Score":null`, 1) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRun pools two logs: each run's row, the pooled row and the split by
// work ahead.
func TestRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := func(seq int, got time.Duration, ahead int) harness.Record {
		return harness.Record{Seq: seq, PredictedTTFT: 100 * time.Millisecond, Chosen: scoring.Candidate{WorkAhead: ahead},
			Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: got, CachedTokens: -1}}
	}
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	writeLog(t, a, []harness.Record{rec(0, 50*time.Millisecond, 0), rec(1, 80*time.Millisecond, 0), rec(2, 125*time.Millisecond, 4000)})
	writeLog(t, b, []harness.Record{rec(0, 50*time.Millisecond, 0), rec(1, 200*time.Millisecond, 2000), rec(2, 100*time.Millisecond, 0)})
	var out strings.Builder
	if err := run([]string{"-warmup", "1", "-ahead", "500", a, b}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| " + a + " | 2 | 22.5% | 24.5% | +2.5% |",
		"| pooled, 2 runs | 4 | 22.5% |",
		"| pooled, more than 500 tokens ahead | 2 | 35.0% |",
		"| pooled, 500 tokens ahead or fewer | 2 | 12.5% |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunArrivals splits the predictions by the prompts routed to the
// same worker while each response ran.
func TestRunArrivals(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rec := func(seq int, worker string, prompt int, from, to float64, got time.Duration) harness.Record {
		return harness.Record{Seq: seq, Worker: worker, PromptTokens: prompt, PredictedTTFT: 100 * time.Millisecond,
			Decided: at(from), Ended: at(to), Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: got, CachedTokens: -1}}
	}
	path := filepath.Join(t.TempDir(), "a.jsonl")
	writeLog(t, path, []harness.Record{
		rec(0, "w0", 100, 0, 1, 50*time.Millisecond),    // sees 1 arrive on w0
		rec(1, "w0", 2000, 0.5, 3, 80*time.Millisecond), // sees only 3's 100 tokens
		rec(2, "w1", 4000, 0.7, 2, 90*time.Millisecond), // another worker: not 0's
		rec(3, "w0", 100, 2, 2.5, 125*time.Millisecond), // nothing after it
		{Seq: 4, Worker: "w0", PromptTokens: 100, PredictedTTFT: 100 * time.Millisecond, // no times: neither
			Outcome: scoring.Outcome{End: scoring.EndCompleted, TTFT: 100 * time.Millisecond, CachedTokens: -1}},
	})
	var out strings.Builder
	if err := run([]string{"-warmup", "0", "-arrivals", "500", path}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| pooled, 1 runs | 5 |",
		"| pooled, a prompt of more than 500 uncached tokens arrived during the response | 1 | 100.0% |",
		"| pooled, none of more than 500 arrived | 3 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunBadLog: a log that is not JSON lines is an error naming it.
func TestRunBadLog(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(path, []byte("{\"Seq\":0}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{path}, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "bad.jsonl: record 2") {
		t.Errorf("error %v, want one naming the file and record 2", err)
	}
	if err := run(nil, &strings.Builder{}); err == nil {
		t.Error("no logs: no error")
	}
}
