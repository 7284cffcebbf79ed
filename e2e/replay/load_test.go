package replay

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"
)

func TestArrivals(t *testing.T) {
	t.Parallel()
	sessions := make([]Session, 2000)
	for i := range sessions {
		sessions[i].Arrival = time.Duration(i) * 100 * time.Millisecond
	}
	t.Run("constant", func(t *testing.T) {
		t.Parallel()
		at := arrivals(runSpec{Kind: LoadConstant, Rate: 4}, sessions[:5], 1)
		want := []time.Duration{0, 250 * ms, 500 * ms, 750 * ms, time.Second}
		if !slices.Equal(at, want) {
			t.Fatalf("arrivals %v, want %v", at, want)
		}
	})
	t.Run("throughput", func(t *testing.T) {
		t.Parallel()
		for _, a := range arrivals(runSpec{Kind: LoadThroughput}, sessions[:5], 1) {
			if a != 0 {
				t.Fatalf("throughput arrival %v, want 0", a)
			}
		}
	})
	t.Run("trace scaled", func(t *testing.T) {
		t.Parallel()
		at := arrivals(runSpec{Kind: LoadTrace, TimeScale: 4}, sessions[:3], 1)
		want := []time.Duration{0, 25 * ms, 50 * ms}
		if !slices.Equal(at, want) {
			t.Fatalf("arrivals %v, want %v", at, want)
		}
	})
	t.Run("poisson", func(t *testing.T) {
		t.Parallel()
		spec := runSpec{Kind: LoadPoisson, Rate: 5}
		a, b := arrivals(spec, sessions, 42), arrivals(spec, sessions, 42)
		if !slices.Equal(a, b) {
			t.Fatal("same seed, different arrivals")
		}
		if c := arrivals(spec, sessions, 43); slices.Equal(a, c) {
			t.Fatal("different seed, same arrivals")
		}
		if a[0] != 0 || !slices.IsSorted(a) {
			t.Fatal("arrivals must start at 0 and never go back")
		}
		// 2000 exponential gaps of mean 0.2 s: the mean gap is within 10%
		// (about 4.5 standard errors) of 0.2 s, and so is its stdev, as
		// for a Poisson process. The seed is fixed, so this cannot flake.
		gaps := make([]float64, len(a)-1)
		var sum float64
		for i := range gaps {
			gaps[i] = (a[i+1] - a[i]).Seconds()
			sum += gaps[i]
		}
		mean := sum / float64(len(gaps))
		var ss float64
		for _, g := range gaps {
			ss += (g - mean) * (g - mean)
		}
		sd := math.Sqrt(ss / float64(len(gaps)))
		if math.Abs(mean-0.2) > 0.02 || math.Abs(sd-0.2) > 0.02 {
			t.Fatalf("gap mean %.3f s, sd %.3f s; want both ≈ 0.2 s", mean, sd)
		}
	})
}

func TestSweepRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lo, hi float64
		n      int
		want   []float64
	}{
		{"four between", 1, 6, 4, []float64{2, 3, 4, 5}},
		{"none", 1, 6, 0, nil},
		{"inverted", 5, 1, 3, []float64{2, 3, 4}},
		{"equal", 2, 2, 1, []float64{3}},
		{"zero", 0, 0, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := sweepRates(tt.lo, tt.hi, tt.n); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSearchRate runs the goodput search against a synthetic latency curve:
// TTFT p90 = 0.2 s / (1 − rate/capacity), which meets "p90 ≤ 2 s" up to
// rate = 0.9 × capacity.
func TestSearchRate(t *testing.T) {
	t.Parallel()
	curve := func(capacity float64) func(float64) (bool, error) {
		return func(rate float64) (bool, error) {
			if rate >= capacity {
				return false, nil
			}
			return 0.2/(1-rate/capacity) <= 2, nil
		}
	}
	tests := []struct {
		name     string
		capacity float64
		lo, hi   float64
		iters    int
		want     float64 // threshold
		tol      float64
	}{
		{"threshold inside", 10, 1, 20, 12, 9, (20 - 1) / 4096.0},
		{"everything meets", 1000, 1, 20, 5, 20, 0},
		{"nothing meets", 1, 2, 20, 5, 0, 0},
		{"lo equals hi", 10, 5, 5, 5, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			probes := 0
			probe := curve(tt.capacity)
			got, err := searchRate(tt.lo, tt.hi, tt.iters, func(r float64) (bool, error) { probes++; return probe(r) })
			if err != nil {
				t.Fatal(err)
			}
			if got > tt.want+1e-9 || tt.want-got > tt.tol+1e-9 {
				t.Fatalf("search found %v, want %v (−%v)", got, tt.want, tt.tol)
			}
			if ok, _ := probe(got); got > 0 && !ok {
				t.Fatalf("answer %v does not meet the SLO", got)
			}
			if probes > tt.iters+2 {
				t.Fatalf("%d probes, at most %d", probes, tt.iters+2)
			}
		})
	}
	t.Run("probe error stops", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		n := 0
		_, err := searchRate(1, 10, 5, func(r float64) (bool, error) {
			n++
			if n == 3 {
				return false, boom
			}
			return r < 5, nil
		})
		if !errors.Is(err, boom) || n != 3 {
			t.Fatalf("err %v after %d probes", err, n)
		}
	})
}

func TestLoadValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		l    LoadConfig
		ok   bool
	}{
		{"synchronous default", LoadConfig{}, true},
		{"concurrent needs n", LoadConfig{Kind: LoadConcurrent}, false},
		{"poisson needs rate", LoadConfig{Kind: LoadPoisson}, false},
		{"poisson nan", LoadConfig{Kind: LoadPoisson, Rate: math.NaN()}, false},
		{"goodput bounds", LoadConfig{Kind: LoadGoodput, MinRate: 5, MaxRate: 1}, false},
		{"goodput ok", LoadConfig{Kind: LoadGoodput, MinRate: 1, MaxRate: 5}, true},
		{"sweep bad rate", LoadConfig{Kind: LoadSweep, Rates: []float64{1, -1}}, false},
		{"bad arrivals", LoadConfig{Kind: LoadSweep, Arrivals: LoadTrace}, false},
		{"unknown", LoadConfig{Kind: "zigzag"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := tt.l
			l.setDefaults()
			err := l.Validate()
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
