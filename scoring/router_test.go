package scoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/kvindex"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestModes(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + strings.Repeat("You are a careful assistant. ", 200) + `"}]}`)
	ids := prompt(3, 1024, 1024)
	tests := []struct {
		name       string
		tok        TokenSource
		noIndex    bool
		req        Request
		warm       bool // route the same body once before, with tokens failing
		wantMode   Mode
		wantPath   string
		wantReason string
		wantWarm   bool // the warmed worker is chosen with cached tokens
	}{
		{name: "client token ids are exact", req: Request{Model: "m", TokenIDs: ids}, wantMode: ModeExact, wantPath: "request"},
		{name: "local tokenizer is exact", tok: &fakeTokens{ids: ids, path: "local"}, req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, wantMode: ModeExact, wantPath: "local"},
		{name: "remote tokenizer", tok: &fakeTokens{ids: ids, path: "remote"}, req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, wantMode: ModeRemote, wantPath: "remote"},
		{name: "tokens but no index is load only", noIndex: true, tok: &fakeTokens{ids: ids, path: "local"}, req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, wantMode: ModeLoadOnly, wantPath: "local", wantReason: "no prefix index"},
		{name: "tokenizer fails, no history: load only", tok: &fakeTokens{err: errTokenize}, req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, wantMode: ModeLoadOnly, wantPath: "none", wantReason: errTokenize.Error()},
		{name: "tokenizer fails, history: approximate", tok: &fakeTokens{err: errTokenize}, req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, warm: true, wantMode: ModeApproximate, wantPath: "none", wantReason: errTokenize.Error(), wantWarm: true},
		{name: "no tokenizer, history: approximate", req: Request{API: APIChat, Model: "m", Prompt: body, Body: body}, warm: true, wantMode: ModeApproximate, wantPath: "none", wantReason: "no tokenizer configured", wantWarm: true},
		{name: "no tokenizer, body shorter than a block: load only", req: Request{API: APIChat, Model: "m", Prompt: []byte(`{"model":"m"}`), Body: []byte(`{"model":"m"}`)}, warm: true, wantMode: ModeLoadOnly, wantPath: "none", wantReason: "no tokenizer configured"},
		{name: "history is per cache salt", req: Request{API: APIChat, Model: "m", Prompt: body, Body: body, CacheSalt: "other"}, warm: true, wantMode: ModeLoadOnly, wantPath: "none", wantReason: "no tokenizer configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, ttftConfig(), tt.tok)
			if tt.noIndex {
				g.r.gather.index = nil
			}
			ws := pool(4)
			warmed := ""
			if tt.warm {
				// Route the body once with the warmed worker the only
				// candidate, then keep it busy so load alone would avoid it.
				prev := Request{API: APIChat, Model: "m", Prompt: body, Body: body}
				d, err := g.r.Pick(t.Context(), &prev, ws[2:3])
				if err != nil {
					t.Fatal(err)
				}
				warmed = d.Worker
				g.r.Done(d, Outcome{End: EndAborted})
				g.load.reports[warmed] = loadReport{Running: 1, Scraped: g.clock.Now()}
			}
			d, err := g.r.Pick(t.Context(), &tt.req, ws)
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tt.wantMode || d.TokenizePath != tt.wantPath || d.TokenizeReason != tt.wantReason {
				t.Errorf("mode, path, reason = %s, %s, %q; want %s, %s, %q", d.Mode, d.TokenizePath, d.TokenizeReason, tt.wantMode, tt.wantPath, tt.wantReason)
			}
			if tt.wantWarm && (d.Worker != warmed || d.Chosen.CachedTokens == 0) {
				t.Errorf("picked %s with %d cached, want warmed %s with cached tokens", d.Worker, d.Chosen.CachedTokens, warmed)
			}
			if d.PromptTokens == 0 {
				t.Error("no prompt size, exact or estimated")
			}
		})
	}
}

// TestReservationBurst fires a concurrent burst of independent requests at
// idle workers: reservations made at decision time must spread it evenly,
// and Done must release every one.
func TestReservationBurst(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(4)
	const burst = 64
	decisions := make([]*Decision, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(100+i, 0, 2048)}, ws)
			if err != nil {
				t.Error(err)
				return
			}
			decisions[i] = d
		})
	}
	wg.Wait()
	counts := map[string]int{}
	for _, d := range decisions {
		counts[d.Worker]++
	}
	for _, w := range ws {
		if counts[w.Name] != burst/len(ws) {
			t.Errorf("burst split %v, want %d each", counts, burst/len(ws))
			break
		}
	}
	if n := inFlight(g.r); n != burst {
		t.Errorf("%d assignments in flight in the ledger, want %d", n, burst)
	}
	for _, d := range decisions {
		wg.Go(func() { g.r.Done(d, Outcome{End: EndAborted}) })
	}
	wg.Wait()
	p, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 2048)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Candidates {
		if c.InFlight != 0 || c.WorkAhead != 0 || c.QueueWait != 0 {
			t.Errorf("%s still loaded after Done: %+v", c.Worker, c)
		}
	}
	if n := inFlight(g.r); n != 0 {
		t.Errorf("%d assignments in flight after Done", n)
	}
}

// TestSharedPrefixBurst sends a concurrent burst of one long shared prefix:
// speculation makes the first assignment's blocks visible at once, so the
// burst clusters where the prefix is, but reservation stops it from all
// queueing on one worker.
func TestSharedPrefixBurst(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(4)
	const burst = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	cachedHits := 0
	for i := range burst {
		wg.Go(func() {
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(i, 7936, 8192)}, ws)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			counts[d.Worker]++
			if d.Chosen.CachedTokens > 0 {
				cachedHits++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(counts) < 2 {
		t.Errorf("burst herded onto one worker: %v", counts)
	}
	if cachedHits < burst/2 {
		t.Errorf("only %d of %d requests used the speculated prefix; split %v", cachedHits, burst, counts)
	}
	if len(g.index.specs) != burst {
		t.Errorf("Speculate called %d times, want %d", len(g.index.specs), burst)
	}
}

func TestTieBreak(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		setup  func(g *rig, ids []uint32)
		want   string
		reason string
	}{
		{
			name: "near-equal: fewer in flight beats slightly faster",
			setup: func(g *rig, ids []uint32) {
				// w0 holds 32 more tokens (≈2 ms faster) but decodes one request.
				g.index.store("w0", kvindex.ChainKey{Model: "m"}, ids, 64, 16, false)
				g.index.store("w1", kvindex.ChainKey{Model: "m"}, ids, 32, 16, false)
				g.load.reports["w0"] = loadReport{Running: 1, Scraped: g.clock.Now()}
			},
			want: "w1", reason: "2 candidates within",
		},
		{
			name: "clearly better wins despite load",
			setup: func(g *rig, ids []uint32) {
				g.index.store("w0", kvindex.ChainKey{Model: "m"}, ids, 1024, 16, false)
				g.load.reports["w0"] = loadReport{Running: 1, Scraped: g.clock.Now()}
			},
			want: "w0", reason: "lowest predicted TTFT",
		},
		{
			name: "new prefix: 30% slower but idle takes it, spreading prefixes",
			setup: func(g *rig, ids []uint32) {
				slow(g, "w1", 1.3)
				g.load.reports["w0"] = loadReport{Running: 1, Scraped: g.clock.Now()}
			},
			want: "w1", reason: "prefix cached nowhere: 2 candidates",
		},
		{
			name: "new prefix: 2x slower is not near-equal",
			setup: func(g *rig, ids []uint32) {
				slow(g, "w1", 2)
				g.load.reports["w0"] = loadReport{Running: 1, Scraped: g.clock.Now()}
			},
			want: "w0", reason: "lowest predicted TTFT",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
			ids := prompt(9, 0, 2048)
			tt.setup(g, ids)
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids}, pool(2))
			if err != nil {
				t.Fatal(err)
			}
			if d.Worker != tt.want || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("picked %s (%q), want %s (%q); %+v", d.Worker, d.Reason, tt.want, tt.reason, d.Candidates)
			}
		})
	}
}

// slow makes worker's model f times slower than the prior, as calibration
// would after seeing it.
func slow(g *rig, worker string, f float64) {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	st := g.r.learn.worker(worker)
	for i := range st.cal.theta {
		st.cal.theta[i] = f
	}
}

// TestTieRotation: equal idle workers are taken in turn, not always the first.
func TestTieRotation(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(3)
	var got []string
	for i := range 6 {
		d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(i, 0, 100)}, ws)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Worker)
		g.r.Done(d, Outcome{End: EndAborted})
	}
	if s := strings.Join(got, ","); s != "w0,w1,w2,w0,w1,w2" {
		t.Errorf("equal workers taken as %s", s)
	}
}

func TestShadow(t *testing.T) {
	t.Parallel()
	cfg := ttftConfig()
	cfg.Shadow = []string{PolicyPrefixMax, PolicyLeastRequest, PolicyAffinity, PolicyDynamoCost, PolicyWarmpath}
	g := newRig(t, PolicyWarmpath, cfg, nil)
	req, ws := scenario(t, g)
	d, err := g.r.Pick(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{PolicyPrefixMax: "w0", PolicyLeastRequest: "w1", PolicyAffinity: "w2", PolicyDynamoCost: "w2"}
	if len(d.Shadow) != len(want) {
		t.Fatalf("shadow = %+v, want the 4 other policies", d.Shadow)
	}
	pred := map[string]time.Duration{}
	for _, c := range d.Candidates {
		pred[c.Worker] = c.PredictedTTFT
	}
	for _, s := range d.Shadow {
		if s.Worker != want[s.Policy] {
			t.Errorf("shadow %s picked %s, want %s", s.Policy, s.Worker, want[s.Policy])
		}
		if s.PredictedTTFT != pred[s.Worker] || s.Regret != pred[s.Worker]-d.Chosen.PredictedTTFT {
			t.Errorf("shadow %s: predicted %v regret %v", s.Policy, s.PredictedTTFT, s.Regret)
		}
	}
	if d.Worker != "w2" || d.Candidates[0].Score != d.Candidates[0].PredictedTTFT.Seconds() {
		t.Errorf("shadows changed the decision: %s, scores %+v", d.Worker, d.Candidates)
	}
	if n := testutil.ToFloat64(g.r.m.shadowAgree.WithLabelValues(PolicyAffinity)); n != 1 {
		t.Errorf("affinity agreements = %v, want 1", n)
	}
	if n := testutil.ToFloat64(g.r.m.shadowAgree.WithLabelValues(PolicyPrefixMax)); n != 0 {
		t.Errorf("prefix-max agreements = %v, want 0", n)
	}
	if n := testutil.CollectAndCount(g.r.m.shadowRegret); n != 4 {
		t.Errorf("regret series = %d, want 4", n)
	}
	// Shadows reserve nothing: only the decision's worker is loaded.
	p, err := g.r.Predict(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Candidates {
		if want := map[bool]int{true: 1, false: 0}[c.Worker == d.Worker]; c.InFlight != want {
			t.Errorf("%s in flight %d, want %d", c.Worker, c.InFlight, want)
		}
	}
}

// TestPredictIsReadOnly: Predict reserves nothing, records no history and
// counts nothing.
func TestPredictIsReadOnly(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(2)
	body := []byte(strings.Repeat("abcdefgh", 256))
	for range 3 {
		if _, err := g.r.Predict(t.Context(), &Request{API: APIChat, Model: "m", Prompt: body, Body: body, TokenIDs: prompt(1, 0, 512)}, ws); err != nil {
			t.Fatal(err)
		}
	}
	d, err := g.r.Predict(t.Context(), &Request{API: APIChat, Model: "m", Prompt: body, Body: body}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != ModeLoadOnly || d.Candidates[0].InFlight != 0 || d.Candidates[1].InFlight != 0 {
		t.Errorf("Predict left state: mode %s, candidates %+v", d.Mode, d.Candidates)
	}
	if len(g.index.specs) != 0 || inFlight(g.r) != 0 || testutil.CollectAndCount(g.r.m.shadowRegret) != 0 {
		t.Errorf("Predict speculated %d times, reserved or counted", len(g.index.specs))
	}
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: time.Second})
	if n := testutil.ToFloat64(g.r.m.unknownDone); n != 1 {
		t.Errorf("Done on a Predict decision: unknown_done_total = %v, want 1", n)
	}
}

func TestDoneOnce(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 512)}, pool(2))
	if err != nil {
		t.Fatal(err)
	}
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: 50 * time.Millisecond, PromptTokens: 512, CachedTokens: 0})
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: 50 * time.Millisecond, PromptTokens: 512, CachedTokens: 0})
	if n := testutil.ToFloat64(g.r.m.unknownDone); n != 1 {
		t.Errorf("unknown_done_total = %v, want 1", n)
	}
	if m := g.r.Model("w0"); m == DefaultConfig().Prior && g.r.Model("w1") == DefaultConfig().Prior {
		t.Error("the first Done did not calibrate")
	}
}

// TestOnlyCompletedOutcomesCalibrate: aborted and expired assignments and
// completions without a first token release load but teach nothing.
func TestOnlyCompletedOutcomesCalibrate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		o     Outcome
		learn bool
	}{
		{name: "completed", o: Outcome{End: EndCompleted, TTFT: 3 * time.Second, PromptTokens: -1, CachedTokens: -1}, learn: true},
		{name: "aborted", o: Outcome{End: EndAborted, TTFT: 3 * time.Second, PromptTokens: -1, CachedTokens: -1}},
		{name: "expired", o: Outcome{End: EndExpired, PromptTokens: -1, CachedTokens: -1}},
		{name: "completed without token", o: Outcome{End: EndCompleted, HTTPStatus: 500, PromptTokens: -1, CachedTokens: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 4096)}, pool(1))
			if err != nil {
				t.Fatal(err)
			}
			g.r.Done(d, tt.o)
			changed := g.r.Model("w0") != DefaultConfig().Prior
			if changed != tt.learn {
				t.Errorf("model changed = %v, want %v", changed, tt.learn)
			}
		})
	}
}

// TestCachedGap: a worker whose engine keeps reporting fewer cached tokens
// than predicted gets a gap metric and one warning, cleared when the
// predictions match again.
func TestCachedGap(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	ids := prompt(5, 1024, 1024)
	g.index.store("w0", kvindex.ChainKey{Model: "m"}, ids, 1024, 16, false)
	run := func(n, actual int) {
		for range n {
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids}, ws)
			if err != nil {
				t.Fatal(err)
			}
			if d.Chosen.CachedTokens != 1008 {
				t.Fatalf("predicted cached %d, want 1008 (capped below the prompt)", d.Chosen.CachedTokens)
			}
			g.r.Done(d, Outcome{End: EndCompleted, TTFT: 30 * time.Millisecond, PromptTokens: 1024, CachedTokens: actual})
		}
	}
	run(25, 0)
	if v := testutil.ToFloat64(g.r.m.cachedGap.WithLabelValues("w0")); v != 1 {
		t.Errorf("gap gauge = %v after 25 misses, want 1", v)
	}
	if n := testutil.ToFloat64(g.r.m.cachedCheck.WithLabelValues("over")); n != 25 {
		t.Errorf("over-predictions = %v, want 25", n)
	}
	logs := g.logs.String()
	if strings.Count(logs, "persistently miss") != 1 || !strings.Contains(logs, "worker=w0") {
		t.Errorf("want one gap warning for w0, logs:\n%s", logs)
	}
	run(50, 1008)
	if v := testutil.ToFloat64(g.r.m.cachedGap.WithLabelValues("w0")); v != 0 {
		t.Errorf("gap gauge = %v after matches, want 0", v)
	}
	if n := testutil.ToFloat64(g.r.m.cachedCheck.WithLabelValues("exact")); n != 50 {
		t.Errorf("exact predictions = %v, want 50", n)
	}
}

func TestLoadReports(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		reports     map[string]loadReport
		age         time.Duration
		wantAhead   []int
		wantKV      []float64
		equalW0W1   bool // w0 (no usage) is priced like w1, not as empty
		wantMissing float64
		wantStale   float64
	}{
		{name: "fresh waiting adds work ahead", reports: map[string]loadReport{"w0": {Waiting: 3, HasKVUsage: true, KVUsage: 0.2}, "w1": {}},
			wantAhead: []int{1536, 0}, wantKV: []float64{0.2, -1}},
		{name: "stale report is ignored", reports: map[string]loadReport{"w0": {Waiting: 3}, "w1": {Waiting: 3}}, age: time.Minute,
			wantAhead: []int{0, 0}, wantKV: []float64{-1, -1}, wantStale: 2},
		{name: "missing report is neither load nor empty cache", reports: map[string]loadReport{"w1": {HasKVUsage: true, KVUsage: 0.99}},
			wantAhead: []int{0, 0}, wantKV: []float64{-1, 0.99}, equalW0W1: true, wantMissing: 1},
		{name: "missing usage is priced as the pool's", reports: map[string]loadReport{"w0": {}, "w1": {HasKVUsage: true, KVUsage: 0.99}},
			wantAhead: []int{0, 0}, wantKV: []float64{-1, 0.99}, equalW0W1: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
			for w, r := range tt.reports {
				r.Scraped = g.clock.Now()
				g.load.reports[w] = r
			}
			g.clock.Advance(tt.age)
			d, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 1000)}, pool(2))
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range d.Candidates {
				if c.WorkAhead != tt.wantAhead[i] || c.KVUsage != tt.wantKV[i] {
					t.Errorf("%s: ahead %d kv %v, want %d %v", c.Worker, c.WorkAhead, c.KVUsage, tt.wantAhead[i], tt.wantKV[i])
				}
			}
			if tt.equalW0W1 && d.Candidates[0].PredictedTTFT != d.Candidates[1].PredictedTTFT {
				t.Errorf("w0 without usage predicted %v, w1 at 0.99 %v: missing usage treated as empty",
					d.Candidates[0].PredictedTTFT, d.Candidates[1].PredictedTTFT)
			}
			if n := testutil.ToFloat64(g.r.m.loadReports.WithLabelValues("missing")); n != tt.wantMissing {
				t.Errorf("missing reports = %v, want %v", n, tt.wantMissing)
			}
			if n := testutil.ToFloat64(g.r.m.loadReports.WithLabelValues("stale")); n != tt.wantStale {
				t.Errorf("stale reports = %v, want %v", n, tt.wantStale)
			}
		})
	}
}

// TestKVPressure: near-full KV cache makes a worker look slower.
func TestKVPressure(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	g.load.reports["w0"] = loadReport{HasKVUsage: true, KVUsage: 0.99, Scraped: g.clock.Now()}
	g.load.reports["w1"] = loadReport{HasKVUsage: true, KVUsage: 0.5, Scraped: g.clock.Now()}
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 4000)}, pool(2))
	if err != nil {
		t.Fatal(err)
	}
	c := d.Candidates
	if d.Worker != "w1" || c[0].Prefill < c[1].Prefill*17/10 {
		t.Errorf("picked %s; prefill at 0.99 usage %v vs %v at 0.5", d.Worker, c[0].Prefill, c[1].Prefill)
	}
}

// TestOffloadedCachedTokens: offloaded hits count as cached but cost a
// share of a computed token.
func TestOffloadedCachedTokens(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ids := prompt(2, 4096, 4096)
	key := kvindex.ChainKey{Model: "m"}
	g.index.store("w0", key, ids, 4000, 16, false)
	g.index.store("w1", key, ids, 1024, 16, false)
	g.index.store("w1", key, ids, 4000, 16, true)
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids}, pool(2))
	if err != nil {
		t.Fatal(err)
	}
	c := d.Candidates
	if c[1].CachedTokens != 4000 || c[1].OffloadedTokens != 4000-1024 || d.Worker != "w0" || !(c[1].Prefill > c[0].Prefill) {
		t.Errorf("offloaded hit mispriced: %+v", c)
	}
}

func TestNoWorkers(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	if _, err := g.r.Pick(t.Context(), &Request{Model: "m"}, nil); !errors.Is(err, ErrNoWorkers) {
		t.Errorf("err = %v, want ErrNoWorkers", err)
	}
}

func TestFirstTokenReleasesPrefill(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 8000), Stream: true}, ws)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 100)}, ws)
	g.r.FirstToken(d)
	after, _ := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 100)}, ws)
	if before.Chosen.WorkAhead != 8000 || after.Chosen.WorkAhead != 0 || after.Chosen.Decoding != 1 {
		t.Errorf("work ahead %d → %d, decoding after %d", before.Chosen.WorkAhead, after.Chosen.WorkAhead, after.Chosen.Decoding)
	}
	// Without FirstToken the predicted first token drains the work ahead.
	g2 := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	d2, _ := g2.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 8000)}, ws)
	g2.clock.Advance(d2.Chosen.PredictedTTFT / 2)
	mid, _ := g2.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 100)}, ws)
	g2.clock.Advance(d2.Chosen.PredictedTTFT)
	end, _ := g2.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 100)}, ws)
	if !(mid.Chosen.WorkAhead > 0 && mid.Chosen.WorkAhead < 8000) || end.Chosen.WorkAhead != 0 {
		t.Errorf("predicted drain: %d at half time, %d after", mid.Chosen.WorkAhead, end.Chosen.WorkAhead)
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	cfg := ttftConfig()
	cfg.Shadow = []string{PolicyPrefixMax}
	g := newRig(t, PolicyWarmpath, cfg, nil)
	req, ws := scenario(t, g)
	d, err := g.r.Pick(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d.Explain())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Chosen  string `json:"chosen"`
		Mode    string `json:"mode"`
		Workers []struct {
			Name         string  `json:"name"`
			CachedTokens int     `json:"cached_tokens"`
			TTFT         float64 `json:"predicted_ttft_ms"`
			TPOT         float64 `json:"predicted_tpot_ms"`
			E2E          float64 `json:"predicted_e2e_ms"`
		} `json:"workers"`
		OutputTokens int `json:"output_tokens"`
		Shadow       []struct {
			Policy string `json:"policy"`
		} `json:"shadow"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Chosen != "w2" || got.Mode != "exact" || len(got.Workers) != 3 || got.Workers[0].CachedTokens != 8000 ||
		got.Workers[2].TTFT != ms(d.Candidates[2].PredictedTTFT.Seconds()) || len(got.Shadow) != 1 ||
		got.Workers[2].TPOT != ms(d.Candidates[2].PredictedTPOT.Seconds()) || !(got.Workers[2].E2E > got.Workers[2].TTFT) ||
		got.OutputTokens != d.OutputTokens {
		t.Errorf("explanation %s", b)
	}
	want := fmt.Sprintf("w2; policy=warmpath; mode=exact; cached=4096; ttft_ms=%.1f; tpot_ms=%.1f",
		ms(d.Chosen.PredictedTTFT.Seconds()), ms(d.Chosen.PredictedTPOT.Seconds()))
	if h := d.Header(); h != want {
		t.Errorf("Header = %q, want %q", h, want)
	}
}

