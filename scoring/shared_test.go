package scoring

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// loopSink hands a router's ledger changes straight to another router, as
// the peers transport does over the network.
type loopSink struct {
	mu   sync.Mutex
	to   *Router
	peer string
	keys [][]uint64 // SpecKeys of each Reserved
}

func (l *loopSink) Reserved(a SharedAssignment) {
	l.mu.Lock()
	l.keys = append(l.keys, slices.Clone(a.SpecKeys))
	l.mu.Unlock()
	l.to.ApplyPeer(l.peer, []PeerEvent{{Kind: PeerReserved, Assignment: a}})
}

func (l *loopSink) FirstToken(id uint64, at time.Time) {
	l.to.ApplyPeer(l.peer, []PeerEvent{{Kind: PeerFirstToken, ID: id, At: at}})
}

func (l *loopSink) Ended(id uint64, lesson Lesson) {
	l.to.ApplyPeer(l.peer, []PeerEvent{{Kind: PeerEnded, ID: id, Lesson: lesson}})
}

// twoReplicas returns two routers over the same workers and clock, a
// sharing its ledger with b.
func twoReplicas(t *testing.T) (a, b *rig, sink *loopSink) {
	t.Helper()
	b = newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	sink = &loopSink{to: b.r, peer: "a"}
	a = newRig(t, PolicyWarmpath, DefaultConfig(), nil)
	a.r.sink = sink
	a.clock, a.load.clock = b.clock, b.clock
	a.r.now = b.clock.Now
	return a, b, sink
}

// TestSharedLedgerSpreadsAcrossReplicas: what one replica routed loads the
// workers in the other's view, so the other sends its request to the
// worker the first left idle (alone, it would take the first worker in
// turn), and ending the assignments, or dropping the silent peer, unloads
// them again.
func TestSharedLedgerSpreadsAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b, _ := twoReplicas(t)
	ws := pool(4)
	var fromA []*Decision
	busy := map[string]bool{}
	for i := range 3 {
		d, err := a.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(100+i, 0, 2048)}, ws)
		if err != nil {
			t.Fatal(err)
		}
		fromA = append(fromA, d)
		busy[d.Worker] = true
	}
	d, err := b.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(200, 0, 2048)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(busy) != 3 || busy[d.Worker] {
		t.Fatalf("a filled %v; b chose %s, want the idle worker", busy, d.Worker)
	}
	if got := b.r.PeerInFlight(); len(got) != 3 {
		t.Fatalf("b holds a's assignments on %v, want 3 workers", got)
	}
	for _, d := range fromA[:2] {
		a.r.Done(d, Outcome{End: EndAborted})
	}
	n := 0
	for _, k := range b.r.PeerInFlight() {
		n += k
	}
	if n != 1 {
		t.Fatalf("b holds %d of a's assignments after two ended, want 1", n)
	}
	b.r.DropPeer("a")
	if got := b.r.PeerInFlight(); len(got) != 0 {
		t.Fatalf("b still holds %v of a silent peer", got)
	}
	p, err := b.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 2048)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Candidates {
		if want := map[bool]int{true: 1}[c.Worker == d.Worker]; c.InFlight != want {
			t.Errorf("%s: %d in flight, want b's own %d", c.Worker, c.InFlight, want)
		}
	}
}

// TestSharedLedgerCarriesFirstTokensAndSpeculation: a peer's reported
// first token ends its prefill in the receiver's view, and the blocks the
// sender's speculation entered and the sequences it decodes travel with
// the reservation.
func TestSharedLedgerCarriesFirstTokensAndSpeculation(t *testing.T) {
	t.Parallel()
	a, b, sink := twoReplicas(t)
	ws := pool(1)
	ids := prompt(7, 0, 4096)
	d, err := a.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: ids, Stream: true}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if len(sink.keys) != 1 || len(sink.keys[0]) != 4096/16 {
		t.Fatalf("speculated keys sent: %d reservations, first with %d keys; want 1 with 256", len(sink.keys), len(sink.keys[0]))
	}
	a.r.FirstToken(d)
	b.clock.Advance(time.Millisecond)
	p, err := b.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(8, 0, 512)}, ws)
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Candidates[0]; c.WorkAhead != 0 || c.Decoding != 1 {
		t.Fatalf("after the peer's first token: work ahead %d, decoding %d; want 0 and 1", c.WorkAhead, c.Decoding)
	}
	// A request of 3 choices of 2 prompts decodes 6 sequences on either
	// replica.
	d, err = a.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(9, 0, 512), Stream: true, Choices: 3, Prompts: 2}, ws)
	if err != nil {
		t.Fatal(err)
	}
	a.r.FirstToken(d)
	b.clock.Advance(time.Millisecond)
	if p, err = b.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(8, 0, 512)}, ws); err != nil {
		t.Fatal(err)
	}
	if c := p.Candidates[0]; c.Decoding != 1+6 {
		t.Fatalf("after the first token of the peer's request of 6 sequences: decoding %d, want 7", c.Decoding)
	}
}

