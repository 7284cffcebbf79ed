package scoring

import (
	"slices"
	"time"
)

// The learning room: what outcomes teach about each worker. A completed
// outcome calibrates the worker's step model, updates its typical request
// and checks the cached-token prediction against the engine's answer; a
// worker without outcomes for IdleRelax is restarted from the pool's
// typical model so it is measured again. The learner is guarded by the
// router's mutex.

// learner holds each worker's learned models and each served model's
// output lengths.
type learner struct {
	cfg     *Config
	workers map[string]*workerModel
	outputs map[string]*outputs
	// unmeasured is set while some worker's decode model has had no
	// measurement (see seedDecode).
	unmeasured bool
	// recent and vals are typicalTheta's scratch: while a worker is
	// unmeasured it runs on every decode outcome.
	recent []*calibrator
	vals   []float64
	// relaxed is relaxIdle's result.
	relaxed []string
}

// workerModel is what the learner knows of one worker.
type workerModel struct {
	// cal is its step model as TTFTs show it, dec as its decode steps do.
	cal *calibrator
	dec *calibrator
	typ typical
	gap gapTracker
	// run follows cal's current run of outliers for corroboration.
	run runWatch
	// sources follows who reports its outcomes (influence.go).
	sources sourceShares
	// lastOutcome is when the worker's last outcome was learned and
	// lastRelax when its calibration was last relaxed for idleness.
	lastOutcome, lastRelax time.Time
}

func newLearner(cfg *Config) learner {
	return learner{cfg: cfg, workers: make(map[string]*workerModel), outputs: make(map[string]*outputs)}
}

// output returns what model's responses taught about their length.
func (l *learner) output(model string) *outputs {
	o, ok := l.outputs[model]
	if !ok {
		o = &outputs{}
		l.outputs[model] = o
	}
	return o
}

// worker returns the model of worker, starting it from the prior.
func (l *learner) worker(name string) *workerModel {
	w, ok := l.workers[name]
	if !ok {
		w = &workerModel{
			cal: newCalibrator(l.cfg.Prior, l.cfg.PriorSpread, l.cfg.NoiseRel),
			dec: newCalibrator(l.cfg.Prior, l.cfg.PriorSpread, l.cfg.NoiseRel),
			typ: typical{uncached: float64(l.cfg.DefaultUncached), prompt: float64(l.cfg.DefaultUncached)},
		}
		l.workers[name] = w
		l.unmeasured = true
	}
	return w
}

// model returns worker's step model: the calibrated one, or the prior
// before any outcome.
func (l *learner) model(worker string) StepModel {
	if w, ok := l.workers[worker]; ok {
		return w.cal.model()
	}
	return l.cfg.Prior
}

// learned is what one outcome taught, for metrics and logs outside the lock.
type learned struct {
	unexplained bool // not fitted: unknown load was ahead of it
	bounded     bool // fitted to a non-streamed answer's end, an upper bound
	outlier     bool
	reset       bool
	// uncorroborated: a restart of the fit was declined, the engine's own
	// figures disagreeing; firstDecline: the first such of its run.
	uncorroborated, firstDecline bool
	// disagrees: the outcome's source disagrees with the worker's other
	// sources (influence.go); firstDisagree: its previous outcome did not.
	disagrees, firstDisagree bool
	source                   string
	model                    StepModel
	decoded                  bool // the decode model was fitted
	decodeModel              StepModel
	checked                  bool
	cachedResult             string
	gap                      gapChange
	gapRate                  float64
	gapBias                  float64
}

// learns reports whether an outcome is a measurement calibration believes:
// a completed request with a first token. A "time to first token" beyond
// maxTTFT is a broken measurement, not a slow engine.
func learns(o Outcome) bool { return o.End == EndCompleted && o.TTFT > 0 && o.TTFT <= maxTTFT }

// maxTTFT bounds the outcomes calibration believes.
const maxTTFT = time.Hour

