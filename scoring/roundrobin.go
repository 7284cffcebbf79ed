package scoring

import (
	"context"
	"sync/atomic"
	"time"
)

// RoundRobin picks candidates in turn. It ignores caches and load; it is the
// simplest baseline. It is safe for concurrent use; the zero value is ready.
type RoundRobin struct {
	next atomic.Uint64
}

// Pick returns the next worker in turn among ws, which must not be empty.
func (p *RoundRobin) Pick(_ context.Context, _ *Request, ws Workers) (*Decision, error) {
	i := int((p.next.Add(1) - 1) % uint64(len(ws)))
	w := ws[i]
	c := Candidate{Worker: w.Name, Address: w.Address}
	return &Decision{
		Worker:       w.Name,
		Address:      w.Address,
		Policy:       "round-robin",
		Mode:         ModeLoadOnly,
		TokenizePath: "none",
		Chosen:       c,
		Reason:       "next in turn",
		Decided:      time.Now(),
	}, nil
}

// Done does nothing: round-robin keeps no per-request state.
func (p *RoundRobin) Done(*Decision, Outcome) {}