func TestMetricsLint(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	req, ws := scenario(t, g)
	d, _ := g.r.Pick(t.Context(), req, ws)
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: time.Second, PromptTokens: 8192, CachedTokens: 4096})
	problems, err := testutil.GatherAndLint(g.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 512)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if g.r.Forget("w0") {
		t.Error("Forget dropped a worker with an assignment in flight")
	}
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: time.Second, PromptTokens: 512, CachedTokens: 0})
	if g.r.Model("w0") == DefaultConfig().Prior {
		t.Fatal("outcome did not calibrate")
	}
	if n := testutil.CollectAndCount(g.r.m.prefillPerTok); n != 1 {
		t.Errorf("model series = %d, want 1", n)
	}
	if !g.r.Forget("w0") {
		t.Error("Forget kept an idle worker")
	}
	if g.r.Model("w0") != DefaultConfig().Prior || testutil.CollectAndCount(g.r.m.prefillPerTok) != 0 {
		t.Error("Forget left the worker's model or metric series")
	}
}

// TestDataParallelBudget: a worker with more ranks prefills a long prompt
// in fewer steps.
func TestDataParallelBudget(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(2)
	ws[1].DataParallelSize = 4
	d, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 32768)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	// 32768 tokens: 4 steps of 8192 on one rank, 1 step on four: 3 step
	// overheads less, and 32768×(5-2)/2 context tokens fewer re-read.
	m := DefaultConfig().Prior
	want := seconds(3*m.StepOverhead + 49152*m.ContextPerToken)
	if c := d.Candidates; (c[0].Prefill - c[1].Prefill - want).Abs() > time.Microsecond {
		t.Errorf("4 ranks not faster: %v vs %v", c[1].Prefill, c[0].Prefill)
	}
}

