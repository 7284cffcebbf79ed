package scoring

import (
	"math"
	"time"
)

// The decode room: what a pick does to the rest of the response. The same
// engine steps that prefill a request carry every sequence decoding on the
// worker, so a worker that prefills fast but takes every prompt decodes
// slowly for all of them. Per candidate this room predicts the time per
// output token (TPOT) the request will get there and the time it adds to
// the responses already decoding there (the slowdown), from a decode step
// model per worker that outcomes calibrate as the TTFT model is: from each
// watched response's inter-token time, against the batch its decode steps
// carried as the ledger's decode meter saw it. It is guarded by the
// router's mutex.

// decodeMeter integrates, for one worker, what its decode steps carried:
// the sequences decoding (past their first token, not ended) and their
// prompt tokens, over time, and the prefill work done meanwhile. An
// outcome's decode window is the difference of two readings, at its first
// token and at its end. It also keeps the rate of prefill work routed to
// the worker, which predicts how much of the coming steps prefill takes.
type decodeMeter struct {
	at   time.Time
	seqs float64
	ctx  float64
	sum  meterReading
	// routed is the uncached tokens routed to the worker, each decayed by
	// exp(−age/RateWindow) since, and routedSq the sum of their squares
	// decayed alike; routedAt is when they were last decayed, firstRouted
	// when the first was counted.
	routed, routedSq      float64
	routedAt, firstRouted time.Time
	// mean is the requests running on the worker (decoding or queued
	// ahead) as decisions found them, and meanCtx their context tokens,
	// each averaged over RateWindow; meanAt is when they were last
	// sampled.
	mean, meanCtx float64
	meanAt        time.Time
}

// meterReading is a decodeMeter's running totals at one time.
type meterReading struct {
	// at is the time the totals are integrated to.
	at time.Time
	// seqSec and ctxSec are ∫ sequences dt and ∫ prompt tokens dt, in
	// sequence-seconds and token-seconds.
	seqSec, ctxSec float64
	// prefilled is the uncached tokens whose prefill finished: counted at
	// their first token, or at their end if none was seen.
	prefilled float64
}

// advance integrates the meter up to t; a t before the last one (a peer's
// first token, stamped in the past) integrates nothing.
func (m *decodeMeter) advance(t time.Time) {
	if t.After(m.at) {
		if !m.at.IsZero() {
			dt := t.Sub(m.at).Seconds()
			m.sum.seqSec += m.seqs * dt
			m.sum.ctxSec += m.ctx * dt
		}
		m.at = t
	}
}

// started counts a's first token at t: its prefill is done and it decodes
// from now on. It returns the reading its decode window starts from.
func (m *decodeMeter) started(a *assignment, t time.Time) meterReading {
	m.advance(t)
	n, ctx := a.decoding()
	m.seqs += n
	m.ctx += ctx
	m.sum.prefilled += a.uncached
	return m.reading()
}

// reading returns the totals at the meter's time.
func (m *decodeMeter) reading() meterReading {
	r := m.sum
	r.at = m.at
	return r
}

// ended counts a's end at t and returns the reading there.
func (m *decodeMeter) ended(a *assignment, t time.Time) meterReading {
	m.advance(t)
	if a.firstSeen {
		n, ctx := a.decoding()
		m.seqs = max(m.seqs-n, 0)
		m.ctx = max(m.ctx-ctx, 0)
	} else {
		m.sum.prefilled += a.uncached
	}
	return m.reading()
}

// decay brings routed to now.
func (m *decodeMeter) decay(now time.Time, window time.Duration) {
	if now.After(m.routedAt) {
		if !m.routedAt.IsZero() {
			k := math.Exp(-now.Sub(m.routedAt).Seconds() / window.Seconds())
			m.routed *= k
			m.routedSq *= k
		}
		m.routedAt = now
	}
}

// route counts uncached tokens routed to the worker at now.
func (m *decodeMeter) route(uncached float64, now time.Time, window time.Duration) {
	m.decay(now, window)
	if m.firstRouted.IsZero() {
		m.firstRouted = now
	}
	m.routed += uncached
	m.routedSq += uncached * uncached
}

