package scoring

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func TestPredictDecode(t *testing.T) {
	t.Parallel()
	m := StepModel{StepOverhead: 0.010, PrefillPerToken: 100e-6, DecodePerSeq: 200e-6, ContextPerToken: 10e-9}
	// step 0.010 + 4×200µs + 8000×10ns = 0.01088 for the loads below with
	// four decoding; prefill at 2000 tokens/s takes 100 µs × 2000 = 20% of
	// the worker's time.
	const step4 = 0.01088
	tests := []struct {
		name                    string
		l                       decodeLoad
		tpot, typical, slowdown float64
	}{
		{
			name:    "alone: one step per token, nobody to slow",
			l:       decodeLoad{batch: 1, ctx: 1000, budget: 8192, prompt: 1000, uncached: 1000, out: 101},
			tpot:    0.010 + 200e-6 + 10e-9*1000,
			typical: 0.010 + 200e-6 + 10e-9*1000,
		},
		{
			// Two 1000-token prompts a second: 0.1 + 100 × 0.0136 s of
			// response expects 2.92 of them, whose median, 3, is more
			// than 2.92: the typical is the expected.
			name:    "prefill routed to the worker stretches every token",
			l:       decodeLoad{batch: 4, ctx: 8000, others: 2, rate: 2000, arrivals: 2, ttft: 0.1, budget: 8192, prompt: 1000, uncached: 500, out: 101},
			tpot:    step4 / 0.8,
			typical: step4 / 0.8,
			// two decoding now wait for 500 tokens of prefill; three on
			// average share 100 steps with a sequence of 1000 + 50.5
			// context tokens.
			slowdown: 2*100e-6*500 + 3*100*(200e-6+10e-9*1050.5),
		},
		{
			// The same tokens in 20 000-token prompts, one each 10 s: a
			// response of 5 tokens after 0.2 s expects 0.1 × 0.254 of one,
			// and most such responses see none.
			name:     "a short response beside rare long prompts most likely sees none of them",
			l:        decodeLoad{batch: 4, ctx: 8000, others: 2, rate: 2000, arrivals: 0.1, ttft: 0.2, budget: 8192, prompt: 1000, uncached: 500, out: 5},
			tpot:     step4 / 0.8,
			typical:  step4,
			slowdown: 2*100e-6*500 + 3*4*(200e-6+10e-9*1002.5),
		},
		{
			// 1.5 prompts expected over 0.2 + 100 × 0.0136 s: the median
			// is one, two thirds of the expected prefill.
			name:     "a few prompts expected: the median count's share of their prefill",
			l:        decodeLoad{batch: 4, ctx: 8000, others: 2, rate: 2000, arrivals: 1.5 / 1.56, ttft: 0.2, budget: 8192, prompt: 1000, uncached: 500, out: 101},
			tpot:     step4 / 0.8,
			typical:  step4 + (step4/0.8-step4)/1.5,
			slowdown: 2*100e-6*500 + 3*100*(200e-6+10e-9*1050.5),
		},
		{
			// n = 3: three sequences of the request in a batch of five; the
			// two others wait for all three in each of 100 steps.
			name:     "several choices decode side by side",
			l:        decodeLoad{batch: 5, ctx: 6000, others: 2, budget: 8192, prompt: 1000, uncached: 0, out: 101, seqs: 3},
			tpot:     0.010 + 5*200e-6 + 10e-9*6000,
			typical:  0.010 + 5*200e-6 + 10e-9*6000,
			slowdown: 2 * 100 * 3 * (200e-6 + 10e-9*1050.5),
		},
		{
			name:    "a saturated worker's token is one full chunk step",
			l:       decodeLoad{batch: 2, ctx: 0, others: 1, rate: 1e6, arrivals: 1000, budget: 1024, prompt: 10, uncached: 0, out: 2},
			tpot:    0.010 + 2*200e-6 + 100e-6*1022,
			typical: 0.010 + 2*200e-6 + 100e-6*1022,
			// one other, one decode step of the request's own.
			slowdown: 200e-6 + 10e-9*11,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dp := predictDecode(m, tt.l)
			if !near(dp.tpot, tt.tpot, 1e-9) || !near(dp.typical, tt.typical, 1e-9) || !near(dp.slowdown, tt.slowdown, 1e-9) {
				t.Errorf("tpot, typical, slowdown = %v, %v, %v; want %v, %v, %v",
					dp.tpot, dp.typical, dp.slowdown, tt.tpot, tt.typical, tt.slowdown)
			}
		})
	}
}