// TestToldMode: once first tokens are reported, a streamed request without
// one still counts as prefilling past its predicted first token (the
// spread of its predicted end, 6% of its 8,000 tokens), while a
// non-streamed one drains on prediction.
func TestToldMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stream    bool
		wantAhead int
	}{
		{name: "streamed waits for its report", stream: true, wantAhead: 480},
		{name: "non-streamed drains on prediction", stream: false, wantAhead: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
			ws := pool(1)
			first, _ := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 100), Stream: true}, ws)
			g.r.FirstToken(first)
			d, _ := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 8000), Stream: tt.stream}, ws)
			g.clock.Advance(10 * d.Chosen.PredictedTTFT)
			p, _ := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(3, 0, 100)}, ws)
			if p.Chosen.WorkAhead != tt.wantAhead {
				t.Errorf("work ahead %d long after the predicted first token, want %d", p.Chosen.WorkAhead, tt.wantAhead)
			}
		})
	}
}

func TestTokenizerReturnsNothing(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), &fakeTokens{path: "local"})
	d, err := g.r.Pick(t.Context(), &Request{API: APIChat, Model: "m", Prompt: []byte("{}"), Body: []byte("{}")}, pool(2))
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != ModeLoadOnly || d.TokenizePath != "none" || d.TokenizeReason != "tokenizer returned no token ids" {
		t.Errorf("mode %s path %s reason %q", d.Mode, d.TokenizePath, d.TokenizeReason)
	}
}

