package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// plotReplicaQuality is the base name of a replicas scenario's plot,
// written as .svg and .png.
const plotReplicaQuality = "quality-vs-replicas"

// replicaSeries are the plot's lines: the runs, by replica count, each
// line joins.
var replicaSeries = []struct {
	name string
	runs []replicaRun
}{
	{"warmpath, ledgers shared", []replicaRun{{"warmpath", 1, false}, {"warmpath", 2, true}, {"warmpath", 4, true}}},
	{"warmpath, not shared", []replicaRun{{"warmpath", 1, false}, {"warmpath", 2, false}}},
	{"prefix-max, not shared", []replicaRun{{"prefix-max", 1, false}, {"prefix-max", 2, false}}},
}

// plotReplicas draws median TTFT and SLO attainment against the replica
// count side by side into dir: each point the median over the rounds, its
// bar the rounds' range.
func plotReplicas(dir string, all []replicaResult, scenario string) error {
	ttft, err := replicaPanel(all, scenario+": median TTFT", "TTFT p50 (s)", false, func(r replicaResult) float64 { return r.summary().TTFT.P50 })
	if err != nil {
		return err
	}
	slo, err := replicaPanel(all, scenario+": SLO attainment", "share of requests within the SLO", true, func(r replicaResult) float64 { return r.attainment })
	if err != nil {
		return err
	}
	for _, ext := range []string{".svg", ".png"} {
		if err := saveSideBySide(filepath.Join(dir, plotReplicaQuality+ext), 11*vg.Inch, 4.5*vg.Inch, ttft, slo); err != nil {
			return err
		}
	}
	return nil
}

// replicaPanel plots value against the replica count, one line per
// replicaSeries entry that has runs, with the legend at the bottom right
// when legend is set.
func replicaPanel(all []replicaResult, title, ylabel string, legend bool, value func(replicaResult) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "router replicas behind Envoy"
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = 0.5, 4.5
	p.Y.Min = 0
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 2, Label: "2"}, {Value: 4, Label: "4"}})
	p.Legend.Top, p.Legend.Left = false, false
	p.Add(plotter.NewGrid())
	for i, s := range replicaSeries {
		var pts []plotter.XYer
		for _, c := range s.runs {
			var xys plotter.XYs
			for _, r := range all {
				if r.run == c {
					xys = append(xys, plotter.XY{X: float64(c.replicas), Y: value(r)})
				}
			}
			if len(xys) > 0 {
				pts = append(pts, xys)
			}
		}
		if len(pts) == 0 {
			continue
		}
		ep, err := plotutil.NewErrorPoints(plotutil.MedianAndMinMax, pts...)
		if err != nil {
			return nil, fmt.Errorf("plot replicas: %w", err)
		}
		line, points, err := plotter.NewLinePoints(ep)
		if err != nil {
			return nil, fmt.Errorf("plot replicas: %w", err)
		}
		line.Color, points.Color, points.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		line.Dashes = plotutil.Dashes(i)
		bars, err := plotter.NewYErrorBars(ep)
		if err != nil {
			return nil, fmt.Errorf("plot replicas: %w", err)
		}
		bars.Color = plotutil.Color(i)
		p.Add(line, points, bars)
		if legend {
			p.Legend.Add(s.name, line, points)
		}
	}
	return p, nil
}

// canvasWriter is a vector or image canvas that writes itself out.
type canvasWriter interface {
	vg.CanvasSizer
	io.WriterTo
}

// saveSideBySide draws the plots in one row into path (.svg or .png).
func saveSideBySide(path string, w, h vg.Length, ps ...*plot.Plot) error {
	var c canvasWriter
	switch filepath.Ext(path) {
	case ".svg":
		c = vgsvg.New(w, h)
	case ".png":
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
	default:
		return fmt.Errorf("write plot %s: unknown format", path)
	}
	tiles := draw.Tiles{Rows: 1, Cols: len(ps), PadX: vg.Inch / 2, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	cs := plot.Align([][]*plot.Plot{ps}, tiles, draw.New(c))
	for i, p := range ps {
		p.Draw(cs[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write plot %s: %w", path, err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write plot %s: %w", path, err)
	}
	return nil
}
