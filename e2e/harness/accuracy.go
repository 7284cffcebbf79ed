package harness

import (
	"math"
	"slices"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int { return a.Seq - b.Seq })
}

// Accuracy is how well a policy's predictions matched outcomes.
type Accuracy struct {
	// Warmup is the number of leading decisions left out.
	Warmup int
	// TTFTSamples counts completed requests after the warm-up with both a
	// predicted and an observed TTFT; MedianAPE and P90APE are the median
	// and 90th percentile of |predicted − observed| / observed over them,
	// in percent; MedianBias is the median of (predicted − observed) /
	// observed in percent (negative: predictions too low). NaN when
	// TTFTSamples is 0.
	TTFTSamples int
	MedianAPE   float64
	P90APE      float64
	MedianBias  float64
	// CachedSamples counts completed requests after the warm-up whose
	// response reported cached_tokens; CachedExact is the fraction of them
	// whose predicted cached tokens equal the reported ones (NaN for none).
	CachedSamples int
	CachedExact   float64
	// TPOTSamples counts completed streamed responses after the warm-up
	// with a predicted and an observed time per output token (three tokens
	// or more) that ended under load, before the last decision (see
	// MeasureAccuracy); TPOTMedianAPE, TPOTP90APE and TPOTMedianBias are
	// as the TTFT ones.
	TPOTSamples    int
	TPOTMedianAPE  float64
	TPOTP90APE     float64
	TPOTMedianBias float64
	// TPOTDrained counts the responses left out of the TPOT figures
	// because they ended after the last decision; TPOTAllMedianAPE and
	// TPOTAllP90APE are the figures with them.
	TPOTDrained      int
	TPOTAllMedianAPE float64
	TPOTAllP90APE    float64
}

// MeasureAccuracy compares predictions with outcomes over records in
// decision order, skipping the first warmup decisions and every request
// that did not complete.
//
// The TPOT figures count only responses that ended by the last decision.
// A predicted TPOT counts the prefill that keeps arriving while the
// response decodes, at the rate the worker has seen; once a
// replay has sent its last request nothing arrives, and a response still
// decoding then is faster than predicted by construction, as its batch
// empties. Those drained responses are counted apart (the warm-up is the
// same boundary at the start). TTFT predictions rest on the queue at the
// decision, which the end of arrivals does not change, and count whole.
func MeasureAccuracy(rs []Record, warmup int) Accuracy {
	var s accuracySamples
	s.add(rs, warmup, nil)
	return s.summary(warmup)
}

// PoolAccuracy is MeasureAccuracy over the predictions of several runs
// taken together, of the records keep reports true for (all of them when
// keep is nil): each run's warm-up and last decision are its own. A run's
// p90 rests on its few worst predictions; pooled runs give the tail
// enough samples to compare two builds.
func PoolAccuracy(runs [][]Record, warmup int, keep func(Record) bool) Accuracy {
	var s accuracySamples
	for _, rs := range runs {
		s.add(rs, warmup, keep)
	}
	return s.summary(warmup)
}

// accuracySamples are the errors, in percent, that Accuracy summarises:
// absolute and signed, of TTFT, of TPOT under load, and of every TPOT.
type accuracySamples struct {
	ape, bias, tape, tbias, tall []float64
	cached, exact, drained       int
}

// add takes the samples of one run's records, in decision order, those
// keep reports true for (all when keep is nil).
func (s *accuracySamples) add(rs []Record, warmup int, keep func(Record) bool) {
	var lastDecision time.Time
	for _, r := range rs {
		if r.Decided.After(lastDecision) {
			lastDecision = r.Decided
		}
	}
	for _, r := range rs {
		if r.Seq < warmup || r.Outcome.End != scoring.EndCompleted || keep != nil && !keep(r) {
			continue
		}
		if r.PredictedTTFT > 0 && r.Outcome.TTFT > 0 {
			e := (r.PredictedTTFT.Seconds() - r.Outcome.TTFT.Seconds()) / r.Outcome.TTFT.Seconds() * 100
			s.ape = append(s.ape, math.Abs(e))
			s.bias = append(s.bias, e)
		}
		if pred, got := r.Chosen.PredictedTPOT, r.Outcome.TPOT(); pred > 0 && got > 0 && r.Outcome.CompletionTokens >= 3 {
			e := (pred.Seconds() - got.Seconds()) / got.Seconds() * 100
			s.tall = append(s.tall, math.Abs(e))
			if !lastDecision.IsZero() && r.Ended.After(lastDecision) {
				s.drained++
			} else {
				s.tape = append(s.tape, math.Abs(e))
				s.tbias = append(s.tbias, e)
			}
		}
		if r.Outcome.CachedTokens >= 0 {
			s.cached++
			if r.PredictedCached == r.Outcome.CachedTokens {
				s.exact++
			}
		}
	}
}

// summary returns the samples' quantiles.
func (s *accuracySamples) summary(warmup int) Accuracy {
	a := Accuracy{Warmup: warmup, MedianAPE: math.NaN(), P90APE: math.NaN(), MedianBias: math.NaN(), CachedExact: math.NaN(),
		TPOTMedianAPE: math.NaN(), TPOTP90APE: math.NaN(), TPOTMedianBias: math.NaN(),
		TPOTAllMedianAPE: math.NaN(), TPOTAllP90APE: math.NaN()}
	a.TTFTSamples = len(s.ape)
	if len(s.ape) > 0 {
		slices.Sort(s.ape)
		slices.Sort(s.bias)
		a.MedianAPE, a.P90APE, a.MedianBias = quantile(s.ape, 0.5), quantile(s.ape, 0.9), quantile(s.bias, 0.5)
	}
	a.TPOTSamples, a.TPOTDrained = len(s.tape), s.drained
	if len(s.tape) > 0 {
		slices.Sort(s.tape)
		slices.Sort(s.tbias)
		a.TPOTMedianAPE, a.TPOTP90APE, a.TPOTMedianBias = quantile(s.tape, 0.5), quantile(s.tape, 0.9), quantile(s.tbias, 0.5)
	}
	if len(s.tall) > 0 {
		slices.Sort(s.tall)
		a.TPOTAllMedianAPE, a.TPOTAllP90APE = quantile(s.tall, 0.5), quantile(s.tall, 0.9)
	}
	a.CachedSamples = s.cached
	if s.cached > 0 {
		a.CachedExact = float64(s.exact) / float64(s.cached)
	}
	return a
}

// quantile returns the q-quantile of sorted values, interpolating linearly
// between closest ranks; NaN for none.
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := q * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}
