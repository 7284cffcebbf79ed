package scoring

import (
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// scenario builds the three-worker case every policy is checked on: an
// 8192-token prompt; w0 holds 8000 tokens of it behind a long queue (40
// waiting requests), w1 is idle and cold, w2 holds 4096 tokens behind a
// short queue (2 waiting).
func scenario(t *testing.T, g *rig) (*Request, Workers) {
	t.Helper()
	ws := pool(3)
	ids := prompt(1, 8192, 8192)
	key := kvindex.ChainKey{Model: "m"}
	g.index.store("w0", key, ids, 8000, 16, false)
	g.index.store("w2", key, ids, 4096, 16, false)
	now := g.clock.Now()
	g.load.reports["w0"] = loadReport{Waiting: 40, Scraped: now, HasKVUsage: true, KVUsage: 0.5}
	g.load.reports["w1"] = loadReport{Scraped: now, HasKVUsage: true, KVUsage: 0.1}
	g.load.reports["w2"] = loadReport{Waiting: 2, Scraped: now, HasKVUsage: true, KVUsage: 0.3}
	return &Request{ID: "r1", Model: "m", TokenIDs: ids}, ws
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy string
		tweak  func(*Config)
		setup  func(*rig)
		want   string
		reason string
	}{
		{name: "warmpath avoids the long queue and the cold worker", policy: PolicyWarmpath, want: "w2", reason: "lowest predicted TTFT"},
		{name: "prefix-max takes the longest prefix whatever the queue", policy: PolicyPrefixMax, want: "w0", reason: "longest cached prefix (8000"},
		{name: "least-request takes the idle worker", policy: PolicyLeastRequest, want: "w1", reason: "fewest requests in flight (0)"},
		{name: "affinity leaves the saturated warm worker", policy: PolicyAffinity, want: "w2", reason: "warmest unsaturated (4096"},
		{name: "affinity stays while under threshold", policy: PolicyAffinity, tweak: func(c *Config) { c.AffinityThreshold = 2 * time.Second }, want: "w0", reason: "warmest unsaturated (8000"},
		{name: "affinity under a tight threshold falls to the idle worker", policy: PolicyAffinity, tweak: func(c *Config) { c.AffinityThreshold = time.Millisecond }, want: "w1", reason: "warmest unsaturated (0 cached"},
		{name: "affinity all saturated takes least penalty", policy: PolicyAffinity, tweak: func(c *Config) { c.AffinityThreshold = time.Millisecond },
			setup: func(g *rig) { g.load.reports["w1"] = loadReport{Waiting: 1, Scraped: g.clock.Now()} }, want: "w1", reason: "all saturated; least penalty 0.026s"},
		{name: "dynamo-cost counts uncached and active blocks", policy: PolicyDynamoCost, want: "w2", reason: "lowest block cost 896"},
		{name: "dynamo-cost with prefill weighted zero sees decode blocks only", policy: PolicyDynamoCost, tweak: func(c *Config) { c.OverlapWeight = 0 }, want: "w1", reason: "lowest block cost 512"},
		{name: "round-robin starts at the first", policy: PolicyRoundRobin, want: "w0", reason: "next in turn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := ttftConfig()
			if tt.tweak != nil {
				tt.tweak(&cfg)
			}
			g := newRig(t, tt.policy, cfg, nil)
			req, ws := scenario(t, g)
			if tt.setup != nil {
				tt.setup(g)
			}
			d, err := g.r.Pick(t.Context(), req, ws)
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("picked %s (%q), want %s (%q); candidates %+v", d.Worker, d.Reason, tt.want, tt.reason, d.Candidates)
			}
			if d.Policy != tt.policy || d.Mode != ModeExact || d.TokenizePath != "request" {
				t.Errorf("policy, mode, path = %s, %s, %s", d.Policy, d.Mode, d.TokenizePath)
			}
			if d.Address != d.Chosen.Address || d.Chosen.Worker != d.Worker {
				t.Errorf("chosen %+v does not match worker %s at %s", d.Chosen, d.Worker, d.Address)
			}
		})
	}
}

// TestScenarioPredictions checks the numbers the scenario's decisions rest
// on: cached tokens from the index and predictions ordered by work.
func TestScenarioPredictions(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
	req, ws := scenario(t, g)
	d, err := g.r.Predict(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Candidates
	if c[0].CachedTokens != 8000 || c[1].CachedTokens != 0 || c[2].CachedTokens != 4096 {
		t.Errorf("cached = %d, %d, %d; want 8000, 0, 4096", c[0].CachedTokens, c[1].CachedTokens, c[2].CachedTokens)
	}
	if c[0].WorkAhead != 40*512 || c[2].WorkAhead != 2*512 || c[1].WorkAhead != 0 {
		t.Errorf("work ahead = %d, %d, %d", c[0].WorkAhead, c[1].WorkAhead, c[2].WorkAhead)
	}
	if !(c[0].QueueWait > c[2].QueueWait && c[2].QueueWait > c[1].QueueWait && c[1].QueueWait == 0) {
		t.Errorf("queue waits not ordered by work ahead: %v %v %v", c[0].QueueWait, c[1].QueueWait, c[2].QueueWait)
	}
	if !(c[1].Prefill > c[2].Prefill && c[2].Prefill > c[0].Prefill) {
		t.Errorf("prefills not ordered by uncached tokens: %v %v %v", c[0].Prefill, c[1].Prefill, c[2].Prefill)
	}
	for _, x := range c {
		if x.PredictedTTFT != x.QueueWait+x.Prefill+x.Overhead || x.Score != x.PredictedTTFT.Seconds() {
			t.Errorf("%s: parts %v+%v+%v do not sum to %v or score %v", x.Worker, x.QueueWait, x.Prefill, x.Overhead, x.PredictedTTFT, x.Score)
		}
	}
}

func TestRandomSpreads(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyRandom, DefaultConfig(), nil)
	ws := pool(4)
	counts := map[string]int{}
	for i := range 4000 {
		d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(i, 0, 64)}, ws)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Worker]++
		g.r.Done(d, Outcome{End: EndAborted})
	}
	for _, w := range ws {
		// 1000 expected, sd ≈ 27: 800..1200 is beyond 7 sd.
		if n := counts[w.Name]; n < 800 || n > 1200 {
			t.Errorf("%s picked %d times of 4000", w.Name, n)
		}
	}
}

func TestRoundRobinRotates(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyRoundRobin, DefaultConfig(), nil)
	ws := pool(3)
	var got []string
	for range 6 {
		d, err := g.r.Pick(t.Context(), &Request{Model: "m"}, ws)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Worker)
	}
	if s := strings.Join(got, ","); s != "w0,w1,w2,w0,w1,w2" {
		t.Errorf("order %s", s)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	bad := DefaultConfig()
	bad.Shadow = []string{"oracle"}
	tests := []struct {
		name   string
		policy string
		cfg    Config
		want   string
	}{
		{name: "unknown policy", policy: "fastest", cfg: DefaultConfig(), want: `unknown policy "fastest"`},
		{name: "unknown shadow", policy: PolicyWarmpath, cfg: bad, want: `shadow: unknown policy "oracle"`},
		{name: "invalid config", policy: PolicyWarmpath, cfg: Config{}, want: "prior_spread"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(tt.policy, tt.cfg, Sources{}, component.Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestPolicyNames(t *testing.T) {
	t.Parallel()
	got := strings.Join(PolicyNames(), ",")
	if got != "affinity,dynamo-cost,least-request,prefix-max,random,round-robin,warmpath" {
		t.Errorf("PolicyNames = %s", got)
	}
}