// learn feeds a completed outcome of assignment a to its worker's model
// and returns, besides what it taught, the lesson for peers. The model is
// fitted with what the engine reports (prompt and cached tokens) rather
// than what was predicted, so index errors do not bend the speed estimate.
func (l *learner) learn(a *assignment, o Outcome, now time.Time, eng engineTTFT) (learned, Lesson) {
	st := l.worker(a.worker)
	st.lastOutcome = now
	actual := o.TTFT.Seconds()
	var res learned
	ls := Lesson{Source: a.source}
	if predicted := a.first.Sub(a.decided).Seconds(); predicted > 0 {
		ls.Ratio = actual / predicted
	}
	const alpha = 0.05
	if dec := (o.Duration - o.TTFT).Seconds(); o.Duration > o.TTFT {
		if st.typ.decode == 0 {
			st.typ.decode = dec
		}
		st.typ.decode += alpha * (dec - st.typ.decode)
	}
	perChoice := a.perChoice(o.CompletionTokens)
	if perChoice > 0 {
		if st.typ.out == 0 {
			st.typ.out = float64(perChoice)
		}
		st.typ.out += alpha * (float64(perChoice) - st.typ.out)
	}
	if a.prompts > 1 {
		// A completions request of several prompts: the decision
		// described the first, the usage counts them all (prompt and
		// cached tokens too), and its first token is any prompt's. It
		// teaches the length of a choice, not the worker's speed nor its
		// cache.
		l.teach(st, Lesson{Source: a.source}, now, eng, &res)
		l.output(a.model).observe(a.maxTokens, perChoice)
		return res, Lesson{Source: a.source}
	}
	w := a.work
	if o.PromptTokens > 0 {
		w.prompt = float64(o.PromptTokens)
	}
	if o.CachedTokens >= 0 {
		if a.exact {
			res.checked = true
			switch {
			case a.cached == o.CachedTokens:
				res.cachedResult = "exact"
			case a.cached > o.CachedTokens:
				res.cachedResult = "over"
			default:
				res.cachedResult = "under"
			}
			res.gap = st.gap.observe(a.cached, o.CachedTokens, l.cfg.CachedGapRate, l.cfg.CachedGapMin)
			res.gapRate, res.gapBias = st.gap.rate, st.gap.bias
		}
		w.cached = float64(o.CachedTokens)
		w.offloaded = min(w.offloaded, w.cached)
	}
	// An outcome that waited for KV blocks says little about step
	// times: the wait is priced separately and not fitted. Nor does one
	// that waited behind requests no ledger knew of: fitted, their work
	// would become this worker's slowness. Nor one moved by Reassign,
	// whose inputs describe another worker and whose TTFT includes the
	// failed attempt.
	res.unexplained = a.unexplained
	if a.kvWait == 0 && !a.unexplained && !a.moved {
		// The work ahead is fitted as the first tokens show it, not as
		// the ledger estimated it: that estimate is the fitted model's
		// own speed applied to the time the queue had run, so a model too
		// slow finds too much ahead, reads the outcome as a fast worker,
		// and overshoots (Mooncake's trace on workers about 1.8× faster
		// than the prior: the long prompts that waited in a queue were
		// predicted 11.5% short at the median of eight runs, 3.5% once
		// fitted in hindsight).
		if a.firstSeen {
			if ahead, ok := a.pending.hindsight(a.decided, a.firstAt, w.uncached()); ok {
				w.ahead += ahead - a.pending.ahead
			}
		}
		ls.TTFT = Fit{OK: true, X: w.features(), Y: actual / a.pred.factor, Seen: actual}
	}
	ls.Decode = l.decodeFit(st, a, o)
	l.teach(st, ls, now, eng, &res)
	st.typ.uncached += alpha * (w.uncached() - st.typ.uncached)
	st.typ.prompt += alpha * (w.prompt - st.typ.prompt)
	l.output(a.model).observe(a.maxTokens, perChoice)
	return res, ls
}

// learnLesson fits a peer's lesson about worker, as learn fits the
// router's own outcomes: a peer's outcome is as much a measurement of the
// worker as one of this replica's.
func (l *learner) learnLesson(worker string, ls Lesson, now time.Time, eng engineTTFT) learned {
	st := l.worker(worker)
	st.lastOutcome = now
	var res learned
	l.teach(st, ls, now, eng, &res)
	return res
}

// teach fits ls to st's models: the source's influence from its ratio of
// observed to predicted, then the TTFT and decode fits it holds.
func (l *learner) teach(st *workerModel, ls Lesson, now time.Time, eng engineTTFT, res *learned) {
	inf := full
	if ls.Ratio > 0 {
		inf = st.sources.weigh(ls.Source, ls.Ratio)
		res.disagrees, res.firstDisagree, res.source = inf.disagrees, inf.began, ls.Source
	}
	if ls.TTFT.OK {
		l.fit(st, ls.TTFT.X, ls.TTFT.Y, ls.TTFT.Seen, eng, inf, res)
	}
	res.model = st.cal.model()
	if ls.Decode.OK {
		st.dec.observeFrom(ls.Decode.X, ls.Decode.Y, l.cfg, nil, inf)
		res.decoded = true
		if l.unmeasured {
			l.seedDecode(now)
		}
	}
	res.decodeModel = st.dec.model()
}

