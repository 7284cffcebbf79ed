package scoring

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/kvindex"
)

// busyHit builds the case that separates the objectives: a 2048-token
// prompt with 256 tokens to generate; w0 holds 2000 of its tokens while 30
// sequences decode there, w1 is idle and cold. w0 gives the first token
// sooner; the whole response, and the 30 others', go faster on w1.
func busyHit(t *testing.T, g *rig) (*Request, Workers) {
	t.Helper()
	ids := prompt(1, 2048, 2048)
	g.index.store("w0", kvindex.ChainKey{Model: "m"}, ids, 2000, 16, false)
	now := g.clock.Now()
	g.load.reports["w0"] = loadReport{Running: 30, Scraped: now}
	g.load.reports["w1"] = loadReport{Scraped: now}
	return &Request{ID: "r1", Model: "m", TokenIDs: ids, MaxTokens: 256, Stream: true}, pool(2)
}

func TestObjectives(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		obj    Objective
		tweak  func(*Config, *Request)
		want   string
		reason string
	}{
		{name: "ttft takes the cache hit", obj: ObjectiveTTFT, want: "w0", reason: "lowest predicted TTFT"},
		{name: "e2e spares the busy worker's decodes", obj: ObjectiveE2E, want: "w1", reason: "lowest predicted cost"},
		{name: "e2e without the others' slowdown still prefers the idle decoder", obj: ObjectiveE2E,
			tweak: func(c *Config, _ *Request) { c.SlowdownWeight = 0 }, want: "w1", reason: "lowest predicted cost"},
		{name: "e2e weighing the first token heavily takes the cache hit", obj: ObjectiveE2E,
			tweak: func(c *Config, _ *Request) { c.TTFTWeight = 100 }, want: "w0", reason: "lowest predicted cost"},
		{name: "slo: only the hit meets a tight TTFT", obj: ObjectiveSLO,
			tweak: func(c *Config, _ *Request) { c.SLOs = map[string]SLO{"m": {TTFT: 60 * time.Millisecond}} },
			want:  "w0", reason: "1 of 2 candidates predicted to meet ttft 60ms"},
		{name: "slo: the request's TPOT target sends it to the idle decoder", obj: ObjectiveSLO,
			tweak: func(c *Config, r *Request) {
				c.DefaultSLO = SLO{TTFT: 60 * time.Millisecond}
				r.SLO = SLO{TTFT: time.Second, TPOT: 10 * time.Millisecond}
			},
			want: "w1", reason: "1 of 2 candidates predicted to meet ttft 1s, tpot 10ms"},
		{name: "slo: both meet loose targets; the most headroom wins", obj: ObjectiveSLO,
			tweak: func(_ *Config, r *Request) { r.SLO = SLO{TTFT: 10 * time.Second, TPOT: 50 * time.Millisecond} },
			want:  "w1", reason: "2 of 2 candidates predicted to meet"},
		{name: "slo: none meets; the least bad, said so", obj: ObjectiveSLO,
			tweak: func(_ *Config, r *Request) { r.SLO = SLO{TTFT: time.Millisecond} },
			want:  "w0", reason: "SLO missed: no candidate is predicted to meet ttft 1ms; least bad"},
		{name: "slo without targets decides as e2e", obj: ObjectiveSLO, want: "w1", reason: "no SLO for the request or its model: lowest predicted cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Objective = tt.obj
			g0 := newRig(t, PolicyWarmpath, cfg, nil) // for the request only
			req, _ := busyHit(t, g0)
			if tt.tweak != nil {
				tt.tweak(&cfg, req)
			}
			g := newRig(t, PolicyWarmpath, cfg, nil)
			_, ws := busyHit(t, g)
			d, err := g.r.Pick(t.Context(), req, ws)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("picked %s (%q), want %s (%q); candidates %+v", d.Worker, d.Reason, tt.want, tt.reason, d.Candidates)
			}
			t.Logf("%s: %s", d.Worker, d.Reason)
			if d.Objective != tt.obj {
				t.Errorf("decision objective %q, want %q", d.Objective, tt.obj)
			}
		})
	}
}