// rate returns the prefill tokens per second routed to the worker lately.
// Until a window has passed since the first routing, the decayed sum
// holds less than a window's worth: it is divided by the time it covers,
// W·(1 − e^(−t/W)), not by W (nor by less than a tenth of W, which a
// single routing would make any rate), so the first seconds' rate is not
// read low.
func (m *decodeMeter) rate(now time.Time, window time.Duration) float64 {
	m.decay(now, window)
	if m.firstRouted.IsZero() {
		return 0
	}
	w := window.Seconds()
	covered := w * -math.Expm1(-max(now.Sub(m.firstRouted).Seconds(), 0)/w)
	return m.routed / max(covered, w/10)
}

// arrivals returns the prompts per second routed to the worker lately,
// each counted by its size: (Σu)²/Σu² of the routed uncached tokens u is
// their number when they are alike and the number of the large ones when
// a few large prompts carry most of the tokens, which are the arrivals a
// decoding response notices.
func (m *decodeMeter) arrivals(now time.Time, window time.Duration) float64 {
	r := m.rate(now, window)
	if r <= 0 || m.routedSq <= 0 {
		return 0
	}
	return r * m.routed / m.routedSq
}

// sample counts the running requests and their context tokens a
// decision found at now in the worker's means, and returns them: a
// time-weighted average of the values the decisions saw, each holding
// until the next.
func (m *decodeMeter) sample(running, ctx float64, now time.Time, window time.Duration) (float64, float64) {
	switch {
	case m.meanAt.IsZero():
		m.mean, m.meanCtx = running, ctx
	case now.After(m.meanAt):
		k := math.Exp(-now.Sub(m.meanAt).Seconds() / window.Seconds())
		m.mean = running + (m.mean-running)*k
		m.meanCtx = ctx + (m.meanCtx-ctx)*k
	default:
		return m.mean, m.meanCtx
	}
	m.meanAt = now
	return m.mean, m.meanCtx
}

// decodeLoad is what the decode model needs to know about one request on
// one worker.
type decodeLoad struct {
	// batch is the sequences decoding in the request's steps, itself
	// included; ctx the context tokens they read per step.
	batch, ctx float64
	// others is the sequences decoding there now besides the request:
	// those its prefill delays.
	others float64
	// rate is the prefill tokens per second the worker's steps carry
	// besides, arrivals the prompts per second that bring them (see
	// decodeMeter.arrivals); budget its token budget per step.
	rate, arrivals, budget float64
	// ttft is the request's predicted time to first token: prompts
	// routed there meanwhile wait behind it and prefill in its decode
	// steps.
	ttft float64
	// prompt and uncached are the request's prompt and prefill tokens, out
	// its expected output tokens per sequence, seqs its sequences (its
	// choices, n; 0 is one).
	prompt, uncached, out, seqs float64
}

// decodePrediction is the decode model's answer for one request on one
// worker, in seconds.
type decodePrediction struct {
	// tpot is the expected time per output token: what the request's
	// predicted end to end counts.
	tpot float64
	// typical is the time per output token the request most likely gets,
	// the median: where few prompts arrive during a response, most
	// responses see none of their prefill, and a few see all of one.
	typical float64
	// slowdown is the time the request adds to the other sequences'
	// responses on the worker.
	slowdown float64
}

