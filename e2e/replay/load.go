package replay

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// LoadKind names a load profile.
type LoadKind string

// The load profiles. Synchronous, concurrent and throughput are closed
// loops (a fixed number of sessions in flight); constant, poisson and trace
// are open loops (sessions start at scheduled times whatever the server
// does); sweep and goodput run several of those.
const (
	LoadSynchronous LoadKind = "synchronous" // one session at a time
	LoadConcurrent  LoadKind = "concurrent"  // Concurrency sessions at a time
	LoadThroughput  LoadKind = "throughput"  // every session at once (capped by Concurrency when set)
	LoadConstant    LoadKind = "constant"    // Rate sessions per second, evenly spaced
	LoadPoisson     LoadKind = "poisson"     // Rate sessions per second, exponential gaps from the seed
	LoadTrace       LoadKind = "trace"       // the trace's own arrival times divided by TimeScale
	LoadSweep       LoadKind = "sweep"       // synchronous, throughput, then rates in between
	LoadGoodput     LoadKind = "goodput"     // search for the largest rate meeting the SLO
)

// LoadConfig is how sessions are started.
type LoadConfig struct {
	// Kind selects the profile. Default synchronous.
	Kind LoadKind `json:"kind" yaml:"kind"`
	// Concurrency is the number of parallel streams for concurrent, and an
	// upper bound on sessions in flight for the other profiles (0: none).
	Concurrency int `json:"concurrency,omitempty" yaml:"concurrency"`
	// Rate is sessions started per second for constant and poisson.
	Rate float64 `json:"rate,omitempty" yaml:"rate"`
	// Rates lists the sweep's rates (sessions/s). Empty: Steps rates spread
	// evenly between the measured synchronous and throughput rates.
	Rates []float64 `json:"rates,omitempty" yaml:"rates"`
	// Steps is the number of derived sweep rates. Default 5.
	Steps int `json:"steps,omitempty" yaml:"steps"`
	// Arrivals is the open-loop profile a sweep or goodput search runs at
	// each rate: constant or poisson. Default poisson.
	Arrivals LoadKind `json:"arrivals,omitempty" yaml:"arrivals"`
	// TimeScale divides trace arrival offsets: 2 replays a trace twice as
	// fast. Default 1.
	TimeScale float64 `json:"time_scale,omitempty" yaml:"time_scale"`
	// MinRate and MaxRate bound the goodput search (sessions/s).
	MinRate float64 `json:"min_rate,omitempty" yaml:"min_rate"`
	MaxRate float64 `json:"max_rate,omitempty" yaml:"max_rate"`
	// Iterations is the number of bisection steps of the goodput search
	// after its two bounds. Default 5.
	Iterations int `json:"iterations,omitempty" yaml:"iterations"`
	// MaxDuration stops starting new sessions this long after a run began
	// (0: no limit); sessions already started finish.
	MaxDuration Duration `json:"max_duration,omitempty" yaml:"max_duration"`
	// MinSessions keeps an open-loop run (constant, poisson, and the runs
	// of a sweep or search) starting sessions past MaxDuration until it has
	// started this many, so that a low rate's run still has a sample worth
	// a percentile (0: MaxDuration alone decides).
	MinSessions int `json:"min_sessions,omitempty" yaml:"min_sessions"`
	// FreshPrefixes regenerates the workload with a different seed for each
	// run of a sweep or search, so one run's cached prefixes do not help the
	// next. Off by default: every run sends the same requests.
	FreshPrefixes bool `json:"fresh_prefixes,omitempty" yaml:"fresh_prefixes"`
	// FreshPrompts regenerates the prompts with a different seed for each
	// run of a sweep or search but keeps the first run's shared prefixes, as
	// GuideLLM's sweep draws new prompts from one dataset: each run sends
	// new requests behind prefixes the workers may still hold.
	FreshPrompts bool `json:"fresh_prompts,omitempty" yaml:"fresh_prompts"`
}

func (l *LoadConfig) setDefaults() {
	if l.Kind == "" {
		l.Kind = LoadSynchronous
	}
	if l.Steps == 0 {
		l.Steps = 5
	}
	if l.Arrivals == "" {
		l.Arrivals = LoadPoisson
	}
	if l.TimeScale == 0 {
		l.TimeScale = 1
	}
	if l.Iterations == 0 {
		l.Iterations = 5
	}
}

