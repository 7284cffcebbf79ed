package scoring

import (
	"math"
	"testing"
	"time"
)

// TestHindsightAhead checks the arithmetic of a prefill stream seen in
// hindsight: what remained of the work queued at a decision, had the
// stream gone at the pace its first tokens showed.
func TestHindsightAhead(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name          string
		p             prefillStream
		decided, frst float64
		own           float64
		want          float64
		ok            bool
	}{
		// 30,000 tokens queued at 0 and 100 of its own: 30,100 in 0.903 s.
		// At 0.45 s half the queue was done.
		{"half done", prefillStream{start: t0, queued: 30000, ahead: 22500}, 0.45, 0.903, 100, 15000, true},
		{"decided at the start", prefillStream{start: t0, queued: 8000, ahead: 8000}, 0, 1, 2000, 8000, true},
		// Decided in the queue's last step: the pace leaves nothing ahead.
		{"all done", prefillStream{start: t0, queued: 1000, ahead: 900}, 0.995, 1, 10, 0, true},
		{"nothing queued", prefillStream{}, 0.5, 1, 100, 0, false},
		{"no time passed", prefillStream{start: at(1), queued: 500}, 1, 1, 100, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.p.hindsight(at(tt.decided), at(tt.frst), tt.own)
			if ok != tt.ok || math.Abs(got-tt.want) > 1 {
				t.Errorf("hindsight = %.1f, %v; want %.1f, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestLearnFitsWorkAheadInHindsight: an outcome that was queued behind
// a prefill stream is fitted with the work that really was ahead of it, not
// with what the ledger estimated at the decision from the model being
// fitted. Here the prior is twice too slow: at the decision the ledger
// thought a quarter of a 30,000-token prompt done (22,500 ahead), while the
// first tokens show half of it was (15,000).
func TestLearnFitsWorkAheadInHindsight(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	l := newLearner(&cfg)
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tt := range []struct {
		name    string
		pending prefillStream
		ahead   float64 // want, in the fitted features
	}{
		{"queued", prefillStream{start: t0, queued: 30000, ahead: 22500}, 15000},
		{"nothing queued", prefillStream{}, 22500},
	} {
		a := &assignment{worker: "w0", decided: at(0.45), firstSeen: true, firstAt: at(0.903), stream: true,
			prompt: 100, uncached: 100, pending: tt.pending,
			work: workload{prompt: 100, ahead: 22500, aheadReqs: 1, aheadCtx: 30000, budget: 8192}}
		o := Outcome{End: EndCompleted, TTFT: 453 * time.Millisecond, Duration: 500 * time.Millisecond,
			PromptTokens: 100, CompletionTokens: 2, CachedTokens: 0}
		_, ls := l.learn(a, o, at(1), engineTTFT{})
		want := a.work
		want.ahead = tt.ahead
		if !ls.TTFT.OK || math.Abs(ls.TTFT.X[1]-want.features()[1]) > 1 {
			t.Errorf("%s: fitted tokens feature %.0f (ok %v), want %.0f", tt.name, ls.TTFT.X[1], ls.TTFT.OK, want.features()[1])
		}
	}
}
