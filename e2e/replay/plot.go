package replay

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot file base names written by WritePlots, each as .svg and .png.
const (
	PlotTTFTCDF = "ttft-cdf"
	PlotE2ECDF  = "e2e-cdf"
	PlotGoodput = "goodput-vs-load"
)

// WritePlots draws c into dir (created if missing): the TTFT and the
// end-to-end latency CDFs of each label (of each label and run when a
// report has several runs) and goodput versus offered load per label, each
// as SVG and PNG. It returns the paths written.
func WritePlots(dir string, c *Comparison) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("write plots: %w", err)
	}
	cdf, err := cdfPlot(c, "Time to first token, CDF", "TTFT (s)", func(r *Result) time.Duration { return r.TTFT })
	if err != nil {
		return nil, err
	}
	e2e, err := cdfPlot(c, "End-to-end latency, CDF", "E2E (s)", func(r *Result) time.Duration { return r.E2E })
	if err != nil {
		return nil, err
	}
	good, err := goodputPlot(c)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, p := range []struct {
		name string
		plot *plot.Plot
	}{{PlotTTFTCDF, cdf}, {PlotE2ECDF, e2e}, {PlotGoodput, good}} {
		for _, ext := range []string{".svg", ".png"} {
			path := filepath.Join(dir, p.name+ext)
			if err := p.plot.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
				return paths, fmt.Errorf("write plot %s: %w", path, err)
			}
			paths = append(paths, path)
		}
	}
	return paths, nil
}

// cdfPlot draws the empirical CDF of one latency (value) of successful
// requests.
func cdfPlot(c *Comparison, title, xlabel string, value func(*Result) time.Duration) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Min = 0
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	var lines []any
	for _, label := range c.Labels {
		rep := c.Reports[label]
		for _, run := range rep.Runs {
			var vals []float64
			for i := range run.Requests {
				if run.Requests[i].OK() {
					vals = append(vals, value(&run.Requests[i]).Seconds())
				}
			}
			if len(vals) == 0 {
				continue
			}
			name := label
			if len(rep.Runs) > 1 {
				name = label + " " + run.Name
			}
			lines = append(lines, name, cdfPoints(vals))
		}
	}
	if len(lines) > 0 {
		if err := plotutil.AddLines(p, lines...); err != nil {
			return nil, fmt.Errorf("plot %s: %w", title, err)
		}
	}
	return p, nil
}

// cdfPoints returns the empirical CDF as a step line: at each sorted value
// the fraction of values at or below it.
func cdfPoints(vals []float64) plotter.XYs {
	v := sortedCopy(vals)
	pts := make(plotter.XYs, 0, 2*len(v))
	n := float64(len(v))
	for i, x := range v {
		pts = append(pts, plotter.XY{X: x, Y: float64(i) / n}, plotter.XY{X: x, Y: float64(i+1) / n})
	}
	return pts
}

// loadPoint is one run's offered load and goodput, in requests per minute.
type loadPoint struct{ load, goodput float64 }

// loadPoints returns a report's runs as (load, goodput) points sorted by
// load. An open-loop run's load is its offered rate scaled by the mean
// turns per session; a closed loop's is its achieved request rate.
func loadPoints(rep *Report) []loadPoint {
	var pts []loadPoint
	for _, run := range rep.Runs {
		s := run.Summary
		load := s.RequestsPerMinute
		if run.Rate > 0 {
			sessions := map[string]bool{}
			for _, r := range run.Requests {
				sessions[r.Session] = true
			}
			turns := 1.0
			if len(sessions) > 0 {
				turns = float64(len(run.Requests)) / float64(len(sessions))
			}
			load = run.Rate * 60 * turns
		}
		pts = append(pts, loadPoint{load, s.Goodput * 60})
	}
	slices.SortFunc(pts, func(a, b loadPoint) int {
		switch {
		case a.load < b.load:
			return -1
		case a.load > b.load:
			return 1
		}
		return 0
	})
	return pts
}

// goodputPlot draws goodput against load, one line per label.
func goodputPlot(c *Comparison) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Goodput versus load"
	if slo := c.Reports[c.Labels[0]].SLO.String(); slo != "" {
		p.Title.Text += " (SLO " + slo + ")"
	}
	p.X.Label.Text = "offered load (requests/min)"
	p.Y.Label.Text = "goodput (requests/min within SLO)"
	p.Y.Min = 0
	p.X.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var lines []any
	for _, label := range c.Labels {
		pts := loadPoints(c.Reports[label])
		if len(pts) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			xys[i] = plotter.XY{X: pt.load, Y: pt.goodput}
		}
		lines = append(lines, label, xys)
	}
	if len(lines) > 0 {
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return nil, fmt.Errorf("plot goodput: %w", err)
		}
	}
	return p, nil
}
