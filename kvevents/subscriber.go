package kvevents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// DefaultReplayTimeout bounds the silence of a replay endpoint before the
// replay is abandoned.
const DefaultReplayTimeout = 10 * time.Second

// maxBuffered bounds the live messages held while a replay runs; past it
// the replay is abandoned and the stream reset.
const maxBuffered = 1 << 16

// Config tunes the subscribers: its keys sit in the kvindex section of
// warmpath's configuration, beside kvindex.Config's.
type Config struct {
	// Topic is the ZMQ topic prefix subscribed to; "" (default) takes every
	// topic.
	Topic string `yaml:"topic"`
	// ReplayTimeout abandons a replay silent this long. Default 10s; 0
	// selects it.
	ReplayTimeout time.Duration `yaml:"replay_timeout"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{ReplayTimeout: DefaultReplayTimeout} }

// Validate reports every invalid field.
func (c *Config) Validate() error {
	if c.ReplayTimeout < 0 {
		return fmt.Errorf("replay_timeout: %v is negative", c.ReplayTimeout)
	}
	return nil
}

// Option configures an optional knob of [NewSubscribers].
type Option func(*Subscribers)

// WithModelOf chooses warmpath's model name for a worker's events. The
// default is the worker's first served model, Models[0].
func WithModelOf(fn func(discovery.Worker) string) Option {
	return func(s *Subscribers) { s.modelOf = fn }
}

// Subscribers keeps one ZMQ subscription per worker and data-parallel rank
// feeding a [kvindex.Index]: it decodes each message, hands its events to
// the index, tracks sequence numbers, replays gaps from the engine's
// replay endpoint, and resets a stream whose engine restarted or whose
// lost events cannot be replayed. It owns what it learns of each stream
// (last seq, gaps, replays, whether it caught up), which [Subscribers.Streams]
// and [Subscribers.CaughtUp] report; the index owns its entries.
//
// Update, Streams and CaughtUp may be called from any goroutine at any
// time; Run owns every subscription goroutine and returns after they have
// all stopped.
type Subscribers struct {
	ix            *kvindex.Index
	topic         string
	replayTimeout time.Duration
	resyncEvery   time.Duration
	modelOf       func(discovery.Worker) string
	log           *slog.Logger
	m             *metrics

	mu      sync.Mutex
	pending []discovery.Worker
	updated bool
	trigger chan struct{} // one slot: coalesces bursts of updates

	statusMu sync.Mutex
	status   map[streamName]*StreamStatus // kept until the worker leaves
}

// streamName identifies one event stream: a worker's data-parallel rank.
type streamName struct {
	worker string
	rank   int
}

// NewSubscribers returns Subscribers feeding ix, configured by cfg.
// Nothing is subscribed until Update and Run are called. It fails when cfg
// is invalid or its metrics cannot be registered.
func NewSubscribers(ix *kvindex.Index, cfg Config, o component.Options, opts ...Option) (*Subscribers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kvevents: %w", err)
	}
	s := &Subscribers{
		ix:            ix,
		topic:         cfg.Topic,
		replayTimeout: cmp.Or(cfg.ReplayTimeout, DefaultReplayTimeout),
		resyncEvery:   DefaultResyncEvery,
		log:           o.Log(),
		status:        make(map[streamName]*StreamStatus),
		modelOf: func(w discovery.Worker) string {
			if len(w.Models) == 0 {
				return ""
			}
			return w.Models[0]
		},
		trigger: make(chan struct{}, 1),
	}
	for _, opt := range opts {
		opt(s)
	}
	m, err := newMetrics(o, s.notCaughtUp)
	if err != nil {
		return nil, err
	}
	s.m = m
	return s, nil
}

// Update replaces the worker set. Workers without a KVEvents endpoint are
// not subscribed. It never blocks; Run applies the latest set.
func (s *Subscribers) Update(workers []discovery.Worker) {
	s.mu.Lock()
	s.pending = append([]discovery.Worker(nil), workers...)
	s.updated = true
	s.mu.Unlock()
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// streamSpec is what a stream goroutine is started with; a change restarts it.
type streamSpec struct {
	src      kvindex.Source
	endpoint string
	replay   string
}

type running struct {
	spec   streamSpec
	cancel context.CancelFunc
	done   chan struct{}
}

// Run subscribes and unsubscribes as Update changes the worker set, until
// ctx ends. It returns nil after every subscription has stopped.
func (s *Subscribers) Run(ctx context.Context) error {
	streams := make(map[streamName]*running)
	var wg sync.WaitGroup
	defer func() {
		for _, r := range streams {
			r.cancel()
		}
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.trigger:
		}
		s.mu.Lock()
		workers, updated := s.pending, s.updated
		s.updated = false
		s.mu.Unlock()
		if !updated {
			continue
		}
		want := make(map[streamName]streamSpec)
		for _, w := range workers {
			if w.KVEvents == "" {
				continue
			}
			for rank := range w.Ranks() {
				ep, err := RankEndpoint(w.KVEvents, rank)
				if err != nil {
					s.log.Error("kv events endpoint", "worker", w.Name, "rank", rank, "err", err)
					continue
				}
				spec := streamSpec{src: kvindex.Source{Worker: w.Name, Rank: rank, Model: s.modelOf(w)}, endpoint: ep}
				if w.KVReplay != "" {
					if spec.replay, err = RankEndpoint(w.KVReplay, rank); err != nil {
						s.log.Error("kv replay endpoint", "worker", w.Name, "rank", rank, "err", err)
						continue
					}
				}
				want[streamName{w.Name, rank}] = spec
			}
		}
		gone := make(map[string]bool)
		for name, r := range streams {
			if spec, ok := want[name]; ok && spec == r.spec {
				continue
			}
			r.cancel()
			<-r.done
			delete(streams, name)
			gone[name.worker] = true
		}
		for name, spec := range want {
			if _, ok := streams[name]; ok {
				continue
			}
			delete(gone, name.worker)
			sctx, cancel := context.WithCancel(ctx)
			r := &running{spec: spec, cancel: cancel, done: make(chan struct{})}
			streams[name] = r
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(r.done)
				s.runStream(sctx, spec)
			}()
		}
		for worker := range gone {
			if !s.hasWorker(streams, worker) {
				s.ix.RemoveWorker(worker)
				s.forget(worker)
			}
		}
	}
}

func (s *Subscribers) hasWorker(streams map[streamName]*running, worker string) bool {
	for name := range streams {
		if name.worker == worker {
			return true
		}
	}
	return false
}

// Bounds of a replay. A replay asks again from its first hole as long as
// its rounds bring batches it lacked, until stallRounds rounds in a row
// bring none or maxRounds were asked. initialAttempts is how many times a
// stream retries an initial replay that stayed incomplete (after
// initialBackoff, doubling) before it serves without the engine's history.
const (
	stallRounds = 3
	maxRounds   = 1000
	// maxChainedReplays bounds the replays one gap starts when batches
	// keep being dropped while they run (replayFrom).
	maxChainedReplays = 8
	initialAttempts   = 4
	initialBackoff    = time.Second
	// DefaultResyncEvery is how often a stream whose replays stayed
	// incomplete replays the engine's whole buffer again.
	DefaultResyncEvery = 30 * time.Second
)

// runStream subscribes one (worker, rank) until ctx ends, redialling after
// socket errors.
func (s *Subscribers) runStream(ctx context.Context, spec streamSpec) {
	st := &stream{s: s, spec: spec}
	s.ix.AddStream(spec.src)
	s.update(spec.src, func(ss *StreamStatus) { ss.CaughtUp = false })
	for ctx.Err() == nil {
		err := st.run(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		s.log.Error("kv events stream", "worker", spec.src.Worker, "rank", spec.src.Rank, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// stream is the sequence state of one (worker, rank); owned by its goroutine.
type stream struct {
	s    *Subscribers
	spec streamSpec
	c    *conn
	dec  Decoder
	b    Batch
	conv converter
	// next is the seq after the last applied one; applied is false before
	// any was.
	next    uint64
	applied bool
	// anchored is true when the next seq is known to be next: after a
	// successful initial replay, or once a first live message was applied.
	anchored bool
	// dupFrom..dupTo are the seqs the last replay applied, when dups. Live
	// copies of them may still be queued on the SUB socket until a live
	// message past dupTo arrives; after that, an old seq means a restart.
	dupFrom, dupTo uint64
	dups           bool
}

func (st *stream) run(ctx context.Context) error {
	c, err := dial(st.spec.endpoint, st.spec.replay, st.s.topic)
	if err != nil {
		return err
	}
	defer c.close()
	st.c = c
	st.dups = false
	caughtUp := st.spec.replay == "" || st.initialReplay(ctx)
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.CaughtUp = caughtUp })
	resyncAt := time.Now().Add(st.s.resyncEvery)
	for ctx.Err() == nil {
		if !caughtUp && time.Now().After(resyncAt) {
			if caughtUp = st.resync(ctx); caughtUp {
				st.s.log.Info("kv events replay complete: caught up", "worker", st.spec.src.Worker, "rank", st.spec.src.Rank)
				st.s.update(st.spec.src, func(ss *StreamStatus) { ss.CaughtUp = true })
			}
			resyncAt = time.Now().Add(st.s.resyncEvery)
		}
		m, ok, err := c.next()
		if n := c.takeUnsignalled(); n > 0 {
			st.s.m.unsignalled.Add(float64(n))
		}
		if errors.Is(err, ErrFrame) {
			st.s.m.decodeErrors.Inc()
			continue
		}
		if errors.Is(err, errNothingThere) {
			st.s.m.emptyReceives.Inc()
			continue
		}
		if err != nil {
			return err
		}
		if ok {
			st.live(ctx, m)
		}
	}
	return nil
}

// initialReplay learns what the engine's buffer still holds and reports
// whether it learnt all of it. A replay that stays incomplete leaves the
// stream reset; it is tried again from scratch after a backoff, up to
// initialAttempts times. After that the stream goes on with live messages,
// not caught up, and run tries again every resyncEvery.
func (st *stream) initialReplay(ctx context.Context) bool {
	if st.anchored {
		// A redial of a stream that was anchored: catch up what it missed.
		return st.replayFrom(ctx, st.next)
	}
	backoff := initialBackoff
	for attempt := 1; ; attempt++ {
		if st.replayFrom(ctx, st.next) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if attempt == initialAttempts {
			st.s.log.Warn("kv events: the engine's replay stays incomplete; this worker is not caught up "+
				"and its cached blocks are learnt from live events until a replay completes",
				"worker", st.spec.src.Worker, "rank", st.spec.src.Rank, "attempts", attempt, "retry_every", st.s.resyncEvery)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff *= 2
		st.next, st.applied, st.anchored = 0, false, false
	}
}

// resync clears the stream and replays the engine's whole buffer again,
// for a stream whose replays were incomplete.
func (st *stream) resync(ctx context.Context) bool {
	st.reset("replay_retry")
	st.next, st.applied, st.anchored, st.dups = 0, false, false, false
	return st.replayFrom(ctx, 0)
}

// live handles one live message in sequence order.
func (st *stream) live(ctx context.Context, m Message) {
	if st.dups && m.Seq > st.dupTo {
		st.dups = false
	}
	switch {
	case m.Seq == endSeq:
		st.s.m.decodeErrors.Inc()
	case !st.anchored || m.Seq == st.next:
		st.apply(m)
	case st.dups && m.Seq >= st.dupFrom:
		// Already applied through a replay.
	case m.Seq < st.next:
		st.reset("seq_backwards")
		st.apply(m)
	default:
		st.countGap()
		if st.spec.replay == "" {
			st.reset("gap_no_replay")
			st.apply(m)
			return
		}
		st.replayFrom(ctx, st.next, m)
	}
}

// countGap counts a gap in the stream's seqs that a replay will fill, in
// the metric and in the stream's status.
func (st *stream) countGap() {
	st.s.m.gaps.Inc()
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.Gaps++ })
}

// replayFrom replays from start in rounds: each applies what follows the
// last applied seq and holds what arrives after a hole, and the next round
// asks again from the first hole, until a round ends with the engine's end
// marker, nothing held, and the live messages that arrived meanwhile (pre
// first) following on. Then it applies the held and live messages,
// deduplicated by seq. It reports whether the replay was complete; an
// initial replay that was not is left reset for the caller to retry, any
// other clears the stream and goes on from the live messages.
//
// A live message dropped while a complete replay ran leaves a hole among
// the live ones after it; the engine's buffer still holds it, so the
// replay asks again from there, up to maxChainedReplays times in a row.
// It once cleared the worker's entries instead: on a loaded machine, where
// a replay takes long enough for another drop, the index lost what the
// engine held and never learnt it again.
func (st *stream) replayFrom(ctx context.Context, start uint64, pre ...Message) (complete bool) {
	return st.replayChained(ctx, start, 0, pre)
}

func (st *stream) replayChained(ctx context.Context, start uint64, chained int, pre []Message) (complete bool) {
	initial := !st.anchored
	buffered := pre
	held := make(map[uint64]Message)
	overflow, truncated := false, false
	var dupFrom uint64
	missedFirst := 0 // rounds in a row whose first message was past from
	var err error
	st.dups = false
	rounds, stalled := 0, 0
	for ; rounds < maxRounds && stalled < stallRounds && !complete && !overflow; rounds++ {
		before, beforeHeld := st.next, len(held)
		from, mustStart := start, st.anchored
		if st.anchored {
			from = st.next
		}
		first := true
		var ended bool
		ended, err = st.c.replayRound(ctx, from, st.s.replayTimeout, st.quiet(), func(m Message) {
			if first {
				first = false
				if rounds == 0 {
					dupFrom = m.Seq
				}
				if m.Seq == from || !mustStart {
					missedFirst = 0
				} else if missedFirst++; missedFirst == 2 {
					// Two rounds in a row began past from (a first message
					// is seldom dropped, its pipe starts empty): the engine
					// no longer holds what we missed.
					truncated, dupFrom = true, m.Seq
					st.reset("replay_truncated")
					st.anchored = false
				}
			}
			st.take(m, held, &overflow, len(buffered))
		}, func(m Message) {
			if len(buffered)+len(held) >= maxBuffered {
				overflow = true
				return
			}
			buffered = append(buffered, m)
		})
		st.s.m.decodeErrors.Add(float64(st.c.takeBadFrames()))
		if err != nil {
			break
		}
		for seq := range held {
			if seq < st.next {
				delete(held, seq)
			}
		}
		complete = ended && len(held) == 0 && st.follows(buffered)
		if st.next == before && len(held) == beforeHeld {
			stalled++
		} else {
			stalled = 0
		}
	}
	st.s.m.replayRounds.Add(float64(rounds))
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.Replays++ })
	var result string
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil || overflow:
		result = "failed"
	case !complete:
		result = "incomplete"
	case truncated:
		result = "truncated"
	default:
		result = "ok"
	}
	st.s.m.replays.WithLabelValues(result).Inc()
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.LastReplay = result })
	if !complete {
		st.s.log.Warn("kv events replay incomplete", "worker", st.spec.src.Worker, "rank", st.spec.src.Rank,
			"start", start, "rounds", rounds, "result", result, "err", err, "overflow", overflow,
			"applied_to", st.next, "held", len(held), "live", len(buffered))
		st.reset("replay_" + result)
		st.anchored, st.dups = false, false
		if initial {
			return false
		}
	}
	if complete && st.applied {
		st.dupFrom, st.dupTo, st.dups = dupFrom, st.next-1, true
	}
	rest := slices.Collect(maps.Values(held))
	slices.SortFunc(rest, func(a, b Message) int { return cmp.Compare(a.Seq, b.Seq) })
	pending := append(rest, buffered...)
	for i, m := range pending {
		switch {
		case !st.anchored || m.Seq == st.next:
			st.apply(m)
		case m.Seq < st.next:
			// Duplicate of a replayed batch.
		case complete && chained < maxChainedReplays:
			// Dropped while the replay ran: ask the engine again.
			st.countGap()
			ok := st.replayChained(ctx, st.next, chained+1, pending[i:])
			if ok && st.dups {
				// Live duplicates of this replay's batches may still come.
				st.dupFrom = min(st.dupFrom, dupFrom)
			}
			return ok
		default:
			// Still a hole after the replay: what is missing is lost.
			st.s.m.gaps.Inc()
			st.reset("gap_after_replay")
			st.apply(m)
		}
	}
	return complete
}

// take applies a replayed message that follows the last applied one (or
// any, before the stream is anchored) and then the held ones it unblocks;
// one past a hole is held for a later round, up to maxBuffered messages.
func (st *stream) take(m Message, held map[uint64]Message, overflow *bool, buffered int) {
	switch {
	case !st.anchored || m.Seq == st.next:
		st.apply(m)
		for {
			h, ok := held[st.next]
			if !ok {
				return
			}
			delete(held, st.next)
			st.apply(h)
		}
	case m.Seq > st.next:
		if _, ok := held[m.Seq]; ok {
			return
		}
		if len(held)+buffered >= maxBuffered {
			*overflow = true
			return
		}
		held[m.Seq] = m
	}
}

// follows reports whether the live messages continue the applied ones: one
// of them is at or before the next seq, or there are none.
func (st *stream) follows(live []Message) bool {
	if len(live) == 0 || !st.anchored {
		return true
	}
	for _, m := range live {
		if m.Seq <= st.next {
			return true
		}
	}
	return false
}

// quiet is how long a replay round waits after its last message for an end
// marker the engine may have dropped before it asks again. The engine sends
// a replay in one loop, so a pause this long means the rest was dropped; a
// round that ends too early only costs another round.
func (st *stream) quiet() time.Duration { return min(st.s.replayTimeout, 250*time.Millisecond) }

// apply decodes m and applies its events to the index, then records its
// seq: a reader that sees the seq sees the events applied.
func (st *stream) apply(m Message) {
	st.next, st.applied, st.anchored = m.Seq+1, true, true
	if err := st.dec.Decode(m.Payload, &st.b); err != nil {
		st.s.m.decodeErrors.Inc()
		st.s.log.Warn("kv events decode", "worker", st.spec.src.Worker, "rank", st.spec.src.Rank, "seq", m.Seq, "err", err)
	} else {
		st.s.ix.Apply(st.spec.src, st.conv.convert(&st.b, st.s.m))
	}
	seq := m.Seq
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.LastSeq = &seq })
}

func (st *stream) reset(reason string) {
	st.s.ix.Reset(st.spec.src, reason)
}