// kvFullPool is one worker of KV capacity blocks that has learnt, from
// one outcome, a decode time of 2 s and 64 output tokens, and is decoding
// four 4096-token requests of choices each: 4 × (256 + 4 × choices)
// blocks held.
func kvFullPool(t *testing.T, capacity, choices int) (*rig, Workers) {
	t.Helper()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	d, _ := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(0, 0, 160)}, ws)
	g.r.Done(d, Outcome{End: EndCompleted, TTFT: 100 * time.Millisecond, Duration: 2100 * time.Millisecond,
		PromptTokens: 160, CachedTokens: 0, CompletionTokens: 64})
	for i := range 4 {
		d, _ := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(i+1, 0, 4096), Stream: true, Choices: choices}, ws)
		g.r.FirstToken(d)
	}
	g.load.reports["w0"] = loadReport{Running: 4, KVBlocks: capacity, Scraped: g.clock.Now()}
	return g, ws
}

// TestKVAdmissionWait: when the engine's KV cache cannot take the request,
// it waits until enough decoding requests end; that wait is part of the
// predicted queue and is not fitted by calibration.
func TestKVAdmissionWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		capacity int
		wantWait bool
	}{
		{name: "fits", capacity: 10000},
		{name: "full until the first decoder ends", capacity: 1200, wantWait: true},
		{name: "capacity unknown", capacity: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, ws := kvFullPool(t, tt.capacity, 1)
			p, _ := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(9, 0, 4096)}, ws)
			q := p.Chosen.QueueWait
			if tt.wantWait && (q < time.Second || q > 3*time.Second) {
				t.Errorf("queue wait %v, want about the 2 s until a decoder ends", q)
			}
			if !tt.wantWait && q > 100*time.Millisecond {
				t.Errorf("queue wait %v, want no KV wait", q)
			}
		})
	}
}

