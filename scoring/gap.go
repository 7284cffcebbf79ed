package scoring

// gapTracker follows how often a worker's predicted cached tokens miss the
// engine's answer (usage.prompt_tokens_details.cached_tokens). A persistent
// gap means the index does not see what the engine holds: a tokenizer or
// chat-template mismatch, a block-size mismatch or lost KV events.
//
// It is not safe for concurrent use; the router guards it.
type gapTracker struct {
	n int
	// rate is an exponential average of misses over about the last
	// CachedGapMin outcomes; bias the same of predicted − actual tokens.
	rate float64
	bias float64
	// open is set while the gap is being reported.
	open bool
}

// gapChange says whether an observation opened or closed a reported gap.
type gapChange int

const (
	gapSame gapChange = iota
	gapOpened
	gapClosed
)

// observe records one outcome and reports whether the gap's state changed.
// The gap opens when the miss rate passes threshold after at least min
// outcomes and closes when it falls under half the threshold.
func (g *gapTracker) observe(predicted, actual int, threshold float64, minN int) gapChange {
	g.n++
	alpha := 1 / float64(min(g.n, minN))
	miss := 0.0
	if predicted != actual {
		miss = 1
	}
	g.rate += alpha * (miss - g.rate)
	g.bias += alpha * (float64(predicted-actual) - g.bias)
	switch {
	case !g.open && g.n >= minN && g.rate > threshold:
		g.open = true
		return gapOpened
	case g.open && g.rate < threshold/2:
		g.open = false
		return gapClosed
	}
	return gapSame
}
