package scoring

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoWorkers is returned by Pick and Predict when given no candidates.
var ErrNoWorkers = errors.New("no candidate workers")

// Deps are the router's collaborators. Only Registerer is required.
type Deps struct {
	// Tokens yields exact prompt token ids; nil means only ids sent by the
	// client (Request.TokenIDs) are exact.
	Tokens TokenSource
	// Index is the KV-cache index; nil means no cache information beyond
	// warmpath's own text-block history.
	Index PrefixIndex
	// Load reports scraped engine gauges; nil means warmpath's own
	// assignments are the only load it knows.
	Load EngineLoad
	// Registerer receives the router's metrics.
	Registerer prometheus.Registerer
	// Logger receives gap reports; nil discards.
	Logger *slog.Logger
}

// Option configures a Router.
type Option func(*Router)

// WithClock makes the router read time from now instead of time.Now.
func WithClock(now func() time.Time) Option { return func(r *Router) { r.now = now } }

// WithSeed seeds the random policy (default 1), for reproducible runs.
func WithSeed(seed uint64) Option { return func(r *Router) { r.seed = seed } }

// Router is a picker: for each request it gathers what is known (exact
// tokens and cached prefixes, or text-block history, and every candidate's
// load), predicts the TTFT on every candidate, lets its policy choose,
// reserves the chosen worker's load until Done, and learns each worker's
// speed from the outcomes. The policy is warmpath's own (lowest predicted
// TTFT) or one of the baselines; every policy goes through the same data
// path, so they can be compared fairly, and other policies can be evaluated
// in shadow on the same view.
//
// A Router is safe for concurrent use. Create it with New.
type Router struct {
	cfg     Config
	name    string
	policy  policy
	shadows []shadowPolicy
	tokens  TokenSource
	index   PrefixIndex
	load    EngineLoad
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
	seed    uint64
	hseed   maphash.Seed

	mu      sync.Mutex
	told    bool // FirstToken was called: first tokens are reported
	workers map[string]*workerState
	live    map[*Decision]*assignment
	seq     uint64
	// scratch, states and vs are reused by every decision under mu; the
	// reports and fresh flags gathered before it come from gather.
	scratch []float64
	states  []*workerState
	vs      view
	gather  sync.Pool // *loadScratch
}

// loadScratch holds the load reports one decision gathers before taking
// the router's lock.
type loadScratch struct {
	reports []LoadReport
	fresh   []bool
}

type shadowPolicy struct {
	name string
	p    policy
}

// New returns a Router deciding with the named policy (see PolicyNames),
// configured by cfg, which must be valid.
func New(name string, cfg Config, deps Deps, opts ...Option) (*Router, error) {
	table := policyTable()
	mk, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("new router: unknown policy %q (want one of %v)", name, PolicyNames())
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new router: %w", err)
	}
	if deps.Registerer == nil {
		return nil, errors.New("new router: no prometheus registerer")
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new router: %w", err)
	}
	r := &Router{
		cfg:     cfg,
		name:    name,
		tokens:  deps.Tokens,
		index:   deps.Index,
		load:    deps.Load,
		log:     deps.Logger,
		m:       m,
		now:     time.Now,
		seed:    1,
		hseed:   maphash.MakeSeed(),
		workers: make(map[string]*workerState),
		live:    make(map[*Decision]*assignment),
	}
	for _, o := range opts {
		o(r)
	}
	if r.log == nil {
		r.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r.policy = mk(r.seed)
	for i, s := range cfg.Shadow {
		if s != name {
			r.shadows = append(r.shadows, shadowPolicy{name: s, p: table[s](r.seed + uint64(i) + 1)})
		}
	}
	return r, nil
}

// Pick chooses a worker among ws for req and reserves its load until Done
// is called with the returned decision. It fails only when ws is empty.
func (r *Router) Pick(ctx context.Context, req *Request, ws Workers) (*Decision, error) {
	return r.decide(ctx, req, ws, true)
}

