package scoring

import "math"

// numParams is the number of StepModel parameters.
const numParams = 5

// workload is what the TTFT model needs to know about one request on one
// worker. Token counts are float64 because estimates (offloaded tokens,
// work reported only by a scrape) are fractional.
type workload struct {
	// prompt, cached and offloaded are the request's prompt tokens, its
	// predicted prefix hit and the offloaded part of that hit.
	prompt    float64
	cached    float64
	offloaded float64
	// ahead is the prefill work queued before the request on the worker,
	// in tokens; decoding the sequences past their first token and
	// decodeCtx their context tokens.
	ahead     float64
	decoding  float64
	decodeCtx float64
	// aheadReqs is the number of requests whose prefill is ahead: they
	// decode while the request prefills; aheadCtx is their prompt tokens.
	aheadReqs float64
	aheadCtx  float64

	// budget is the engine's token budget per step.
	budget float64
	// offloadCost prices an offloaded token as a fraction of a computed one.
	offloadCost float64
}

// uncached is the prefill work of the request itself, in tokens: at least
// one token is always computed.
func (w *workload) uncached() float64 {
	u := w.prompt - w.cached + w.offloadCost*w.offloaded
	return max(u, 1)
}

// parts splits the request's TTFT into the feature vectors of the wait
// before its first prefill chunk (queue) and of its own prefill; the model's
// prediction of each part is the dot product with the step model. The
// per-request overhead is the last parameter alone.
//
// The engine serves running decodes first in every step, then prefill
// chunks in arrival order from what is left of the budget (vllm.md §5.2). A
// request is admitted only at a step boundary, so it first waits for the
// work ahead of it, which fills ceil(ahead/budget) steps; with no prefill
// ahead but sequences decoding it waits half a decode step on average.
// Then it needs ceil(uncached/budget) steps of its own, during which the
// requests that were ahead of it decode too.
func (w *workload) parts() (queue, prefill [numParams]float64) {
	u := w.uncached()
	per := max(w.budget-w.decoding, w.budget/8)
	var nq float64
	switch {
	case w.ahead > 0:
		nq = math.Ceil(w.ahead / per)
	case w.decoding > 0:
		nq = 0.5
	}
	dec := w.decoding + w.aheadReqs
	decCtx := w.decodeCtx + w.aheadCtx
	own := math.Max(math.Ceil(u/max(w.budget-dec, w.budget/8)), 1)
	queue = [numParams]float64{nq, w.ahead, nq * w.decoding, nq*w.decodeCtx + w.ahead, 0}
	// Each own chunk reads the context computed before it plus itself.
	ownCtx := own*w.cached + u*(own+1)/2
	prefill = [numParams]float64{own, u, own * dec, own*decCtx + ownCtx, 0}
	return queue, prefill
}

// features is the full feature vector whose dot product with the step
// model predicts TTFT in seconds.
func (w *workload) features() [numParams]float64 {
	q, p := w.parts()
	var x [numParams]float64
	for i := range x {
		x[i] = q[i] + p[i]
	}
	x[numParams-1] = 1
	return x
}

func dot(a, b [numParams]float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// prediction is the model's answer for one request on one worker, in seconds.
type prediction struct {
	queue, prefill, overhead float64
	// factor is the KV-pressure multiplier applied to queue and prefill.
	factor float64
}

func (p prediction) total() float64 { return p.queue + p.prefill + p.overhead }

// predictTTFT applies step model m to w; factor ≥ 1 prices preemption risk.
func predictTTFT(m StepModel, w *workload, factor float64) prediction {
	q, pf := w.parts()
	v := m.vector()
	return prediction{
		queue:    dot(q, v) * factor,
		prefill:  dot(pf, v) * factor,
		overhead: m.RequestOverhead,
		factor:   factor,
	}
}

// kvFactor is the preemption-risk multiplier for KV cache usage u (0..1):
// 1 up to high, rising linearly to 1+penalty at full usage.
func kvFactor(u, high, penalty float64) float64 {
	if !(u > high) {
		return 1
	}
	return 1 + penalty*(min(u, 1)-high)/(1-high)
}
