package app

import (
	"cmp"
	"slices"
	"time"

	"github.com/warmpath/warmpath/kvevents"
	"github.com/warmpath/warmpath/kvindex"
)

// streamStatus is one (worker, data-parallel rank) entry of GET
// /debug/workers' "index": the index's view of the stream and its
// subscriber's, under the field names operators' scripts read.
type streamStatus struct {
	Worker      string    `json:"worker"`
	Rank        int       `json:"rank"`
	Model       string    `json:"model"`
	Blocks      int       `json:"blocks_indexed"`
	Batches     uint64    `json:"batches_applied"`
	LastSeq     *uint64   `json:"last_seq"`
	Gaps        uint64    `json:"gaps"`
	Replays     uint64    `json:"replays"`
	Resets      uint64    `json:"resets"`
	Unreachable uint64    `json:"unreachable_stores"`
	BlockSize   int       `json:"block_size_seen"`
	LastReplay  string    `json:"last_replay,omitempty"`
	CaughtUp    bool      `json:"caught_up"`
	LastEventAt time.Time `json:"last_event_at,omitzero"`
	Stale       bool      `json:"stale"`
}

// mergeStreams joins the index's and the subscribers' views of each
// stream, ordered by worker and rank. A stream only one side knows (read a
// moment apart, the two may differ) gets the other side's zero values,
// with last_seq null.
func mergeStreams(index []kvindex.StreamStatus, subs []kvevents.StreamStatus) []streamStatus {
	type key struct {
		worker string
		rank   int
	}
	byKey := make(map[key]*streamStatus, len(index))
	out := make([]*streamStatus, 0, len(index))
	entry := func(worker string, rank int, model string) *streamStatus {
		k := key{worker, rank}
		if e, ok := byKey[k]; ok {
			return e
		}
		e := &streamStatus{Worker: worker, Rank: rank, Model: model}
		byKey[k] = e
		out = append(out, e)
		return e
	}
	for _, s := range index {
		e := entry(s.Worker, s.Rank, s.Model)
		e.Blocks, e.Batches, e.Resets, e.Unreachable, e.BlockSize = s.Blocks, s.Batches, s.Resets, s.Unreachable, s.BlockSize
		e.LastEventAt, e.Stale = s.LastEventAt, s.Stale
	}
	for _, s := range subs {
		e := entry(s.Worker, s.Rank, s.Model)
		e.LastSeq, e.Gaps, e.Replays, e.LastReplay, e.CaughtUp = s.LastSeq, s.Gaps, s.Replays, s.LastReplay, s.CaughtUp
	}
	slices.SortFunc(out, func(a, b *streamStatus) int {
		return cmp.Or(cmp.Compare(a.Worker, b.Worker), cmp.Compare(a.Rank, b.Rank))
	})
	merged := make([]streamStatus, len(out))
	for i, e := range out {
		merged[i] = *e
	}
	return merged
}