// Predict returns the decision Pick would make now, without reserving
// load, recording history or counting it in metrics: it is the read-only
// form for POST /debug/lookup and for harnesses. Its decision must not be
// passed to Done.
func (r *Router) Predict(ctx context.Context, req *Request, ws Workers) (*Decision, error) {
	return r.decide(ctx, req, ws, false)
}

// FirstToken tells the router that the request of d produced its first
// token, so its prefill no longer counts as work ahead on its worker. It is
// optional: until it is first called the router assumes each first token
// came when predicted; once it has been called, a streamed request
// (Request.Stream) counts as prefilling until its own call, while
// non-streamed ones keep the predicted time. Unknown decisions are ignored.
func (r *Router) FirstToken(d *Decision) {
	r.mu.Lock()
	r.told = true
	if a, ok := r.live[d]; ok {
		now := r.now()
		a.firstSeen, a.firstAt = true, now
		a.state.lastFirst = now
	}
	r.mu.Unlock()
}

// tokensOf returns the request's exact token ids, where they came from, and
// why none came when ids is nil.
func (r *Router) tokensOf(ctx context.Context, req *Request) (ids []uint32, path, reason string) {
	if req.TokenIDs != nil {
		return req.TokenIDs, "request", ""
	}
	if r.tokens == nil {
		return nil, "none", "no tokenizer configured"
	}
	ids, path, err := r.tokens.Tokens(ctx, req)
	switch {
	case err != nil:
		r.m.tokenizeErrors.Inc()
		return nil, "none", err.Error()
	case ids == nil:
		r.m.tokenizeErrors.Inc()
		return nil, "none", "tokenizer returned no token ids"
	}
	return ids, path, ""
}

func (r *Router) state(name string) *workerState {
	st, ok := r.workers[name]
	if !ok {
		st = &workerState{
			cal:         newCalibrator(r.cfg.Prior, r.cfg.PriorSpread, r.cfg.NoiseRel),
			avgUncached: float64(r.cfg.DefaultUncached),
			avgPrompt:   float64(r.cfg.DefaultUncached),
			text:        newTextHistory(r.cfg.TextHistory),
		}
		r.workers[name] = st
	}
	return st
}

