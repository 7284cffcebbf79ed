package peers

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/warmpath/warmpath/scoring"
)

func TestEventsRoundTrip(t *testing.T) {
	t.Parallel()
	sent := time.Unix(1_800_000_000, 5)
	recv := time.Unix(900, 0) // another clock entirely
	a := scoring.SharedAssignment{
		ID: 7, Worker: "w-1", Decided: sent.Add(-3 * time.Millisecond), Start: sent.Add(40 * time.Millisecond),
		First: sent.Add(90 * time.Millisecond), Prompt: 8192, Uncached: 512.5, Blocks: 512, OwnBlocks: 48,
		Stream: true, Seqs: 8, SpecKeys: []uint64{1, 1 << 63, 42},
	}
	var e encoder
	e.reset(sent)
	e.reserved(&a)
	e.firstToken(7, sent.Add(-time.Millisecond))
	e.ended(3, nil)
	got, err := decodeEvents(nil, e.frame(e.at), recv)
	if err != nil {
		t.Fatal(err)
	}
	want := a
	want.Decided, want.Start, want.First = recv.Add(-3*time.Millisecond), recv.Add(40*time.Millisecond), recv.Add(90*time.Millisecond)
	if len(got) != 3 || !reflect.DeepEqual(got[0].Assignment, want) {
		t.Fatalf("reserved: got %+v\nwant %+v", got[0].Assignment, want)
	}
	if !reflect.DeepEqual(got[1], scoring.PeerEvent{Kind: scoring.PeerFirstToken, ID: 7, At: recv.Add(-time.Millisecond)}) ||
		!reflect.DeepEqual(got[2], scoring.PeerEvent{Kind: scoring.PeerEnded, ID: 3}) {
		t.Fatalf("first token, ended: %+v %+v", got[1], got[2])
	}
	e.reset(sent)
	e.ended(9, &scoring.Lesson{Source: "x"}) // teaches nothing: a plain end
	late, err := decodeEvents(nil, e.frame(sent.Add(5*time.Millisecond)), recv)
	if err != nil || len(late) != 1 {
		t.Fatalf("frame sent 5 ms after its base: %v, %+v", err, late)
	}
	e.reset(sent)
	e.firstToken(1, sent)
	aged, _ := decodeEvents(nil, e.frame(sent.Add(5*time.Millisecond)), recv)
	if want := recv.Add(-5 * time.Millisecond); !aged[0].At.Equal(want) {
		t.Fatalf("a time 5 ms before sending arrives as %v, want %v", aged[0].At, want)
	}
	e.reset(sent)
	hb, err := decodeEvents(got[:0], e.frame(e.at), recv)
	if err != nil || len(hb) != 0 {
		t.Fatalf("heartbeat: %v, %d events", err, len(hb))
	}
}

// TestSequencesBounded: a reservation's sequences travel up to the bound
// the decoder accepts, so that no request's n makes a frame undecodable.
func TestSequencesBounded(t *testing.T) {
	t.Parallel()
	var e encoder
	e.reset(time.Unix(0, 0))
	e.reserved(&scoring.SharedAssignment{ID: 1, Worker: "w", Seqs: 1 << 40})
	got, err := decodeEvents(nil, e.frame(e.at), time.Unix(0, 0))
	if err != nil || len(got) != 1 || got[0].Assignment.Seqs != maxSeqs {
		t.Fatalf("decoded %+v, %v; want one reservation of %d sequences", got, err, maxSeqs)
	}
}

// testLesson is what a streamed response teaches, both fits, in values
// float32 holds exactly.
var testLesson = scoring.Lesson{Source: "cert:spiffe://envoy", Ratio: 1.25,
	TTFT:   scoring.Fit{OK: true, X: [5]float64{3, 4096, 12, 9e6, 1}, Y: 0.5, Seen: 0.625},
	Decode: scoring.Fit{OK: true, X: [5]float64{63, 2048, 504, 4e6, 0}, Y: 1.5, Seen: 1.5}}

// TestLessonRoundTrip: an end's lesson arrives as sent, with either fit
// alone or both; an end that teaches nothing is the plain 2-byte event.
func TestLessonRoundTrip(t *testing.T) {
	t.Parallel()
	ttftOnly, decodeOnly := testLesson, testLesson
	ttftOnly.Decode = scoring.Fit{}
	decodeOnly.TTFT, decodeOnly.Ratio = scoring.Fit{}, 0
	for _, l := range []scoring.Lesson{testLesson, ttftOnly, decodeOnly} {
		var e encoder
		e.reset(time.Unix(0, 0))
		e.ended(5, &l)
		got, err := decodeEvents(nil, e.frame(e.at), time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if want := (scoring.PeerEvent{Kind: scoring.PeerEnded, ID: 5, Lesson: l}); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
	}
	var e encoder
	e.reset(time.Unix(0, 0))
	e.ended(5, &scoring.Lesson{Source: "addr:1.2.3.4"})
	if n := len(e.b); n != 2 {
		t.Fatalf("an end without a fit takes %d bytes, want 2", n)
	}
}

// TestDowngrade: a frame re-encoded for a follower of an older version
// holds the same events at the same times, without what that version
// lacks: a reservation's sequences before version 3, lessons before 2.
func TestDowngrade(t *testing.T) {
	t.Parallel()
	sent := time.Unix(1_800_000_000, 0)
	var e encoder
	e.reset(sent)
	e.reserved(&scoring.SharedAssignment{ID: 1, Worker: "w", Decided: sent.Add(-time.Millisecond), Uncached: 64, Seqs: 4, SpecKeys: []uint64{3}})
	e.firstToken(1, sent.Add(-2*time.Millisecond))
	e.ended(1, &testLesson)
	f := e.frame(sent.Add(4 * time.Millisecond))
	recv := time.Unix(5000, 0)
	for v := byte(wireVersion - 1); v >= minWireVersion; v-- {
		old, err := downgrade(f, v)
		if err != nil {
			t.Fatal(err)
		}
		if old[0] != v {
			t.Fatalf("downgraded frame in version %d, want %d", old[0], v)
		}
		want, err := decodeEvents(nil, f, recv)
		if err != nil {
			t.Fatal(err)
		}
		want[0].Assignment.Seqs = 0
		if v < 2 {
			want[2].Lesson = scoring.Lesson{}
		}
		got, err := decodeEvents(nil, old, recv)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("downgraded to version %d: %+v, %v\nwant %+v", v, got, err, want)
		}
	}
}