// TestTypicalShare checks the Poisson median the typical TPOT rests on
// against the median counted from the distribution itself, wherever the
// distribution function is not within a hair of one half (where the
// median jumps and any approximation may land on either side).
func TestTypicalShare(t *testing.T) {
	t.Parallel()
	for i := 1; i <= 1000; i++ {
		k := float64(i) / 20
		median, cdf, p := 0, 0.0, math.Exp(-k)
		for {
			cdf += p
			if cdf >= 0.5 {
				break
			}
			median++
			p *= k / float64(median)
		}
		if math.Abs(cdf-0.5) < 1e-3 || math.Abs(cdf-p-0.5) < 1e-3 {
			continue
		}
		want := min(float64(median)/k, 1)
		if got := typicalShare(k); !near(got, want, 1e-12) {
			t.Errorf("typicalShare(%v) = %v, want %v (median %d)", k, got, want, median)
		}
	}
	if got := typicalShare(0); got != 0 {
		t.Errorf("typicalShare(0) = %v, want 0", got)
	}
}

// TestDecodeMeter checks a decode window's reading: the sequences and
// context the steps carried on average, and the prefill done meanwhile.
func TestDecodeMeter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var m decodeMeter
	a := &assignment{prompt: 1000, uncached: 800}
	b := &assignment{prompt: 3000, uncached: 3000}
	c := &assignment{prompt: 500, uncached: 500}
	m.advance(at(0))
	m.started(b, at(0)) // b decodes from 0
	b.firstSeen = true
	from := m.started(a, at(1)) // a's window opens at 1
	a.firstSeen = true
	m.started(c, at(2)) // c's prefill finished at 2
	c.firstSeen = true
	m.ended(c, at(3))
	m.ended(b, at(4))
	to := m.ended(a, at(5))
	span := to.at.Sub(from.at).Seconds()
	// From 1 to 5: a and b (1–2), a, b, c (2–3), a and b (3–4), a (4–5).
	if seqs := (to.seqSec - from.seqSec) / span; !near(seqs, (2+3+2+1)/4.0, 1e-12) {
		t.Errorf("mean batch %v, want 2", seqs)
	}
	if ctx := (to.ctxSec - from.ctxSec) / span; !near(ctx, (4000+4500+4000+1000)/4.0, 1e-12) {
		t.Errorf("mean context %v, want 3375", ctx)
	}
	if p := to.prefilled - from.prefilled; p != 500 {
		t.Errorf("prefilled in the window %v, want c's 500", p)
	}
	// A peer's first token stamped in the past integrates nothing
	// backwards.
	before := m.reading()
	m.started(&assignment{prompt: 10}, at(4.5))
	if r := m.reading(); r.seqSec != before.seqSec || r.at != before.at {
		t.Errorf("a past first token moved the integral: %+v → %+v", before, r)
	}
}