func (r *Router) decide(ctx context.Context, req *Request, ws Workers, commit bool) (*Decision, error) {
	if len(ws) == 0 {
		return nil, ErrNoWorkers
	}
	now := r.now()
	n := len(ws)
	d := &Decision{Policy: r.name, Mode: ModeLoadOnly, Decided: now, Candidates: make([]Candidate, n)}
	for i := range ws {
		d.Candidates[i].Worker = ws[i].Name
		d.Candidates[i].Address = ws[i].Address
	}
	key := CacheKey{Model: req.Model, LoRA: req.LoRA, Salt: req.CacheSalt}
	bs := r.cfg.blockSize(req.Model)

	ids, path, reason := r.tokensOf(ctx, req)
	d.TokenizePath, d.TokenizeReason = path, reason
	exact := false
	if ids != nil {
		d.PromptTokens = len(ids)
		switch {
		case r.index == nil:
			d.TokenizeReason = "no prefix index"
		default:
			exact = true
			d.Mode = ModeExact
			if path == "remote" {
				d.Mode = ModeRemote
			}
			r.applyMatches(d, r.index.Lookup(key, ids, bs), bs)
		}
	} else {
		d.PromptTokens = int(float64(len(req.Body)) / r.cfg.BytesPerToken)
	}
	var chain []uint64
	if (commit || ids == nil) && len(req.Body) >= r.cfg.TextChunk {
		chain = textChain(r.hseed, key, req.Body, r.cfg.TextChunk, nil)
	}
	ls, _ := r.gather.Get().(*loadScratch)
	if ls == nil {
		ls = &loadScratch{}
	}
	defer r.gather.Put(ls)
	ls.reports, ls.fresh = grow(ls.reports, n), grow(ls.fresh, n)
	reports, fresh := ls.reports, ls.fresh
	if r.load != nil {
		for i := range ws {
			rep, ok := r.load.Load(ws[i].Name)
			reports[i] = rep
			age := now.Sub(rep.Scraped)
			fresh[i] = ok && age <= r.cfg.LoadMaxAge
			switch {
			case !ok:
				r.m.loadMissing.Inc()
			case !fresh[i]:
				r.m.loadStale.Inc()
			default:
				r.m.loadFresh.Inc()
			}
		}
	}
	if exact {
		for i := range ws {
			if r.index.Stale(ws[i].Name) {
				r.m.staleIndex.Inc()
			}
		}
	}

	r.mu.Lock()
	r.states = grow(r.states, n)
	states := r.states
	for i := range ws {
		states[i] = r.state(ws[i].Name)
	}
	if ids == nil && chain != nil {
		r.applyText(d, states, chain, now)
	}
	if commit {
		r.relaxIdle(states, now)
	}
	v := r.view(d, ws, states, reports, fresh, bs, now)
	r.scratch = grow(r.scratch, n)
	score := r.scratch
	idx, why := r.policy.choose(v, score)
	for i := range d.Candidates {
		d.Candidates[i].Score = score[i]
	}
	d.Chosen = d.Candidates[idx]
	d.Worker, d.Address, d.Reason = d.Chosen.Worker, d.Chosen.Address, why
	for _, s := range r.shadows {
		j, _ := s.p.choose(v, score)
		c := d.Candidates[j]
		d.Shadow = append(d.Shadow, ShadowPick{Policy: s.name, Worker: c.Worker,
			PredictedTTFT: c.PredictedTTFT, Regret: c.PredictedTTFT - d.Chosen.PredictedTTFT})
	}
	if commit {
		r.reserve(d, v, states[idx], idx, exact, req.Stream, now)
		if chain != nil {
			states[idx].text.record(chain, now.UnixNano())
		}
		r.seq++
	}
	r.mu.Unlock()

	if !commit {
		return d, nil
	}
	if exact {
		r.index.Speculate(d.Worker, key, ids, bs)
	}
	r.m.decisions.WithLabelValues(r.name, string(d.Mode)).Inc()
	r.m.inflight.Inc()
	for _, s := range d.Shadow {
		r.m.shadowRegret.WithLabelValues(s.Policy).Observe(s.Regret.Seconds())
		if s.Worker == d.Worker {
			r.m.shadowAgree.WithLabelValues(s.Policy).Inc()
		}
	}
	return d, nil
}

// applyMatches puts the index's answer on the candidates, capped as the
// engine caps its hit: at most floor((P-1)/B)·B tokens, since the last
// prompt token is always computed.
func (r *Router) applyMatches(d *Decision, ms []PrefixMatch, bs int) {
	limit := max(d.PromptTokens-1, 0) / bs * bs
	for _, m := range ms {
		for i := range d.Candidates {
			c := &d.Candidates[i]
			if c.Worker != m.Worker {
				continue
			}
			gpu := min(max(m.GPUTokens, 0), limit)
			off := min(max(m.OffloadedTokens, 0), limit-gpu)
			c.CachedTokens, c.OffloadedTokens = gpu+off, off
			break
		}
	}
}

// applyText estimates cached tokens from warmpath's own routing history of
// text blocks; the decision is approximate when any candidate matched.
func (r *Router) applyText(d *Decision, states []*workerState, chain []uint64, now time.Time) {
	ttl := int64(r.cfg.TextTTL)
	for i, st := range states {
		k := st.text.match(chain, now.UnixNano(), ttl)
		if k == 0 {
			continue
		}
		d.Mode = ModeApproximate
		est := int(float64(k*r.cfg.TextChunk) / r.cfg.BytesPerToken)
		d.Candidates[i].CachedTokens = min(est, max(d.PromptTokens-1, 0))
	}
}

