package scoring

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/warmpath/warmpath/internal/component"
)

// ErrNoWorkers is returned by Pick and Predict when given no candidates.
var ErrNoWorkers = errors.New("no candidate workers")

// Sources are what the router reads before each decision; any may be nil
// (see gatherer).
type Sources struct {
	// Tokens yields exact prompt token ids; nil means only ids sent by the
	// client (Request.TokenIDs) are exact.
	Tokens TokenSource
	// Index is the KV-cache index; nil means no cache information beyond
	// warmpath's own text-block history.
	Index PrefixIndex
	// Load reports scraped engine gauges; nil means warmpath's own
	// assignments are the only load it knows.
	Load EngineLoad
	// Peers says how current the peers' share of the ledger is; nil when
	// there are no peers.
	Peers PeerView
}

// Option configures a Router.
type Option func(*Router)

// WithSeed seeds the random policy (default 1), for reproducible runs.
func WithSeed(seed uint64) Option { return func(r *Router) { r.seed = seed } }

// Router is the picker the ext_proc layer calls. It is a façade over the
// rooms a decision passes through, in order:
//
//   - gathering (gather.go): exact tokens and cached prefixes, or the
//     prompt's text chain, and every candidate's scraped load;
//   - prediction (predict.go, model.go): every candidate's TTFT from its
//     step model and its load;
//   - the policy (policy.go): warmpath's or a baseline's choice, and the
//     shadow policies';
//   - the ledger (ledger.go): the chosen worker's reservation, until Done;
//   - learning (learn.go, calibrate.go, gap.go): what each outcome
//     teaches;
//   - metrics (metrics.go).
//
// Every policy goes through the same rooms, so they can be compared fairly.
//
// A Router is safe for concurrent use: gathering runs concurrently, the
// rest of a decision under one mutex. Create it with New.
type Router struct {
	cfg     Config
	name    string
	policy  policy
	shadows []shadowPolicy
	gather  *gatherer
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
	seed    uint64
	sink    LedgerSink // nil: the ledger is not shared
	// noPeerLessons: peers' lessons are not fitted (WithoutPeerLessons).
	noPeerLessons bool

	mu     sync.Mutex // guards the fields below
	ledger ledger
	learn  learner
	text   textRoutes
	pred   predictor
	quiet  silenceWatch
	// seq numbers committed decisions; it rotates tie-breaks.
	seq uint64
}

type shadowPolicy struct {
	name string
	p    policy
}

