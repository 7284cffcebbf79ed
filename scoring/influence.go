package scoring

import "math"

// The influence of one outcome source. Outcomes reach the router over
// ext_proc streams, and Request.Source names who opened the stream: the
// identity of its client certificate under mutual TLS, else the client's
// address. A Huber weight bounds what one outcome can do to a worker's
// fit; this bounds what one source can.
//
// Two sources that report about one worker should agree on how far its
// first tokens are from their predictions, since they share its queue. A
// source whose residuals disagree with the other sources' (their typical
// ratio to the prediction differs by more than a factor of 2) cannot
// restart the worker's fit: its outliers neither extend nor break a run
// (calibrate.go); while two sources disagree, neither restarts it. If it
// also reports most of the worker's recent outcomes,
// it is weighed down to the others' count, so it has at most half of the
// fit. A source alone on a worker, the usual single Envoy, is never
// weighed down (the engine's own figures still guard its restarts:
// corroborate.go), and the majority is not weighed down when a minor
// source disagrees: a flood of fabricated outcomes can be told from the
// truth only by what else reports it, and a small one has little weight.

const (
	// sourceWindow is the number of a worker's outcomes over which each
	// source's count and residual decay.
	sourceWindow = 64
	// minOthers is the decayed count the other sources must have reported
	// before a dominant source is compared with them.
	minOthers = 8
	// maxSources bounds the sources followed per worker; a new one takes
	// the place of the least heard.
	maxSources = 16
)

// disagreeLog is the log of the factor between a source's typical
// observed/predicted ratio and the other sources' beyond which they
// disagree.
var disagreeLog = math.Log(2)

// sourceShares follows the sources reporting outcomes of one worker.
type sourceShares struct {
	names []string
	// counts is each source's decayed number of outcomes; rho its decayed
	// mean of log(observed / predicted), clipped to ±maxRho.
	counts []float64
	rho    []float64
	// down is set while the source disagrees with the others.
	down []bool
}

const maxRho = 4.0

// influence is what the fit may take from one outcome of a source.
type influence struct {
	// weight is 1, or less when the source dominates and disagrees.
	weight float64
	// disagrees: the source's outliers must not count towards a restart.
	disagrees bool
	// began: the source did not disagree at its previous outcome.
	began bool
}

// full is the influence of an outcome of a source in agreement.
var full = influence{weight: 1}

// weigh records an outcome from src whose first token came ratio times its
// prediction and returns its influence.
func (s *sourceShares) weigh(src string, ratio float64) influence {
	const decay = 1 - 1.0/sourceWindow
	i := -1
	for j := range s.names {
		s.counts[j] *= decay
		if s.names[j] == src {
			i = j
		}
	}
	if i < 0 {
		if len(s.names) < maxSources {
			s.names, s.counts, s.rho, s.down = append(s.names, src), append(s.counts, 0), append(s.rho, 0), append(s.down, false)
			i = len(s.names) - 1
		} else {
			i = 0
			for j := range s.counts {
				if s.counts[j] < s.counts[i] {
					i = j
				}
			}
			s.names[i], s.counts[i], s.rho[i], s.down[i] = src, 0, 0, false
		}
	}
	x := 0.0
	if ratio > 0 && !math.IsInf(ratio, 0) {
		x = max(-maxRho, min(maxRho, math.Log(ratio)))
	}
	s.counts[i]++
	s.rho[i] += (x - s.rho[i]) / min(s.counts[i], sourceWindow)

	var others, othersRho float64
	for j, c := range s.counts {
		if j != i {
			others += c
			othersRho += c * s.rho[j]
		}
	}
	was := s.down[i]
	s.down[i] = others >= minOthers && math.Abs(s.rho[i]-othersRho/others) > disagreeLog
	if !s.down[i] {
		return full
	}
	return influence{weight: min(1, others/s.counts[i]), disagrees: true, began: !was}
}
