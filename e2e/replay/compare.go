package replay

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Comparison holds reports of the same workload under different labels
// (routing policies), for side-by-side tables and plots.
type Comparison struct {
	// Labels lists the reports' labels in table order: sorted, with
	// Baseline first when set.
	Labels []string
	// Reports maps each label to its report.
	Reports map[string]*Report
	// Baseline is the label others are compared against ("" for none).
	Baseline string
	// Warnings notes reports that did not run the same workload (seed,
	// workload or load differ), which makes the comparison unfair.
	Warnings []string
}

// ErrEmptyComparison is returned by Compare for no reports.
var ErrEmptyComparison = errors.New("compare: no reports")

// Compare merges reports keyed by label into one comparison. baseline, when
// not empty, must be one of the labels; ratios in the Markdown table are
// relative to it. A report's own Label is ignored in favour of its key.
func Compare(reports map[string]*Report, baseline string) (*Comparison, error) {
	if len(reports) == 0 {
		return nil, ErrEmptyComparison
	}
	if _, ok := reports[baseline]; baseline != "" && !ok {
		return nil, fmt.Errorf("compare: baseline %q is not among the reports", baseline)
	}
	c := &Comparison{Reports: reports, Baseline: baseline}
	for label, rep := range reports {
		if rep == nil {
			return nil, fmt.Errorf("compare: report %q is nil", label)
		}
		c.Labels = append(c.Labels, label)
	}
	slices.SortFunc(c.Labels, func(a, b string) int {
		switch {
		case a == baseline:
			return -1
		case b == baseline:
			return 1
		}
		return strings.Compare(a, b)
	})
	ref := reports[c.Labels[0]]
	for _, label := range c.Labels[1:] {
		rep := reports[label]
		if rep.Seed != ref.Seed {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s used seed %d, %s seed %d", label, rep.Seed, c.Labels[0], ref.Seed))
		}
		if rep.Workload.Kind != ref.Workload.Kind || rep.Load.Kind != ref.Load.Kind {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s ran %s/%s, %s ran %s/%s", label,
				rep.Workload.Kind, rep.Load.Kind, c.Labels[0], ref.Workload.Kind, ref.Load.Kind))
		}
	}
	return c, nil
}

// WriteMarkdown writes c as Markdown: one row per label and run with
// latency percentiles, throughput, goodput, cache hit rate and SLO verdict,
// then peak goodput per label.
func WriteMarkdown(w io.Writer, c *Comparison) error {
	var b strings.Builder
	slo := "every request succeeds"
	if s := c.Reports[c.Labels[0]].SLO.String(); s != "" {
		slo = s
	}
	fmt.Fprintf(&b, "SLO: `%s`\n\n", slo)
	b.WriteString("| label | run | requests | failed | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | E2E p50 | E2E p90 | req/min | goodput/min | cache hit | SLO |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, label := range c.Labels {
		for _, run := range c.Reports[label].Runs {
			s := run.Summary
			met := "met"
			if !s.SLOMet {
				met = "missed"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f%% | %s |\n",
				mdEscape(label), mdEscape(run.Name), s.Requests, s.Failed,
				fmtStat(s.TTFT.P50, s.TTFT.Count), fmtStat(s.TTFT.P90, s.TTFT.Count), fmtStat(s.TTFT.P99, s.TTFT.Count),
				fmtStat(s.ITL.P50, s.ITL.Count), fmtStat(s.E2E.P50, s.E2E.Count), fmtStat(s.E2E.P90, s.E2E.Count),
				s.RequestsPerMinute, s.Goodput*60, s.CacheHitRate*100, met)
		}
	}
	b.WriteString("\n| label | peak goodput (req/min meeting the SLO) |")
	if c.Baseline != "" {
		fmt.Fprintf(&b, " TTFT p50 vs %s |", mdEscape(c.Baseline))
	}
	b.WriteString("\n|---|---:|")
	if c.Baseline != "" {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	base := c.Reports[c.Baseline]
	for _, label := range c.Labels {
		rep := c.Reports[label]
		fmt.Fprintf(&b, "| %s | %.1f |", mdEscape(label), rep.PeakGoodput)
		if base != nil {
			b.WriteString(" " + ratio(firstP50(rep), firstP50(base)) + " |")
		}
		b.WriteString("\n")
	}
	for _, warn := range c.Warnings {
		fmt.Fprintf(&b, "\n> warning: %s\n", warn)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write markdown: %w", err)
	}
	return nil
}

// firstP50 is the median TTFT of a report's first run, 0 when it has none.
func firstP50(rep *Report) float64 {
	if len(rep.Runs) == 0 {
		return 0
	}
	return rep.Runs[0].Summary.TTFT.P50
}

func ratio(v, base float64) string {
	if base <= 0 || v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v/base)
}

func fmtStat(v float64, n int) string {
	if n == 0 {
		return "–"
	}
	return fmtSeconds(v)
}

// mdEscape keeps a label from breaking a table cell.
func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