func TestRoutedRateDecays(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var m decodeMeter
	w := 10 * time.Second
	for i := range 100 {
		m.route(1000, t0.Add(time.Duration(i)*100*time.Millisecond), w) // 10 000 tokens/s
	}
	now := t0.Add(10 * time.Second)
	// A steady 10k tokens/s reads as 10k/s after one window, not as the
	// 10k × (1 − e^-1) the decayed sum holds.
	r0 := m.rate(now, w)
	if !near(r0, 10000, 0.06) {
		t.Errorf("rate %v after one window of 10k tokens/s", r0)
	}
	// With nothing routed since, the sum decays while the time it covers
	// hardly grows: a minute later about e^-6 of it is left.
	if r := m.rate(now.Add(time.Minute), w); !near(r, r0*math.Exp(-6)*(1-math.Exp(-1))/(1-math.Exp(-7)), 1e-6) {
		t.Errorf("rate %v a minute later, want about e^-6 of %v", r, r0)
	}
	// Half a window in, the rate is already the rate.
	var h decodeMeter
	for i := range 50 {
		h.route(1000, t0.Add(time.Duration(i)*100*time.Millisecond), w)
	}
	if r := h.rate(t0.Add(5*time.Second), w); !near(r, 10000, 0.06) {
		t.Errorf("rate %v half a window into 10k tokens/s", r)
	}
	var none decodeMeter
	if r := none.rate(now, w); r != 0 {
		t.Errorf("rate %v with nothing ever routed", r)
	}
}

// TestRoutedArrivals checks the prompts per second the meter counts:
// alike prompts by their number, and a few large ones among many small by
// the large ones' number.
func TestRoutedArrivals(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	w := 10 * time.Second
	now := t0.Add(10 * time.Second)
	var alike decodeMeter
	for i := range 100 {
		alike.route(1000, t0.Add(time.Duration(i)*100*time.Millisecond), w) // 10 prompts/s
	}
	if a := alike.arrivals(now, w); !near(a, 10, 0.06) {
		t.Errorf("arrivals %v of 10 alike prompts/s", a)
	}
	var mixed decodeMeter
	for i := range 100 {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		mixed.route(20, at, w)
		if i%10 == 0 {
			mixed.route(20000, at, w) // one a second
		}
	}
	if a := mixed.arrivals(now, w); !near(a, 1, 0.1) {
		t.Errorf("arrivals %v of one 20 000-token prompt a second among ten of 20 tokens", a)
	}
	var none decodeMeter
	if a := none.arrivals(now, w); a != 0 {
		t.Errorf("arrivals %v with nothing ever routed", a)
	}
}

func TestOutputsExpect(t *testing.T) {
	t.Parallel()
	var o outputs
	if got := o.expect(0, 256); got != 256 {
		t.Errorf("nothing learned, no max_tokens: %v, want the default", got)
	}
	if got := o.expect(900, 256); got != 900 {
		t.Errorf("nothing learned, max_tokens 900: %v", got)
	}
	for range 100 {
		o.observe(1000, 250) // clients ask 1000 and use a quarter
		o.observe(0, 120)
	}
	if got := o.expect(400, 256); !near(got, 100, 0.01) {
		t.Errorf("a quarter of max_tokens 400: %v", got)
	}
	if got := o.expect(0, 256); !near(got, 120, 0.01) {
		t.Errorf("without max_tokens: %v, want the learned mean 120", got)
	}
}