// predictDecode predicts the request's time per output token on the
// worker, and the time it adds to the other sequences' responses there.
//
// A decode step costs StepOverhead + DecodePerSeq × batch +
// ContextPerToken × context, and prefill work arriving at rate λ takes a
// share PrefillPerToken × λ of the worker's time, during which no token is
// decoded: the expected TPOT = step / (1 − share), never more than a step
// that also prefills a full chunk, which is what every step is once
// prefill arrives faster than the worker computes it (share ≥ 1). The
// others decoding now wait for the request's prefill; the rest of the
// batch it decodes with wait, in every one of its decode steps, for its
// sequences.
//
// That prefill comes in prompts, and a response of few tokens sees whole
// ones or none: of k prompts expected between the decision and its last
// token (those routed during its wait and prefill queue behind it and
// prefill in its decode steps), it most likely sees the Poisson median of
// k, none while k < ln 2. The typical TPOT is the step plus the expected
// prefill's time scaled by that median over k, which tends to the
// expected TPOT as k grows. A saturated worker has a backlog of prefill,
// not arrivals: its typical step is the full one.
func predictDecode(m StepModel, l decodeLoad) decodePrediction {
	step := m.StepOverhead + m.DecodePerSeq*l.batch + m.ContextPerToken*l.ctx
	share := m.PrefillPerToken * l.rate
	full := step + m.PrefillPerToken*max(l.budget-l.batch, 0)
	tpot := full
	if share < 1 {
		tpot = min(step/(1-share), full)
	}
	steps := max(l.out-1, 0)
	seqs := max(l.seqs, 1)
	own := seqs * (m.DecodePerSeq + m.ContextPerToken*(l.prompt+l.out/2))
	slowdown := max(l.others, 0)*m.PrefillPerToken*l.uncached + max(l.batch-seqs, 0)*steps*own
	tpot, step = max(tpot, 0), max(step, 0)
	typical := tpot
	if k := l.arrivals * (max(l.ttft, 0) + steps*tpot); share < 1 && k < math.Inf(1) {
		typical = step + (tpot-step)*typicalShare(k)
	}
	return decodePrediction{tpot: tpot, typical: typical, slowdown: max(slowdown, 0)}
}

// typicalShare returns the share of the expected prefill a response most
// likely sees when k prompts are expected during it: the median of a
// Poisson count of mean k over k, 0 while k < ln 2. The median is
// approximated by ⌊k + 1/3 − 0.02/k⌋, within Choi's bounds k − ln 2 ≤
// median < k + 1/3. It is never more than 1: just past ln 2 the median
// count, one prompt, exceeds k, but the prompts' sizes are skewed and one
// prompt's typical prefill is below its mean.
func typicalShare(k float64) float64 {
	if k < math.Ln2 {
		return 0
	}
	return min(math.Floor(k+1.0/3-0.02/k)/k, 1)
}

// decodeFeatures is the feature vector whose dot product with the decode
// step model is the time of steps decode steps that carried batch
// sequences reading ctx context tokens on average, and prefilled tokens
// of other requests' prefill: one TPOT measurement's explanation.
func decodeFeatures(steps, prefilled, batch, ctx float64) [numParams]float64 {
	return [numParams]float64{steps, prefilled, steps * batch, steps * ctx, 0}
}

// outputs is what a model's responses taught about their length: the
// mean output of requests without max_tokens, and the mean share of
// max_tokens used by those with it. Each counts its samples.
type outputs struct {
	mean, fill   float64
	nMean, nFill int
}

// minOutputs is the samples an output statistic needs before it is used.
const minOutputs = 8

// observe learns one completed response's length.
func (o *outputs) observe(maxTokens, completion int) {
	const alpha = 0.05
	if completion <= 0 {
		return
	}
	if maxTokens > 0 {
		f := min(float64(completion)/float64(maxTokens), 1)
		if o.nFill == 0 {
			o.fill = f
		}
		o.fill += alpha * (f - o.fill)
		o.nFill++
		return
	}
	if o.nMean == 0 {
		o.mean = float64(completion)
	}
	o.mean += alpha * (float64(completion) - o.mean)
	o.nMean++
}

// expect returns the output tokens to expect of a request with maxTokens
// (0 when it set none): the learned share of it, or all of it before that
// is learned; without max_tokens the learned mean, or def.
func (o *outputs) expect(maxTokens, def int) float64 {
	switch {
	case maxTokens > 0 && o.nFill >= minOutputs:
		return max(1, o.fill*float64(maxTokens))
	case maxTokens > 0:
		return float64(maxTokens)
	case o.nMean >= minOutputs:
		return max(1, o.mean)
	}
	return float64(def)
}
