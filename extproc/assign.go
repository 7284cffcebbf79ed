package extproc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

// Assignment is one request in flight on one worker: what was sent where and
// when. It ends exactly once, through Registry.End.
type Assignment struct {
	ID       string
	Worker   string
	Decision *scoring.Decision
	Start    time.Time

	ended atomic.Bool
}

// Registry tracks in-flight assignments per worker. Each assignment ends
// exactly once: at completion, on abort, or when it outlives the TTL (timed
// cleanup for streams whose end was never seen). A Registry is safe for
// concurrent use.
type Registry struct {
	ttl   time.Duration
	now   func() time.Time
	onEnd func(*Assignment, scoring.Outcome)

	mu       sync.Mutex
	all      map[*Assignment]struct{}
	byWorker map[string]int
}

// NewRegistry returns a registry that calls onEnd once for every assignment
// as it ends (outside the registry's lock). Assignments older than ttl are
// expired by Run.
func NewRegistry(ttl time.Duration, now func() time.Time, onEnd func(*Assignment, scoring.Outcome)) *Registry {
	return &Registry{ttl: ttl, now: now, onEnd: onEnd, all: map[*Assignment]struct{}{}, byWorker: map[string]int{}}
}

// Begin records that the request id was sent per decision d.
func (r *Registry) Begin(id string, d *scoring.Decision) *Assignment {
	a := &Assignment{ID: id, Worker: d.Worker, Decision: d, Start: r.now()}
	r.mu.Lock()
	r.all[a] = struct{}{}
	r.byWorker[a.Worker]++
	r.mu.Unlock()
	return a
}

// End ends a with outcome o and reports whether this call ended it; later
// calls for the same assignment do nothing.
func (r *Registry) End(a *Assignment, o scoring.Outcome) bool {
	if !a.ended.CompareAndSwap(false, true) {
		return false
	}
	r.mu.Lock()
	delete(r.all, a)
	if r.byWorker[a.Worker]--; r.byWorker[a.Worker] <= 0 {
		delete(r.byWorker, a.Worker)
	}
	r.mu.Unlock()
	if o.Duration == 0 {
		o.Duration = r.now().Sub(a.Start)
	}
	r.onEnd(a, o)
	return true
}

// InFlight returns the number of assignments in flight on worker.
func (r *Registry) InFlight(worker string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byWorker[worker]
}

// ByWorker returns the number of assignments in flight per worker.
func (r *Registry) ByWorker() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.byWorker))
	for k, v := range r.byWorker {
		out[k] = v
	}
	return out
}

// Len returns the number of assignments in flight.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// Expire ends every assignment that started more than the TTL ago and
// returns how many it ended.
func (r *Registry) Expire() int {
	cutoff := r.now().Add(-r.ttl)
	var old []*Assignment
	r.mu.Lock()
	for a := range r.all {
		if a.Start.Before(cutoff) {
			old = append(old, a)
		}
	}
	r.mu.Unlock()
	n := 0
	for _, a := range old {
		if r.End(a, scoring.Outcome{End: scoring.EndExpired, PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}) {
			n++
		}
	}
	return n
}

// Run expires old assignments until ctx ends, checking every tenth of the
// TTL (at least once a second, at most every 100 ms).
func (r *Registry) Run(ctx context.Context) error {
	every := min(max(r.ttl/10, 100*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Expire()
		}
	}
}
