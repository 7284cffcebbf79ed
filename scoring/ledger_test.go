package scoring

import (
	"math"
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
			l := s.load(at(first+100), discovery.EngineLoad{}, false, 16, true, perToken, budget, typical{})
			if l.decoding != float64(len(tt.finished)) {
				t.Fatalf("decoding %v, want %d", l.decoding, len(tt.finished))
			}
			if math.Abs(l.pending.queued-tt.want) > 0.5 {
				t.Errorf("queued %.1f, want %.1f", l.pending.queued, tt.want)
			}
			done := 0.1 / perToken
			if wantAhead := max(tt.want-done, min(23359, budget)/4); math.Abs(l.ahead-wantAhead) > 0.5 {
				t.Errorf("ahead %.1f, want %.1f", l.ahead, wantAhead)
			}
		})
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
