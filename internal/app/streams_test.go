package app

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/kvevents"
	"github.com/warmpath/warmpath/kvindex"
)

func TestMergeStreams(t *testing.T) {
	t.Parallel()
	at := time.Unix(1000, 0).UTC()
	tests := []struct {
		name  string
		index []kvindex.StreamStatus
		subs  []kvevents.StreamStatus
		want  []streamStatus
	}{
		{
			name:  "both views of a stream",
			index: []kvindex.StreamStatus{{Worker: "w0", Model: "m", Blocks: 40, Resets: 1, Unreachable: 2, BlockSize: 16, LastEventAt: at}},
			subs:  []kvevents.StreamStatus{{Worker: "w0", Model: "m", LastSeq: seq(9), Gaps: 3, Replays: 4, LastReplay: "ok", CaughtUp: true}},
			want: []streamStatus{{Worker: "w0", Model: "m", Blocks: 40, LastSeq: seq(9), Gaps: 3, Replays: 4, Resets: 1,
				Unreachable: 2, BlockSize: 16, LastReplay: "ok", CaughtUp: true, LastEventAt: at}},
		},
		{
			name:  "one side each, ordered by worker and rank",
			index: []kvindex.StreamStatus{{Worker: "w1", Rank: 1, Model: "m", Blocks: 5, Stale: true}},
			subs:  []kvevents.StreamStatus{{Worker: "w1", Model: "m", LastSeq: seq(2)}, {Worker: "w0", Model: "m"}},
			want: []streamStatus{{Worker: "w0", Model: "m"}, {Worker: "w1", Model: "m", LastSeq: seq(2)},
				{Worker: "w1", Rank: 1, Model: "m", Blocks: 5, Stale: true}},
		},
		{name: "none", want: []streamStatus{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := mergeStreams(tc.index, tc.subs)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func seq(v uint64) *uint64 { return &v }

// TestStreamStatusJSON pins the field names of /debug/workers' "index"
// entries, which operators' scripts read, and shows a sequence number past
// 2^63 as the engine sent it.
func TestStreamStatusJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(streamStatus{LastEventAt: time.Unix(1, 0), LastSeq: seq(1<<63 + 5), LastReplay: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	want := []string{"batches_applied", "block_size_seen", "blocks_indexed", "caught_up", "gaps", "last_event_at", "last_replay", "last_seq", "model",
		"rank", "replays", "resets", "stale", "unreachable_stores", "worker"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v", got, want)
	}
	if !strings.Contains(string(b), `"last_seq":9223372036854775813,`) {
		t.Errorf("last_seq past 2^63 not shown as sent: %s", b)
	}
}