// TestKVAdmissionCountsSequences: each of a request's n sequences writes
// its own output into the KV cache, so the blocks it needs to be admitted,
// and those it holds while it decodes, count its output n times.
func TestKVAdmissionCountsSequences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		running, probe int // choices of the four decoding requests and of the probe
		capacity       int
		wantWait       bool
	}{
		// Each 4096-token decoder holds 256 + 4 blocks (64 output tokens).
		{name: "one choice fits", running: 1, probe: 1, capacity: 1310},
		{name: "eight choices need 32 more blocks", running: 1, probe: 8, capacity: 1310, wantWait: true},
		{name: "beside decoders of one choice", running: 1, probe: 1, capacity: 1400},
		{name: "beside decoders of eight choices", running: 8, probe: 1, capacity: 1400, wantWait: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, ws := kvFullPool(t, tt.capacity, tt.running)
			p, _ := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(9, 0, 4096), Choices: tt.probe}, ws)
			if q := p.Chosen.QueueWait; (q >= time.Second) != tt.wantWait {
				t.Errorf("queue wait %v; want a KV wait: %v", q, tt.wantWait)
			}
		})
	}
}

// TestShadowOfBaseline: with a baseline deciding, warmpath in shadow shows
// what the baseline gave away, as negative regret.
func TestShadowOfBaseline(t *testing.T) {
	t.Parallel()
	cfg := ttftConfig()
	cfg.Shadow = []string{PolicyWarmpath}
	g := newRig(t, PolicyPrefixMax, cfg, nil)
	req, ws := scenario(t, g)
	d, err := g.r.Pick(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != "w0" || len(d.Shadow) != 1 || d.Shadow[0].Worker != "w2" || d.Shadow[0].Regret >= 0 {
		t.Fatalf("decision %s, shadow %+v", d.Worker, d.Shadow)
	}
	if d.Candidates[0].Score != -8000 {
		t.Errorf("prefix-max score %v, want -cached tokens", d.Candidates[0].Score)
	}
	if n := testutil.CollectAndCount(g.r.m.shadowRegret); n != 1 {
		t.Errorf("regret series %d", n)
	}
}

// TestScrapeCountsRecentlyEnded: a scrape taken while warmpath's own
// requests ran still counts those that ended since; they are not load from
// another client.
func TestScrapeCountsRecentlyEnded(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyLeastRequest, DefaultConfig(), nil)
	ws := pool(1)
	req := &Request{Model: "m", TokenIDs: prompt(3, 0, 512), Stream: true}
	var ds []*Decision
	for range 3 {
		d, err := g.r.Pick(t.Context(), req, ws)
		if err != nil {
			t.Fatal(err)
		}
		g.r.FirstToken(d)
		ds = append(ds, d)
	}
	g.clock.Advance(100 * time.Millisecond)
	// The engine runs the three and, unknown to warmpath, one more.
	g.load.reports["w0"] = loadReport{Running: 4, Scraped: g.clock.Now()}
	g.clock.Advance(100 * time.Millisecond)
	for _, d := range ds[:2] {
		g.r.Done(d, Outcome{End: EndCompleted, TTFT: 50 * time.Millisecond, Duration: 200 * time.Millisecond,
			PromptTokens: 512, CachedTokens: 0, CompletionTokens: 10})
	}
	d, err := g.r.Predict(t.Context(), req, ws)
	if err != nil {
		t.Fatal(err)
	}
	// One of warmpath's own is still decoding, plus the other client's one.
	if c := d.Candidates[0]; c.Decoding != 2 || c.InFlight != 1 {
		t.Errorf("decoding %d, in flight %d; want 2 and 1 (the ended ones are not another client's load)", c.Decoding, c.InFlight)
	}
	// A scrape taken after they ended does not count them.
	g.load.reports["w0"] = loadReport{Running: 2, Scraped: g.clock.Now()}
	if d, err = g.r.Predict(t.Context(), req, ws); err != nil {
		t.Fatal(err)
	}
	if c := d.Candidates[0]; c.Decoding != 2 {
		t.Errorf("after a new scrape: decoding %d, want 2", c.Decoding)
	}
}

// TestIdleWorkerRelaxes: a worker calibrated 3× slower during a bad spell
// gets no requests; once it has been idle for IdleRelax periods its model
// relaxes towards the pool's, it gets a request again, and what it then
// shows decides.
func TestIdleWorkerRelaxes(t *testing.T) {
	t.Parallel()
	t.Run("streamed", func(t *testing.T) { t.Parallel(); testIdleWorkerRelaxes(t, true) })
	// Non-streamed answers show no first token, only their end: they must
	// still bring a worker once judged slow back (the defect: they never
	// did, since nothing counted as a recent outcome).
	t.Run("unstreamed", func(t *testing.T) { t.Parallel(); testIdleWorkerRelaxes(t, false) })
}

