package oracle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/scoring"
)

// Target is one simulated worker the oracle sees into.
type Target struct {
	// Name is the worker's name in warmpath's configuration.
	Name string
	// Server is the running simulator.
	Server *vllmsim.Server
	// Engine is the configuration its engines run (block size, budget and
	// step costs).
	Engine vllmsim.EngineConfig
}

// ErrNoWorkers is returned by Pick for an empty candidate list.
var ErrNoWorkers = errors.New("oracle: no candidate workers")

// Picker is the oracle. It is safe for concurrent use; create it with New.
type Picker struct {
	targets map[string]Target
	scale   float64
	now     func() time.Time

	mu sync.Mutex
	// ready is, per worker, the wall time at which the prefill work the
	// oracle has sent there is done.
	ready map[string]time.Time
	// flights are the requests in flight per worker, for the prefixes
	// being computed that the true cache does not show yet.
	flights map[string]map[*flight]struct{}
	live    map[*scoring.Decision]*flight
}

type flight struct {
	worker string
	prompt []uint32
	salt   string
}

// Option configures a Picker.
type Option func(*Picker)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(p *Picker) { p.now = now } }

// New returns an oracle over targets, whose simulators run timeScale
// simulated seconds per wall second.
func New(targets []Target, timeScale float64, opts ...Option) *Picker {
	p := &Picker{targets: map[string]Target{}, scale: timeScale, now: time.Now,
		ready: map[string]time.Time{}, flights: map[string]map[*flight]struct{}{}, live: map[*scoring.Decision]*flight{}}
	if !(p.scale > 0) {
		p.scale = 1
	}
	for _, t := range targets {
		p.targets[t.Name] = t
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Pick predicts the time to first token on every candidate from the true
// state and picks the lowest. Requests without token ids (text prompts)
// cannot be looked up in the simulators' caches; they go to the candidate
// with the least queued prefill work.
func (p *Picker) Pick(_ context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error) {
	if len(ws) == 0 {
		return nil, ErrNoWorkers
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	d := &scoring.Decision{Policy: "oracle", Mode: scoring.ModeExact, TokenizePath: "request",
		PromptTokens: len(req.TokenIDs), Decided: now}
	if req.TokenIDs == nil {
		d.Mode, d.TokenizePath = scoring.ModeLoadOnly, "none"
	}
	best := -1
	for i, w := range ws {
		c := p.predict(now, req, w.Name)
		c.Address = w.Address
		d.Candidates = append(d.Candidates, c)
		if best < 0 || c.Score < d.Candidates[best].Score ||
			(c.Score == d.Candidates[best].Score && c.InFlight < d.Candidates[best].InFlight) {
			best = i
		}
	}
	d.Chosen = d.Candidates[best]
	d.Worker, d.Address = d.Chosen.Worker, d.Chosen.Address
	d.Reason = fmt.Sprintf("true state: lowest predicted TTFT %.1f ms (cached %d of %d tokens)",
		d.Chosen.PredictedTTFT.Seconds()*1000, d.Chosen.CachedTokens, len(req.TokenIDs))
	// Reserve: the chosen worker's prefill queue grows by this prefill.
	start := p.ready[d.Worker]
	if start.Before(now) {
		start = now
	}
	p.ready[d.Worker] = start.Add(p.wall(d.Chosen.Prefill))
	f := &flight{worker: d.Worker, prompt: req.TokenIDs, salt: req.CacheSalt}
	if p.flights[d.Worker] == nil {
		p.flights[d.Worker] = map[*flight]struct{}{}
	}
	p.flights[d.Worker][f] = struct{}{}
	p.live[d] = f
	return d, nil
}

// Done forgets the request's flight.
func (p *Picker) Done(d *scoring.Decision, _ scoring.Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f, ok := p.live[d]; ok {
		delete(p.live, d)
		delete(p.flights[f.worker], f)
	}
}

// predict returns the candidate for worker; the lock is held. Durations
// are simulated time converted to wall time.
func (p *Picker) predict(now time.Time, req *scoring.Request, worker string) scoring.Candidate {
	c := scoring.Candidate{Worker: worker, InFlight: len(p.flights[worker])}
	t, ok := p.targets[worker]
	wait := max(p.ready[worker].Sub(now), 0)
	if !ok {
		// Not a simulator the oracle knows: never better than a known one.
		c.QueueWait, c.PredictedTTFT, c.Score = wait, time.Duration(math.MaxInt64/2), math.MaxFloat64
		return c
	}
	running := 0
	for _, st := range t.Server.State() {
		running += st.Running
	}
	if req.TokenIDs != nil {
		c.CachedTokens = p.cached(t, req, worker)
	}
	uncached := len(req.TokenIDs) - c.CachedTokens
	e := t.Engine
	chunks := max((uncached+e.MaxNumBatchedTokens-1)/e.MaxNumBatchedTokens, 1)
	perStep := e.Step.Overhead + time.Duration(running)*e.Step.DecodePerSeq
	prefill := time.Duration(uncached)*e.Step.PrefillPerToken + time.Duration(chunks)*perStep
	c.QueueWait = wait
	c.Prefill = p.wall(prefill)
	c.PredictedTTFT = c.QueueWait + c.Prefill
	c.Score = c.PredictedTTFT.Seconds()
	return c
}

// cached returns the prefix of req that worker holds or will hold by the
// time req is scheduled: the true cache's hit, or the longest block-aligned
// common prefix with a request the oracle sent there that is in flight,
// capped as vLLM caps hits (the last token is always computed).
func (p *Picker) cached(t Target, req *scoring.Request, worker string) int {
	best := 0
	for rank := range max(len(t.Server.State()), 1) {
		best = max(best, t.Server.CachedPrefix(rank, req.TokenIDs, req.CacheSalt))
	}
	bs := t.Engine.BlockSize
	limit := (len(req.TokenIDs) - 1) / bs * bs
	for f := range p.flights[worker] {
		if f.salt != req.CacheSalt {
			continue
		}
		n := commonPrefix(f.prompt, req.TokenIDs)
		best = max(best, n/bs*bs)
	}
	return max(min(best, limit), 0)
}

func commonPrefix(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// wall converts a simulated duration to wall time.
func (p *Picker) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / p.scale)
}
