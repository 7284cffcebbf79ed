package scoring

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warmpath/warmpath/discovery"
)

// TestLedgerStreamCarriesStepRemainder: when a long prompt's first token
// comes, the step that finished it gave the rest of its budget to the
// prompt behind it, which the prefill stream counts as done from then.
func TestLedgerStreamCarriesStepRemainder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	const budget, perToken = 8192.0, 32e-6 // a token's prefill in seconds
	tests := []struct {
		name     string
		finished []float64 // uncached tokens of the prompts whose first tokens came, in order
		gaps     []float64 // ms before each of those first tokens
		want     float64   // the 23,359 tokens behind them, less what their step did
	}{
		// 28,357 tokens in steps of 8,191 (a token of each goes to the
		// decode it became): a last chunk of 3,784 leaves 4,407.
		{"one prompt", []float64{28357}, []float64{1000}, 23359 - 4407},
		// Two prompts finished by one step (8,190 for prefill beside two
		// decodes): their 6,000 tokens leave 2,190.
		{"two in one step", []float64{4000, 2000}, []float64{1000, 0.2}, 23359 - 2190},
		// Two first tokens a step apart: only the later one's step counts.
		{"two steps", []float64{4000, 2000}, []float64{1000, 30}, 23359 - 6190},
		// A prompt that filled its last step leaves nothing.
		{"a whole step", []float64{2 * 8191}, []float64{1000}, 23359},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s workerLedger
			behind := &assignment{decided: at(0), uncached: 23359, prompt: 23359, stream: true, start: at(0), first: at(2000)}
			s.inflight = append(s.inflight, behind)
			first := 0.0
			for i, n := range tt.finished {
				first += tt.gaps[i]
				a := &assignment{decided: at(0), uncached: n, prompt: int(n), stream: true, start: at(0), first: at(first)}
				s.inflight = append(s.inflight, a)
				s.started(a, at(first))
			}
			l := s.load(at(first+100), discovery.EngineLoad{}, false, 16, true, StepModel{PrefillPerToken: perToken}, budget, typical{})
			if l.decoding != float64(len(tt.finished)) {
				t.Fatalf("decoding %v, want %d", l.decoding, len(tt.finished))
			}
			if math.Abs(l.pending.queued-tt.want) > 0.5 {
				t.Errorf("queued %.1f, want %.1f", l.pending.queued, tt.want)
			}
			done := 0.1 / perToken
			if wantAhead := streamRemaining(tt.want, done); math.Abs(l.ahead-wantAhead) > 0.5 {
				t.Errorf("ahead %.1f, want %.1f", l.ahead, wantAhead)
			}
		})
	}
}

// TestLedgerStreamCarriesOnlyToAPromptPresent: the step that finished a
// prompt gives the rest of its budget to the prompt behind it only when
// that prompt was waiting as the step began (an engine builds a step's
// batch as it starts), and never all of it (its first token would have
// come with the step's).
func TestLedgerStreamCarriesOnlyToAPromptPresent(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }
	const budget, perToken = 8192.0, 32e-6
	m := StepModel{PrefillPerToken: perToken}
	// A 3,000-token prompt's first token comes at 1,000 ms. Had the
	// prompt behind it been in that step, the step carried 5,191 tokens
	// (its 8,192 less the 3,000 and a token for the decode the prompt
	// has become) and took 8,191 × 32 µs = 262 ms: it began at 738 ms.
	tests := []struct {
		name     string
		decided  float64 // ms, the prompt behind
		uncached float64
		want     float64 // its tokens queued from the first token on
	}{
		{"waiting as the step began", 500, 6000, 6000 - 5191},
		{"decided during the step", 900, 6000, 6000},
		{"short enough to finish in the step", 500, 2000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s workerLedger
			a := &assignment{decided: at(0), uncached: 3000, prompt: 3000, stream: true, start: at(0), first: at(1000)}
			behind := &assignment{decided: at(tt.decided), uncached: tt.uncached, prompt: int(tt.uncached), stream: true,
				start: at(1000), first: at(1200)}
			s.inflight = append(s.inflight, a, behind)
			s.started(a, at(1000))
			l := s.load(at(1000), discovery.EngineLoad{}, false, 16, true, m, budget, typical{})
			if math.Abs(l.pending.queued-tt.want) > 0.5 {
				t.Errorf("queued %.1f, want %.1f", l.pending.queued, tt.want)
			}
		})
	}
}