// perChoice is a response's completion tokens per choice: the usage
// counts every choice's.
func (a *assignment) perChoice(completion int) int {
	if completion <= 0 {
		return completion
	}
	return max(completion/a.sequences(), 1)
}

// learnsUnstreamed reports whether an outcome is a non-streamed answer
// that completed: no first token is seen, only the end. The answer must
// have gone through an engine step: its request had a prompt, known at the
// decision or reported in the answer's usage, and the engine did not
// refuse it (a 4xx status: a prompt over the context length, a bad
// parameter, a rate limit). A request without a prompt (GET /v1/models, a
// health probe routed like any other) or a refused one is answered in a
// millisecond or two; fitted as a bound on a first token, such an answer
// once taught the worker's model that a step costs next to nothing (the
// routing harness's probe, on the first worker of every scenario).
func learnsUnstreamed(a *assignment, o Outcome) bool {
	return !a.stream && o.End == EndCompleted && o.TTFT == 0 && o.Duration > 0 && o.Duration <= maxTTFT &&
		(a.prompt > 0 || o.PromptTokens > 0) && !o.refused()
}

// learnUnstreamed takes what a non-streamed answer can say. Its worker
// answered, so it counts as measured now (for relaxIdle, both as a
// candidate and as part of the typical model); without that, traffic that
// is not streamed never let a worker once judged slow be tried again. And
// its first token came no later than its end: a model that predicted the
// first token later than the whole answer is too slow, and is fitted to
// the answer's duration, an upper bound of the truth. A faster answer says
// nothing more, since its split into first token and decode is not seen.
func (l *learner) learnUnstreamed(a *assignment, o Outcome, now time.Time, eng engineTTFT) (learned, Lesson) {
	st := l.worker(a.worker)
	st.lastOutcome = now
	if n := a.perChoice(o.CompletionTokens); n > 0 {
		l.output(a.model).observe(a.maxTokens, n)
	}
	var res learned
	ls := Lesson{Source: a.source}
	end := o.Duration.Seconds()
	// Several prompts: the features would be the first's (see learn).
	if a.prompts <= 1 && a.kvWait == 0 && !a.unexplained && !a.moved && a.pred.total() > end {
		w := a.work
		if o.PromptTokens > 0 {
			w.prompt = float64(o.PromptTokens)
		}
		if o.CachedTokens >= 0 {
			w.cached = float64(o.CachedTokens)
			w.offloaded = min(w.offloaded, w.cached)
		}
		ls.TTFT = Fit{OK: true, X: w.features(), Y: end / a.pred.factor, Seen: end}
		res.bounded = true
	}
	l.teach(st, ls, now, eng, &res)
	return res, ls
}

// fit feeds st's calibration the time y (seconds, scaled as predicted;
// seen is the time as measured) of an outcome with features x, of its
// source's influence (influence.go). A run of outliers restarts the fit
// only when eng, the engine's own first-token figures, corroborates it
// (corroborate.go).
func (l *learner) fit(st *workerModel, x [numParams]float64, y, seen float64, eng engineTTFT, inf influence, res *learned) {
	resets, prev := st.cal.resets, st.cal.run
	res.outlier = st.cal.observeFrom(x, y, l.cfg, func(sign float64) bool {
		ok := st.run.corroborates(sign, seen, eng)
		if !ok {
			res.uncorroborated = true
			st.run.declined++
			res.firstDecline = st.run.declined == 1
		}
		return ok
	}, inf)
	st.run.observed(prev, st.cal.run, seen, eng)
	if st.cal.run == 0 {
		st.run.declined = 0
	}
	res.reset = st.cal.resets != resets
}

// minDecodeSteps is the fewest decode steps a response must take to
// measure the decode model. Another request's prefill is counted in a
// window when it ends (its first token), though its chunks ran in the
// steps before: a window of a few steps that holds part of a long
// prompt's chunks, or all of them and none of its end, is mostly that
// edge, and a handful of such responses (Mooncake-like traffic: answers
// of 2–10 tokens beside 30K-token prompts) once fitted a step overhead
// 30 times the truth and no prefill cost. Over 16 steps and more the
// edges are a small part of the window and even out.
const minDecodeSteps = 16

