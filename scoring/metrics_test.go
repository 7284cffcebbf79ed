package scoring

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsGolden runs a fixed sequence of decisions and endings and
// compares the counters' exposition with testdata/metrics.golden.
func TestMetricsGolden(t *testing.T) {
	t.Parallel()
	cfg := ttftConfig()
	cfg.Shadow = []string{PolicyPrefixMax}
	g := newRig(t, PolicyWarmpath, cfg, &fakeTokens{err: errTokenize})
	req, ws := scenario(t, g)
	d1, _ := g.r.Pick(t.Context(), req, ws)                                                                          // exact, w2
	d2, _ := g.r.Pick(t.Context(), &Request{API: APIChat, Model: "m", Prompt: []byte("hi"), Body: []byte("hi")}, ws) // load-only; prefix-max agrees
	g.r.Done(d1, Outcome{End: EndCompleted, TTFT: 300 * time.Millisecond, PromptTokens: 8192, CachedTokens: 4096})
	g.r.Done(d2, Outcome{End: EndAborted, PromptTokens: -1, CachedTokens: -1})
	g.r.Done(d2, Outcome{End: EndAborted})
	f, err := os.Open(filepath.Join("testdata", "metrics.golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(g.reg, f,
		"warmpath_scoring_unknown_done_total", "warmpath_scoring_cached_tokens_predictions_total",
		"warmpath_scoring_shadow_agreements_total", "warmpath_scoring_load_reports_total"); err != nil {
		t.Error(err)
	}
}