// view predicts every candidate's TTFT and gathers what policies need.
//
// A worker with several data-parallel ranks is modelled as one engine with
// their summed step budget.
func (r *Router) view(d *Decision, ws Workers, states []*workerState, reports []LoadReport, fresh []bool, bs int, now time.Time) *view {
	n := len(states)
	v := &r.vs
	*v = view{cfg: &r.cfg, cands: d.Candidates, loads: grow(v.loads, n), uncached: grow(v.uncached, n), work: grow(v.work, n),
		kvWait: grow(v.kvWait, n), factor: grow(v.factor, n), models: grow(v.models, n), prompt: d.PromptTokens, blockSize: bs, seq: r.seq}
	known, sum := 0, 0.0
	models := v.models
	for i, st := range states {
		models[i] = st.cal.model()
		m := models[i]
		v.loads[i] = st.load(now, reports[i], fresh[i], bs, r.told, m.PrefillPerToken, float64(r.cfg.budget(ws[i].Name)*ws[i].Ranks()))
		if u := v.loads[i].kvUsage; u >= 0 {
			known++
			sum += u
		}
	}
	for i, st := range states {
		l := &v.loads[i]
		c := &d.Candidates[i]
		m := models[i]
		v.work[i] = workload{
			prompt:      float64(d.PromptTokens),
			cached:      float64(c.CachedTokens),
			offloaded:   float64(c.OffloadedTokens),
			ahead:       l.ahead,
			aheadReqs:   l.aheadReqs,
			aheadCtx:    l.aheadCtx,
			decoding:    l.decoding,
			decodeCtx:   l.decodeCtx,
			budget:      float64(r.cfg.budget(c.Worker) * ws[i].Ranks()),
			offloadCost: r.cfg.OffloadCost,
		}
		w := &v.work[i]
		// Unknown usage is priced as the pool's mean known usage, never
		// as an empty cache.
		u := l.kvUsage
		if u < 0 && known > 0 {
			u = sum / float64(known)
		}
		v.factor[i] = kvFactor(u, r.cfg.KVHigh, r.cfg.KVPenalty)
		p := predict(m, w, v.factor[i])
		v.uncached[i] = w.uncached()
		capacity := reports[i].KVBlocks
		if !fresh[i] || capacity <= 0 {
			capacity = r.cfg.KVBlocks[c.Worker]
		}
		need := int(math.Ceil((w.uncached() + st.avgOut) / float64(bs)))
		v.kvWait[i] = st.kvWait(now, capacity, need, l.kvUsage, bs, r.told)
		c.QueueWait = seconds(p.queue) + v.kvWait[i]
		c.Prefill = seconds(p.prefill)
		c.Overhead = seconds(p.overhead)
		c.PredictedTTFT = c.QueueWait + c.Prefill + c.Overhead
		c.InFlight = l.inflight
		c.WorkAhead = int(math.Round(l.ahead))
		c.Decoding = int(math.Round(l.decoding))
		c.KVUsage = l.kvUsage
	}
	return v
}

// relaxIdle restarts, from the typical model of the workers with recent
// outcomes, the calibration of each candidate that has gone IdleRelax
// without an outcome and has nothing in flight, once per period. Without
// it, a worker the model once judged slow would get no request, and so no
// chance to be measured again. Nothing restarts while no worker has a
// recent outcome.
func (r *Router) relaxIdle(states []*workerState, now time.Time) {
	period := r.cfg.IdleRelax
	if period <= 0 {
		return
	}
	var centre *[numParams]float64
	for _, st := range states {
		if st.cal.n == 0 || len(st.inflight) > 0 || now.Sub(st.lastOutcome) < period || now.Sub(st.lastRelax) < period {
			continue
		}
		if centre == nil {
			c, ok := r.typicalTheta(now)
			if !ok {
				return
			}
			centre = &c
		}
		st.cal.restart(*centre)
		st.lastRelax = now
		r.m.idleRestarts.Inc()
	}
}