// Validate reports every problem in l, joined; each wraps ErrConfig.
func (l *LoadConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) { errs = append(errs, fieldErr("load."+field, format, args...)) }
	if l.Concurrency < 0 {
		bad("concurrency", "must be >= 0")
	}
	if l.MaxDuration < 0 {
		bad("max_duration", "must be >= 0")
	}
	if l.MinSessions < 0 {
		bad("min_sessions", "must be >= 0")
	}
	rateOK := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
	switch l.Kind {
	case LoadSynchronous, LoadThroughput, "":
	case LoadConcurrent:
		if l.Concurrency <= 0 {
			bad("concurrency", "must be > 0 for concurrent")
		}
	case LoadConstant, LoadPoisson:
		if !rateOK(l.Rate) {
			bad("rate", "must be > 0 for %s", l.Kind)
		}
	case LoadTrace:
		if !(l.TimeScale > 0) || math.IsInf(l.TimeScale, 0) {
			bad("time_scale", "must be > 0")
		}
	case LoadSweep:
		for _, r := range l.Rates {
			if !rateOK(r) {
				bad("rates", "must all be > 0")
				break
			}
		}
		if l.Steps < 0 {
			bad("steps", "must be >= 0")
		}
	case LoadGoodput:
		if !rateOK(l.MinRate) || !rateOK(l.MaxRate) || l.MaxRate < l.MinRate {
			bad("min_rate", "0 < min_rate <= max_rate required")
		}
		if l.Iterations < 0 {
			bad("iterations", "must be >= 0")
		}
	default:
		bad("kind", "unknown %q", l.Kind)
	}
	switch l.Arrivals {
	case LoadConstant, LoadPoisson, "":
	default:
		bad("arrivals", "must be constant or poisson")
	}
	return errors.Join(errs...)
}

// runSpec is one basic run: a closed or open loop at one setting.
type runSpec struct {
	Kind        LoadKind
	Rate        float64 // open loops
	Concurrency int     // closed loops; cap for open loops
	TimeScale   float64 // trace
}

// name returns a short, stable label for reports and plots.
func (s runSpec) name() string {
	switch s.Kind {
	case LoadConcurrent:
		return fmt.Sprintf("concurrent-%d", s.Concurrency)
	case LoadConstant, LoadPoisson:
		return fmt.Sprintf("%s@%.3g/s", s.Kind, s.Rate)
	case LoadTrace:
		return fmt.Sprintf("trace×%g", s.TimeScale)
	default:
		return string(s.Kind)
	}
}

// closed reports whether the run keeps a fixed number of sessions in flight
// rather than following an arrival schedule.
func (s runSpec) closed() bool {
	return s.Kind == LoadSynchronous || s.Kind == LoadConcurrent
}

// streams returns the number of parallel streams of a closed loop.
func (s runSpec) streams() int {
	if s.Kind == LoadSynchronous {
		return 1
	}
	return s.Concurrency
}

// arrivals returns each session's start offset for an open-loop run, the
// same for the same spec, sessions and seed. Sessions are started in index
// order.
func arrivals(s runSpec, sessions []Session, seed int64) []time.Duration {
	out := make([]time.Duration, len(sessions))
	switch s.Kind {
	case LoadConstant:
		for i := range out {
			out[i] = time.Duration(float64(i) / s.Rate * float64(time.Second))
		}
	case LoadPoisson:
		r := newRand(seed, hashString("poisson"), math.Float64bits(s.Rate))
		var t float64
		for i := range out {
			out[i] = time.Duration(t * float64(time.Second))
			t += r.ExpFloat64() / s.Rate
		}
	case LoadTrace:
		for i, sess := range sessions {
			out[i] = time.Duration(float64(sess.Arrival) / s.TimeScale)
		}
	}
	// LoadThroughput: all zero.
	return out
}

// sweepRates spreads n rates evenly strictly between lo and hi, as GuideLLM's
// sweep does between its synchronous and throughput measurements. When the
// throughput run was no faster than the synchronous one (a server that does
// not batch, or noise on tiny runs), it spreads them up to twice the larger.
func sweepRates(lo, hi float64, n int) []float64 {
	lo, hi = min(lo, hi), max(lo, hi)
	if hi <= lo {
		hi = 2 * hi
	}
	if n <= 0 || !(lo > 0) {
		return nil
	}
	out := make([]float64, n)
	step := (hi - lo) / float64(n+1)
	for i := range out {
		out[i] = lo + step*float64(i+1)
	}
	return out
}

// searchRate finds the largest rate in [lo, hi] for which probe reports the
// SLO met, assuming the SLO holds below some threshold and fails above it.
// It probes lo, then hi, then bisects iters times. It returns 0 when even lo
// fails.
func searchRate(lo, hi float64, iters int, probe func(rate float64) (bool, error)) (float64, error) {
	ok, err := probe(lo)
	if err != nil || !ok {
		return 0, err
	}
	if hi <= lo {
		return lo, nil
	}
	ok, err = probe(hi)
	if err != nil || ok {
		return hi * b2f(ok), err
	}
	good, bad := lo, hi
	for range iters {
		mid := (good + bad) / 2
		ok, err := probe(mid)
		if err != nil {
			return good, err
		}
		if ok {
			good = mid
		} else {
			bad = mid
		}
	}
	return good, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
