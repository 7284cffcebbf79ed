package scoring

// silenceAfter is how many completed requests in a row, each of which must
// have stored at least one new KV block on its worker, may pass without a
// single KV-event batch from that worker before the worker is flagged as
// silent. Events go out before the outputs they belong to (vLLM publishes
// at the end of the engine step), so a worker that publishes at all has
// long shown one batch by the eighth such answer.
const silenceAfter = 8

// silenceWatch notices workers that serve requests but publish no KV
// events: a publisher that connects where it should bind, a wrong
// endpoint, prefix caching turned off. warmpath would otherwise route to
// them blind while its index and readiness look healthy. It holds one
// entry per worker whose index stream is known; the router's mutex guards
// it.
type silenceWatch struct {
	workers map[string]*silence
}

type silence struct {
	batches uint64 // the worker's applied batches at the last check
	quiet   int    // storing outcomes in a row with no new batch
	silent  bool
}

// silenceChange says what an observation changed.
type silenceChange int

const (
	silenceSame silenceChange = iota
	silenceStarted
	silenceEnded
)

// observe records one completed outcome on worker: batches is what the
// index applied from it so far, stored whether the outcome must have
// stored a new block (its uncached prompt held a full block).
func (w *silenceWatch) observe(worker string, batches uint64, stored bool) silenceChange {
	if w.workers == nil {
		w.workers = make(map[string]*silence)
	}
	s := w.workers[worker]
	if s == nil {
		w.workers[worker] = &silence{batches: batches}
		return silenceSame
	}
	if batches != s.batches {
		s.batches, s.quiet = batches, 0
		if s.silent {
			s.silent = false
			return silenceEnded
		}
		return silenceSame
	}
	if !stored || s.silent {
		return silenceSame
	}
	s.quiet++
	if s.quiet < silenceAfter {
		return silenceSame
	}
	s.silent = true
	return silenceStarted
}

// isSilent reports whether worker is flagged.
func (w *silenceWatch) isSilent(worker string) bool {
	s := w.workers[worker]
	return s != nil && s.silent
}

// silentWorkers lists the flagged workers.
func (w *silenceWatch) silentWorkers() []string {
	var out []string
	for name, s := range w.workers {
		if s.silent {
			out = append(out, name)
		}
	}
	return out
}

// forget drops worker's entry.
func (w *silenceWatch) forget(worker string) { delete(w.workers, worker) }

// storesBlock reports whether an outcome's prompt left at least one full
// block uncached, which the engine stores and announces: from the
// engine's usage when reported, else from the decision's own figures. A
// refused request stored nothing; a client resending one used to flag its
// worker silent.
func storesBlock(o Outcome, a *assignment, blockSize int) bool {
	if o.refused() {
		return false
	}
	prompt, cached := a.prompt, a.cached
	if o.PromptTokens > 0 {
		prompt = o.PromptTokens
	}
	if o.CachedTokens >= 0 {
		cached = o.CachedTokens
	}
	return blockSize > 0 && prompt/blockSize > cached/blockSize
}