// typicalTheta is the per-parameter median of the calibrated models of
// the workers with an outcome within IdleRelax, prior-relative; false when
// there are none.
func (r *Router) typicalTheta(now time.Time) ([numParams]float64, bool) {
	var out [numParams]float64
	var recent []*calibrator
	for _, st := range r.workers {
		if st.cal.n > 0 && now.Sub(st.lastOutcome) < r.cfg.IdleRelax {
			recent = append(recent, st.cal)
		}
	}
	if len(recent) == 0 {
		return out, false
	}
	vals := make([]float64, len(recent))
	for i := range out {
		for j, c := range recent {
			vals[j] = c.theta[i]
		}
		slices.Sort(vals)
		out[i] = vals[len(vals)/2]
	}
	return out, true
}

// reserve records the decision as in flight on the chosen worker.
func (r *Router) reserve(d *Decision, v *view, st *workerState, idx int, exact, stream bool, now time.Time) {
	c := d.Candidates[idx]
	a := &assignment{
		worker:    c.Worker,
		decided:   now,
		prompt:    d.PromptTokens,
		uncached:  v.uncached[idx],
		blocks:    (d.PromptTokens + v.blockSize - 1) / v.blockSize,
		start:     now.Add(c.QueueWait),
		first:     now.Add(c.PredictedTTFT),
		work:      v.work[idx],
		cached:    c.CachedTokens,
		exact:     exact,
		stream:    stream,
		kvWait:    v.kvWait[idx],
		ownBlocks: int(math.Ceil((v.uncached[idx] + st.avgOut) / float64(v.blockSize))),
	}
	a.pred = prediction{queue: (c.QueueWait - a.kvWait).Seconds(), prefill: c.Prefill.Seconds(), overhead: c.Overhead.Seconds(), factor: v.factor[idx]}
	a.state = st
	st.add(a)
	r.live[d] = a
}

// Done ends the assignment of d: its load is released and, when the request
// completed with a first token (TTFT in (0, 1h]), the outcome calibrates the
// worker's model and checks the cached-token prediction. It must be called exactly once
// per decision returned by Pick; other calls are counted and ignored.
func (r *Router) Done(d *Decision, o Outcome) {
	r.mu.Lock()
	a, ok := r.live[d]
	if !ok {
		r.mu.Unlock()
		r.m.unknownDone.Inc()
		return
	}
	delete(r.live, d)
	st := a.state
	now := r.now()
	st.remove(a, now)
	st.pruneEnded(now.Add(-r.cfg.LoadMaxAge))
	var (
		l       learned
		learnOK = o.End == EndCompleted && o.TTFT > 0 && o.TTFT <= maxTTFT
	)
	if learnOK {
		l = r.learn(st, a, o)
		st.lastOutcome = now
	}
	r.mu.Unlock()

	r.m.inflight.Dec()
	r.m.outcomes.WithLabelValues(string(o.End)).Inc()
	if !learnOK {
		return
	}
	r.m.relError.Observe(l.relErr)
	if l.outlier {
		r.m.outliers.Inc()
	}
	if l.reset {
		r.m.resets.Inc()
		r.log.Info("worker changed speed: calibration restarted from the prior's uncertainty", "worker", a.worker)
	}
	r.m.prefillPerTok.WithLabelValues(a.worker).Set(l.model.PrefillPerToken)
	r.m.stepOverhead.WithLabelValues(a.worker).Set(l.model.StepOverhead)
	if l.checked {
		r.m.cachedCheck.WithLabelValues(l.cachedResult).Inc()
	}
	switch l.gap {
	case gapOpened:
		r.m.cachedGap.WithLabelValues(a.worker).Set(1)
		r.log.Warn("cached-token predictions persistently miss the engine's cached_tokens: tokenizer, chat template or block size mismatch, or lost KV events",
			"worker", a.worker, "miss_rate", l.gapRate, "mean_over_prediction_tokens", l.gapBias)
	case gapClosed:
		r.m.cachedGap.WithLabelValues(a.worker).Set(0)
		r.log.Info("cached-token predictions match the engine again", "worker", a.worker, "miss_rate", l.gapRate)
	}
}

