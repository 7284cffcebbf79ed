package replay

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Metric names a per-request latency measure.
type Metric string

// The latency measures an SLO can bound.
const (
	MetricTTFT Metric = "ttft" // time to first token
	MetricITL  Metric = "itl"  // mean inter-token latency of the request
	MetricE2E  Metric = "e2e"  // end-to-end request latency
)

// Objective bounds one quantile of one metric: "90% of TTFT ≤ 8 s" is
// {Metric: ttft, Quantile: 0.9, Max: 8s}.
type Objective struct {
	Metric   Metric
	Quantile float64 // in (0, 1]
	Max      time.Duration
}

// String returns the objective as ParseSLO reads it, e.g. "ttft:p90<=8s".
func (o Objective) String() string {
	return fmt.Sprintf("%s:p%s<=%s", o.Metric, strconv.FormatFloat(o.Quantile*100, 'f', -1, 64), o.Max)
}

// SLO is a set of objectives a run must all meet. The zero SLO has no
// objectives and is met by any run in which every request succeeded.
//
// A run meets an objective when the given quantile of the metric over all
// its requests is within Max, failed requests counting as infinitely slow.
// A request counts toward goodput when it succeeded and each of its metrics
// is within every objective's Max.
type SLO struct {
	Objectives []Objective
}

// ParseSLO reads a comma-separated list of objectives "METRIC:pQ<=DURATION",
// e.g. "ttft:p90<=8s,e2e:p99<=60s". Metrics are ttft, itl and e2e.
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		metric, rest, ok := strings.Cut(part, ":")
		q, limit, ok2 := strings.Cut(rest, "<=")
		if !ok || !ok2 || !strings.HasPrefix(q, "p") {
			return SLO{}, fieldErr("slo", "%q is not METRIC:pQ<=DURATION", part)
		}
		m := Metric(strings.ToLower(strings.TrimSpace(metric)))
		if m != MetricTTFT && m != MetricITL && m != MetricE2E {
			return SLO{}, fieldErr("slo", "unknown metric %q (ttft, itl, e2e)", metric)
		}
		pct, err := strconv.ParseFloat(strings.TrimSpace(q[1:]), 64)
		if err != nil || !(pct > 0 && pct <= 100) {
			return SLO{}, fieldErr("slo", "quantile %q must be in (0, 100]", q)
		}
		d, err := time.ParseDuration(strings.TrimSpace(limit))
		if err != nil || d <= 0 {
			return SLO{}, fieldErr("slo", "limit %q must be a positive duration", limit)
		}
		slo.Objectives = append(slo.Objectives, Objective{Metric: m, Quantile: pct / 100, Max: d})
	}
	return slo, nil
}

// String returns the SLO in ParseSLO's syntax.
func (s SLO) String() string {
	parts := make([]string, len(s.Objectives))
	for i, o := range s.Objectives {
		parts[i] = o.String()
	}
	return strings.Join(parts, ",")
}

// MarshalText implements encoding.TextMarshaler.
func (s SLO) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseSLO.
func (s *SLO) UnmarshalText(b []byte) error {
	v, err := ParseSLO(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// value returns r's measure of m.
func (r *Result) value(m Metric) time.Duration {
	switch m {
	case MetricTTFT:
		return r.TTFT
	case MetricITL:
		return r.ITL
	default:
		return r.E2E
	}
}

// good reports whether r succeeded within every objective's limit.
func (s SLO) good(r *Result) bool {
	if !r.OK() {
		return false
	}
	for _, o := range s.Objectives {
		if r.value(o.Metric) > o.Max {
			return false
		}
	}
	return true
}

// Attainment returns the share of results that succeeded with every
// metric within every objective's limit (the requests goodput counts);
// NaN for no results.
func (s SLO) Attainment(results []Result) float64 {
	if len(results) == 0 {
		return math.NaN()
	}
	good := 0
	for i := range results {
		if s.good(&results[i]) {
			good++
		}
	}
	return float64(good) / float64(len(results))
}

// met reports whether results meet every objective, and an explanation of
// the first that fails ("" when met).
func (s SLO) met(results []Result) (bool, string) {
	if len(results) == 0 {
		return false, "no requests"
	}
	if len(s.Objectives) == 0 {
		for i := range results {
			if !results[i].OK() {
				return false, "a request failed"
			}
		}
		return true, ""
	}
	for _, o := range s.Objectives {
		vals := make([]float64, len(results))
		for i := range results {
			vals[i] = inf
			if results[i].OK() {
				vals[i] = results[i].value(o.Metric).Seconds()
			}
		}
		if q := quantile(sortedCopy(vals), o.Quantile); q > o.Max.Seconds() {
			return false, fmt.Sprintf("%s: %s is %s", o, o.Metric, fmtSeconds(q))
		}
	}
	return true, ""
}
