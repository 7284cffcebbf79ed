package scoring

// Reassign attributes the assignment of d to worker, another of d's
// candidates: the proxy walked the decision's fallback list (the chosen
// endpoint refused, or failed before answering) and reports that worker as
// the one that served. The reservation moves to worker's ledger with what
// was predicted for it as a candidate (its queue wait, first token and
// cached prefix), and peers are told, as a new reservation under the same
// ID. Its outcome then checks the cached-token prediction and teaches the
// typical request of worker, but does not fit worker's step model: the
// model's inputs were gathered for the chosen worker's load, and the time
// lost on the failed attempt is in the measured TTFT. Its decode, which
// happens wholly on worker, is metered and fitted there; its prefill
// counts in worker's routed rate. Its KV blocks beyond the cached prefix
// keep the chosen worker's estimate.
//
// It reports whether it moved the assignment: false when d is not live
// (ended, never committed, or not this router's), when worker is not one of
// its candidates, when it is already there, or when its first token was
// already reported (it decodes where it is).
func (r *Router) Reassign(d *Decision, worker string) bool {
	var c *Candidate
	for i := range d.Candidates {
		if d.Candidates[i].Worker == worker {
			c = &d.Candidates[i]
			break
		}
	}
	if c == nil {
		return false
	}
	r.mu.Lock()
	a, ok := r.ledger.live[d]
	if !ok || a.worker == worker || a.firstSeen {
		r.mu.Unlock()
		return false
	}
	r.ledger.move(a, worker, *c)
	a.ledger.meter.route(a.uncached, r.now(), r.cfg.RateWindow)
	var sa SharedAssignment
	if r.sink != nil {
		sa = a.shared(nil)
	}
	r.mu.Unlock()
	if r.sink != nil {
		r.sink.Reserved(sa)
	}
	return true
}

// move takes a off its worker's ledger, where it never ran, and puts it on
// worker's with candidate c's predictions.
func (l *ledger) move(a *assignment, worker string, c Candidate) {
	from := a.ledger
	for i, b := range from.inflight {
		if b == a {
			from.inflight = append(from.inflight[:i], from.inflight[i+1:]...)
			break
		}
	}
	a.worker = worker
	a.ledger = l.worker(worker)
	a.start = a.decided.Add(c.QueueWait)
	a.first = a.decided.Add(c.PredictedTTFT)
	a.cached = c.CachedTokens
	a.work.cached, a.work.offloaded = float64(c.CachedTokens), float64(c.OffloadedTokens)
	a.uncached = a.work.uncached()
	a.kvWait = 0
	a.pred = prediction{queue: c.QueueWait.Seconds(), prefill: c.Prefill.Seconds(), overhead: c.Overhead.Seconds(), factor: 1}
	a.moved = true
	a.ledger.inflight = append(a.ledger.inflight, a)
}
