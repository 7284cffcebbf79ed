package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/warmpath/warmpath/e2e/replay"
)

// plotTradeoffName is the base name of a scenario's first-token against
// whole-response plot, written as .svg and .png.
const plotTradeoffName = "ttft-vs-e2e"

// tradeoffPoint is one policy's medians in one scenario.
type tradeoffPoint struct {
	policy    string
	ttft, e2e float64
}

// tradeoffPoints returns each report's first run's TTFT and E2E medians,
// in the order of labels.
func tradeoffPoints(labels []string, reports map[string]*replay.Report) []tradeoffPoint {
	var out []tradeoffPoint
	for _, l := range labels {
		r := reports[l]
		if r == nil || len(r.Runs) == 0 {
			continue
		}
		s := r.Runs[0].Summary
		out = append(out, tradeoffPoint{policy: l, ttft: s.TTFT.P50, e2e: s.E2E.P50})
	}
	return out
}

// plotTradeoff draws each policy at its (median TTFT, median E2E) into dir:
// down and to the left is better on both; the warmpath objectives show
// what each trades.
func plotTradeoff(dir, scenario string, pts []tradeoffPoint) error {
	if len(pts) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = scenario + ": first token against whole response"
	p.X.Label.Text = "TTFT p50 (s)"
	p.Y.Label.Text = "E2E p50 (s)"
	p.Add(plotter.NewGrid())
	xys := make(plotter.XYs, len(pts))
	labels := make([]string, len(pts))
	for i, q := range pts {
		xys[i] = plotter.XY{X: q.ttft, Y: q.e2e}
		labels[i] = " " + q.policy
	}
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return fmt.Errorf("plot tradeoff: %w", err)
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(3)
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return fmt.Errorf("plot tradeoff: %w", err)
	}
	p.Add(sc, lb)
	// Room for the labels right of the points and around them.
	xmax := slices.MaxFunc(pts, func(a, b tradeoffPoint) int { return cmp.Compare(a.ttft, b.ttft) }).ttft
	ymin := slices.MinFunc(pts, func(a, b tradeoffPoint) int { return cmp.Compare(a.e2e, b.e2e) }).e2e
	ymax := slices.MaxFunc(pts, func(a, b tradeoffPoint) int { return cmp.Compare(a.e2e, b.e2e) }).e2e
	p.X.Min, p.X.Max = 0, xmax*1.35
	pad := (ymax - ymin) * 0.15
	if pad == 0 {
		pad = ymax * 0.1
	}
	p.Y.Min, p.Y.Max = max(ymin-pad, 0), ymax+pad
	for _, ext := range []string{".svg", ".png"} {
		if err := p.Save(7*vg.Inch, 5*vg.Inch, filepath.Join(dir, plotTradeoffName+ext)); err != nil {
			return fmt.Errorf("plot tradeoff: %w", err)
		}
	}
	return nil
}

// replot reads the reports a run of the chosen scenarios left under out
// (report-<policy>.json) and draws their plots again: the TTFT and E2E
// CDFs and the first token against whole response, without running
// anything.
func replot(out string, chosen []*scenario) error {
	for _, sc := range chosen {
		dir := filepath.Join(out, sc.name)
		files, err := filepath.Glob(filepath.Join(dir, "report-*.json"))
		if err != nil || len(files) == 0 {
			continue
		}
		reports := map[string]*replay.Report{}
		var labels []string
		for _, f := range files {
			label := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "report-"), ".json")
			rep, err := readReport(f)
			if err != nil {
				return err
			}
			reports[label] = rep
			labels = append(labels, label)
		}
		slices.Sort(labels)
		cmp, err := replay.Compare(reports, "")
		if err != nil {
			return err
		}
		if _, err := replay.WritePlots(dir, cmp); err != nil {
			return err
		}
		if err := plotTradeoff(dir, sc.name, tradeoffPoints(labels, reports)); err != nil {
			return err
		}
	}
	return nil
}

func readReport(path string) (*replay.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("replot: %w", err)
	}
	defer f.Close()
	rep, err := replay.ReadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("replot %s: %w", path, err)
	}
	return rep, nil
}
