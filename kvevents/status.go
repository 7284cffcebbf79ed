package kvevents

import (
	"cmp"
	"slices"

	"github.com/warmpath/warmpath/kvindex"
)

// StreamStatus is the subscriber's view of one (worker, data-parallel
// rank) event stream, for operators (GET /debug/workers merges it with
// the index's view of the same stream, [kvindex.StreamStatus]). It is a
// JSON-ready value.
type StreamStatus struct {
	Worker string `json:"worker"`
	Rank   int    `json:"rank"`
	Model  string `json:"model"`
	// LastSeq is the last applied sequence number, nil (null) before any.
	LastSeq *uint64 `json:"last_seq"`
	// Gaps and Replays count sequence gaps seen and replays performed.
	Gaps    uint64 `json:"gaps"`
	Replays uint64 `json:"replays"`
	// LastReplay is the result of the last replay: ok, truncated (the
	// engine no longer held the first missing batch), incomplete (holes
	// remained after every round) or failed; "" before any.
	LastReplay string `json:"last_replay,omitempty"`
	// CaughtUp is true once a replay from the start was complete (or,
	// without a replay endpoint, once the subscription is made). A stream
	// whose replays stay incomplete is not caught up: it goes on from live
	// messages and replays again every 30 seconds.
	CaughtUp bool `json:"caught_up"`
}

// Streams returns the status of every stream subscribed so far whose
// worker is still in the set, ordered by worker and rank.
func (s *Subscribers) Streams() []StreamStatus {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	out := make([]StreamStatus, 0, len(s.status))
	for _, st := range s.status {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b StreamStatus) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Rank, b.Rank))
	})
	return out
}

// CaughtUp reports whether every stream of worker has finished its
// initial replay. Unknown workers are not caught up.
func (s *Subscribers) CaughtUp(worker string) bool {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	found := false
	for name, st := range s.status {
		if name.worker != worker {
			continue
		}
		found = true
		if !st.CaughtUp {
			return false
		}
	}
	return found
}

// notCaughtUp counts the streams not caught up.
func (s *Subscribers) notCaughtUp() float64 {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	n := 0
	for _, st := range s.status {
		if !st.CaughtUp {
			n++
		}
	}
	return float64(n)
}

// update runs fn on the status of src's stream, creating it.
func (s *Subscribers) update(src kvindex.Source, fn func(st *StreamStatus)) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	name := streamName{src.Worker, src.Rank}
	st := s.status[name]
	if st == nil {
		st = &StreamStatus{Worker: src.Worker, Rank: src.Rank}
		s.status[name] = st
	}
	st.Model = src.Model
	fn(st)
}

// forget drops the status of every stream of worker.
func (s *Subscribers) forget(worker string) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	for name := range s.status {
		if name.worker == worker {
			delete(s.status, name)
		}
	}
}