// TestUnstreamedAnswersBoundTTFT checks that non-streamed answers ending
// before the first token a model predicts pull that model down, and that
// answers slower than the prediction leave it alone (their first token is
// not seen).
func TestUnstreamedAnswersBoundTTFT(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
	ws := pool(1)
	e := engine{o: 0.006, p: 40e-6, d: 150e-6, c: 4e-9, f: 0.003, budget: 8192}
	truth := time.Duration(e.ttft(workload{prompt: 1024, budget: 8192}) * 1e9)
	seed := 5000
	serve := func(n int, stream bool, ttft, end time.Duration) time.Duration {
		var pred time.Duration
		for range n {
			seed++ // a new prompt each time: nothing is cached
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(seed, 0, 1024), Stream: stream}, ws)
			if err != nil {
				t.Fatal(err)
			}
			pred = d.Chosen.PredictedTTFT
			g.clock.Advance(end)
			g.r.Done(d, Outcome{End: EndCompleted, TTFT: ttft, Duration: end, PromptTokens: 1024, CompletionTokens: 2, CachedTokens: 0})
		}
		return pred
	}
	slow := serve(60, true, 3*truth, 3*truth+time.Millisecond) // learned 3× slower than it is
	if after := serve(60, false, 0, 4*truth); after < slow*9/10 {
		t.Errorf("answers slower than predicted moved the prediction from %v to %v", slow, after)
	}
	if n := testutil.ToFloat64(g.r.m.boundedFits); n != 0 {
		t.Errorf("%v bounded fits from answers slower than predicted", n)
	}
	fast := serve(60, false, 0, truth+time.Millisecond)
	if fast > slow/2 {
		t.Errorf("after 60 answers ending in %v, the predicted first token is %v (was %v)", truth, fast, slow)
	}
	if n := testutil.ToFloat64(g.r.m.boundedFits); n == 0 {
		t.Error("no bounded fit counted")
	}
}

// TestStepLessAnswersTeachNothing checks that a non-streamed answer that
// went through no engine step neither bounds the worker's first token nor
// counts as its outcome: one to a request without a prompt (GET /v1/models
// through the same route: a load-only decision, answered at once, its
// usage not reported) and one the engine refused (400: the prompt over the
// context length). An answer whose usage reports a prompt, with a 200,
// still does.
func TestStepLessAnswersTeachNothing(t *testing.T) {
	t.Parallel()
	refused := func(o Outcome) Outcome {
		o.HTTPStatus = 400
		return o
	}
	tests := []struct {
		name   string
		req    *Request
		answer func(Outcome) Outcome
	}{
		{name: "no prompt", req: &Request{Model: "m"}, answer: func(o Outcome) Outcome { return o }},
		{name: "refused", req: &Request{Model: "m", TokenIDs: prompt(7, 0, 1024)}, answer: refused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
			ws := pool(1)
			before := g.r.Model("w0")
			serve := func(req *Request, o Outcome) {
				d, err := g.r.Pick(t.Context(), req, ws)
				if err != nil {
					t.Fatal(err)
				}
				g.clock.Advance(o.Duration)
				g.r.Done(d, o)
			}
			for range 20 {
				serve(tc.req, tc.answer(Outcome{End: EndCompleted, HTTPStatus: 200, Duration: 2 * time.Millisecond,
					PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}))
			}
			if after := g.r.Model("w0"); after != before {
				t.Errorf("20 answers through no engine step moved the model from %+v to %+v", before, after)
			}
			if n := testutil.ToFloat64(g.r.m.boundedFits); n != 0 {
				t.Errorf("%v bounded fits from answers through no engine step", n)
			}
			if at := g.r.learn.worker("w0").lastOutcome; !at.IsZero() {
				t.Errorf("an answer through no engine step counted as w0's outcome at %v", at)
			}
			// An answer reporting the prompt it computed is a measurement.
			serve(&Request{Model: "m"}, Outcome{End: EndCompleted, HTTPStatus: 200, Duration: 2 * time.Millisecond,
				PromptTokens: 1024, CompletionTokens: 1, CachedTokens: 0})
			if n := testutil.ToFloat64(g.r.m.boundedFits); n != 1 {
				t.Errorf("an answer reporting 1,024 prompt tokens: %v bounded fits, want 1", n)
			}
			if after := g.r.Model("w0"); after == before {
				t.Error("an answer reporting its prompt, faster than predicted, left the model alone")
			}
		})
	}
}

// TestChoicesDecodeSideBySide: a request asking for n completions decodes
// n sequences, and its usage counts all their tokens. Counted as one
// sequence of n times the tokens, its response made a decode step look n
// times cheaper, and its length n times longer. It must count as n
// sequences in the ledger, fit no decode step, and teach the length of one
// choice.
// TestRequestSequences: a request decodes its choices for each prompt, one
// at least, and never more than MaxSequences however large n is.
func TestRequestSequences(t *testing.T) {
	t.Parallel()
	tests := []struct{ choices, prompts, want int }{
		{0, 0, 1},
		{-3, 0, 1},
		{4, 0, 4},
		{3, 2, 6},
		{math.MaxInt, 3, MaxSequences},
		{1 << 20, 1 << 20, MaxSequences},
		{MaxSequences / 2, 3, MaxSequences},
	}
	for _, tt := range tests {
		r := Request{Choices: tt.choices, Prompts: tt.prompts}
		if got := r.sequences(); got != tt.want {
			t.Errorf("%d choices of %d prompts: %d sequences, want %d", tt.choices, tt.prompts, got, tt.want)
		}
	}
}

func TestChoicesDecodeSideBySide(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	serve := func(i, choices, tokens int) {
		d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(300+i, 0, 512), Stream: true, Choices: choices}, ws)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(40 * time.Millisecond)
		g.r.FirstToken(d)
		if choices > 1 {
			probe, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(9999, 0, 64), Stream: true}, ws)
			if err != nil {
				t.Fatal(err)
			}
			if got := probe.Candidates[0].Decoding; got != choices {
				t.Fatalf("a request of %d choices past its first token: %d sequences decoding", choices, got)
			}
		}
		decode := time.Duration(tokens/max(choices, 1)) * 20 * time.Millisecond
		g.clock.Advance(decode)
		g.r.Done(d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: 40 * time.Millisecond, Decode: decode,
			Duration: 40*time.Millisecond + decode, PromptTokens: 512, CompletionTokens: tokens, CachedTokens: 0})
	}
	for i := range 2 * minOutputs {
		serve(i, 4, 400) // 100 tokens a choice
	}
	if n := testutil.ToFloat64(g.r.m.decodeFits); n != 0 {
		t.Errorf("%v decode fits from responses of 4 choices, want none", n)
	}
	checkOutputTokens(t, g, ws, 100)
	serve(99, 1, 100)
	if n := testutil.ToFloat64(g.r.m.decodeFits); n != 1 {
		t.Errorf("%v decode fits after a response of one choice, want 1", n)
	}
}

