package enginemetrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// want mirrors the *.want.json files written by testdata/gen_vllm_metrics.py.
type wantMetrics struct {
	Running            int          `json:"running"`
	Waiting            int          `json:"waiting"`
	KVCacheUsage       float64      `json:"kv_cache_usage"`
	PrefixCacheQueries float64      `json:"prefix_cache_queries"`
	PrefixCacheHits    float64      `json:"prefix_cache_hits"`
	Preemptions        float64      `json:"preemptions"`
	Engines            int          `json:"engines"`
	LoRA               *LoRAInfo    `json:"lora"`
	CacheConfig        *CacheConfig `json:"cache_config"`
	KVBlocks           int          `json:"kv_blocks"`
	TTFTCount          float64      `json:"ttft_count"`
	TTFTSeconds        float64      `json:"ttft_seconds"`
}

func TestParseFixtures(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.prom")
	if err != nil || len(files) < 3 {
		t.Fatalf("fixtures: %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			wb, err := os.ReadFile(strings.TrimSuffix(f, ".prom") + ".want.json")
			if err != nil {
				t.Fatal(err)
			}
			var want wantMetrics
			if err := json.Unmarshal(wb, &want); err != nil {
				t.Fatal(err)
			}
			got, err := Parse(text)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if math.Abs(got.KVCacheUsage-want.KVCacheUsage) > 1e-9 || !got.HasKVCacheUsage {
				t.Errorf("KVCacheUsage = %v (has %v), want %v", got.KVCacheUsage, got.HasKVCacheUsage, want.KVCacheUsage)
			}
			gotCmp := wantMetrics{
				Running: got.Running, Waiting: got.Waiting, KVCacheUsage: want.KVCacheUsage,
				PrefixCacheQueries: got.PrefixCacheQueries, PrefixCacheHits: got.PrefixCacheHits,
				Preemptions: got.Preemptions, Engines: got.Engines, LoRA: got.LoRA, CacheConfig: got.CacheConfig,
				KVBlocks: got.KVBlocks, TTFTCount: got.TTFTCount, TTFTSeconds: got.TTFTSeconds,
			}
			if got.HasTTFT != (want.TTFTCount > 0) {
				t.Errorf("HasTTFT %v with %v first tokens wanted", got.HasTTFT, want.TTFTCount)
			}
			if !reflect.DeepEqual(gotCmp, want) {
				g, _ := json.Marshal(gotCmp)
				t.Errorf("parsed\n %s\nwant\n %s", g, wb)
			}
		})
	}
}

func TestParseEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		text    string
		want    Metrics
		wantErr error
	}{
		{name: "empty", text: "", wantErr: ErrNotEngine},
		{name: "not vllm", text: "# TYPE up gauge\nup 1\n", wantErr: ErrNotEngine},
		{name: "garbage in a kept family", text: "vllm:num_requests_running{engine=\"0\" 3\n", wantErr: ErrMalformed},
		{name: "garbage elsewhere is skipped", text: "foo{{{ bar\nvllm:num_requests_waiting 2\n", want: Metrics{Waiting: 2, Engines: 1}},
		{name: "NaN", text: "vllm:num_requests_running NaN\n", wantErr: ErrInvalidValue},
		{name: "negative", text: "vllm:num_requests_waiting -1\n", wantErr: ErrInvalidValue},
		{name: "infinite usage", text: "vllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc +Inf\n", wantErr: ErrInvalidValue},
		{name: "bad block size", text: "vllm:num_requests_waiting 0\nvllm:cache_config_info{block_size=\"sixteen\"} 1\n", wantErr: ErrInvalidValue},
		{name: "bad max_lora", text: "vllm:num_requests_waiting 0\nvllm:lora_requests_info{max_lora=\"x\"} 1\n", wantErr: ErrInvalidValue},
		{
			name: "untyped, no trailing newline, CRLF-free minimal server",
			text: "vllm:num_requests_running{engine=\"0\"} 2\nvllm:num_requests_running{engine=\"1\"} 3\nvllm:num_requests_waiting 1",
			want: Metrics{Running: 5, Waiting: 1, Engines: 2},
		},
		{
			name: "old gpu names only",
			text: "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.5\nvllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\n",
			want: Metrics{Running: 1, Engines: 1, KVCacheUsage: 0.5, HasKVCacheUsage: true, PrefixCacheQueries: 10, PrefixCacheHits: 4},
		},
		{
			name: "new name wins over old",
			text: "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.25\n",
			want: Metrics{Running: 1, Engines: 1, KVCacheUsage: 0.25, HasKVCacheUsage: true},
		},
		{
			name: "prefix caching off, lowercase, None blocks",
			text: "vllm:num_requests_running 0\nvllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"false\",num_gpu_blocks=\"None\"} 1\n",
			want: Metrics{Engines: 1, CacheConfig: &CacheConfig{BlockSize: 16}},
		},
		{
			name: "kv blocks summed over engines",
			text: "vllm:num_requests_running 0\nvllm:cache_config_info{engine=\"1\",block_size=\"16\",num_gpu_blocks=\"100\"} 1\nvllm:cache_config_info{engine=\"0\",block_size=\"16\",num_gpu_blocks=\"120\"} 1\n",
			want: Metrics{Engines: 1, KVBlocks: 220, CacheConfig: &CacheConfig{BlockSize: 16, NumGPUBlocks: 120}},
		},
		{
			name: "lora: newest label set wins, empty lists",
			text: "vllm:num_requests_running 0\nvllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a\",waiting_lora_adapters=\"\"} 5\nvllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 9\n",
			want: Metrics{Engines: 1, LoRA: &LoRAInfo{MaxLoRA: 2, Running: []string{}, Waiting: []string{}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Parse([]byte(tc.text))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFilterExposition(t *testing.T) {
	t.Parallel()
	in := "# HELP vllm:num_requests_running Number.\n# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\"} 1.0\n# a comment\n# TYPE up gauge\nup 1\n" +
		"vllm:num_requests_running_extra 3\n#TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2"
	want := "# HELP vllm:num_requests_running Number.\n# TYPE vllm:num_requests_running gauge\n" +
		"vllm:num_requests_running{engine=\"0\"} 1.0\n#TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"
	if got := string(filterExposition(nil, []byte(in))); got != want {
		t.Fatalf("filterExposition =\n%q\nwant\n%q", got, want)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.prom")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("vllm:num_requests_running{engine=\"0\"} 1\n"))
	f.Add([]byte("# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\"} 1\n"))
	f.Add([]byte("vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\",,\"} 1e9\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrNotEngine) && !errors.Is(err, ErrInvalidValue) {
				t.Fatalf("undefined error %v", err)
			}
			return
		}
		if m.Running < 0 || m.Waiting < 0 || m.Engines < 1 || math.IsNaN(m.KVCacheUsage) {
			t.Fatalf("impossible load %+v", m)
		}
	})
}

func readFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestParserReuse(t *testing.T) {
	t.Parallel()
	var p Parser
	a, err := p.Parse(readFixture(t, "vllm-dp2.prom"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse([]byte("vllm:num_requests_running 1\n")); err != nil {
		t.Fatal(err)
	}
	b, err := p.Parse(readFixture(t, "vllm-dp2.prom"))
	if err != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("reused parser: %+v, %v; want %+v", b, err, a)
	}
}

func BenchmarkParse(b *testing.B) {
	for _, name := range []string{"vllm-single.prom", "vllm-dp2.prom"} {
		text := readFixture(b, name)
		b.Run(name+"/filtered", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				buf = filterExposition(buf[:0], text)
				if _, err := parseFiltered(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/expfmt-whole", func(b *testing.B) {
			// Reference: what a scrape would cost without the line filter.
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				p := expfmt.NewTextParser(model.LegacyValidation)
				if _, err := p.TextToMetricFamilies(bytes.NewReader(text)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