// decodeFit is the decode model's observation of a's response: its time
// from first token to last (o.Decode, else to the end) over its
// CompletionTokens − 1 decode steps, against what the decode meter saw in
// that window: the mean batch and context of the steps and the other
// requests' prefill work done in them. A response needs a reported first
// token and minDecodeSteps steps to be a measurement; otherwise the Fit
// is not OK. Nor is a response of several choices (n): its tokens come
// from that many sequences decoding side by side, which end apart, and
// counted as one sequence's steps they made a step look n times cheaper.
func (l *learner) decodeFit(st *workerModel, a *assignment, o Outcome) Fit {
	if a.sequences() > 1 {
		return Fit{}
	}
	decode := o.Decode
	if decode <= 0 {
		decode = o.Duration - o.TTFT
	}
	seqSec := a.decodeTo.seqSec - a.decodeFrom.seqSec
	span := decode.Seconds()
	if !a.firstSeen || o.CompletionTokens-1 < minDecodeSteps || !(span > 0) || !(seqSec > 0) {
		return Fit{}
	}
	steps := float64(o.CompletionTokens - 1)
	// The meter's window is the router's first token to its end, which
	// the response's own times measure better; both see the same steps.
	meterSpan := a.decodeTo.at.Sub(a.decodeFrom.at).Seconds()
	if !(meterSpan > 0) {
		return Fit{}
	}
	batch := seqSec / meterSpan
	out := st.typ.out
	if out <= 0 {
		out = float64(o.CompletionTokens)
	}
	ctx := (a.decodeTo.ctxSec-a.decodeFrom.ctxSec)/meterSpan + batch*out/2
	prefilled := max(a.decodeTo.prefilled-a.decodeFrom.prefilled, 0)
	return Fit{OK: true, X: decodeFeatures(steps, prefilled, batch, ctx), Y: span, Seen: span}
}

// seedDecode starts the decode model of every worker not yet measured
// from the typical one of those that are. Decode is measured only after a
// whole response, so the first workers measured would otherwise be
// compared, for a while, against the others' prior: a prior that
// underestimates the pool makes every worker not yet measured look faster
// than the ones that are, and the first picks after warm-up leave the
// cache for them. Until measured itself, a worker follows the typical
// model as it changes.
func (l *learner) seedDecode(now time.Time) {
	centre, ok := l.typicalTheta(now, func(m *workerModel) *calibrator { return m.dec })
	if !ok {
		return
	}
	l.unmeasured = false
	for _, st := range l.workers {
		if st.dec.n == 0 {
			st.dec.restart(centre)
			l.unmeasured = true
		}
	}
}

// relaxIdle restarts, from the typical model of the workers with recent
// outcomes, the calibration of each candidate that has gone IdleRelax
// without an outcome and has nothing in flight, once per period. Without
// it, a worker the model once judged slow would get no request, and so no
// chance to be measured again. Nothing restarts while no worker has a
// recent outcome. It returns the workers whose calibration restarted, in
// a slice valid until the next call.
func (l *learner) relaxIdle(ws Workers, busy func(worker string) bool, now time.Time) []string {
	l.relaxed = l.relaxed[:0]
	period := l.cfg.IdleRelax
	if period <= 0 {
		return nil
	}
	var centre, decCentre *[numParams]float64
	for i := range ws {
		st := l.worker(ws[i].Name)
		if st.cal.n == 0 || busy(ws[i].Name) || now.Sub(st.lastOutcome) < period || now.Sub(st.lastRelax) < period {
			continue
		}
		if centre == nil {
			c, ok := l.typicalTheta(now, func(m *workerModel) *calibrator { return m.cal })
			if !ok {
				return l.relaxed
			}
			centre = &c
			if c, ok := l.typicalTheta(now, func(m *workerModel) *calibrator { return m.dec }); ok {
				decCentre = &c
			}
		}
		st.cal.restart(*centre)
		if decCentre != nil && st.dec.n > 0 {
			st.dec.restart(*decCentre)
		}
		st.lastRelax = now
		l.relaxed = append(l.relaxed, ws[i].Name)
	}
	return l.relaxed
}

// typicalTheta is the per-parameter median of the models cal selects of
// the workers with an outcome within IdleRelax, prior-relative, among
// those calibrated at all; false when there are none.
func (l *learner) typicalTheta(now time.Time, cal func(*workerModel) *calibrator) ([numParams]float64, bool) {
	var out [numParams]float64
	recent := l.recent[:0]
	for _, st := range l.workers {
		if c := cal(st); c.n > 0 && now.Sub(st.lastOutcome) < l.cfg.IdleRelax {
			recent = append(recent, c)
		}
	}
	l.recent = recent
	if len(recent) == 0 {
		return out, false
	}
	vals := slices.Grow(l.vals[:0], len(recent))[:len(recent)]
	l.vals = vals
	for i := range out {
		for j, c := range recent {
			vals[j] = c.theta[i]
		}
		slices.Sort(vals)
		out[i] = vals[len(vals)/2]
	}
	return out, true
}