// New returns a Router deciding with the named policy (see PolicyNames),
// configured by cfg, which must be valid, reading src. It fails when the
// policy is unknown, cfg is invalid or its metrics cannot be registered.
func New(name string, cfg Config, src Sources, o component.Options, opts ...Option) (*Router, error) {
	table := policyTable()
	mk, ok := table[name]
	if !ok {
		return nil, fmt.Errorf("new router: unknown policy %q (want one of %v)", name, PolicyNames())
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new router: %w", err)
	}
	m, err := newMetrics(o)
	if err != nil {
		return nil, err
	}
	r := &Router{
		cfg:    cfg,
		name:   name,
		log:    o.Log(),
		m:      m,
		now:    o.Now(),
		seed:   1,
		ledger: newLedger(),
	}
	r.learn = newLearner(&r.cfg)
	r.text = newTextRoutes(&r.cfg)
	r.gather = &gatherer{cfg: &r.cfg, m: m, tokens: src.Tokens, index: src.Index, load: src.Load, peers: src.Peers, seed: maphash.MakeSeed()}
	for _, opt := range opts {
		opt(r)
	}
	if err := o.Register("scoring ledger", peerInFlightCollector{r}); err != nil {
		return nil, err
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

func (r *Router) decide(ctx context.Context, req *Request, ws Workers, commit bool) (*Decision, error) {
	if len(ws) == 0 {
		return nil, ErrNoWorkers
	}
	now := r.now()
	d := &Decision{Policy: r.name, Mode: ModeLoadOnly, Decided: now, Candidates: make([]Candidate, len(ws))}
	for i := range ws {
		d.Candidates[i].Worker = ws[i].Name
		d.Candidates[i].Address = ws[i].Address
	}
	f := r.gather.gather(ctx, req, ws, d, commit)
	defer r.gather.release(f)

	r.mu.Lock()
	if f.ids == nil && f.chain != nil {
		r.text.apply(d, f.chain, now)
	}
	if commit {
		relaxed := r.learn.relaxIdle(ws, func(w string) bool { return len(r.ledger.worker(w).inflight) > 0 }, now)
		for _, w := range relaxed {
			st := r.learn.worker(w)
			var dec *StepModel
			if st.dec.n > 0 {
				d := st.dec.model()
				dec = &d
			}
			r.m.models(w, st.cal.model(), dec)
		}
		r.m.idleRestarts.Add(float64(len(relaxed)))
	}
	v := r.pred.predict(r, req, d, ws, f, now)
	if r.name == PolicyWarmpath {
		d.Objective = r.cfg.Objective
		if d.Objective == ObjectiveSLO {
			d.SLO = v.slo
		}
	}
	score := r.pred.scores
	idx, why := r.policy.choose(v, score)
	for i := range d.Candidates {
		d.Candidates[i].Score = score[i]
	}
	d.Chosen = d.Candidates[idx]
	d.Worker, d.Address, d.Reason = d.Chosen.Worker, d.Chosen.Address, why
	d.KVSilent = r.quiet.isSilent(d.Worker)
	for _, s := range r.shadows {
		j, _ := s.p.choose(v, score)
		c := d.Candidates[j]
		d.Shadow = append(d.Shadow, ShadowPick{Policy: s.name, Worker: c.Worker,
			PredictedTTFT: c.PredictedTTFT, Regret: c.PredictedTTFT - d.Chosen.PredictedTTFT})
	}
	var a *assignment
	if commit {
		a = r.reserve(d, req, v, idx, f, now)
		if f.chain != nil {
			r.text.record(d.Worker, f.chain, now)
		}
		r.seq++
	}
	r.mu.Unlock()

	if !commit {
		return d, nil
	}
	keys := r.gather.speculate(d.Worker, f)
	if r.sink != nil {
		r.sink.Reserved(a.shared(keys))
	}
	for _, s := range d.Shadow {
		r.m.shadowRegret.WithLabelValues(s.Policy).Observe(s.Regret.Seconds())
		if s.Worker == d.Worker {
			r.m.shadowAgree.WithLabelValues(s.Policy).Inc()
		}
	}
	return d, nil
}

// reserve records the decision as in flight on the chosen worker and
// returns its assignment. r.mu must be held.
func (r *Router) reserve(d *Decision, req *Request, v *view, idx int, f *facts, now time.Time) *assignment {
	c := d.Candidates[idx]
	bs := f.blockSize
	a := &assignment{
		worker:    c.Worker,
		ledger:    r.ledger.worker(c.Worker),
		decided:   now,
		prompt:    d.PromptTokens,
		uncached:  v.uncached[idx],
		more:      f.more,
		blocks:    (d.PromptTokens + bs - 1) / bs,
		start:     now.Add(c.QueueWait),
		first:     now.Add(c.PredictedTTFT),
		work:      v.work[idx],
		pending:   v.loads[idx].pending,
		cached:    c.CachedTokens,
		exact:     f.exact,
		stream:    req.Stream,
		model:     req.Model,
		maxTokens: req.MaxTokens,
		prompts:   req.Prompts,
		seqs:      req.sequences(),
		out:       v.out,
		kvWait:    v.kvWait[idx],
		ownBlocks: ownBlocks(v.uncached[idx], req.sequences(), r.learn.worker(c.Worker).typ, bs),
		source:    req.Source,
	}
	a.pred = prediction{queue: (c.QueueWait - a.kvWait).Seconds(), prefill: c.Prefill.Seconds(), overhead: c.Overhead.Seconds(), factor: v.factor[idx]}
	r.ledger.reserve(d, a)
	a.ledger.meter.route(a.uncached, now, r.cfg.RateWindow)
	return a
}

// FirstToken tells the router that the request of d produced its first
// token, so its prefill no longer counts as work ahead on its worker. It is
// optional: until it is first called the router assumes each first token
// came when predicted; once it has been called, a streamed request
// (Request.Stream) counts as prefilling until its own call, while
// non-streamed ones keep the predicted time. Unknown decisions are ignored.
func (r *Router) FirstToken(d *Decision) {
	r.mu.Lock()
	now := r.now()
	a, ok := r.ledger.firstToken(d, now)
	r.mu.Unlock()
	if ok && r.sink != nil {
		r.sink.FirstToken(a.id, now)
	}
}

// Done ends the assignment of d: its load is released and, when the request
// completed with a first token (TTFT in (0, 1h]), the outcome calibrates the
// worker's model and checks the cached-token prediction. A non-streamed
// request that completed shows only its end: it marks the worker as
// measured now and bounds its first token (see learnUnstreamed). It must be called
// exactly once per decision returned by Pick; other calls are counted and
// ignored.
func (r *Router) Done(d *Decision, o Outcome) {
	// Read outside the router's lock: the index's may be held by a large
	// batch.
	var batches uint64
	watched := false
	if r.gather.index != nil && o.End == EndCompleted {
		batches, watched = r.gather.index.Batches(d.Worker)
	}
	var eng engineTTFT
	if r.gather.load != nil && o.End == EndCompleted {
		eng = engineTTFTOf(r.gather.load.Load(d.Worker))
	}
	r.mu.Lock()
	now := r.now()
	a, ok := r.ledger.end(d, now)
	if !ok {
		r.mu.Unlock()
		r.m.unknownDone.Inc()
		return
	}
	var l learned
	var lesson Lesson
	learnOK := learns(o)
	switch {
	case learnOK:
		l, lesson = r.learn.learn(a, o, now, eng)
	case learnsUnstreamed(a, o):
		l, lesson = r.learn.learnUnstreamed(a, o, now, eng)
		learnOK = true
	}
	quiet := silenceSame
	if watched && a.worker == d.Worker {
		quiet = r.quiet.observe(a.worker, batches, storesBlock(o, a, r.cfg.blockSize(a.model)))
	}
	r.mu.Unlock()
	if r.sink != nil {
		r.sink.Ended(a.id, lesson)
	}
	if learnOK {
		r.m.learned(a.worker, l, r.log)
	}
	r.m.silence(a.worker, quiet, r.log)
}

// KVSilent lists the workers flagged as serving requests without
// publishing KV events, in no particular order.
func (r *Router) KVSilent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.quiet.silentWorkers()
}

// Model returns the step model the router currently holds for worker: the
// calibrated one, or the prior before any outcome.
func (r *Router) Model(worker string) StepModel {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.learn.model(worker)
}

// InFlight returns, per worker with any, the number of assignments in
// flight in the router's ledger.
func (r *Router) InFlight() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ledger.inFlight()
}

// Forget drops what the router learned about worker (calibration, text
// history, gap state) and its per-worker metric series; call it when the
// worker leaves the pool for good. Assignments still in flight on it keep
// their reservation until Done, and the state is kept until then.
// It reports whether the state was dropped.
func (r *Router) Forget(worker string) bool {
	r.mu.Lock()
	if !r.ledger.forget(worker) {
		r.mu.Unlock()
		return false
	}
	delete(r.learn.workers, worker)
	r.text.forget(worker)
	r.quiet.forget(worker)
	r.mu.Unlock()
	r.m.forget(worker)
	return true
}
