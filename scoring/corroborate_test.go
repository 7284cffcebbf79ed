package scoring

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSlownessTheEngineDoesNotSee replays the calibration-poisoning attack:
// after a worker was learnt from honest outcomes, a source reports 40
// first tokens of 6 s for it. When the engine's own first-token figures
// show no such requests (the fake exchanges never reached it), the
// calibration does not restart and the prediction stays near the truth;
// when they do (the worker really got slow), it restarts and follows.
func TestSlownessTheEngineDoesNotSee(t *testing.T) {
	t.Parallel()
	e := engine{o: 0.006, p: 40e-6, d: 150e-6, c: 4e-9, f: 0.003, budget: 8192}
	truth := time.Duration(e.ttft(workload{prompt: 1024, budget: 8192}) * 1e9)
	const slow = 6 * time.Second
	for _, tc := range []struct {
		name       string
		engineSees bool
		exposed    bool // the engine exposes its first-token histogram at all
	}{
		{name: "fake outcomes, engine figures unchanged", exposed: true},
		{name: "real slowdown, engine figures agree", engineSees: true, exposed: true},
		{name: "no engine figures: outcomes trusted", exposed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, PolicyWarmpath, ttftConfig(), nil)
			ws := pool(1)
			report := loadReport{HasTTFT: tc.exposed}
			seed := 7000
			serve := func(n int, ttft time.Duration, engineSees bool) time.Duration {
				var pred time.Duration
				for range n {
					seed++
					d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(seed, 0, 1024), Stream: true}, ws)
					if err != nil {
						t.Fatal(err)
					}
					pred = d.Chosen.PredictedTTFT
					g.clock.Advance(ttft + time.Millisecond)
					if engineSees {
						report.TTFTCount++
						report.TTFTSeconds += ttft.Seconds()
					}
					report.Scraped = g.clock.Now()
					g.load.mu.Lock()
					g.load.reports["w0"] = report
					g.load.mu.Unlock()
					g.r.Done(d, Outcome{End: EndCompleted, TTFT: ttft, Duration: ttft + time.Millisecond,
						PromptTokens: 1024, CompletionTokens: 2, CachedTokens: 0})
				}
				return pred
			}
			before := serve(40, truth, true)
			serve(40, slow, tc.engineSees)
			after := serve(1, slow, tc.engineSees) // the prediction once all 40 are in
			declined := testutil.ToFloat64(g.r.m.uncorroborated)
			t.Logf("predicted first token %v before, %v after", before, after)
			if !tc.exposed || tc.engineSees {
				if after < 10*before {
					t.Errorf("prediction %v after 40 first tokens of %v (was %v): the model did not follow", after, slow, before)
				}
				if declined != 0 {
					t.Errorf("%v restarts declined with the engine agreeing or silent", declined)
				}
				return
			}
			if after > 2*before {
				t.Errorf("prediction %v after 40 fake first tokens of %v (was %v): one source swung the model", after, slow, before)
			}
			if declined == 0 || testutil.ToFloat64(g.r.m.resets) != 0 {
				t.Errorf("declined %v, resets %v; want declines and no reset", declined, testutil.ToFloat64(g.r.m.resets))
			}
			if n := strings.Count(g.logs.String(), "engine's own first-token figures disagree"); n != 1 {
				t.Errorf("%d warnings, want one for the run", n)
			}
		})
	}
}
