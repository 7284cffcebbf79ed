package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
)

func syntheticConfig(url string, n int) Config {
	return Config{
		Label: "test", BaseURL: url, Seed: 5,
		Workload: WorkloadConfig{Kind: WorkloadSynthetic, Model: "m", Synthetic: SyntheticConfig{
			Requests: n, Prompt: Dist{Mean: 20}, Output: Dist{Mean: 3}, PrefixTokens: 30, PrefixCount: 2,
		}},
	}
}

func TestRunSynchronous(t *testing.T) {
	t.Parallel()
	fake := newFakeLLM(t)
	fake.worker = "w1"
	fake.split = true
	srv := fake.start(t)
	cfg := syntheticConfig(srv.URL, 6)
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs", len(rep.Runs))
	}
	run := rep.Runs[0]
	if run.Name != "synchronous" || len(run.Requests) != 6 || run.Summary.Succeeded != 6 {
		t.Fatalf("run %s: %d requests, summary %+v", run.Name, len(run.Requests), run.Summary)
	}
	if fake.maxInflight() != 1 {
		t.Fatalf("max in flight %d, want 1", fake.maxInflight())
	}
	for i, r := range run.Requests {
		if want := fmt.Sprintf("r%d", i); r.Session != want {
			t.Fatalf("request %d is %s, want %s in order", i, r.Session, want)
		}
		if r.TTFT <= 0 || r.TTFT > r.E2E || r.CompletionTokens != 3 || r.Worker != "w1" || r.Reason != "least predicted ttft" {
			t.Fatalf("request %d: %+v", i, r)
		}
		// Requests 0 and 1 open prefixes p0 and p1; later ones hit them.
		// The fake caches by words: the prefix's 30 plus the chat roles
		// are not counted, so cached ≥ 30 for repeats.
		if i >= 2 && r.CachedTokens < 30 {
			t.Fatalf("request %d cached %d tokens, want the 30-token prefix", i, r.CachedTokens)
		}
		if i < 2 && r.CachedTokens != 0 {
			t.Fatalf("request %d cached %d, want 0", i, r.CachedTokens)
		}
	}
	if run.Summary.Workers["w1"] != 6 || run.Summary.CacheHitRate <= 0 {
		t.Fatalf("summary %+v", run.Summary)
	}
	for _, body := range fake.requests() {
		so, _ := body["stream_options"].(map[string]any)
		if body["stream"] != true || so["include_usage"] != true {
			t.Fatalf("request did not ask for streamed usage: %v", body)
		}
	}
}

// gateAt returns a gate that holds requests until n are in flight at once,
// then lets every request through. It gives up after a long time so a bug
// fails the test instead of hanging it.
func gateAt(n int) func(int) {
	var once sync.Once
	open := make(chan struct{})
	return func(inflight int) {
		if inflight >= n {
			once.Do(func() { close(open) })
		}
		select {
		case <-open:
		case <-time.After(30 * time.Second):
		}
	}
}

// TestRunMeasuresDelays streams with a first-token delay and gaps between
// chunks and checks that the measures cannot be shorter than what the
// server waited: TTFT includes the first delay and E2E every delay. (ITL is
// not bounded below: a descheduled client may read several chunks at once.)
func TestRunMeasuresDelays(t *testing.T) {
	t.Parallel()
	fake := newFakeLLM(t)
	fake.firstDelay, fake.chunkDelay = 30*ms, 10*ms
	srv := fake.start(t)
	cfg := syntheticConfig(srv.URL, 2)
	cfg.Workload.Synthetic.Output = Dist{Mean: 5}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Runs[0].Requests {
		if r.TTFT < 30*ms || r.E2E < 70*ms || r.E2E < r.TTFT || r.ITL < 0 {
			t.Fatalf("%s: ttft %v, itl %v, e2e %v: the server's delays must be measured", r.Session, r.TTFT, r.ITL, r.E2E)
		}
	}
}

func TestRunConcurrencyBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		load LoadConfig
		want int
	}{
		{"concurrent 3", LoadConfig{Kind: LoadConcurrent, Concurrency: 3}, 3},
		{"throughput capped at 4", LoadConfig{Kind: LoadThroughput, Concurrency: 4}, 4},
		{"poisson capped at 2", LoadConfig{Kind: LoadPoisson, Rate: 100, Concurrency: 2}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFakeLLM(t)
			fake.gate = gateAt(tt.want)
			srv := fake.start(t)
			cfg := syntheticConfig(srv.URL, 12)
			cfg.Load = tt.load
			rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
			if err != nil {
				t.Fatal(err)
			}
			if got := fake.maxInflight(); got != tt.want {
				t.Fatalf("max in flight %d, want %d", got, tt.want)
			}
			if s := rep.Runs[0].Summary; s.Succeeded != 12 {
				t.Fatalf("%d succeeded, want 12", s.Succeeded)
			}
		})
	}
}

func TestRunOpenLoopSchedule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  func(url string) Config
		spec runSpec
	}{
		{"poisson", func(url string) Config {
			c := syntheticConfig(url, 10)
			c.Load = LoadConfig{Kind: LoadPoisson, Rate: 3}
			return c
		}, runSpec{Kind: LoadPoisson, Rate: 3}},
		{"constant", func(url string) Config {
			c := syntheticConfig(url, 10)
			c.Load = LoadConfig{Kind: LoadConstant, Rate: 2}
			return c
		}, runSpec{Kind: LoadConstant, Rate: 2}},
		{"mooncake trace at 10x", func(url string) Config {
			return Config{Label: "t", BaseURL: url, Seed: 5,
				Workload: WorkloadConfig{Kind: WorkloadMooncake, Model: "m", API: APICompletions, TokenIDs: true,
					Trace: TraceConfig{Path: "testdata/mooncake-synthetic-head100.jsonl", Limit: 10, MaxPrompt: 64, MaxOutput: 2}},
				Load: LoadConfig{Kind: LoadTrace, TimeScale: 10}}
		}, runSpec{Kind: LoadTrace, TimeScale: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFakeLLM(t)
			srv := fake.start(t)
			cfg := tt.cfg(srv.URL)
			rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
			if err != nil {
				t.Fatal(err)
			}
			sessions, err := Generate(cfg.Workload, cfg.Seed)
			if err != nil {
				t.Fatal(err)
			}
			want := arrivals(tt.spec, sessions, cfg.Seed)
			got := map[string]time.Duration{}
			for _, r := range rep.Runs[0].Requests {
				got[r.Session] = r.Scheduled
				if !r.OK() {
					t.Fatalf("%s failed: %s", r.Session, r.Error)
				}
			}
			for i, s := range sessions {
				if got[s.ID] != want[i] {
					t.Fatalf("%s scheduled at %v, want %v", s.ID, got[s.ID], want[i])
				}
			}
		})
	}
}

func TestRunClientModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		clients ClientConfig
		want    int
	}{
		{ClientConfig{Mode: ClientShared}, 1},
		{ClientConfig{Mode: ClientSticky, Count: 3}, 3},
		{ClientConfig{Mode: ClientPerRequest}, 6},
	}
	for _, tt := range tests {
		t.Run(string(tt.clients.Mode), func(t *testing.T) {
			t.Parallel()
			fake := newFakeLLM(t)
			srv := fake.start(t)
			cfg := syntheticConfig(srv.URL, 6)
			cfg.Clients = tt.clients
			rep, err := Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := fake.connections(); got != tt.want {
				t.Fatalf("%d connections, want %d", got, tt.want)
			}
			for i, r := range rep.Runs[0].Requests {
				if tt.clients.Mode == ClientSticky && r.Client != i%3 {
					t.Fatalf("request %d on client %d, want %d", i, r.Client, i%3)
				}
				if tt.clients.Mode == ClientPerRequest && r.ReusedConn {
					t.Fatalf("request %d reused a connection", i)
				}
			}
		})
	}
}

func TestRunMultiTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		history HistoryMode
		api     API
	}{
		{"chat, response history", HistoryResponse, APIChat},
		{"chat, synthetic history", HistorySynthetic, APIChat},
		{"anthropic messages", HistoryResponse, APIMessages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFakeLLM(t)
			srv := fake.start(t)
			cfg := Config{Label: "chat", BaseURL: srv.URL, Seed: 1, History: tt.history,
				Workload: WorkloadConfig{Kind: WorkloadChat, Model: "m", API: tt.api, Chat: ChatConfig{
					Sessions: 2, SystemTokens: 10, Turns: Dist{Mean: 3}, User: Dist{Mean: 12}, Output: Dist{Mean: 4},
					Think: DurationDist{Mean: Duration(time.Hour)},
				}}}
			clock := clocktest.New(epoch)
			start := clock.Now()
			rep, err := Run(t.Context(), cfg, WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(rep.Runs[0].Requests); n != 6 {
				t.Fatalf("%d requests, want 2 sessions × 3 turns", n)
			}
			// Think time passed on the (fake) clock: two hour-long waits per session.
			if elapsed := clock.Now().Sub(start); elapsed < 4*time.Hour {
				t.Fatalf("clock moved %v, want the sessions' think times", elapsed)
			}
			var lens []int
			for _, body := range fake.requests() {
				msgs := body["messages"].([]any)
				lens = append(lens, len(msgs))
				if len(msgs) >= 3 {
					prev := msgs[len(msgs)-2].(map[string]any)
					if prev["role"] != "assistant" {
						t.Fatalf("message before the last is %v, want the assistant reply", prev["role"])
					}
					isEcho := prev["content"] == "tok0 tok1 tok2 tok3 "
					if (tt.history == HistoryResponse) != isEcho {
						t.Fatalf("assistant content %q with history %s", prev["content"], tt.history)
					}
				}
			}
			want := []int{2, 4, 6, 2, 4, 6} // system+user, then +user/assistant per turn
			if tt.api == APIMessages {
				want = []int{1, 3, 5, 1, 3, 5} // system is a top-level field
			}
			if !slices.Equal(lens, want) {
				t.Fatalf("message counts %v, want %v", lens, want)
			}
			// Later turns hit the cache of earlier ones.
			for _, r := range rep.Runs[0].Requests {
				if r.Turn > 0 && r.CachedTokens <= 10 {
					t.Fatalf("%s turn %d cached %d tokens", r.Session, r.Turn, r.CachedTokens)
				}
			}
		})
	}
}

func TestRunFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		midError  bool
		wantClass string
	}{
		{"http 503", 503, false, "http 503"},
		{"error event", 0, true, "stream error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := newFakeLLM(t)
			fake.status, fake.midError = tt.status, tt.midError
			srv := fake.start(t)
			cfg := Config{Label: "x", BaseURL: srv.URL, Seed: 1, SLO: SLO{},
				Workload: WorkloadConfig{Kind: WorkloadChat, Model: "m", Chat: ChatConfig{
					Sessions: 3, Turns: Dist{Mean: 3}, User: Dist{Mean: 5}, Output: Dist{Mean: 3}}}}
			rep, err := Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Runs[0].Summary
			// A session stops at its first failure: one request each.
			if s.Requests != 3 || s.Failed != 3 || s.Errors[tt.wantClass] != 3 || s.SLOMet {
				t.Fatalf("summary %+v", s)
			}
			if rep.PeakGoodput != 0 {
				t.Fatalf("peak goodput %v with every request failed", rep.PeakGoodput)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		srv.Close()
		rep, err := Run(t.Context(), syntheticConfig(srv.URL, 2))
		if err != nil {
			t.Fatal(err)
		}
		if s := rep.Runs[0].Summary; s.Failed != 2 || s.Errors["transport"] != 2 {
			t.Fatalf("summary %+v", s)
		}
	})
}