// TestUnexplainedLoadIsNotSpeed: a request that waited while the engine
// ran work no ledger knew of (another router's) does not teach the worker's
// speed; the same outcome without that load does.
func TestUnexplainedLoadIsNotSpeed(t *testing.T) {
	t.Parallel()
	for _, foreign := range []bool{false, true} {
		g := newRig(t, PolicyWarmpath, DefaultConfig(), nil)
		ws := pool(1)
		d, err := g.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(1, 0, 2048)}, ws)
		if err != nil {
			t.Fatal(err)
		}
		g.clock.Advance(10 * time.Millisecond)
		waiting := 0
		if foreign {
			waiting = 6 // six requests queued that this router did not route
		}
		// The next decision reads a scrape taken while d still waits.
		g.load.reports["w0"] = loadReport{Running: 1, Waiting: waiting, Scraped: g.clock.Now()}
		if _, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: prompt(2, 0, 64)}, ws); err != nil {
			t.Fatal(err)
		}
		g.r.Done(d, Outcome{End: EndCompleted, TTFT: 3 * d.Chosen.PredictedTTFT, PromptTokens: 2048, CachedTokens: 0})
		moved := g.r.Model("w0") != DefaultConfig().Prior
		if moved == foreign {
			t.Errorf("foreign load %v: calibration moved %v", foreign, moved)
		}
		if n := testutil.ToFloat64(g.r.m.unexplained); (n == 1) != foreign {
			t.Errorf("foreign load %v: %v outcomes counted unexplained", foreign, n)
		}
	}
}

// TestPeerLessonsTeachTheSameModel: a peer's outcomes teach the receiver's
// models what they taught the peer's own, so that a replica that decided
// nothing holds the deciding one's TTFT and decode models of the worker,
// fit for fit. Made WithoutPeerLessons it keeps the prior.
func TestPeerLessonsTeachTheSameModel(t *testing.T) {
	t.Parallel()
	for _, learn := range []bool{true, false} {
		a, b, _ := twoReplicas(t)
		b.r.noPeerLessons = !learn
		ws := pool(1)
		for i := range 24 {
			d, err := a.r.Pick(t.Context(), &Request{Model: "m", TokenIDs: prompt(300+i, 0, 1024+64*i), Stream: true}, ws)
			if err != nil {
				t.Fatal(err)
			}
			ttft := 3 * d.Chosen.PredictedTTFT
			a.clock.Advance(ttft)
			a.r.FirstToken(d)
			decode := 40 * 20 * time.Millisecond
			a.clock.Advance(decode)
			a.r.Done(d, Outcome{End: EndCompleted, HTTPStatus: 200, TTFT: ttft, Decode: decode, Duration: ttft + decode,
				PromptTokens: d.PromptTokens, CompletionTokens: 41, CachedTokens: 0})
		}
		prior := DefaultConfig().Prior
		own, got := a.r.learn.worker("w0"), b.r.learn.worker("w0")
		if own.cal.model() == prior || own.dec.model() == prior {
			t.Fatalf("the deciding replica's models did not move: %+v, %+v", own.cal.model(), own.dec.model())
		}
		switch {
		case learn && (got.cal.model() != own.cal.model() || got.dec.model() != own.dec.model()):
			t.Errorf("the receiver's models %+v / %+v, want the decider's %+v / %+v",
				got.cal.model(), got.dec.model(), own.cal.model(), own.dec.model())
		case !learn && (got.cal.model() != prior || got.dec.model() != prior):
			t.Errorf("without peer lessons the receiver's models moved: %+v / %+v", got.cal.model(), got.dec.model())
		}
		if n, want := testutil.ToFloat64(b.r.m.peerLessons), map[bool]float64{true: 24}[learn]; n != want {
			t.Errorf("learn %v: %v peer lessons counted, want %v", learn, n, want)
		}
	}
}