// TestDecodeCalibration feeds a router responses timed by a known decode
// step model, with the batch its ledger shows, and checks that the decode
// model it learns predicts their TPOT.
func TestDecodeCalibration(t *testing.T) {
	t.Parallel()
	truth := StepModel{StepOverhead: 0.030, PrefillPerToken: 250e-6, DecodePerSeq: 300e-6, ContextPerToken: 20e-9}
	g := newRig(t, PolicyRoundRobin, DefaultConfig(), nil)
	ws := pool(1)
	rng := rand.New(rand.NewPCG(3, 4))
	type live struct {
		d     *Decision
		first time.Time
		out   int
	}
	var running []live
	var errs []float64
	for i := range 400 {
		// Keep 2–12 sequences decoding; each ends after its tokens, timed
		// by the truth for the batch at its end.
		for len(running) < 2+rng.IntN(10) {
			out := 32 + rng.IntN(200)
			d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(i*100+len(running), 0, 500+rng.IntN(3000)), Stream: true, MaxTokens: out}, ws)
			if err != nil {
				t.Fatal(err)
			}
			g.clock.Advance(50 * time.Millisecond)
			g.r.FirstToken(d)
			running = append(running, live{d: d, first: g.clock.Now(), out: out})
		}
		k := rng.IntN(len(running))
		r := running[k]
		running = append(running[:k], running[k+1:]...)
		ctx := 0.0
		for _, o := range running {
			ctx += float64(o.d.PromptTokens)
		}
		batch := float64(len(running) + 1)
		ctx += float64(r.d.PromptTokens) + batch*float64(r.out)/2
		tpot := truth.StepOverhead + truth.DecodePerSeq*batch + truth.ContextPerToken*ctx
		decode := time.Duration(tpot * float64(r.out-1) * float64(time.Second))
		if i >= 300 {
			errs = append(errs, math.Abs(r.d.Chosen.PredictedTPOT.Seconds()-tpot)/tpot)
		}
		g.clock.Set(r.first.Add(decode))
		g.r.Done(r.d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: 50 * time.Millisecond, Decode: decode,
			Duration: 50*time.Millisecond + decode, PromptTokens: r.d.PromptTokens, CompletionTokens: r.out, CachedTokens: 0})
	}
	// The batch at the prediction is not the batch at the end, so the
	// error is not zero; it is far below the prior's.
	if med := percentile(errs, 0.5); med > 0.10 {
		t.Errorf("median TPOT error %.1f%% after 300 responses, want ≤ 10%%", 100*med)
	}
	m := g.r.learn.worker("w0").dec.model()
	if !near(m.StepOverhead, truth.StepOverhead, 0.25) {
		t.Errorf("learned decode step %v, truth %v", m.StepOverhead, truth.StepOverhead)
	}
}

// TestDecodeMeterSample checks the running average decisions keep: the
// first sample is the mean, later ones pull it by 1 − e^(−Δt/window).
func TestDecodeMeterSample(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var m decodeMeter
	if b, c := m.sample(4, 4000, t0, 10*time.Second); b != 4 || c != 4000 {
		t.Fatalf("first sample: %v, %v; want 4, 4000", b, c)
	}
	b, c := m.sample(0, 0, t0.Add(10*time.Second), 10*time.Second)
	if want := 4 * math.Exp(-1); !near(b, want, 1e-12) || !near(c, 1000*want, 1e-12) {
		t.Errorf("after one window at 0: %v, %v; want %v, %v", b, c, want, 1000*want)
	}
	// A sample stamped no later than the last changes nothing.
	if b2, c2 := m.sample(100, 1e6, t0, 10*time.Second); b2 != b || c2 != c {
		t.Errorf("a sample in the past moved the mean: %v, %v", b2, c2)
	}
}

// TestSeedDecode checks that the first decode measurement of a pool
// starts every worker not yet measured from the measured ones' model, so
// the first picks do not compare a measured worker against the prior.
func TestSeedDecode(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	l := newLearner(&cfg)
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, w := range []string{"a", "b", "c"} {
		l.worker(w)
	}
	a := l.worker("a")
	a.lastOutcome = now
	m := cfg.Prior
	// a's decode steps take three times the prior's.
	for range 20 {
		x := decodeFeatures(100, 0, 4, 4000)
		y := 3 * (100*(m.StepOverhead+4*m.DecodePerSeq) + 100*4000*m.ContextPerToken)
		a.dec.observe(x, y, &cfg, nil)
	}
	l.seedDecode(now)
	want := a.dec.model()
	for _, w := range []string{"b", "c"} {
		if got := l.worker(w).dec.model(); got != want {
			t.Errorf("%s's decode model %+v, want the measured one %+v", w, got, want)
		}
	}
	if !l.unmeasured {
		t.Error("seeded workers count as measured: they would stop following the pool")
	}
	// A worker measured since keeps its own model when another appears.
	b := l.worker("b")
	b.dec.observe(decodeFeatures(100, 0, 1, 100), 0.5, &cfg, nil)
	own := b.dec.model()
	l.worker("d")
	l.seedDecode(now)
	if b.dec.model() != own {
		t.Error("seeding moved a measured worker's model")
	}
	if l.worker("d").dec.model() == cfg.Prior {
		t.Error("a worker added later still decodes at the prior")
	}
}
