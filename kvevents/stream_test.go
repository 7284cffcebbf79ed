package kvevents

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// testStream returns subs' stream of src as runStream starts it, without
// sockets and without a replay endpoint: it takes live messages only.
func testStream(subs *Subscribers, src kvindex.Source) *stream {
	subs.ix.AddStream(src)
	subs.update(src, func(st *StreamStatus) { st.CaughtUp = false })
	return &stream{s: subs, spec: streamSpec{src: src}}
}

// emptyBatch is a payload without events.
var emptyBatch = batch(0, func(*enc) {})

func TestCaughtUp(t *testing.T) {
	t.Parallel()
	subs := newSubscribers(t, newIndex(t, nil), DefaultConfig(), component.Options{})
	r0, r1 := kvindex.Source{Worker: "a", Model: "m"}, kvindex.Source{Worker: "a", Rank: 1, Model: "m"}
	testStream(subs, r0)
	testStream(subs, r1)
	subs.update(r1, func(st *StreamStatus) { st.CaughtUp = true })
	if subs.CaughtUp("a") || subs.CaughtUp("nobody") {
		t.Fatal("caught up before rank 0 is, or unknown worker caught up")
	}
	subs.update(r0, func(st *StreamStatus) { st.CaughtUp = true })
	if !subs.CaughtUp("a") {
		t.Fatal("not caught up")
	}
	subs.forget("a")
	if subs.CaughtUp("a") || len(subs.Streams()) != 0 {
		t.Fatal("a forgotten worker is still known")
	}
}

// TestStreamSequence plays sequences of live messages on a stream without
// a replay endpoint and checks what it records and what it resets.
func TestStreamSequence(t *testing.T) {
	t.Parallel()
	bad := []byte{0x93, 0x01}
	tests := []struct {
		name         string
		seqs         []uint64
		payload      map[uint64][]byte // by seq; emptyBatch otherwise
		last         uint64
		gaps         uint64
		resets       map[string]float64
		decodeErrors float64
	}{
		{name: "in order", seqs: []uint64{0, 1, 2}, last: 2},
		{name: "the first message anchors anywhere", seqs: []uint64{5, 6}, last: 6},
		{name: "a gap without replay resets", seqs: []uint64{0, 1, 3}, last: 3, gaps: 1, resets: map[string]float64{"gap_no_replay": 1}},
		{name: "seq backwards resets", seqs: []uint64{0, 1, 2, 0}, last: 0, resets: map[string]float64{"seq_backwards": 1}},
		{name: "the end marker is no data", seqs: []uint64{0, endSeq}, last: 0, decodeErrors: 1},
		{name: "an undecodable payload counts and keeps the sequence", seqs: []uint64{0, 1, 2},
			payload: map[uint64][]byte{1: bad}, last: 2, decodeErrors: 1},
		{name: "seqs past 2^63 follow on", seqs: []uint64{1<<63 - 1, 1 << 63, 1<<63 + 1}, last: 1<<63 + 1},
		{name: "a gap past 2^63 is a gap", seqs: []uint64{1<<63 - 1, 1<<63 + 1}, last: 1<<63 + 1, gaps: 1, resets: map[string]float64{"gap_no_replay": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewPedanticRegistry()
			ix := newIndex(t, reg)
			subs := newSubscribers(t, ix, DefaultConfig(), component.Options{})
			src := kvindex.Source{Worker: "w", Model: "m"}
			st := testStream(subs, src)
			for _, seq := range tc.seqs {
				p, ok := tc.payload[seq]
				if !ok {
					p = emptyBatch
				}
				st.live(t.Context(), Message{Seq: seq, Payload: p})
			}
			got := statusOf(subs, src)
			if got.LastSeq == nil || *got.LastSeq != tc.last || got.Gaps != tc.gaps || got.Replays != 0 {
				t.Errorf("status %+v, want last seq %d, %d gaps", got, tc.last, tc.gaps)
			}
			if n := testutil.ToFloat64(subs.m.decodeErrors); n != tc.decodeErrors {
				t.Errorf("%v decode errors, want %v", n, tc.decodeErrors)
			}
			var want uint64
			for _, reason := range []string{"seq_backwards", "gap_no_replay", "gap_after_replay", "replay_truncated", "replay_incomplete", "replay_failed"} {
				want += uint64(tc.resets[reason])
				if n := counterValue(t, reg, "warmpath_kvindex_resets_total", reason); n != tc.resets[reason] {
					t.Errorf("%v resets for %s, want %v", n, reason, tc.resets[reason])
				}
			}
			if r := indexStatusOf(ix, src).Resets; r != want {
				t.Errorf("%d resets, want %d", r, want)
			}
		})
	}
}

// counterValue returns the value of the counter name whose one label has
// value, or 0 when reg holds none.
func counterValue(t *testing.T, reg prometheus.Gatherer, name, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestMetricsExposition plays the real capture and a few faulty messages
// on four streams and checks both packages' exposition: w0 takes the
// whole capture, w1 its first message and then one whose envelope has an
// unknown key and whose events are of an unknown type and of another
// KV-cache group, w2 its first message, an undecodable one and a seq
// going backwards, w3 a gap without a replay endpoint. The index's
// series are those of the capture (12 stores, 56 removals of unknown
// hashes, 96 distinct blocks, 136 entries over w0 and w1) and two resets.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	ix := newIndex(t, reg)
	subs := newSubscribers(t, ix, DefaultConfig(), component.Options{Registerer: reg})
	msgs := loadCapture(t, capturePath)
	play := func(worker string, seqs []uint64, payloads ...[]byte) {
		st := testStream(subs, kvindex.Source{Worker: worker, Model: "qwen3"})
		for i, p := range payloads {
			st.live(t.Context(), Message{Topic: "kv-events", Seq: seqs[i], Payload: p})
		}
	}
	var all [][]byte
	var seqs []uint64
	for i, m := range msgs {
		all, seqs = append(all, m.Payload), append(seqs, uint64(i))
	}
	play("w0", seqs, all...)
	odd := (&enc{}).mp(3).str("ts").f64(1).str("snapshot").nil().str("events").arr(2)
	odd.mp(2).str("type").str("BlockPinned").str("block_hashes").arr(1).uint(5)
	odd.mp(5).str("type").str("BlockStored").str("block_hashes").arr(1).uint(77).str("token_ids").arr(testBlock)
	for i := range testBlock {
		odd.uint(uint64(i))
	}
	odd.str("block_size").uint(testBlock).str("group_idx").uint(1)
	play("w1", []uint64{0, 1}, msgs[0].Payload, odd.b)
	play("w2", []uint64{7, 8, 3}, msgs[0].Payload, []byte{0x93, 0x01}, emptyBatch)
	play("w3", []uint64{0, 2}, emptyBatch, emptyBatch)
	f, err := os.Open("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(reg, f,
		"warmpath_kvevents_decode_errors_total", "warmpath_kvevents_gaps_total", "warmpath_kvevents_replays_total",
		"warmpath_kvevents_skipped_total", "warmpath_kvindex_events_total", "warmpath_kvindex_skipped_total",
		"warmpath_kvindex_resets_total", "warmpath_kvindex_entries", "warmpath_kvindex_blocks"); err != nil {
		t.Error(err)
	}
}