// TestStreamRemaining: what remains of a prefill stream whose end has not
// been seen follows the pace well before its predicted end, is never less
// than the pace leaves, falls as time passes, and is a spread's worth of
// the stream at its predicted end and past it, without a jump.
func TestStreamRemaining(t *testing.T) {
	t.Parallel()
	const queued = 10000.0
	b := streamSpread * queued
	if got := streamRemaining(queued, 0); math.Abs(got-queued) > 1e-3 {
		t.Errorf("nothing done: %.4f, want %.0f", got, queued)
	}
	if got := streamRemaining(queued, queued); math.Abs(got-b) > 1e-9 {
		t.Errorf("at the predicted end: %.4f, want the spread %.0f", got, b)
	}
	if got := streamRemaining(queued, 3*queued); got != b {
		t.Errorf("long past the predicted end: %.4f, want the spread %.0f", got, b)
	}
	if got := streamRemaining(queued, queued-1e-6); math.Abs(got-b) > 1e-3 {
		t.Errorf("just before the predicted end: %.4f, want about %.0f", got, b)
	}
	if got := streamRemaining(0, 5); got != 0 {
		t.Errorf("an empty stream: %v, want 0", got)
	}
	prev := math.Inf(1)
	for done := 0.0; done <= 1.5*queued; done += queued / 200 {
		got := streamRemaining(queued, done)
		if got < queued-done-1e-9 || got > prev+1e-9 {
			t.Fatalf("done %.0f: %.1f, want at least %.1f and at most %.1f", done, got, queued-done, prev)
		}
		prev = got
	}
}

// TestLedgerStreamProgressesAtItsPredictedPace: the prefill stream ahead
// is credited progress at the pace its own queue-wait prediction implies,
// its steps' overhead and the decodes beside it included, so that the time
// elapsed and the wait predicted for what remains add up to the wait
// predicted for the whole stream when it began.
func TestLedgerStreamProgressesAtItsPredictedPace(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	const budget = 8192.0
	m := StepModel{StepOverhead: 0.013, PrefillPerToken: 30e-6, DecodePerSeq: 80e-6, ContextPerToken: 5e-9, RequestOverhead: 0.005}
	// A 24,000-token prompt decided at t0 behind nothing, on a worker with
	// two sequences decoding (2,000 context tokens each), whose first
	// tokens came just before.
	var s workerLedger
	for range 2 {
		a := &assignment{decided: t0.Add(-time.Second), uncached: 500, prompt: 2000, stream: true, start: t0.Add(-time.Second), first: t0.Add(-time.Millisecond)}
		s.inflight = append(s.inflight, a)
		s.started(a, t0.Add(-time.Millisecond))
	}
	s.inflight = append(s.inflight, &assignment{decided: t0, uncached: 24000, prompt: 24000, stream: true, start: t0, first: t0.Add(time.Second)})
	wait := func(l ledgerLoad) float64 {
		w := workload{ahead: l.ahead, decoding: l.decoding, decodeCtx: l.decodeCtx, budget: budget}
		q, _ := w.parts()
		return dot(q, m.vector())
	}
	l0 := s.load(t0, discovery.EngineLoad{}, false, 16, true, m, budget, typical{})
	if math.Abs(l0.ahead-24000) > 0.5 || l0.decoding != 2 {
		t.Fatalf("at the decision: ahead %v, decoding %v; want 24000, 2", l0.ahead, l0.decoding)
	}
	whole := wait(l0)
	elapsed := whole / 2
	l := s.load(t0.Add(time.Duration(elapsed*float64(time.Second))), discovery.EngineLoad{}, false, 16, true, m, budget, typical{})
	// The bare per-token cost credits elapsed/30 µs, about 12,660 tokens,
	// and leaves 11,340; the stream's own pace leaves half.
	if want := streamRemaining(24000, 12000); math.Abs(l.ahead-want) > 1 {
		t.Errorf("half the stream's predicted wait later: ahead %.1f tokens, want %.1f", l.ahead, want)
	}
	if rest := wait(l); rest+elapsed < whole*0.95 {
		t.Errorf("elapsed %.3fs + the wait predicted for the rest %.3fs fall short of the whole stream's %.3fs", elapsed, rest, whole)
	}
}

