package vllmsim

import (
	"container/heap"
	"fmt"
	"time"
)

// Cluster drives engines on a virtual clock, with no goroutines and no
// sleeping: a discrete-event simulation that runs as fast as the CPU
// allows and makes the same decisions as the live server. Tests and
// harnesses use it to replay workloads in seconds. A Cluster is not safe
// for concurrent use.
type Cluster struct {
	engines []*Engine
	now     time.Duration
	busy    []bool
	pending []StepResult
	queue   arrivals
	seq     int

	// OnOutput, when set, is called at the virtual time an output becomes
	// visible (the end of its step). It may call Submit.
	OnOutput func(worker int, o Output)
	// OnStep, when set, is called when a step ends, before its outputs.
	OnStep func(worker int, s StepResult)
	// OnReject, when set, is called for a request an engine refused.
	OnReject func(worker int, r *Request, err error)
}

// NewCluster returns a cluster of the engines at virtual time 0.
func NewCluster(engines ...*Engine) *Cluster {
	return &Cluster{engines: engines, busy: make([]bool, len(engines)), pending: make([]StepResult, len(engines))}
}

// Engine returns engine i, for read-only inspection between events.
func (c *Cluster) Engine(i int) *Engine { return c.engines[i] }

// Now returns the virtual time.
func (c *Cluster) Now() time.Duration { return c.now }

// Submit schedules r to arrive at engine worker at virtual time at (no
// earlier than now). r.Arrival is set to the arrival time.
func (c *Cluster) Submit(at time.Duration, worker int, r *Request) {
	c.seq++
	heap.Push(&c.queue, arrival{at: max(at, c.now), seq: c.seq, worker: worker, req: r})
}

// Do calls f at virtual time at, between steps (to reset a cache, say).
func (c *Cluster) Do(at time.Duration, f func()) {
	c.seq++
	heap.Push(&c.queue, arrival{at: max(at, c.now), seq: c.seq, worker: -1, do: f})
}

// Run processes events until every engine is idle and nothing is due.
func (c *Cluster) Run() error {
	for {
		for w, e := range c.engines {
			if !c.busy[w] && !e.Idle() {
				c.pending[w] = e.Step(c.now)
				c.busy[w] = true
			}
		}
		t, ok := c.next()
		if !ok {
			return nil
		}
		if t < c.now {
			return fmt.Errorf("virtual clock went backwards: %v < %v", t, c.now)
		}
		c.now = t
		for w := range c.engines {
			if c.busy[w] && c.pending[w].Start+c.pending[w].Duration == t {
				c.busy[w] = false
				res := c.pending[w]
				c.pending[w] = StepResult{}
				if c.OnStep != nil {
					c.OnStep(w, res)
				}
				for _, o := range res.Outputs {
					if c.OnOutput != nil {
						c.OnOutput(w, o)
					}
				}
			}
		}
		for len(c.queue) > 0 && c.queue[0].at <= t {
			a := heap.Pop(&c.queue).(arrival)
			if a.do != nil {
				a.do()
				continue
			}
			a.req.Arrival = a.at
			if err := c.engines[a.worker].Add(a.req); err != nil && c.OnReject != nil {
				c.OnReject(a.worker, a.req, err)
			}
		}
	}
}

func (c *Cluster) next() (time.Duration, bool) {
	var t time.Duration
	ok := false
	if len(c.queue) > 0 {
		t, ok = c.queue[0].at, true
	}
	for w := range c.engines {
		if c.busy[w] {
			end := c.pending[w].Start + c.pending[w].Duration
			if !ok || end < t {
				t, ok = end, true
			}
		}
	}
	return t, ok
}

type arrival struct {
	at     time.Duration
	seq    int
	worker int
	req    *Request
	do     func()
}

type arrivals []arrival

func (a arrivals) Len() int { return len(a) }
func (a arrivals) Less(i, j int) bool {
	if a[i].at != a[j].at {
		return a[i].at < a[j].at
	}
	return a[i].seq < a[j].seq
}
func (a arrivals) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)   { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}
