package scoring

import (
	"math"
	"testing"
)

func TestWorkloadParts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		w            workload
		wantQueue    [numParams]float64
		wantPrefill  [numParams]float64
		wantUncached float64
	}{
		{
			name:         "idle, cold, fits one step",
			w:            workload{prompt: 1000, budget: 8192},
			wantPrefill:  [numParams]float64{1, 1000, 0, 1000, 0},
			wantUncached: 1000,
		},
		{
			name:         "cached prefix reads context but is not computed",
			w:            workload{prompt: 1000, cached: 992, budget: 8192},
			wantPrefill:  [numParams]float64{1, 8, 0, 992 + 8, 0},
			wantUncached: 8,
		},
		{
			name:         "full hit still computes one token",
			w:            workload{prompt: 1000, cached: 1000, budget: 8192},
			wantPrefill:  [numParams]float64{1, 1, 0, 1000 + 1, 0},
			wantUncached: 1,
		},
		{
			name:         "long prompt is chunked",
			w:            workload{prompt: 10000, budget: 4096},
			wantPrefill:  [numParams]float64{3, 10000, 0, 10000 * 4 / 2, 0},
			wantUncached: 10000,
		},
		{
			name:         "work ahead fills whole steps first",
			w:            workload{prompt: 1000, ahead: 9000, budget: 4096},
			wantQueue:    [numParams]float64{3, 9000, 0, 9000, 0},
			wantPrefill:  [numParams]float64{1, 1000, 0, 1000, 0},
			wantUncached: 1000,
		},
		{
			name:         "decoding alone costs half a step of waiting",
			w:            workload{prompt: 1000, decoding: 10, decodeCtx: 5000, budget: 8192},
			wantQueue:    [numParams]float64{0.5, 0, 5, 2500, 0},
			wantPrefill:  [numParams]float64{1, 1000, 10, 5000 + 1000, 0},
			wantUncached: 1000,
		},
		{
			name:         "requests ahead decode during the own prefill",
			w:            workload{prompt: 1000, ahead: 500, aheadReqs: 2, aheadCtx: 3000, budget: 8192},
			wantQueue:    [numParams]float64{1, 500, 0, 500, 0},
			wantPrefill:  [numParams]float64{1, 1000, 2, 3000 + 1000, 0},
			wantUncached: 1000,
		},
		{
			name:         "decodes take budget and time in every step",
			w:            workload{prompt: 4000, decoding: 100, decodeCtx: 50000, budget: 4096},
			wantQueue:    [numParams]float64{0.5, 0, 50, 25000, 0},
			wantPrefill:  [numParams]float64{2, 4000, 200, 2*50000 + 4000*3/2, 0}, // 4096-100 < 4000: two steps
			wantUncached: 4000,
		},
		{
			name:         "offloaded hit costs a share",
			w:            workload{prompt: 1000, cached: 800, offloaded: 400, offloadCost: 0.25, budget: 8192},
			wantPrefill:  [numParams]float64{1, 300, 0, 800 + 300, 0},
			wantUncached: 300,
		},
		{
			name:         "decodes never starve prefill entirely",
			w:            workload{prompt: 1024, decoding: 9000, budget: 8192},
			wantQueue:    [numParams]float64{0.5, 0, 4500, 0, 0},
			wantPrefill:  [numParams]float64{1, 1024, 9000, 1024, 0},
			wantUncached: 1024,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q, p := tt.w.parts()
			if q != tt.wantQueue || p != tt.wantPrefill || tt.w.uncached() != tt.wantUncached {
				t.Errorf("queue %v prefill %v uncached %v; want %v %v %v", q, p, tt.w.uncached(), tt.wantQueue, tt.wantPrefill, tt.wantUncached)
			}
			x := tt.w.features()
			for i := range numParams - 1 {
				if x[i] != q[i]+p[i] {
					t.Errorf("features[%d] = %v, want %v", i, x[i], q[i]+p[i])
				}
			}
			if x[numParams-1] != 1 {
				t.Errorf("overhead feature %v", x[numParams-1])
			}
		})
	}
}

func TestPredictParts(t *testing.T) {
	t.Parallel()
	m := DefaultConfig().Prior
	w := workload{prompt: 1000, ahead: 9000, budget: 4096}
	p := predictTTFT(m, &w, 1.5)
	q, pf := w.parts()
	v := m.vector()
	if math.Abs(p.queue-1.5*dot(q, v)) > 1e-12 || math.Abs(p.prefill-1.5*dot(pf, v)) > 1e-12 || p.overhead != m.RequestOverhead {
		t.Errorf("prediction %+v", p)
	}
	if math.Abs(p.total()-(p.queue+p.prefill+p.overhead)) > 1e-12 {
		t.Errorf("total %v", p.total())
	}
}

func TestKVFactor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		u, want float64
	}{{0, 1}, {0.9, 1}, {0.95, 1.5}, {1, 2}, {1.5, 2}, {math.NaN(), 1}, {-1, 1}}
	for _, tt := range tests {
		if got := kvFactor(tt.u, 0.9, 1); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("kvFactor(%v) = %v, want %v", tt.u, got, tt.want)
		}
	}
}
