package kvevents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	m, err := newMetrics(o)
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

// runStream subscribes one (worker, rank) until ctx ends, redialling after
// socket errors.
func (s *Subscribers) runStream(ctx context.Context, spec streamSpec) {
	st := &stream{s: s, spec: spec, last: -1, dupTo: -1}
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
	last int64 // last applied seq, -1 before any
	// anchored is true when the next seq is known to be last+1: after a
	// successful initial replay, or once a first live message was applied.
	anchored bool
	// dupFrom..dupTo are the seqs the last replay applied (dupTo −1: none).
	// Live copies of them may still be queued on the SUB socket until a live
	// message past dupTo arrives; after that, an old seq means a restart.
	dupFrom, dupTo int64
}

func (st *stream) run(ctx context.Context) error {
	c, err := dial(st.spec.endpoint, st.spec.replay, st.s.topic)
	if err != nil {
		return err
	}
	defer c.close()
	st.c = c
	st.dupTo = -1
	if st.spec.replay != "" {
		// Initial replay: learn what the engine's buffer still holds.
		st.replayFrom(ctx, uint64(st.last+1))
	}
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.CaughtUp = true })
	for ctx.Err() == nil {
		m, ok, err := c.next()
		if errors.Is(err, ErrFrame) {
			st.s.m.decodeErrors.Inc()
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

// live handles one live message in sequence order.
func (st *stream) live(ctx context.Context, m Message) {
	seq := int64(m.Seq)
	if st.dupTo >= 0 && seq > st.dupTo {
		st.dupTo = -1
	}
	switch {
	case m.Seq == endSeq:
		st.s.m.decodeErrors.Inc()
	case !st.anchored || seq == st.last+1:
		st.apply(m)
	case st.dupTo >= 0 && seq >= st.dupFrom:
		// Already applied through a replay.
	case seq <= st.last:
		st.reset("seq_backwards")
		st.apply(m)
	default:
		st.s.m.gaps.Inc()
		st.s.update(st.spec.src, func(ss *StreamStatus) { ss.Gaps++ })
		if st.spec.replay == "" {
			st.reset("gap_no_replay")
			st.apply(m)
			return
		}
		st.replayFrom(ctx, uint64(st.last+1), m)
	}
}

// replayFrom replays from start, applying replayed batches, then the live
// messages that arrived meanwhile (pre first), deduplicated by seq.
func (st *stream) replayFrom(ctx context.Context, start uint64, pre ...Message) {
	initial := !st.anchored
	buffered := pre
	first := true
	overflow := false
	st.dupTo = -1
	err := st.c.doReplay(ctx, start, st.s.replayTimeout, func(m Message) {
		if first {
			first = false
			if m.Seq != start && !initial {
				// The engine no longer holds what we missed.
				st.s.m.replays.WithLabelValues("truncated").Inc()
				st.reset("replay_truncated")
			}
			st.dupFrom = int64(m.Seq)
		}
		if int64(m.Seq) > st.last {
			st.apply(m)
			st.dupTo = st.last
		}
	}, func(m Message) {
		if len(buffered) >= maxBuffered {
			overflow = true
			return
		}
		buffered = append(buffered, m)
	})
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.Replays++ })
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil || overflow:
		st.s.m.replays.WithLabelValues("failed").Inc()
		st.s.log.Warn("kv events replay failed", "worker", st.spec.src.Worker, "rank", st.spec.src.Rank,
			"start", start, "err", err, "overflow", overflow)
		if !initial {
			st.reset("replay_failed")
		}
		st.anchored = false // accept the next message as a new start
		st.dupTo = -1
	default:
		st.s.m.replays.WithLabelValues("ok").Inc()
		st.anchored = true
	}
	for _, m := range buffered {
		seq := int64(m.Seq)
		switch {
		case !st.anchored || seq == st.last+1:
			st.apply(m)
		case seq <= st.last:
			// Duplicate of a replayed batch.
		default:
			// Still a hole after the replay: what is missing is lost.
			st.s.m.gaps.Inc()
			st.reset("gap_after_replay")
			st.apply(m)
		}
	}
}

// apply decodes m and applies its events to the index, then records its
// seq: a reader that sees the seq sees the events applied.
func (st *stream) apply(m Message) {
	st.last = int64(m.Seq)
	st.anchored = true
	if err := st.dec.Decode(m.Payload, &st.b); err != nil {
		st.s.m.decodeErrors.Inc()
		st.s.log.Warn("kv events decode", "worker", st.spec.src.Worker, "rank", st.spec.src.Rank, "seq", m.Seq, "err", err)
	} else {
		st.s.ix.Apply(st.spec.src, st.conv.convert(&st.b, st.s.m))
	}
	st.s.update(st.spec.src, func(ss *StreamStatus) { ss.LastSeq = st.last })
}

func (st *stream) reset(reason string) {
	st.s.ix.Reset(st.spec.src, reason)
}
