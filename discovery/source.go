package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
)

// A Source discovers the worker set.
//
// Run discovers workers until ctx is done. It publishes the complete worker
// set to out: first once it knows the whole set (its initial list is read or
// synced), then again after every change, each time as a full set, never as a
// delta. Publish never blocks, so a slow consumer never holds up a source; a
// consumer that falls behind sees only the newest set (bursts coalesce).
// Run returns nil when ctx is cancelled and an error when it cannot go on.
type Source interface {
	Run(ctx context.Context, out *Updates) error
}

// Updates is a one-slot mailbox for worker sets, handed from a Source to its
// consumer. Publish stores the newest set and signals Ready without
// blocking; Take returns the newest set. Sets published between two Takes
// coalesce into the last one.
//
// Updates is safe for concurrent use. Create it with NewUpdates.
type Updates struct {
	mu      sync.Mutex
	pending []Worker
	has     bool
	ready   chan struct{}
}

// NewUpdates returns an empty mailbox.
func NewUpdates() *Updates {
	return &Updates{ready: make(chan struct{}, 1)}
}

// Publish replaces the pending set with a copy of ws and signals Ready.
// It never blocks.
func (u *Updates) Publish(ws []Worker) {
	cp := slices.Clone(ws)
	if cp == nil {
		cp = []Worker{}
	}
	u.mu.Lock()
	u.pending, u.has = cp, true
	u.mu.Unlock()
	select {
	case u.ready <- struct{}{}:
	default: // a signal is already pending; it covers this set too
	}
}

// Ready returns a channel that receives a value after Publish. A receive
// does not guarantee a pending set (another Take may have consumed it).
func (u *Updates) Ready() <-chan struct{} { return u.ready }

// Take returns the newest published set and clears it. ok is false when no
// set was published since the last Take.
func (u *Updates) Take() (ws []Worker, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ws, ok = u.pending, u.has
	u.pending, u.has = nil, false
	return ws, ok
}

// ErrInvalidWorkers is wrapped by the error of ValidateWorkers.
var ErrInvalidWorkers = errors.New("invalid worker set")

// ValidateWorkers checks a worker set: every worker has a unique non-empty
// name, a host:port address and at least one model, and a non-negative
// data-parallel size. The error names every problem found and wraps
// ErrInvalidWorkers.
func ValidateWorkers(ws []Worker) error {
	var errs []error
	seen := make(map[string]bool, len(ws))
	for i, w := range ws {
		name := w.Name
		if name == "" {
			errs = append(errs, fmt.Errorf("worker %d: empty name", i))
			name = fmt.Sprintf("#%d", i)
		} else if seen[name] {
			errs = append(errs, fmt.Errorf("worker %q: duplicate name", name))
		}
		seen[name] = true
		if _, port, err := net.SplitHostPort(w.Address); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("worker %q: address %q is not host:port", name, w.Address))
		}
		if len(w.Models) == 0 {
			errs = append(errs, fmt.Errorf("worker %q: no models", name))
		}
		if w.DataParallelSize < 0 {
			errs = append(errs, fmt.Errorf("worker %q: negative data_parallel_size %d", name, w.DataParallelSize))
		}
		if w.Protocol != "" && w.Protocol != ProtocolH2C {
			errs = append(errs, fmt.Errorf("worker %q: protocol %q: want empty (HTTP/1.1) or %s", name, w.Protocol, ProtocolH2C))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidWorkers, errors.Join(errs...))
}
