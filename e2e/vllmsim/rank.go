package vllmsim

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// scaledClock maps simulated engine time to wall time: simulated time runs
// scale times faster than the wall clock from start on.
type scaledClock struct {
	start time.Time
	scale float64
}

func (c scaledClock) sim(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(c.start)) * c.scale)
}

func (c scaledClock) wall(d time.Duration) time.Time {
	return c.start.Add(time.Duration(float64(d) / c.scale))
}

// liveRequest is a request submitted to a running rank: the engine loop
// appends outputs, the HTTP handler drains them. Appending never blocks
// the engine.
type liveRequest struct {
	req    *Request
	notify chan struct{} // one slot, may be shared by the requests of one HTTP call

	mu   sync.Mutex
	outs []Output
	err  error
	done bool
}

// take returns the outputs not yet taken, and whether the request ended.
func (l *liveRequest) take(buf []Output) ([]Output, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf = append(buf, l.outs...)
	l.outs = l.outs[:0]
	return buf, l.done, l.err
}

func (l *liveRequest) deliver(o Output) {
	l.mu.Lock()
	l.outs = append(l.outs, o)
	l.done = o.Finished
	l.mu.Unlock()
	l.signal()
}

func (l *liveRequest) fail(err error) {
	l.mu.Lock()
	l.err, l.done = err, true
	l.mu.Unlock()
	l.signal()
}

func (l *liveRequest) signal() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// RankState is a read-only view of one engine's true state, for tests and
// oracle pickers.
type RankState struct {
	Rank             int
	Running, Waiting int
	KVUsage          float64
	Preemptions      int
	// SimTime is the engine clock at the last step boundary.
	SimTime time.Duration
}

// rank runs one engine on the scaled clock. The engine is touched only
// under mu: by the loop around each step, and by State and CachedPrefix.
type rank struct {
	id     int
	clock  scaledClock
	pub    *publisher // nil when events are off
	met    *rankMetrics
	faults func() *Faults
	rng    *rand.Rand // owned by run

	mu      sync.Mutex
	eng     *Engine
	inbox   []*liveRequest
	aborts  []*liveRequest
	live    map[*Request]*liveRequest
	simNow  time.Duration
	pending int // submitted and not finished, for load balancing
	reset   []chan bool
	wake    chan struct{}
}

func newRank(id int, eng *Engine, clock scaledClock, pub *publisher, met *rankMetrics, faults func() *Faults) *rank {
	return &rank{id: id, eng: eng, clock: clock, pub: pub, met: met, faults: faults,
		rng:  rand.New(rand.NewPCG(eng.Config().Seed, 0x57a11)),
		live: make(map[*Request]*liveRequest), wake: make(chan struct{}, 1)}
}

// submit stamps l's arrival on the engine clock and queues it.
func (r *rank) submit(l *liveRequest) {
	r.mu.Lock()
	l.req.Arrival = r.clock.sim(time.Now())
	r.inbox = append(r.inbox, l)
	r.pending++
	r.mu.Unlock()
	r.poke()
}

func (r *rank) abort(l *liveRequest) {
	r.mu.Lock()
	r.aborts = append(r.aborts, l)
	r.mu.Unlock()
	r.poke()
}

// resetPrefixCache asks the loop to reset the cache at the next step
// boundary and reports whether it succeeded.
func (r *rank) resetPrefixCache(ctx context.Context) bool {
	ch := make(chan bool, 1)
	r.mu.Lock()
	r.reset = append(r.reset, ch)
	r.mu.Unlock()
	r.poke()
	select {
	case ok := <-ch:
		return ok
	case <-ctx.Done():
		return false
	}
}

func (r *rank) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *rank) load() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return 4*r.eng.Waiting() + len(r.inbox) + r.eng.Running()
}

func (r *rank) state() RankState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RankState{Rank: r.id, Running: r.eng.Running(), Waiting: r.eng.Waiting() + len(r.inbox),
		KVUsage: r.eng.KVUsage(), Preemptions: r.eng.Preemptions(), SimTime: r.simNow}
}

func (r *rank) cachedPrefix(prompt []uint32, salt string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.eng.CachedPrefix(prompt, salt)
}

