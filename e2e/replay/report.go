package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

var inf = math.Inf(1)

// Result is the measure of one request.
type Result struct {
	// Session and Turn identify the request in the workload.
	Session string `json:"session"`
	Turn    int    `json:"turn"`
	// Group is the session's shared-prefix group ("" when none).
	Group string `json:"group,omitempty"`
	// Client is the index of the client (connection pool) that sent it.
	Client int `json:"client"`
	// Scheduled is when the load profile meant the session to start and
	// Sent when the request was written, both offsets from the run start.
	Scheduled time.Duration `json:"scheduled_ns"`
	Sent      time.Duration `json:"sent_ns"`
	// TTFT is the time from sending to the first token, ITL the mean gap
	// between tokens after it, E2E the time to the end of the response.
	// Zero when not observed.
	TTFT time.Duration `json:"ttft_ns"`
	ITL  time.Duration `json:"itl_ns"`
	E2E  time.Duration `json:"e2e_ns"`
	// Status is the HTTP status, 0 when no response arrived.
	Status int `json:"status"`
	// Error describes a failure: transport, HTTP status, malformed or
	// truncated stream, or an error event in the stream. Empty on success.
	Error string `json:"error,omitempty"`
	// PromptTokens, CompletionTokens and CachedTokens come from the usage
	// the server reported; -1 when it reported none.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens"`
	// Worker and Reason are the x-warmpath-worker and x-warmpath-reason
	// response headers, empty when absent.
	Worker string `json:"worker,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ReusedConn reports whether the request went over a kept-alive
	// connection.
	ReusedConn bool `json:"reused_conn"`
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Error == "" && r.Status == 200 }

// Stats summarises one latency measure over a run's successful requests, in
// seconds. All fields are zero when there were none.
type Stats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Summary is what one run measured.
type Summary struct {
	Requests  int `json:"requests"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Duration is from the run's start to its last response, in seconds.
	Duration float64 `json:"duration_s"`
	// RequestRate is completed requests per second over Duration;
	// RequestsPerMinute the same per minute.
	RequestRate       float64 `json:"request_rate"`
	RequestsPerMinute float64 `json:"requests_per_minute"`
	TTFT              Stats   `json:"ttft_s"`
	ITL               Stats   `json:"itl_s"`
	E2E               Stats   `json:"e2e_s"`
	// Goodput is requests per second that succeeded within every SLO limit.
	Goodput float64 `json:"goodput"`
	// SLOMet reports whether the run met the SLO; SLOMiss says why not.
	SLOMet  bool   `json:"slo_met"`
	SLOMiss string `json:"slo_miss,omitempty"`
	// PromptTokens and CachedTokens sum the usage of requests that reported
	// it (UsageReported of them); CacheHitRate is their ratio, 0 when no
	// request reported usage.
	UsageReported int     `json:"usage_reported"`
	PromptTokens  int64   `json:"prompt_tokens"`
	CachedTokens  int64   `json:"cached_tokens"`
	CacheHitRate  float64 `json:"cache_hit_rate"`
	// Workers counts requests per x-warmpath-worker value.
	Workers map[string]int `json:"workers,omitempty"`
	// Errors counts failures per error class (the text before the first
	// colon).
	Errors map[string]int `json:"errors,omitempty"`
}

// RunReport is one run at one load setting.
type RunReport struct {
	// Name labels the load ("poisson@2/s", "concurrent-8").
	Name string   `json:"name"`
	Kind LoadKind `json:"kind"`
	// Rate is the offered session rate of an open loop (sessions/s), 0 for
	// closed loops; Concurrency the streams of a closed loop.
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	// Seed is the workload seed the run used.
	Seed     int64    `json:"seed"`
	Summary  Summary  `json:"summary"`
	Requests []Result `json:"requests"`
}

