package replay

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vals []float64
		q    float64
		want float64
	}{
		{"median odd", []float64{3, 1, 2}, 0.5, 2},
		{"median even interpolates", []float64{1, 2, 3, 4}, 0.5, 2.5},
		{"p90 of 1..10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9.1},
		{"p0 is min", []float64{5, 7}, 0, 5},
		{"p100 is max", []float64{5, 7}, 1, 7},
		{"single", []float64{4}, 0.99, 4},
		{"infinite tail", []float64{1, 2, inf}, 0.9, inf},
		{"infinite beyond", []float64{1, 2, 3, inf}, 0.5, 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := quantile(sortedCopy(tt.vals), tt.q); math.Abs(got-tt.want) > 1e-12 && got != tt.want {
				t.Fatalf("quantile(%v, %v) = %v, want %v", tt.vals, tt.q, got, tt.want)
			}
		})
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Fatal("quantile of nothing is not NaN")
	}
}

func TestParseSLO(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []Objective
		wantErr bool
	}{
		{"ttft:p90<=8s", []Objective{{MetricTTFT, 0.9, 8 * time.Second}}, false},
		{" ttft:p90<=8s , e2e:p99<=1m ", []Objective{{MetricTTFT, 0.9, 8 * time.Second}, {MetricE2E, 0.99, time.Minute}}, false},
		{"ITL:p50<=50ms", []Objective{{MetricITL, 0.5, 50 * time.Millisecond}}, false},
		{"", nil, false},
		{"ttft<=8s", nil, true},
		{"tpot:p90<=8s", nil, true},
		{"ttft:p0<=8s", nil, true},
		{"ttft:p101<=8s", nil, true},
		{"ttft:p90<=-1s", nil, true},
		{"ttft:90<=8s", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			slo, err := ParseSLO(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(slo.Objectives, tt.want) {
				t.Fatalf("ParseSLO = %v, %v; want %v", slo.Objectives, err, tt.want)
			}
			back, err := ParseSLO(slo.String())
			if err != nil || !reflect.DeepEqual(back, slo) {
				t.Fatalf("round trip %q: %v, %v", slo.String(), back, err)
			}
		})
	}
}

func okResult(ttft, e2e time.Duration) Result {
	return Result{Status: 200, TTFT: ttft, E2E: e2e, ITL: 10 * ms, PromptTokens: 100, CompletionTokens: 10, CachedTokens: 50}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	slo, err := ParseSLO("ttft:p90<=1s")
	if err != nil {
		t.Fatal(err)
	}
	var results []Result
	for i := range 9 {
		r := okResult(time.Duration(i+1)*100*ms, 2*time.Second)
		r.Worker = []string{"w0", "w1", "w2"}[i%3]
		results = append(results, r)
	}
	results = append(results, Result{Status: 503, Error: "http 503: busy", PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1})
	s := summarize(results, 10*time.Second, slo)
	if s.Requests != 10 || s.Succeeded != 9 || s.Failed != 1 || s.Errors["http 503"] != 1 {
		t.Fatalf("counts %+v", s)
	}
	if s.TTFT.P50 != 0.5 || s.TTFT.Max != 0.9 || s.TTFT.Count != 9 {
		t.Fatalf("ttft stats %+v", s.TTFT)
	}
	if s.RequestRate != 0.9 || math.Abs(s.RequestsPerMinute-54) > 1e-9 {
		t.Fatalf("rate %v/s %v/min", s.RequestRate, s.RequestsPerMinute)
	}
	// Nine good requests out of ten, but the failure counts as infinitely
	// slow: p90 interpolates between 0.9 s and ∞, so the SLO is missed.
	if s.SLOMet || s.Goodput != 0.9 {
		t.Fatalf("slo met %v goodput %v, want missed and 0.9/s", s.SLOMet, s.Goodput)
	}
	if a := slo.Attainment(results); a != 0.9 {
		t.Fatalf("attainment %v, want 9 of 10 within 1 s", a)
	}
	if a := slo.Attainment(nil); !math.IsNaN(a) {
		t.Fatalf("attainment of nothing %v, want NaN", a)
	}
	if s.CacheHitRate != 0.5 || s.UsageReported != 9 {
		t.Fatalf("cache hit %v from %d", s.CacheHitRate, s.UsageReported)
	}
	if !reflect.DeepEqual(s.Workers, map[string]int{"w0": 3, "w1": 3, "w2": 3}) {
		t.Fatalf("workers %v", s.Workers)
	}
	// Without the failure, p90 of 0.1..0.9 is 0.82 s: met.
	if s := summarize(results[:9], 10*time.Second, slo); !s.SLOMet || s.SLOMiss != "" {
		t.Fatalf("slo not met: %s", s.SLOMiss)
	}
	// A tighter SLO: p90 ≤ 0.5 s fails with an explanation.
	tight, _ := ParseSLO("ttft:p90<=500ms")
	if s := summarize(results[:9], 10*time.Second, tight); s.SLOMet || !strings.Contains(s.SLOMiss, "820 ms") {
		t.Fatalf("tight slo: met %v, miss %q", s.SLOMet, s.SLOMiss)
	}
}

func TestPeakGoodput(t *testing.T) {
	t.Parallel()
	runs := []RunReport{
		{Summary: Summary{SLOMet: true, RequestsPerMinute: 14}},
		{Summary: Summary{SLOMet: true, RequestsPerMinute: 103}},
		{Summary: Summary{SLOMet: false, RequestsPerMinute: 200}},
	}
	if got := peakGoodput(runs); got != 103 {
		t.Fatalf("peak %v, want 103", got)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	t.Parallel()
	slo, _ := ParseSLO("ttft:p90<=8s")
	rep := &Report{Label: "warmpath", Seed: 3, SLO: slo, Workload: WorkloadConfig{Kind: WorkloadChat, Model: "m",
		Chat: ChatConfig{Think: DurationDist{Mean: Duration(time.Second)}}},
		Runs: []RunReport{{Name: "synchronous", Requests: []Result{okResult(time.Second, 2*time.Second)}}}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"slo": "ttft:p90\u003c=8s"`) && !strings.Contains(buf.String(), `"slo": "ttft:p90<=8s"`) {
		t.Fatalf("slo not written as text:\n%s", buf.String())
	}
	back, err := ReadJSON(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back, rep)
	}
}