// TestStreamPaceFallsBackToThePerTokenCost: a stream of nothing, or a
// model that prices the work at nothing, progresses at the model's
// per-token cost.
func TestStreamPaceFallsBackToThePerTokenCost(t *testing.T) {
	t.Parallel()
	m := StepModel{PrefillPerToken: 40e-6}
	if got := streamPace(m, 0, 2, 4000, 8192); got != 40e-6 {
		t.Errorf("no tokens queued: pace %v, want 40e-6", got)
	}
	if got := streamPace(StepModel{}, 1000, 2, 4000, 8192); got != 0 {
		t.Errorf("a model of zeros: pace %v, want its per-token cost 0", got)
	}
	if got := streamPace(m, 8192, 0, 0, 8192); math.Abs(got-40e-6) > 1e-12 {
		t.Errorf("one step's tokens, no overhead: pace %v, want 40e-6", got)
	}
}

// TestKVWaitCountsTheFirstPromptsCachedPrefix: the blocks an in-flight
// request shares with others are its first prompt's cached prefix; the
// later prompts of a completions request add prefill (uncached), not a
// smaller shared prefix. Taken from uncached with them, a batch of prompts
// whose first was cached counted no shared blocks, and a request that
// must wait for blocks was predicted to fit.
func TestKVWaitCountsTheFirstPromptsCachedPrefix(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	// A 4,096-token first prompt with 4,000 cached, and 3 later prompts
	// of 512 tokens each: it holds its own 128 blocks beside the 250 it
	// shares.
	a := &assignment{prompt: 4096, uncached: 96 + 1536, more: 1536, ownBlocks: 128, first: now.Add(time.Second)}
	s := &workerLedger{inflight: []*assignment{a}}
	typ := typical{decode: 2}
	if w := s.kvWait(now, 400, 20, -1, 16, false, typ); w != 0 {
		t.Errorf("20 blocks beside 378 held of 400: waits %v, want none", w)
	}
	if w := s.kvWait(now, 400, 30, -1, 16, false, typ); w != 3*time.Second {
		t.Errorf("30 blocks beside 378 held of 400: waits %v, want the 3 s until it ends", w)
	}
}

// TestEndedAtKeptCount holds the reconciliation's kept count of ended
// assignments to a count made afresh over every entry, through appends,
// prunes (also against a scrape asked about before, and one stamped after
// entries it then drops), the bound's overflow, and older scrapes. Each
// query prunes first, as load does.
func TestEndedAtKeptCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	base := time.Unix(1_000_000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	var s workerLedger
	now, scrape := 1000, 0
	recount := func(at time.Time) (running, waiting int) {
		for _, e := range s.ended {
			switch {
			case e.decided.After(at):
			case e.start.After(at) && e.first.After(at):
				waiting++
			default:
				running++
			}
		}
		return running, waiting
	}
	const steps, boundPhase = 20_000, 14_000
	for i := range steps {
		now += rng.IntN(3)
		switch op := rng.IntN(20); {
		case i == boundPhase: // from here on one scrape, and entries it saw: past the bound
			scrape = now
		case i > boundPhase || op < 14: // an assignment ends
			decided := now - rng.IntN(400)
			if i > boundPhase {
				decided = scrape - rng.IntN(100)
			}
			a := &assignment{decided: ms(decided), start: ms(decided + rng.IntN(300)), first: ms(decided + rng.IntN(400))}
			if rng.IntN(2) == 0 {
				a.firstSeen, a.firstAt = true, ms(decided+rng.IntN(400))
			}
			s.remove(a, ms(now))
		case op < 17: // a new scrape, stamped up to 20 ms after now
			scrape = now - 50 + rng.IntN(70)
		case op < 18: // an older scrape asked about again
			scrape -= rng.IntN(20)
		}
		at := ms(scrape)
		s.pruneEnded(at)
		wantRunning, wantWaiting := recount(at)
		if running, waiting := s.endedAt(at); running != wantRunning || waiting != wantWaiting {
			t.Fatalf("step %d: kept count %d running, %d waiting; afresh %d, %d", i, running, waiting, wantRunning, wantWaiting)
		}
	}
	if len(s.ended) != maxEnded {
		t.Fatalf("%d entries at the end: the test did not reach the bound", len(s.ended))
	}
}