func TestRunTokenIDs(t *testing.T) {
	t.Parallel()
	fake := newFakeLLM(t)
	srv := fake.start(t)
	cfg := syntheticConfig(srv.URL, 3)
	cfg.Workload.API, cfg.Workload.TokenIDs = APICompletions, true
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range fake.requests() {
		ids, ok := body["prompt"].([]any)
		// 30 prefix ids + 4 marker ids + 16 words.
		if !ok || len(ids) != 50 {
			t.Fatalf("request %d prompt %T of %d ids, want 50 token ids", i, body["prompt"], len(ids))
		}
	}
	if fake.paths[0] != "/v1/completions" || rep.Runs[0].Summary.Succeeded != 3 {
		t.Fatalf("path %s, summary %+v", fake.paths[0], rep.Runs[0].Summary)
	}
}

func TestRunSweepAndGoodput(t *testing.T) {
	t.Parallel()
	t.Run("sweep with rates", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 4)
		cfg.Load = LoadConfig{Kind: LoadSweep, Rates: []float64{1, 2, 4}, Arrivals: LoadConstant}
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rep.Runs {
			names = append(names, r.Name)
		}
		if !slices.Equal(names, []string{"constant@1/s", "constant@2/s", "constant@4/s"}) {
			t.Fatalf("runs %v", names)
		}
	})
	t.Run("derived sweep", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 4)
		cfg.Load = LoadConfig{Kind: LoadSweep, Steps: 2, FreshPrefixes: true}
		rep, err := Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Runs) != 4 || rep.Runs[0].Kind != LoadSynchronous || rep.Runs[1].Kind != LoadThroughput || rep.Runs[2].Kind != LoadPoisson {
			t.Fatalf("runs %+v", rep.Runs)
		}
		if rep.Runs[0].Seed == rep.Runs[1].Seed {
			t.Fatal("fresh prefixes did not change the seed between runs")
		}
		if r2, r3 := rep.Runs[2].Rate, rep.Runs[3].Rate; !(r2 > 0 && r3 > r2) {
			t.Fatalf("derived rates %v, %v", r2, r3)
		}
	})
	t.Run("fresh prompts keep the prefixes", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 4)
		cfg.Load = LoadConfig{Kind: LoadSweep, Rates: []float64{1, 2}, Arrivals: LoadConstant, FreshPrompts: true}
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Runs) != 2 || rep.Runs[0].Seed == rep.Runs[1].Seed {
			t.Fatalf("runs %d, seeds %d and %d: want two runs with different seeds", len(rep.Runs), rep.Runs[0].Seed, rep.Runs[1].Seed)
		}
	})
	t.Run("goodput search", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 4)
		cfg.SLO, _ = ParseSLO("ttft:p90<=1s")
		cfg.Load = LoadConfig{Kind: LoadGoodput, MinRate: 1, MaxRate: 8, Iterations: 3}
		// On the fake clock every request takes no time: the SLO holds at
		// any rate, so the search ends at MaxRate after two probes.
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		if rep.SearchRate != 8 || len(rep.Runs) != 2 || rep.PeakGoodput <= 0 {
			t.Fatalf("search rate %v after %d runs, peak %v", rep.SearchRate, len(rep.Runs), rep.PeakGoodput)
		}
	})
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	fake := newFakeLLM(t)
	srv := fake.start(t)
	cfg := syntheticConfig(srv.URL, 50)
	cfg.Load = LoadConfig{Kind: LoadConstant, Rate: 1}
	ctx, cancel := context.WithCancel(t.Context())
	fake.gate = func(int) { cancel() }
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Runs) != 1 || len(rep.Runs[0].Requests) >= 50 {
		t.Fatalf("want a partial report, got %+v", rep)
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no label", func(c *Config) { c.Label = "" }, "label"},
		{"bad url", func(c *Config) { c.BaseURL = "localhost:80" }, "base_url"},
		{"bad client mode", func(c *Config) { c.Clients.Mode = "magic" }, "clients.mode"},
		{"trace load without trace", func(c *Config) { c.Load.Kind = LoadTrace }, "trace needs"},
		{"bad history", func(c *Config) { c.History = "none" }, "history"},
		{"missing trace file", func(c *Config) {
			c.Workload = WorkloadConfig{Kind: WorkloadAzure, Model: "m", Trace: TraceConfig{Path: "testdata/nope.csv"}}
		}, "open trace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := syntheticConfig("http://127.0.0.1:1", 1)
			tt.mutate(&cfg)
			_, err := Run(t.Context(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestProgressRateLimited(t *testing.T) {
	t.Parallel()
	clock := clocktest.New(epoch)
	var buf bytes.Buffer
	p := &progress{w: &buf, clock: clock, interval: 5 * time.Second, label: "warmpath"}
	p.begin("poisson@2/s", 10)
	for range 10 {
		clock.Advance(time.Second)
		p.record(true)
	}
	p.end()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	// Ten seconds of one-per-second updates: a line at 5 s and 10 s, plus the end line.
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "5/10 requests done") || !strings.Contains(lines[2], "10/10 requests done, 0 failed, 10s") {
		t.Fatalf("lines:\n%s", buf.String())
	}
	var nilProgress *progress
	nilProgress.record(false) // a nil progress prints nothing and does not panic
}

func TestRunMaxDuration(t *testing.T) {
	t.Parallel()
	t.Run("open loop stops scheduling", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 10)
		cfg.Load = LoadConfig{Kind: LoadConstant, Rate: 1, MaxDuration: Duration(3500 * ms)}
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		// Arrivals at 0, 1, 2 and 3 s fall before the 3.5 s limit.
		if n := len(rep.Runs[0].Requests); n != 4 {
			t.Fatalf("%d requests, want 4", n)
		}
	})
	t.Run("open loop sends at least MinSessions", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := syntheticConfig(srv.URL, 10)
		cfg.Load = LoadConfig{Kind: LoadConstant, Rate: 1, MaxDuration: Duration(3500 * ms), MinSessions: 6}
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		// Four arrivals fall before the limit; two more are sent past it.
		if n := len(rep.Runs[0].Requests); n != 6 {
			t.Fatalf("%d requests, want 6", n)
		}
	})
	t.Run("closed loop finishes started sessions only", func(t *testing.T) {
		t.Parallel()
		fake := newFakeLLM(t)
		srv := fake.start(t)
		cfg := Config{Label: "c", BaseURL: srv.URL, Seed: 1,
			Workload: WorkloadConfig{Kind: WorkloadChat, Model: "m", Chat: ChatConfig{
				Sessions: 3, Turns: Dist{Mean: 3}, User: Dist{Mean: 5}, Output: Dist{Mean: 2},
				Think: DurationDist{Mean: Duration(time.Hour)}}},
			Load: LoadConfig{Kind: LoadSynchronous, MaxDuration: Duration(90 * time.Minute)}}
		rep, err := Run(t.Context(), cfg, WithClock(clocktest.New(epoch)))
		if err != nil {
			t.Fatal(err)
		}
		// Session c0 runs its three turns (0 h, 1 h, 2 h); by then the
		// 90-minute limit has passed and c1 and c2 never start.
		var sessions []string
		for _, r := range rep.Runs[0].Requests {
			sessions = append(sessions, r.Session)
		}
		if !slices.Equal(sessions, []string{"c0", "c0", "c0"}) {
			t.Fatalf("requests from %v, want c0's three turns", sessions)
		}
	})
}