// Report is everything one Run measured: one or more runs of the same
// workload against one target under one label (typically a routing policy).
type Report struct {
	Label    string         `json:"label"`
	Target   string         `json:"target"`
	Seed     int64          `json:"seed"`
	SLO      SLO            `json:"slo"`
	Workload WorkloadConfig `json:"workload"`
	Load     LoadConfig     `json:"load"`
	Clients  ClientConfig   `json:"clients"`
	Started  time.Time      `json:"started"`
	Runs     []RunReport    `json:"runs"`
	// PeakGoodput is the highest completed request rate (requests/minute)
	// among runs that met the SLO; 0 when none did.
	PeakGoodput float64 `json:"peak_goodput_rpm"`
	// SearchRate is the goodput search's answer (sessions/s), 0 otherwise.
	SearchRate float64 `json:"search_rate,omitempty"`
}

// summarize computes a run's summary. duration is the run's wall time.
func summarize(results []Result, duration time.Duration, slo SLO) Summary {
	s := Summary{Requests: len(results), Duration: duration.Seconds()}
	var ttft, itl, e2e []float64
	good := 0
	for i := range results {
		r := &results[i]
		if r.Worker != "" {
			if s.Workers == nil {
				s.Workers = map[string]int{}
			}
			s.Workers[r.Worker]++
		}
		if r.PromptTokens >= 0 && r.CachedTokens >= 0 {
			s.UsageReported++
			s.PromptTokens += int64(r.PromptTokens)
			s.CachedTokens += int64(r.CachedTokens)
		}
		if !r.OK() {
			s.Failed++
			if s.Errors == nil {
				s.Errors = map[string]int{}
			}
			s.Errors[errorClass(r)]++
			continue
		}
		s.Succeeded++
		ttft = append(ttft, r.TTFT.Seconds())
		e2e = append(e2e, r.E2E.Seconds())
		// ITL needs two tokens: usage says so, or, without usage, at
		// least two content deltas gave a non-zero gap.
		if r.CompletionTokens > 1 || (r.CompletionTokens < 0 && r.ITL > 0) {
			itl = append(itl, r.ITL.Seconds())
		}
		if slo.good(r) {
			good++
		}
	}
	s.TTFT, s.ITL, s.E2E = stats(ttft), stats(itl), stats(e2e)
	if s.Duration > 0 {
		s.RequestRate = float64(s.Succeeded) / s.Duration
		s.RequestsPerMinute = s.RequestRate * 60
		s.Goodput = float64(good) / s.Duration
	}
	if s.PromptTokens > 0 {
		s.CacheHitRate = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	s.SLOMet, s.SLOMiss = slo.met(results)
	return s
}

// errorClass is the part of a failure's message before the first colon.
func errorClass(r *Result) string {
	msg := r.Error
	if msg == "" {
		return fmt.Sprintf("http %d", r.Status)
	}
	for i := range len(msg) {
		if msg[i] == ':' {
			return msg[:i]
		}
	}
	return msg
}

func stats(vals []float64) Stats {
	if len(vals) == 0 {
		return Stats{}
	}
	v := sortedCopy(vals)
	var sum float64
	for _, x := range v {
		sum += x
	}
	return Stats{
		Count: len(v),
		Mean:  sum / float64(len(v)),
		P50:   quantile(v, 0.50),
		P90:   quantile(v, 0.90),
		P95:   quantile(v, 0.95),
		P99:   quantile(v, 0.99),
		Max:   v[len(v)-1],
	}
}

func sortedCopy(v []float64) []float64 {
	c := slices.Clone(v)
	slices.Sort(c)
	return c
}

// quantile returns the q-quantile of sorted values by linear interpolation
// between closest ranks (numpy's default), NaN for no values.
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := q * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	frac := pos - float64(lo)
	if frac == 0 || math.IsInf(sorted[hi], 1) {
		if frac == 0 {
			return sorted[lo]
		}
		return inf
	}
	return sorted[lo] + (sorted[hi]-sorted[lo])*frac
}

// peakGoodput returns the highest requests/minute among runs meeting the SLO.
func peakGoodput(runs []RunReport) float64 {
	best := 0.0
	for _, r := range runs {
		if r.Summary.SLOMet {
			best = max(best, r.Summary.RequestsPerMinute)
		}
	}
	return best
}

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON, so reports of separate
// processes can be compared.
func ReadJSON(r io.Reader) (*Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("read report: %w", err)
	}
	return &rep, nil
}

func fmtSeconds(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "∞"
	case math.IsNaN(s):
		return "n/a"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}
