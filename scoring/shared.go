package scoring

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sharing the ledger: with several warmpath replicas in front of the same
// workers, each replica's ledger must hold the others' assignments too, or
// every replica takes the others' load for a slow worker. The router tells
// a LedgerSink of each change to its own assignments, and takes the
// changes of peers' ledgers through ApplyPeer. Peers' assignments load the
// workers exactly as the router's own do (queue, decodes, KV blocks, the
// scrape reconciliation). Each replica sees the outcomes of its own
// decisions only, 1/N of them behind N replicas; an ended assignment
// carries what its outcome taught the deciding replica's calibration (a
// Lesson: the fit's inputs), which the receiver fits too, so that every
// replica's models learn from all of the pool's outcomes. Transport,
// authentication and expiry of silent peers belong to package peers.

// SharedAssignment is one assignment as peers see it: the load it puts on
// its worker, in the receiving replica's clock. Times are absolute; the
// transport converts them between replicas' clocks.
type SharedAssignment struct {
	// ID is unique among the sending router's assignments.
	ID     uint64
	Worker string
	// Decided is when it was routed; Start and First are the predicted
	// start of its prefill and its first token; FirstAt, when not zero,
	// is when its first token was seen.
	Decided, Start, First, FirstAt time.Time
	// Prompt is its prompt in tokens, Uncached the tokens it prefills
	// (offloaded ones priced in), Blocks the KV blocks of its prompt and
	// OwnBlocks those it adds beyond its cached prefix (uncached prompt and
	// each sequence's expected output).
	Prompt    int
	Uncached  float64
	Blocks    int
	OwnBlocks int
	// Stream is set for streamed requests, whose first token is reported.
	Stream bool
	// Seqs is the sequences it decodes (Request.sequences: n choices ×
	// prompts); 0 when the sender did not say, taken as one.
	Seqs int
	// SpecKeys are the KV index block keys the request will hold on its
	// worker beyond what the worker held already (kvindex.Index.Speculate
	// returns them); the receiver enters them as speculative.
	SpecKeys []uint64
}

// Lesson is what one outcome taught the calibration of the replica that
// decided it, as inputs another replica can fit: the feature vectors and
// measured times the deciding replica fitted, not its resulting model.
// Both replicas hold the same ledger, so the features the decider saw
// describe the worker's queue for the receiver as well. The zero Lesson
// teaches nothing.
type Lesson struct {
	// Source is who reported the outcome (Request.Source): one source's
	// influence on a worker is bounded across every replica's outcomes
	// alike (influence.go).
	Source string
	// Ratio is the outcome's observed / predicted first token; 0 when
	// there was no prediction to compare.
	Ratio float64
	// TTFT is the step model's fit of the first token (or of a
	// non-streamed answer's end, an upper bound), Decode the decode
	// model's fit of the response's steps.
	TTFT, Decode Fit
}

// Fit is one observation of a calibrator: features X, and Y the time they
// should explain, in seconds. For the TTFT fit Y is scaled as the
// prediction was (by the KV-pressure factor) and Seen is the time as
// measured; for the decode fit they are equal.
type Fit struct {
	OK      bool
	X       [numParams]float64
	Y, Seen float64
}

// Teaches reports whether l holds an observation.
func (l Lesson) Teaches() bool { return l.TTFT.OK || l.Decode.OK }

// LedgerSink is told of every change to the router's own ledger so that it
// can be shared: Reserved once per committed decision (after its
// speculation), FirstToken and Ended later for the same ID, Ended with
// what the outcome taught (the zero Lesson when nothing). Calls come from
// many goroutines, never with the router's lock held, and must not block.
type LedgerSink interface {
	Reserved(a SharedAssignment)
	FirstToken(id uint64, at time.Time)
	Ended(id uint64, l Lesson)
}

// PeerEventKind says what a PeerEvent changes.
type PeerEventKind uint8

// The changes a peer's ledger sends.
const (
	PeerReserved   PeerEventKind = iota + 1 // Assignment is new
	PeerFirstToken                          // ID produced its first token at At
	PeerEnded                               // ID ended
)

// PeerEvent is one change to a peer's ledger.
type PeerEvent struct {
	Kind       PeerEventKind
	Assignment SharedAssignment // PeerReserved
	ID         uint64           // PeerFirstToken, PeerEnded
	At         time.Time        // PeerFirstToken
	Lesson     Lesson           // PeerEnded
}

// WithLedgerSink makes the router tell sink of every change to its own
// ledger.
func WithLedgerSink(sink LedgerSink) Option { return func(r *Router) { r.sink = sink } }

// peerKey names one of a peer's assignments.
type peerKey struct {
	peer string
	id   uint64
}