// boundary applies what arrived before engine time t: aborts, resets and
// requests stamped at or before t. It runs with r.mu held.
func (r *rank) boundary(t time.Duration) {
	for _, l := range r.aborts {
		r.eng.Abort(l.req)
		for i, q := range r.inbox {
			if q == l {
				r.inbox = append(r.inbox[:i], r.inbox[i+1:]...)
				r.pending--
				break
			}
		}
		if _, ok := r.live[l.req]; ok {
			delete(r.live, l.req)
			r.pending--
		}
	}
	r.aborts = r.aborts[:0]
	for _, ch := range r.reset {
		ch <- r.eng.ResetPrefixCache()
	}
	r.reset = r.reset[:0]
	n := 0
	for _, l := range r.inbox {
		if l.req.Arrival > t {
			break
		}
		n++
		if err := r.eng.Add(l.req); err != nil {
			r.pending--
			l.fail(err)
			continue
		}
		r.live[l.req] = l
	}
	r.inbox = r.inbox[n:]
}

// run is the engine loop: at each step boundary it admits arrivals, runs
// one step, sleeps its duration on the scaled clock, then delivers the
// outputs and publishes the step's KV events.
func (r *rank) run(ctx context.Context) error {
	var t time.Duration
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		r.simNow = t
		r.boundary(t)
		if r.eng.Idle() {
			// Events of an idle engine (AllBlocksCleared after a reset) wait
			// for the next step, as vLLM publishes only from engine steps.
			r.observeQueues()
			if len(r.inbox) > 0 {
				t = max(t, r.inbox[0].req.Arrival)
				r.mu.Unlock()
				continue
			}
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-r.wake:
				continue
			}
		}
		res := r.eng.Step(t)
		r.observeQueues()
		r.mu.Unlock()
		if f := r.faults(); f.StallFraction > 0 && r.rng.Float64() < f.StallFraction {
			res.Duration += f.Stall
			for i := range res.Outputs {
				if res.Outputs[i].Index == 0 {
					res.Outputs[i].FirstToken += f.Stall
				}
			}
			r.met.stalls.Inc()
		}

		r.met.stepLag.Observe(max(0, time.Since(r.clock.wall(t)).Seconds()))
		end := t + res.Duration
		if d := time.Until(r.clock.wall(end)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		}
		t = end
		r.account(res)
		// Events go out before the outputs reach clients, as vLLM's engine
		// core publishes them before its outputs reach the API server.
		if len(res.Events) > 0 {
			r.emit(ctx, res.Events)
		}
		r.mu.Lock()
		for _, o := range res.Outputs {
			l := r.live[o.Req]
			if l == nil {
				continue // aborted during the step
			}
			if o.Finished {
				delete(r.live, o.Req)
				r.pending--
			}
			l.deliver(o)
		}
		r.mu.Unlock()
	}
}

func (r *rank) emit(ctx context.Context, ev []Event) {
	if r.pub == nil {
		return
	}
	now := time.Now()
	r.pub.publish(ctx, Batch{TS: float64(now.UnixNano()) / 1e9, Events: ev, Rank: r.id})
}

func (r *rank) observeQueues() {
	r.met.running.Set(float64(r.eng.Running()))
	r.met.waiting.Set(float64(r.eng.Waiting() + len(r.inbox)))
	r.met.kvUsage.Set(r.eng.KVUsage())
}

// account updates the metrics of one finished step.
func (r *rank) account(res StepResult) {
	m := r.met
	m.iterationTokens.Observe(float64(res.PrefillTokens + res.DecodeSeqs))
	m.queries.Add(float64(res.Queries))
	m.hits.Add(float64(res.Hits))
	m.preemptions.Add(float64(res.Preempted))
	m.generationTokens.Add(float64(len(res.Outputs)))
	end := res.Start + res.Duration
	for _, o := range res.Outputs {
		if o.Index == 0 {
			// As vLLM, prompt tokens count the whole prompt, cached or not,
			// when its prefill completes.
			m.promptTokens.Add(float64(o.PromptTokens))
			m.ttft.Observe((o.FirstToken - o.Arrival).Seconds())
			m.queueTime.Observe((o.Scheduled - o.Arrival).Seconds())
			m.prefillTime.Observe((o.FirstToken - o.Scheduled).Seconds())
		} else {
			m.itl.Observe(res.Duration.Seconds())
		}
		if o.Finished {
			m.e2e.Observe((end - o.Arrival).Seconds())
			m.success.WithLabelValues("length").Inc()
		}
	}
}