// learned is what one outcome taught, for metrics and logs outside the lock.
type learned struct {
	relErr       float64
	outlier      bool
	reset        bool
	model        StepModel
	checked      bool
	cachedResult string
	gap          gapChange
	gapRate      float64
	gapBias      float64
}

// learn feeds a completed outcome to the worker's calibration. The model is
// fitted with what the engine reports (prompt and cached tokens) rather
// than what was predicted, so index errors do not bend the speed estimate.
func (r *Router) learn(st *workerState, a *assignment, o Outcome) learned {
	actual := o.TTFT.Seconds()
	l := learned{relErr: (a.pred.total() + a.kvWait.Seconds() - actual) / actual}
	const alpha = 0.05
	if dec := (o.Duration - o.TTFT).Seconds(); o.Duration > o.TTFT {
		if st.avgDecode == 0 {
			st.avgDecode = dec
		}
		st.avgDecode += alpha * (dec - st.avgDecode)
	}
	if o.CompletionTokens > 0 {
		st.avgOut += alpha * (float64(o.CompletionTokens) - st.avgOut)
	}
	w := a.work
	if o.PromptTokens > 0 {
		w.prompt = float64(o.PromptTokens)
	}
	if o.CachedTokens >= 0 {
		if a.exact {
			l.checked = true
			switch {
			case a.cached == o.CachedTokens:
				l.cachedResult = "exact"
			case a.cached > o.CachedTokens:
				l.cachedResult = "over"
			default:
				l.cachedResult = "under"
			}
			l.gap = st.gap.observe(a.cached, o.CachedTokens, r.cfg.CachedGapRate, r.cfg.CachedGapMin)
			l.gapRate, l.gapBias = st.gap.rate, st.gap.bias
		}
		w.cached = float64(o.CachedTokens)
		w.offloaded = min(w.offloaded, w.cached)
	}
	// An outcome that waited for KV blocks says little about step
	// times: the wait is priced separately and not fitted.
	if a.kvWait == 0 {
		resets := st.cal.resets
		l.outlier = st.cal.observe(w.features(), actual/a.pred.factor, &r.cfg)
		l.reset = st.cal.resets != resets
	}
	l.model = st.cal.model()
	st.avgUncached += alpha * (w.uncached() - st.avgUncached)
	st.avgPrompt += alpha * (w.prompt - st.avgPrompt)
	return l
}

// Model returns the step model the router currently holds for worker: the
// calibrated one, or the prior before any outcome.
func (r *Router) Model(worker string) StepModel {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.workers[worker]; ok {
		return st.cal.model()
	}
	return r.cfg.Prior
}

// Forget drops what the router learned about worker (calibration, text
// history, gap state) and its per-worker metric series; call it when the
// worker leaves the pool for good. Assignments still in flight on it keep
// their reservation until Done, and the state is kept until then.
// It reports whether the state was dropped.
func (r *Router) Forget(worker string) bool {
	r.mu.Lock()
	st, ok := r.workers[worker]
	if ok && len(st.inflight) > 0 {
		r.mu.Unlock()
		return false
	}
	delete(r.workers, worker)
	r.mu.Unlock()
	r.m.cachedGap.DeleteLabelValues(worker)
	r.m.prefillPerTok.DeleteLabelValues(worker)
	r.m.stepOverhead.DeleteLabelValues(worker)
	return true
}

// maxTTFT bounds the outcomes calibration believes: a longer "time to
// first token" is a broken measurement, not a slow engine.
const maxTTFT = time.Hour

// grow returns s resized to n zeroed elements, reusing its storage when
// it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// seconds converts a prediction to a Duration, saturating far below
// overflow so that an absurd model can never produce a negative time.
func seconds(s float64) time.Duration {
	const limit = float64(1000 * time.Hour)
	d := s * float64(time.Second)
	switch {
	case !(d > 0): // also NaN
		return 0
	case d > limit:
		return time.Duration(limit)
	}
	return time.Duration(d)
}