// TestSeveralPromptsTeachNoSpeed: a completions request of several prompts
// is routed by its first, while its usage counts every prompt's tokens and
// its first token is any prompt's. Fitted as one prompt of the summed
// tokens, it read the worker as that many times faster and its cache as
// holding the other prompts' prefixes. It must count its sequences, teach
// the length of one choice, and neither fit the step model nor check the
// cached-token prediction.
func TestSeveralPromptsTeachNoSpeed(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	before := g.r.Model("w0")
	for i := range 2 * minOutputs {
		d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(500+i, 0, 512), Prompts: 4, Choices: 2, Stream: true}, ws)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(30 * time.Millisecond)
		g.r.FirstToken(d)
		if i == 0 {
			probe, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(9999, 0, 64)}, ws)
			if err != nil {
				t.Fatal(err)
			}
			if got := probe.Candidates[0].Decoding; got != 8 {
				t.Errorf("4 prompts of 2 choices past the first token: %d sequences decoding, want 8", got)
			}
		}
		g.clock.Advance(time.Second)
		g.r.Done(d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: 30 * time.Millisecond, Decode: time.Second,
			Duration: 30*time.Millisecond + time.Second, PromptTokens: 4 * 512, CompletionTokens: 8 * 50, CachedTokens: 3 * 512})
	}
	if after := g.r.Model("w0"); after != before {
		t.Errorf("requests of 4 prompts moved the step model from %+v to %+v", before, after)
	}
	if n := testutil.CollectAndCount(g.r.m.cachedCheck); n != 0 {
		t.Errorf("%d cached-token checks of requests of 4 prompts, want none", n)
	}
	// Not streamed and faster than predicted, it bounds no first token.
	u, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(700, 0, 512), Prompts: 4}, ws)
	if err != nil {
		t.Fatal(err)
	}
	g.clock.Advance(time.Millisecond)
	g.r.Done(u, Outcome{End: EndCompleted, HTTPStatus: 200, Duration: time.Millisecond, PromptTokens: 4 * 512, CompletionTokens: 4 * 50, CachedTokens: 0})
	if n := testutil.ToFloat64(g.r.m.boundedFits); n != 0 {
		t.Errorf("%v bounded fits from an answer to 4 prompts, want none", n)
	}
	checkOutputTokens(t, g, ws, 50)
}

// TestMorePromptsPrefill: the later prompts of a completions request add
// their tokens beyond the full blocks each shares with the first, and
// never count their last token as shared; text converts at the first
// prompt's own tokens per byte, else at the configured bytes per token.
func TestMorePromptsPrefill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		m     MorePrompts
		first int
		want  float64
	}{
		{"one prompt", MorePrompts{}, 100, 0},
		{"ids, nothing shared", MorePrompts{Parts: []PromptPart{{Size: 40}, {Size: 7}}}, 100, 47},
		{"ids, shared in full blocks", MorePrompts{Parts: []PromptPart{{Size: 50, Shared: 40}}}, 100, 50 - 32},
		{"ids, the first again", MorePrompts{Parts: []PromptPart{{Size: 100, Shared: 100}}}, 100, 100 - 96},
		{"ids, two blocks of the first", MorePrompts{Parts: []PromptPart{{Size: 32, Shared: 32}}}, 100, 32 - 16},
		{"text at the first's tokens per byte", MorePrompts{Text: true, FirstBytes: 400, Parts: []PromptPart{{Size: 800, Shared: 400}}}, 100, 200 - 96},
		{"text at bytes per token", MorePrompts{Text: true, Parts: []PromptPart{{Size: 400}}}, 0, 100},
	}
	for _, tt := range tests {
		if got := tt.m.prefill(tt.first, 16, 4); got != tt.want {
			t.Errorf("%s: %v tokens, want %v", tt.name, got, tt.want)
		}
	}
}

// TestSeveralPromptsLoadTheirWorker: vLLM prefills every prompt of a
// completions request, each queued behind the first. The request's own
// first token is the first prompt's, but the requests routed after it wait
// for all of them: before, they waited for the first prompt's prefill
// only, and a batch of 8 prompts loaded its worker as one.
func TestSeveralPromptsLoadTheirWorker(t *testing.T) {
	t.Parallel()
	more := MorePrompts{Parts: []PromptPart{{Size: 512}, {Size: 512}, {Size: 512, Shared: 500}}}
	pick := func(g *rig, req *Request) *Decision {
		t.Helper()
		d, err := g.r.Pick(t.Context(), req, pool(1))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var first, next [2]*Decision
	for i, m := range []MorePrompts{{}, more} {
		g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
		first[i] = pick(g, &Request{Model: "m", TokenIDs: prompt(1, 0, 512), Prompts: 1 + len(m.Parts), MorePrompts: m})
		next[i] = pick(g, &Request{Model: "m", TokenIDs: prompt(2, 0, 512)})
	}
	if got, want := first[1].MorePrefillTokens, 512+512+(512-496); got != want {
		t.Errorf("MorePrefillTokens %d, want %d", got, want)
	}
	if got := first[1].Explain().MorePrefill; got != first[1].MorePrefillTokens {
		t.Errorf("the explanation shows %d more prefill tokens, the decision %d", got, first[1].MorePrefillTokens)
	}
	if first[1].Chosen.PredictedTTFT != first[0].Chosen.PredictedTTFT {
		t.Errorf("the later prompts moved the request's own first token: %v, %v with one prompt", first[1].Chosen.PredictedTTFT, first[0].Chosen.PredictedTTFT)
	}
	if got, want := next[1].Chosen.WorkAhead, next[0].Chosen.WorkAhead+1040; got != want {
		t.Errorf("the next request waits behind %d tokens, want %d (%d with one prompt before it)", got, want, next[0].Chosen.WorkAhead)
	}
	if next[1].Chosen.QueueWait <= next[0].Chosen.QueueWait {
		t.Errorf("the next request's queue wait %v is no longer than behind one prompt (%v)", next[1].Chosen.QueueWait, next[0].Chosen.QueueWait)
	}
}

// checkOutputTokens checks the output length a decision expects for a
// request without max_tokens: the mean length of one choice learnt so far.
func checkOutputTokens(t *testing.T, g *rig, ws Workers, want int) {
	t.Helper()
	d, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 512), Stream: true}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if d.OutputTokens != want {
		t.Errorf("expected output %d tokens, want the %d of one choice", d.OutputTokens, want)
	}
}

