package scoring

import "github.com/warmpath/warmpath/discovery"

// Corroboration: a run of outcomes that says a worker changed speed is
// checked against the engine's own figures before the calibration starts
// over. Outcomes arrive over ext_proc; one source reporting false first
// tokens (a stream opened by something that is not the proxy, or a proxy
// that measures wrong) would otherwise swing a worker's model at its
// fourth outlier in a row, since such a run restarts the fit, and the
// worker, judged slow, would lose its traffic. The engine measures its
// first tokens itself (vllm:time_to_first_token_seconds, scraped with its
// load): over a run that says slower, it must have served requests, and
// their mean first token must be at least a quarter of the run's mean.
// Until it is, the outliers stay down-weighted as single outliers are, and
// the fit does not restart. A run that says faster is trusted: the check
// compares seconds with seconds, and a simulator on a scaled clock reports
// its engine's seconds scaled, which can only make it more lenient in the
// slower direction. Without the engine's figures (not exposed, not scraped
// yet, stale) outcomes are trusted as they are.

// corroborationFactor is how far below the run's mean first token the
// engine's own mean over the run may sit.
const corroborationFactor = 4

// engineTTFT is the engine's cumulative first-token count and seconds at
// one moment, when scraped and fresh.
type engineTTFT struct {
	count, seconds float64
	ok             bool
}

func engineTTFTOf(l discovery.EngineLoad, ok bool) engineTTFT {
	if !ok || l.Stale || !l.HasTTFT || l.ScrapedAt.IsZero() {
		return engineTTFT{}
	}
	return engineTTFT{count: l.TTFTCount, seconds: l.TTFTSeconds, ok: true}
}

// runWatch follows the current run of same-sign outliers of one
// calibrator: the engine's figures when it began, and the run's outcomes.
type runWatch struct {
	start    engineTTFT
	sum      float64 // seconds of the run's outcomes
	n        int
	declined int // resets declined so far, for metrics
}

// observed records an outcome y (seconds) after the calibrator saw it,
// given its run length before (prev) and after (now).
func (r *runWatch) observed(prev, now int, y float64, eng engineTTFT) {
	switch {
	case now == 0:
		r.n, r.sum = 0, 0
	case now == 1 || now < prev:
		r.start, r.n, r.sum = eng, 1, y
	default:
		r.n++
		r.sum += y
	}
}

// corroborates reports whether the engine's figures now agree with the
// run, which y (not yet recorded) extends, in the direction sign (+1:
// slower than predicted).
func (r *runWatch) corroborates(sign, y float64, eng engineTTFT) bool {
	if sign < 0 || !eng.ok || !r.start.ok {
		return true
	}
	served := eng.count - r.start.count
	if served < 1 {
		return false // no first token of its own over the whole run, or a restart
	}
	engineMean := (eng.seconds - r.start.seconds) / served
	return engineMean*corroborationFactor >= (r.sum+y)/float64(r.n+1)
}
