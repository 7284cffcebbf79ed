package scoring

import (
	"math"
	"time"
)

// The prediction room: per candidate, the TTFT the worker's step model
// predicts for the request given the load the ledger shows there (queue
// wait, uncached prefill, fixed overhead), the KV-admission wait and the
// preemption-risk factor, then what the decode room predicts of the rest
// of the response (TPOT, end to end, the slowdown it imposes). It reads
// the ledger and the learner and changes neither. It runs under the
// router's mutex and reuses its scratch for every decision.

// predictor holds the scratch one prediction reuses.
type predictor struct {
	vs     view
	scores []float64
	// ledgers and models are each candidate's ledger and learned model.
	ledgers []*workerLedger
	models  []*workerModel
	// reuse is the share of each request's prompt its best candidate held
	// cached, averaged over recent decisions: how much of what a cache
	// holds the workload comes back for.
	reuse float64
}

// reuseAlpha is the weight of one decision in predictor.reuse.
const reuseAlpha = 0.02

// predict fills every candidate's prediction on d and returns the view
// the policies choose from, valid until the next call.
//
// A worker with several data-parallel ranks is modelled as one engine with
// their summed step budget.
func (p *predictor) predict(r *Router, req *Request, d *Decision, ws Workers, f *facts, now time.Time) *view {
	n := len(ws)
	v := &p.vs
	out := r.learn.output(req.Model).expect(req.MaxTokens, r.cfg.DefaultOutputTokens)
	d.OutputTokens = int(math.Round(out))
	*v = view{cfg: &r.cfg, cands: d.Candidates, loads: grow(v.loads, n), uncached: grow(v.uncached, n), work: grow(v.work, n),
		kvWait: grow(v.kvWait, n), factor: grow(v.factor, n), models: grow(v.models, n),
		prompt: d.PromptTokens, out: out, slo: r.cfg.slo(req.Model, req.SLO), blockSize: f.blockSize, seq: r.seq}
	p.ledgers, p.models = grow(p.ledgers, n), grow(p.models, n)
	known, sum := 0, 0.0
	for i := range ws {
		p.ledgers[i], p.models[i] = r.ledger.worker(ws[i].Name), r.learn.worker(ws[i].Name)
		v.models[i] = p.models[i].cal.model()
		budget := float64(r.cfg.budget(ws[i].Name) * ws[i].Ranks())
		v.loads[i] = p.ledgers[i].load(now, f.loads[i], f.fresh[i], f.blockSize, r.ledger.told,
			v.models[i], budget, p.models[i].typ)
		if u := v.loads[i].kvUsage; u >= 0 {
			known++
			sum += u
		}
	}
	for i := range ws {
		l := &v.loads[i]
		c := &d.Candidates[i]
		typ := p.models[i].typ
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
		pr := predictTTFT(v.models[i], w, v.factor[i])
		v.uncached[i] = w.uncached() + f.more
		capacity := f.loads[i].KVBlocks
		if !f.fresh[i] || capacity <= 0 {
			capacity = r.cfg.KVBlocks[c.Worker]
		}
		need := ownBlocks(v.uncached[i], req.sequences(), typ, f.blockSize)
		v.kvWait[i] = p.ledgers[i].kvWait(now, capacity, need, l.kvUsage, f.blockSize, r.ledger.told, typ)
		c.QueueWait = seconds(pr.queue) + v.kvWait[i]
		c.Prefill = seconds(pr.prefill)
		c.Overhead = seconds(pr.overhead)
		c.PredictedTTFT = c.QueueWait + c.Prefill + c.Overhead
		others := l.decoding + l.aheadReqs
		typOut := typ.out
		if typOut <= 0 {
			typOut = out
		}
		// A response decodes for longer than the batch of this instant
		// lasts: it starts with the sequences running now and, as they
		// end, shares its steps with the worker's usual batch instead.
		// The midpoint of the two is what it sees on average.
		ctx := l.decodeCtx + l.aheadCtx + others*typOut/2
		mean, meanCtx := p.ledgers[i].meter.sample(others, ctx, now, r.cfg.RateWindow)
		seqs := float64(req.sequences())
		meter := &p.ledgers[i].meter
		dp := predictDecode(p.models[i].dec.model(), decodeLoad{
			batch:    (others+mean)/2 + seqs,
			ctx:      (ctx+meanCtx)/2 + seqs*(w.prompt+out/2),
			others:   others,
			rate:     meter.rate(now, r.cfg.RateWindow),
			arrivals: meter.arrivals(now, r.cfg.RateWindow),
			budget:   w.budget,
			ttft:     c.PredictedTTFT.Seconds(),
			prompt:   w.prompt,
			uncached: v.uncached[i],
			out:      out,
			seqs:     seqs,
		})
		c.PredictedTPOT = seconds(dp.typical)
		c.PredictedE2E = c.PredictedTTFT + seconds(dp.tpot*max(out-1, 0))
		c.Slowdown = seconds(dp.slowdown)
		c.InFlight = l.inflight
		c.WorkAhead = int(math.Round(l.ahead))
		c.Decoding = int(math.Round(l.decoding))
		c.KVUsage = l.kvUsage
	}
	if d.PromptTokens > 0 && n > 0 {
		most := 0
		for i := range d.Candidates {
			most = max(most, d.Candidates[i].CachedTokens)
		}
		p.reuse += reuseAlpha * (float64(most)/float64(d.PromptTokens) - p.reuse)
		v.fewest = float64(d.PromptTokens - most)
	}
	v.reuse = p.reuse
	p.scores = grow(p.scores, n)
	return v
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
