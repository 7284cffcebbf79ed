package tokenize

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/component"
)

func TestBodyParserCollector(t *testing.T) {
	t.Parallel()
	bp := NewBodyParser(1 << 20)
	long := strings.Repeat("a message long enough to be looked up ", 3)
	body := []byte(`{"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"` + long + `!"}]}`)
	for range 2 {
		if _, err := bp.Parse(body); err != nil {
			t.Fatal(err)
		}
	}
	s := bp.Stats()
	want := `
# HELP warmpath_message_cache_lookups_total Lookups in the parsed-message cache, by result: hit (reused) or miss.
# TYPE warmpath_message_cache_lookups_total counter
warmpath_message_cache_lookups_total{result="hit"} 2
warmpath_message_cache_lookups_total{result="miss"} 2
# HELP warmpath_message_cache_entries Entries the parsed-message cache holds.
# TYPE warmpath_message_cache_entries gauge
warmpath_message_cache_entries 2
`
	if err := testutil.CollectAndCompare(bp.Collector(), strings.NewReader(want),
		"warmpath_message_cache_lookups_total", "warmpath_message_cache_entries"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(bp.Collector())
	if got := gathered(t, reg)["warmpath_message_cache_bytes"]; got != float64(s.Bytes) || got <= 0 {
		t.Fatalf("bytes = %v, want %d", got, s.Bytes)
	}
	// A parser without a cache registers and reports nothing.
	if n := testutil.CollectAndCount(NewBodyParser(0).Collector()); n != 0 {
		t.Fatalf("a nil parser reported %d metrics", n)
	}
}

// gathered is the value of each single-series metric reg gathers, by name.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		if ms := mf.GetMetric(); len(ms) == 1 {
			found[mf.GetName()] = ms[0].GetGauge().GetValue() + ms[0].GetCounter().GetValue()
		}
	}
	return found
}

// qwen3Pipeline returns a qwen3 pipeline with a 1 MiB cache whose
// metrics are on a registry of its own.
func qwen3Pipeline(t *testing.T) (*Pipeline, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewPipelineMetrics(component.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline("qwen3", filepath.Join("testdata", "models", "qwen3"), 1<<20, m)
	if err != nil {
		t.Fatal(err)
	}
	return p, reg
}

func TestPromptCacheMetrics(t *testing.T) {
	t.Parallel()
	p, reg := qwen3Pipeline(t)
	text := strings.Repeat("the system prompt that every request repeats. ", 24) // past checkpointSpacing
	p.cache.Encode(text, false)
	p.cache.Encode(text+"and a question after it", false)
	s := p.cache.Stats()
	if s.Hits != 1 || s.Misses != 1 {
		t.Fatalf("stats %+v, want one hit and one miss", s)
	}
	want := `
# HELP warmpath_prompt_cache_lookups_total Lookups in the prompt prefix cache, by result: hit (reused) or miss.
# TYPE warmpath_prompt_cache_lookups_total counter
warmpath_prompt_cache_lookups_total{model="qwen3",result="hit"} 1
warmpath_prompt_cache_lookups_total{model="qwen3",result="miss"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "warmpath_prompt_cache_lookups_total"); err != nil {
		t.Fatal(err)
	}
	found := gathered(t, reg)
	if found["warmpath_prompt_cache_entries"] != float64(s.Entries) || found["warmpath_prompt_cache_bytes"] != float64(s.Bytes) ||
		found["warmpath_prompt_cache_retokenized_bytes_total"] != float64(s.TailBytes) || s.TailBytes == 0 {
		t.Fatalf("gathered %v, stats %+v", found, s)
	}
}

func TestRenderMemoMetrics(t *testing.T) {
	t.Parallel()
	p, reg := qwen3Pipeline(t)
	bp := NewBodyParser(1 << 20)
	// Messages long enough for the message cache to hand them back as
	// the same values.
	q1 := strings.Repeat("a first question, long enough to be looked up ", 3)
	turn1 := `{"messages":[{"role":"user","content":"` + q1 + `"}]}`
	turn2 := `{"messages":[{"role":"user","content":"` + q1 + `"},{"role":"assistant","content":"an answer"},{"role":"user","content":"a second question"}]}`
	for _, body := range []string{turn1, turn2, turn2} {
		b, err := bp.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := p.TokenizeBody(t.Context(), KindChat, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	// The first question is marked on turn 1 and recorded on turn 2 (a
	// message seen once is not recorded), and replays when turn 2 comes
	// again. The other two are too short for the message cache: each turn
	// parses them anew, so each is marked and never seen again.
	want := `
# HELP warmpath_render_memo_lookups_total Lookups in the chat template's render memo, by result: hit (reused) or miss.
# TYPE warmpath_render_memo_lookups_total counter
warmpath_render_memo_lookups_total{model="qwen3",result="hit"} 1
warmpath_render_memo_lookups_total{model="qwen3",result="miss"} 6
# HELP warmpath_render_memo_entries Entries the chat template's render memo holds.
# TYPE warmpath_render_memo_entries gauge
warmpath_render_memo_entries{model="qwen3"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "warmpath_render_memo_lookups_total", "warmpath_render_memo_entries"); err != nil {
		t.Fatal(err)
	}
	if got := gathered(t, reg)["warmpath_render_memo_bytes"]; got <= 0 || got > 1<<20/4 {
		t.Fatalf("render memo bytes = %v, want some, within a quarter of the 1 MiB cache", got)
	}
}