// TestE2EPredictions checks the figures the e2e objective adds up.
func TestE2EPredictions(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	req, ws := busyHit(t, g)
	d, err := g.r.Predict(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	if d.OutputTokens != 256 {
		t.Errorf("output tokens %d, want max_tokens 256 before any is learned", d.OutputTokens)
	}
	w0, w1 := d.Candidates[0], d.Candidates[1]
	for _, c := range d.Candidates {
		// Nothing was routed before: the typical TPOT is the expected one
		// (TestTypicalTPOT parts them).
		e2e := c.PredictedTTFT + time.Duration(255*float64(c.PredictedTPOT))
		if d := c.PredictedE2E - e2e; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: e2e %v is not ttft + 255 × tpot = %v", c.Worker, c.PredictedE2E, e2e)
		}
		// w0 holds the prompt's prefix, so only w1 pays for writing a
		// second copy of it over the cache.
		want := (c.PredictedE2E + c.Slowdown).Seconds() + DefaultConfig().TTFTWeight*c.PredictedTTFT.Seconds()
		if c.Worker == "w0" && !near(c.Score, want, 1e-9) || c.Worker == "w1" && !(c.Score > want) {
			t.Errorf("%s (%d cached): score %v against e2e + slowdown %v", c.Worker, c.CachedTokens, c.Score, want)
		}
	}
	if !(w0.PredictedTTFT < w1.PredictedTTFT && w0.PredictedTPOT > w1.PredictedTPOT) {
		t.Errorf("w0 should start sooner and decode slower: %+v, %+v", w0, w1)
	}
	if w1.Slowdown != 0 || !(w0.Slowdown > 0) {
		t.Errorf("slowdowns %v (30 decoding), %v (idle)", w0.Slowdown, w1.Slowdown)
	}
}

func TestObjectiveConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		tweak func(*Config)
		want  string
	}{
		{"unknown objective", func(c *Config) { c.Objective = "fastest" }, `objective: "fastest"`},
		{"negative target", func(c *Config) { c.SLOs = map[string]SLO{"m": {TPOT: -time.Millisecond}} }, "slos[m]"},
		{"no default output", func(c *Config) { c.DefaultOutputTokens = 0 }, "default_output_tokens"},
		{"no rate window", func(c *Config) { c.RateWindow = 0 }, "rate_window"},
		{"negative slowdown weight", func(c *Config) { c.SlowdownWeight = -1 }, "slowdown_weight"},
		{"negative TTFT weight", func(c *Config) { c.TTFTWeight = -1 }, "ttft_weight"},
	} {
		cfg := DefaultConfig()
		tt.tweak(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	cfg := DefaultConfig()
	cfg.SLOs = map[string]SLO{"m": {TTFT: time.Second}}
	cfg.DefaultSLO = SLO{TPOT: 50 * time.Millisecond}
	if got := cfg.slo("m", SLO{TPOT: 20 * time.Millisecond}); got != (SLO{TTFT: time.Second, TPOT: 20 * time.Millisecond}) {
		t.Errorf("model target with the request's own TPOT: %+v", got)
	}
	if got := cfg.slo("other", SLO{}); got != cfg.DefaultSLO {
		t.Errorf("unlisted model: %+v, want the default", got)
	}
}

// TestTypicalTPOT checks the TPOT a decision reports against the expected
// one its predicted E2E counts: on a worker sent a 16000-token prompt every
// four seconds,
// a response of three tokens most likely sees none of their prefill, and
// one of two thousand sees about its expected share.
func TestTypicalTPOT(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	g.load.reports["w0"] = loadReport{Running: 4, Scraped: g.clock.Now()}
	for i := range 5 {
		d, err := g.r.Pick(t.Context(), &Request{ID: fmt.Sprint("long", i), Model: "m", TokenIDs: prompt(10+i, 0, 16000), MaxTokens: 1}, ws)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(4 * time.Second)
		g.r.Done(d, Outcome{End: EndAborted})
		g.load.reports["w0"] = loadReport{Running: 4, Scraped: g.clock.Now()}
	}
	expected := func(c Candidate, out int) time.Duration {
		return (c.PredictedE2E - c.PredictedTTFT) / time.Duration(out-1)
	}
	short, err := g.r.Predict(t.Context(), &Request{ID: "short", Model: "m", TokenIDs: prompt(1, 0, 100), MaxTokens: 4}, ws)
	if err != nil {
		t.Fatal(err)
	}
	c := short.Chosen
	if e := expected(c, 4); !(c.PredictedTPOT < e*9/10) {
		t.Errorf("short response: typical TPOT %v, expected %v: a short response most likely sees no prefill", c.PredictedTPOT, e)
	}
	long, err := g.r.Predict(t.Context(), &Request{ID: "long", Model: "m", TokenIDs: prompt(2, 0, 100), MaxTokens: 2000}, ws)
	if err != nil {
		t.Fatal(err)
	}
	c = long.Chosen
	if e := expected(c, 2000); c.PredictedTPOT > e || c.PredictedTPOT < e*9/10 {
		t.Errorf("long response: typical TPOT %v, expected %v: within a tenth of it", c.PredictedTPOT, e)
	}
	t.Logf("short: typical %v, expected %v; long: typical %v, expected %v",
		short.Chosen.PredictedTPOT, expected(short.Chosen, 4), c.PredictedTPOT, expected(c, 2000))
}