// testIdleWorkerRelaxes: w0 has a bad spell, measured with streamed
// answers, and is avoided; then traffic goes on, streamed or not, and w0,
// fast again, must be tried and win back a fair share.
func testIdleWorkerRelaxes(t *testing.T, streamed bool) {
	g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
	ws := pool(2)
	e := engine{o: 0.006, p: 40e-6, d: 150e-6, c: 4e-9, f: 0.003, budget: 8192}
	rng := rand.New(rand.NewPCG(9, 9))
	run := func(n int, slowW0 float64, stream bool) map[string]int {
		got := map[string]int{}
		for range n {
			ids := prompt(1000+rng.IntN(1<<20), 0, 1024)
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids, Stream: stream}, ws)
			if err != nil {
				t.Fatal(err)
			}
			got[d.Worker]++
			f := 1.0
			if d.Worker == "w0" {
				f = slowW0
			}
			w := workload{prompt: 1024, budget: 8192}
			ttft := time.Duration(f * e.ttft(w) * 1e9)
			end := ttft + 5*time.Millisecond
			g.clock.Advance(end)
			o := Outcome{End: EndCompleted, TTFT: ttft, Duration: end, PromptTokens: 1024, CompletionTokens: 2, CachedTokens: 0}
			if !stream {
				o.TTFT = 0
			}
			g.r.Done(d, o)
		}
		return got
	}
	run(60, 3, true) // w0 has a bad spell and is learned 3× slower
	if got := run(200, 1, streamed); got["w0"] != 0 {
		t.Fatalf("w0 judged slow still got %d of 200 requests within the idle period", got["w0"])
	}
	// After an idle period, the first decision once another worker has a
	// recent outcome restarts w0's calibration, and its model gauge shows
	// the restarted model before any outcome of w0's.
	slow := testutil.ToFloat64(g.r.m.prefillPerTok.WithLabelValues("w0"))
	g.clock.Advance(DefaultConfig().IdleRelax)
	if got := run(1, 1, streamed); got["w1"] != 1 {
		t.Fatalf("the request after the idle period went to %v, want w1", got)
	}
	d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(7, 0, 1024), Stream: streamed}, ws)
	if err != nil {
		t.Fatal(err)
	}
	got, want := testutil.ToFloat64(g.r.m.prefillPerTok.WithLabelValues("w0")), g.r.Model("w0").PrefillPerToken
	if got != want || got == slow {
		t.Errorf("w0's prefill gauge after the idle restart: %v, want the restarted model's %v (before: %v)", got, want, slow)
	}
	g.r.Done(d, Outcome{End: EndAborted})
	// Idle for a few periods while the spell is over: w0 must be tried again.
	tried := 0
	for range 6 {
		g.clock.Advance(DefaultConfig().IdleRelax)
		tried += run(20, 1, streamed)["w0"]
	}
	if tried == 0 {
		t.Fatal("w0 got no request after three minutes idle: a worker once judged slow is never measured again")
	}
	if n := testutil.ToFloat64(g.r.m.idleRestarts); n == 0 {
		t.Error("no idle restart counted")
	}
	if got := run(200, 1, streamed); got["w0"] < 60 {
		t.Errorf("w0, fast again and measured, got %d of 200 requests; want a fair share", got["w0"])
	}
}

// inFlight is the number of assignments in r's ledger.
func inFlight(r *Router) int {
	n := 0
	for _, k := range r.InFlight() {
		n += k
	}
	return n
}

// TestSilentKVEvents checks that a worker serving requests that must store
// blocks, with no KV-event batch arriving from it, is flagged after
// silenceAfter of them (gauge, one warning, decisions marked), and that
// one batch clears the flag; a worker without a stream is never flagged,
// nor one whose answers were fully cached or refused.
func TestSilentKVEvents(t *testing.T) {
	t.Parallel()
	g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	ws := pool(1)
	answer := func(n int, o Outcome) *Decision {
		var last *Decision
		for i := range n {
			ids := prompt(100+i, 0, 256)
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids}, ws)
			if err != nil {
				t.Fatal(err)
			}
			g.r.Done(d, o)
			last = d
		}
		return last
	}
	serve := func(n int, cached int) *Decision {
		return answer(n, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: 20 * time.Millisecond, Duration: 30 * time.Millisecond,
			PromptTokens: 256, CompletionTokens: 4, CachedTokens: cached})
	}
	gauge := func() float64 { return testutil.ToFloat64(g.r.m.kvSilent.WithLabelValues("w0")) }

	serve(3*silenceAfter, 0) // no stream known for w0: nothing to judge
	if len(g.r.KVSilent()) != 0 || gauge() != 0 {
		t.Fatalf("a worker without a KV-event stream was flagged: %v", g.r.KVSilent())
	}
	g.index.published("w0", 0)
	serve(3*silenceAfter, 256) // every answer fully cached: nothing new stored
	if len(g.r.KVSilent()) != 0 {
		t.Fatal("flagged on answers that stored no block")
	}
	// Refused (the prompt over the context length): nothing was stored.
	answer(3*silenceAfter, Outcome{End: EndCompleted, HTTPStatus: 400, Duration: time.Millisecond,
		PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1})
	if len(g.r.KVSilent()) != 0 {
		t.Fatal("flagged on refused requests")
	}
	serve(silenceAfter-1, 0)
	if len(g.r.KVSilent()) != 0 {
		t.Fatalf("flagged after %d storing answers, want %d", silenceAfter-1, silenceAfter)
	}
	serve(1, 0)
	if got := g.r.KVSilent(); len(got) != 1 || got[0] != "w0" || gauge() != 1 {
		t.Fatalf("silent %v gauge %v after %d storing answers with no batch", got, gauge(), silenceAfter)
	}
	if d := serve(5, 0); !d.KVSilent {
		t.Error("a decision for the silent worker is not marked")
	}
	if n := strings.Count(g.logs.String(), "publishes no KV events"); n != 1 {
		t.Errorf("%d silence warnings, want 1:\n%s", n, g.logs.String())
	}
	g.index.published("w0", 1)
	serve(1, 0)
	if len(g.r.KVSilent()) != 0 || gauge() != 0 {
		t.Fatalf("still flagged after a batch: %v", g.r.KVSilent())
	}
	if d := serve(1, 0); d.KVSilent {
		t.Error("a decision is marked after the worker published again")
	}
}