// ApplyPeer applies peer's ledger changes, in order. Events for unknown
// IDs (ended already, or from before a reset) are ignored; a second
// PeerReserved for a live ID replaces it. An ended assignment's Lesson is
// fitted to its worker's models, unless the router was made
// WithoutPeerLessons.
func (r *Router) ApplyPeer(peer string, evs []PeerEvent) {
	var lessons []peerLesson
	r.mu.Lock()
	now := r.now()
	for i := range evs {
		ev := &evs[i]
		switch ev.Kind {
		case PeerReserved:
			sa := &ev.Assignment
			k := peerKey{peer, sa.ID}
			if old, ok := r.ledger.remote[k]; ok {
				old.ledger.remove(old, now)
			}
			w := r.ledger.worker(sa.Worker)
			a := &assignment{
				worker: sa.Worker, ledger: w, decided: sa.Decided, prompt: sa.Prompt, uncached: sa.Uncached,
				blocks: sa.Blocks, start: sa.Start, first: sa.First, ownBlocks: sa.OwnBlocks, stream: sa.Stream,
				seqs: sa.Seqs, remote: true,
			}
			a.work.budget = float64(r.cfg.budget(sa.Worker))
			w.meter.route(sa.Uncached, now, r.cfg.RateWindow)
			if !sa.FirstAt.IsZero() {
				w.started(a, sa.FirstAt)
			}
			w.inflight = append(w.inflight, a)
			r.ledger.remote[k] = a
		case PeerFirstToken:
			if a, ok := r.ledger.remote[peerKey{peer, ev.ID}]; ok && !a.firstSeen {
				r.ledger.told = true
				a.ledger.started(a, ev.At)
			}
		case PeerEnded:
			k := peerKey{peer, ev.ID}
			if a, ok := r.ledger.remote[k]; ok {
				delete(r.ledger.remote, k)
				a.ledger.remove(a, now)
				a.ledger.pruneEnded(a.ledger.lastScrape)
				if !r.noPeerLessons && ev.Lesson.Teaches() {
					lessons = append(lessons, peerLesson{worker: a.worker, lesson: ev.Lesson})
				}
			}
		}
	}
	r.mu.Unlock()
	if len(lessons) > 0 {
		r.learnFromPeer(lessons)
	}
}

// peerLesson is a peer's lesson about one worker.
type peerLesson struct {
	worker string
	lesson Lesson
	eng    engineTTFT
}

// learnFromPeer fits peers' lessons to their workers' models, with the
// engines' own first-token figures read outside the router's lock, as Done
// reads them.
func (r *Router) learnFromPeer(ls []peerLesson) {
	if r.gather.load != nil {
		for i := range ls {
			ls[i].eng = engineTTFTOf(r.gather.load.Load(ls[i].worker))
		}
	}
	out := make([]learned, len(ls))
	r.mu.Lock()
	now := r.now()
	for i := range ls {
		out[i] = r.learn.learnLesson(ls[i].worker, ls[i].lesson, now, ls[i].eng)
	}
	r.mu.Unlock()
	r.m.peerLessons.Add(float64(len(ls)))
	for i := range ls {
		r.m.learned(ls[i].worker, out[i], r.log)
	}
}

// WithoutPeerLessons makes the router ignore the lessons of peers' ended
// assignments: its models learn from its own outcomes only.
func WithoutPeerLessons() Option { return func(r *Router) { r.noPeerLessons = true } }

// DropPeer forgets every assignment of peer, as ended now: the peer went
// silent for longer than its entries may live, or its ledger is about to
// be sent whole again.
func (r *Router) DropPeer(peer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	for k, a := range r.ledger.remote {
		if k.peer == peer {
			delete(r.ledger.remote, k)
			a.ledger.remove(a, now)
		}
	}
}

// PeerInFlight returns, per worker with any, the number of peers'
// assignments in flight in the router's ledger.
func (r *Router) PeerInFlight() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int)
	for _, a := range r.ledger.remote {
		out[a.worker]++
	}
	return out
}

// shared returns a's view for peers, with the speculated block keys.
func (a *assignment) shared(keys []uint64) SharedAssignment {
	sa := SharedAssignment{
		ID: a.id, Worker: a.worker, Decided: a.decided, Start: a.start, First: a.first,
		Prompt: a.prompt, Uncached: a.uncached, Blocks: a.blocks, OwnBlocks: a.ownBlocks, Stream: a.stream,
		Seqs: a.seqs, SpecKeys: keys,
	}
	if a.firstSeen {
		sa.FirstAt = a.firstAt
	}
	return sa
}

// peerInFlightCollector exposes the peers' assignments in flight per
// worker, read from the ledger when scraped.
type peerInFlightCollector struct{ r *Router }

var peerInFlightDesc = prometheus.NewDesc("warmpath_scoring_peer_assignments_in_flight",
	"Assignments of peer replicas in flight in this replica's ledger, per worker.", []string{"worker"}, nil)

func (c peerInFlightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- peerInFlightDesc }

func (c peerInFlightCollector) Collect(ch chan<- prometheus.Metric) {
	for w, n := range c.r.PeerInFlight() {
		ch <- prometheus.MustNewConstMetric(peerInFlightDesc, prometheus.GaugeValue, float64(n), w)
	}
}
