package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/replay"
)

// sseServer streams a fixed three-token chat reply with usage, naming
// itself in the worker header.
func sseServer(t *testing.T, worker string, requests *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(replay.WorkerHeader, worker)
		for _, tok := range []string{"a", "b", "c"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":16}}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

const testConfig = `
seed: 9
slo: "ttft:p90<=5s"
workload:
  kind: synthetic
  model: m
  synthetic:
    requests: 5
    prompt_tokens: {mean: 20}
    output_tokens: {mean: 3}
    prefix_tokens: 16
    prefix_count: 1
load:
  kind: constant
  rate: 200
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMainRunAndCompare(t *testing.T) {
	t.Parallel()
	var nA, nB atomic.Int64
	a, b := sseServer(t, "w0", &nA), sseServer(t, "w1", &nB)
	out := t.TempDir()
	cfg := writeConfig(t, testConfig)
	var stdout, stderr bytes.Buffer
	err := Main(t.Context(), []string{"run", "--config", cfg, "--quiet", "--out", out,
		"--target", "random=" + a.URL, "--target", "warmpath=" + b.URL}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if nA.Load() != 5 || nB.Load() != 5 {
		t.Fatalf("targets got %d and %d requests, want 5 each", nA.Load(), nB.Load())
	}
	for _, f := range []string{"random.json", "warmpath.json", "comparison.md", "ttft-cdf.svg", "ttft-cdf.png", "goodput-vs-load.svg", "goodput-vs-load.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
	for _, want := range []string{"| random | constant@200/s | 5 | 0 |", "| warmpath | constant@200/s | 5 | 0 |", "TTFT p50 vs random", "40.0%"} { // 16 of 40 prompt tokens cached
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}

	// The reports merge again from their files.
	out2 := t.TempDir()
	stdout.Reset()
	err = Main(t.Context(), []string{"compare", "--out", out2, "--baseline", "random",
		filepath.Join(out, "random.json"), filepath.Join(out, "warmpath.json")}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("compare: %v", err)
	}
	md, err := os.ReadFile(filepath.Join(out2, "comparison.md"))
	if err != nil || !strings.Contains(string(md), "| warmpath | constant@200/s |") {
		t.Fatalf("comparison.md: %v\n%s", err, md)
	}
}

func TestMainSaltPerTarget(t *testing.T) {
	t.Parallel()
	salts := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			CacheSalt string `json:"cache_salt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		salts <- body.CacheSalt
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	cfg := writeConfig(t, strings.Replace(testConfig, "requests: 5", "requests: 1", 1))
	var stdout, stderr bytes.Buffer
	err := Main(t.Context(), []string{"run", "--config", cfg, "--quiet", "--salt", "--out", t.TempDir(),
		"--target", "random=" + srv.URL, "--target", "warmpath=" + srv.URL}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	close(salts)
	var got []string
	for s := range salts {
		got = append(got, s)
	}
	if strings.Join(got, ",") != "random,warmpath" {
		t.Fatalf("salts %v, want one per target label", got)
	}
}

func TestMainErrors(t *testing.T) {
	t.Parallel()
	good := writeConfig(t, testConfig)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", nil, "missing subcommand"},
		{"unknown subcommand", []string{"dance"}, "unknown subcommand"},
		{"no config", []string{"run", "--target", "a=http://x"}, "--config is required"},
		{"no target", []string{"run", "--config", good}, "--target"},
		{"bad target", []string{"run", "--config", good, "--target", "nourl"}, "LABEL=URL"},
		{"duplicate target", []string{"run", "--config", good, "--target", "a=http://x", "--target", "a=http://y"}, "twice"},
		{"unknown field", []string{"run", "--config", writeConfig(t, testConfig+"bogus: 1\n"), "--target", "a=http://x"}, "bogus"},
		{"invalid config", []string{"run", "--config", writeConfig(t, "workload: {kind: synthetic}\n"), "--target", "a=http://x"}, "workload.model"},
		{"missing config", []string{"run", "--config", "/nonexistent.yaml", "--target", "a=http://x"}, "read config"},
		{"compare nothing", []string{"compare"}, "report files"},
		{"compare garbage", []string{"compare", good}, "read report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := Main(t.Context(), tt.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
	var stdout bytes.Buffer
	if err := Main(t.Context(), []string{"help"}, &stdout, &stdout); err != nil || !strings.Contains(stdout.String(), "usage:") {
		t.Fatalf("help: %v %q", err, stdout.String())
	}
}

func TestMainInterrupted(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := sseServer(t, "w0", &n)
	cfg := writeConfig(t, strings.Replace(testConfig, "rate: 200", "rate: 0.001", 1))
	ctx, cancel := context.WithCancel(t.Context())
	// The second request is due in 1000 s; cancel once the first is done.
	go func() {
		for n.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Main(ctx, []string{"run", "--config", cfg, "--quiet", "--out", out, "--target", "p=" + srv.URL}, &stdout, &stderr); err != nil {
		t.Fatalf("interrupted run returned %v", err)
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("stderr: %s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "p.json")); err != nil {
		t.Fatal("partial report not written")
	}
}

func TestExamplesLoad(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(p)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Workload.Model == "" || cfg.Seed == 0 {
				t.Fatalf("example decoded to %+v", cfg)
			}
		})
	}
	cfg, err := loadConfig("examples/coding-sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workload.Coding.Think.Mean != replay.Duration(10*time.Second) || cfg.SLO.String() != "ttft:p90<=4s" {
		t.Fatalf("durations or SLO not decoded from text: %+v %v", cfg.Workload.Coding.Think, cfg.SLO)
	}
}