func TestHelloRoundTrip(t *testing.T) {
	t.Parallel()
	h := hello{Version: wireVersion, ID: 1 << 60, Name: "warmpath-0", Advertise: "10.0.0.1:9002"}
	h.Nonce[3], h.Proof[31] = 9, 8
	for _, proof := range []bool{false, true} {
		got, err := decodeHello(appendHello(nil, h, proof), proof)
		if err != nil {
			t.Fatal(err)
		}
		want := h
		if proof {
			want.Nonce = [16]byte{}
		} else {
			want.Proof = [32]byte{}
		}
		if got != want {
			t.Fatalf("proof=%v: got %+v want %+v", proof, got, want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	var e encoder
	e.reset(time.Unix(0, 0))
	e.reserved(&scoring.SharedAssignment{ID: 1, Worker: "w"})
	good := e.frame(e.at)
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version", append([]byte{9}, good[1:]...)},
		{"kind", []byte{wireVersion, 'X', 0}},
		{"hello as events", appendHello(nil, hello{ID: 1}, false)},
		{"truncated", good[:len(good)-2]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"too many events", []byte{wireVersion, kindEvents, 0, 0xff, 0xff, 0xff, 0x7f}},
		{"unknown tag", []byte{wireVersion, kindEvents, 0, 1, 'Z'}},
		{"no worker", func() []byte {
			var e encoder
			e.reset(time.Unix(0, 0))
			e.reserved(&scoring.SharedAssignment{ID: 1})
			return e.frame(e.at)
		}()},
		{"lesson without a fit", lessonFrame(func(b []byte) { b[len(b)-1-4*6-4*7] = 0 }, testLesson)},
		{"lesson with an unknown fit", lessonFrame(func(b []byte) { b[len(b)-1-4*6-4*7] = 7 }, testLesson)},
		{"lesson with a negative feature", lessonFrame(nil, func() scoring.Lesson {
			l := testLesson
			l.TTFT.X[1] = -1
			return l
		}())},
		{"lesson with no time", lessonFrame(nil, func() scoring.Lesson {
			l := testLesson
			l.Decode.Y = 0
			return l
		}())},
		{"lesson of more than an hour", lessonFrame(nil, func() scoring.Lesson {
			l := testLesson
			l.TTFT.Seen = 4000
			return l
		}())},
		{"lesson with a NaN ratio", lessonFrame(nil, func() scoring.Lesson {
			l := testLesson
			l.Ratio = math.NaN()
			return l
		}())},
		{"lesson in a version 1 frame", lessonFrame(func(b []byte) { b[0] = 1 }, testLesson)},
		// After the worker: four times, prompt, uncached (4 bytes), blocks,
		// own blocks, stream; then the sequences and the key count.
		{"huge key count", []byte{wireVersion, kindEvents, 0, 1, tagReserved, 1, 1, 'w', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"huge sequence count", []byte{wireVersion, kindEvents, 0, 1, tagReserved, 1, 1, 'w', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := decodeEvents(nil, tc.b, time.Unix(0, 0)); !errors.Is(err, ErrFrame) {
				t.Fatalf("err = %v, want ErrFrame", err)
			}
		})
	}
}

// version is the version byte of frame b.
func version(b []byte) byte { return b[0] }

// lessonFrame is a frame with the end of one assignment teaching l, edited
// by edit when not nil.
func lessonFrame(edit func([]byte), l scoring.Lesson) []byte {
	var e encoder
	e.reset(time.Unix(0, 0))
	e.ended(1, &l)
	b := e.frame(e.at)
	if edit != nil {
		edit(b)
	}
	return b
}

// FuzzDecodeEvents: no input makes the decoder panic or return events
// with an error, and what decodes re-encodes to a frame that decodes the
// same.
func FuzzDecodeEvents(f *testing.F) {
	var e encoder
	e.reset(time.Unix(100, 0))
	e.reserved(&scoring.SharedAssignment{ID: 1, Worker: "w", Uncached: 3, SpecKeys: []uint64{5}})
	e.firstToken(1, time.Unix(101, 0))
	e.ended(1, nil)
	e.ended(2, &testLesson)
	f.Add(e.frame(e.at))
	f.Add(appendHello(nil, hello{ID: 2, Name: "n"}, true))
	f.Add([]byte{wireVersion, kindEvents, 0, 0})
	base := time.Unix(1000, 0)
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := decodeEvents(nil, b, base)
		if err != nil {
			if len(evs) != 0 {
				t.Fatalf("%d events with error %v", len(evs), err)
			}
			_, _ = decodeHello(b, true)
			return
		}
		e := encoder{v: version(b)}
		e.reset(base)
		e.events(evs)
		again, err := decodeEvents(nil, e.frame(e.at), base)
		if err != nil || !reflect.DeepEqual(again, evs) {
			t.Fatalf("re-encoded frame decodes as %+v, %v; want %+v", again, err, evs)
		}
	})
}
