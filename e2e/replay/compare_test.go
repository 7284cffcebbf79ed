package replay

import (
	"bytes"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeReport builds a report whose TTFTs are base, 2·base, … n·base, at
// the given loads (sessions/s), with goodput falling off past capacity.
func fakeReport(label string, base time.Duration, n int, rates []float64, capacity float64) *Report {
	slo, _ := ParseSLO("ttft:p90<=2s")
	rep := &Report{Label: label, Seed: 1, SLO: slo,
		Workload: WorkloadConfig{Kind: WorkloadSynthetic}, Load: LoadConfig{Kind: LoadSweep}}
	for _, rate := range rates {
		slow := time.Duration(1)
		if rate > capacity {
			slow = time.Duration(rate / capacity * 4)
		}
		var results []Result
		for i := range n {
			r := okResult(time.Duration(i+1)*base*slow, 3*time.Second)
			r.Session = label + string(rune('a'+i))
			results = append(results, r)
		}
		run := RunReport{Name: runSpec{Kind: LoadPoisson, Rate: rate}.name(), Kind: LoadPoisson, Rate: rate, Requests: results}
		run.Summary = summarize(results, time.Duration(float64(n)/rate*float64(time.Second)), slo)
		rep.Runs = append(rep.Runs, run)
	}
	rep.PeakGoodput = peakGoodput(rep.Runs)
	return rep
}

func testComparison(t *testing.T) *Comparison {
	t.Helper()
	rates := []float64{0.5, 1, 2, 4}
	c, err := Compare(map[string]*Report{
		"random":   fakeReport("random", 100*ms, 20, rates, 0.8),
		"warmpath": fakeReport("warmpath", 20*ms, 20, rates, 3),
	}, "random")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompareMarkdown(t *testing.T) {
	t.Parallel()
	c := testComparison(t)
	if strings.Join(c.Labels, ",") != "random,warmpath" || len(c.Warnings) != 0 {
		t.Fatalf("labels %v warnings %v", c.Labels, c.Warnings)
	}
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, c); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"SLO: `ttft:p90<=2s`",
		// TTFTs 0.1 s … 2 s: p50 interpolates to 1.05 s, p90 to 1.81 s.
		"| random | poisson@0.5/s | 20 | 0 | 1.05 s | 1.81 s | 1.98 s |",
		"| random | poisson@1/s | 20 | 0 | 5.25 s | 9.05 s | 9.90 s | 10 ms | 3.00 s | 3.00 s | 60.0 | 12.0 | 50.0% | missed |",
		"| warmpath | poisson@0.5/s | 20 | 0 | 210 ms | 362 ms | 396 ms |",
		// random meets the SLO only at 0.5/s (30 req/min); warmpath up to
		// 4/s, where its TTFTs are five times slower but p90 is 1.81 s.
		"| random | 30.0 | 1.00× |",
		"| warmpath | 240.0 | 0.20× |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if got := strings.Count(md, "\n| random | poisson"); got != 4 {
		t.Errorf("%d random rows, want 4", got)
	}
}

func TestCompareErrorsAndWarnings(t *testing.T) {
	t.Parallel()
	if _, err := Compare(nil, ""); !errors.Is(err, ErrEmptyComparison) {
		t.Fatalf("err = %v", err)
	}
	a := fakeReport("a", ms, 2, []float64{1}, 5)
	if _, err := Compare(map[string]*Report{"a": a}, "b"); err == nil {
		t.Fatal("unknown baseline accepted")
	}
	b := fakeReport("b", ms, 2, []float64{1}, 5)
	b.Seed = 99
	c, err := Compare(map[string]*Report{"a": a, "b": b}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "seed 99") {
		t.Fatalf("warnings %v", c.Warnings)
	}
}

func TestWritePlots(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "plots")
	paths, err := WritePlots(dir, testComparison(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 6 {
		t.Fatalf("paths %v, want the TTFT CDF, the E2E CDF and goodput, each in SVG and PNG", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(p) {
		case ".svg":
			if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("warmpath")) {
				t.Fatalf("%s is not an SVG naming the labels", p)
			}
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			// Count non-white pixels: axes, lines and text must be drawn.
			bounds, ink := img.Bounds(), 0
			for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
				for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
					if r, g, b, _ := img.At(x, y).RGBA(); r&g&b < 0xf000 {
						ink++
					}
				}
			}
			if ink < 500 {
				t.Fatalf("%s: only %d inked pixels", p, ink)
			}
		}
	}
}

func TestCDFPoints(t *testing.T) {
	t.Parallel()
	pts := cdfPoints([]float64{3, 1, 2})
	want := []struct{ x, y float64 }{{1, 0}, {1, 1.0 / 3}, {2, 1.0 / 3}, {2, 2.0 / 3}, {3, 2.0 / 3}, {3, 1}}
	for i, w := range want {
		if pts[i].X != w.x || pts[i].Y != w.y {
			t.Fatalf("point %d = %v, want %v", i, pts[i], w)
		}
	}
}
