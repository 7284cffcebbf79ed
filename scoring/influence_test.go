package scoring

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestOneSourceCannotSwingAWorker floods a worker with fabricated first
// tokens from a second ext_proc client, in both directions, while the
// engine exposes no first-token figures (so corroboration trusts every
// run): the source bound alone must hold the prediction. The same
// outcomes from the only source are a change of speed, which the model
// must follow.
func TestOneSourceCannotSwingAWorker(t *testing.T) {
	t.Parallel()
	e := engine{o: 0.006, p: 40e-6, d: 150e-6, c: 4e-9, f: 0.003, budget: 8192}
	truth := time.Duration(e.ttft(workload{prompt: 1024, budget: 8192}) * 1e9)
	const honest, liar = "cert:spiffe://cluster.local/ns/gw/sa/envoy", "addr:10.9.9.9"
	for _, tc := range []struct {
		name   string
		report time.Duration // what the flooding source reports
		alone  bool          // the flood comes from the only source
	}{
		{name: "slower, second source", report: 6 * time.Second},
		{name: "faster, second source", report: truth / 20},
		{name: "slower, only source", report: 6 * time.Second, alone: true},
		{name: "faster, only source", report: truth / 20, alone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
			ws := pool(1)
			seed := 9000
			serve := func(src string, ttft time.Duration) time.Duration {
				seed++
				d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(seed, 0, 1024), Stream: true, Source: src}, ws)
				if err != nil {
					t.Fatal(err)
				}
				g.clock.Advance(ttft + time.Millisecond)
				g.r.Done(d, Outcome{End: EndCompleted, TTFT: ttft, Duration: ttft + time.Millisecond,
					PromptTokens: 1024, CompletionTokens: 2, CachedTokens: 0})
				return d.Chosen.PredictedTTFT
			}
			var before time.Duration
			for range 40 {
				before = serve(honest, truth)
			}
			flood := liar
			if tc.alone {
				flood = honest
			}
			// Four fabricated outcomes for each true one: the flood soon
			// reports most of the worker's outcomes.
			for range 40 {
				if !tc.alone {
					serve(honest, truth)
				}
				for range 4 {
					serve(flood, tc.report)
				}
			}
			after := serve(honest, truth)
			ratio := after.Seconds() / before.Seconds()
			disagreeing := testutil.ToFloat64(g.r.m.disagreeing)
			t.Logf("predicted %v before, %v after the flood (×%.2f); %v outcomes disagreeing", before, after, ratio, disagreeing)
			if tc.alone {
				if math.Abs(math.Log(ratio)) < math.Log(5) {
					t.Errorf("the only source's outcomes moved the prediction ×%.2f; want it to follow a change of speed", ratio)
				}
				if disagreeing != 0 {
					t.Errorf("%v outcomes of the only source counted as disagreeing", disagreeing)
				}
				return
			}
			if math.Abs(math.Log(ratio)) > math.Log(1.5) {
				t.Errorf("one source of fabricated outcomes moved the prediction ×%.2f", ratio)
			}
			if disagreeing < 100 {
				t.Errorf("%v outcomes counted as disagreeing, want the flood's", disagreeing)
			}
			// Two sources that disagree are each warned of: which one
			// lies is for the operator to find.
			if n := strings.Count(g.logs.String(), "disagree with the worker's other sources"); n != 2 {
				t.Errorf("%d warnings, want one per source", n)
			}
			for _, src := range []string{honest, liar} {
				if !strings.Contains(g.logs.String(), src) {
					t.Errorf("no warning names the source %s", src)
				}
			}
		})
	}
}

func TestSourceShares(t *testing.T) {
	t.Parallel()
	t.Run("one source is never weighed down", func(t *testing.T) {
		var s sourceShares
		for i := range 500 {
			ratio := 1.0
			if i > 100 {
				ratio = 50
			}
			if inf := s.weigh("a", ratio); inf != full {
				t.Fatalf("outcome %d: %+v", i, inf)
			}
		}
	})
	t.Run("agreeing sources keep full weight", func(t *testing.T) {
		var s sourceShares
		for i := range 500 {
			src := []string{"a", "b", "c"}[i%3]
			ratio := 1 + 0.3*math.Sin(float64(i))
			if i%7 == 0 {
				src = "a" // unequal shares
			}
			if inf := s.weigh(src, ratio); inf != full {
				t.Fatalf("outcome %d from %s: %+v", i, src, inf)
			}
		}
	})
	t.Run("a dominant disagreeing source gets the others' weight", func(t *testing.T) {
		var s sourceShares
		for range 20 {
			s.weigh("honest", 1)
		}
		var inf influence
		began := 0
		for range 200 {
			s.weigh("honest", 1)
			for range 4 {
				inf = s.weigh("liar", 0.05)
				if inf.began {
					began++
				}
			}
		}
		if !inf.disagrees || inf.weight > 0.3 || inf.weight < 0.2 {
			t.Errorf("liar at 4 outcomes per honest one: %+v, want disagreeing at weight about 1/4", inf)
		}
		if began != 1 {
			t.Errorf("began %d times, want once", began)
		}
		// The minority disagrees with the flood as much: it cannot
		// restart the fit either, but keeps its whole weight.
		if got := s.weigh("honest", 1); got.weight != 1 || !got.disagrees {
			t.Errorf("the honest minority: %+v, want full weight, disagreeing", got)
		}
	})
	t.Run("a minor disagreeing source cannot restart, keeps its weight", func(t *testing.T) {
		var s sourceShares
		for range 100 {
			s.weigh("big", 1)
		}
		inf := s.weigh("small", 20)
		if !inf.disagrees || inf.weight != 1 {
			t.Errorf("%+v, want disagreeing at weight 1", inf)
		}
		if got := s.weigh("big", 1); got != full {
			t.Errorf("the majority: %+v, want full weight", got)
		}
	})
	t.Run("sources are bounded", func(t *testing.T) {
		var s sourceShares
		for i := range 10 * maxSources {
			s.weigh(string(rune('a'+i%26))+string(rune('A'+i/26)), 1)
		}
		if len(s.names) != maxSources {
			t.Errorf("%d sources followed, want %d", len(s.names), maxSources)
		}
	})
}
