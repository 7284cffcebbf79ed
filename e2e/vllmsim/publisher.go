package vllmsim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/zeromq/goczmq"
)

// publisherOptions are the fault and format knobs of a publisher.
type publisherOptions struct {
	wire        Wire
	bytesHashes bool
	// dropFraction of batches are not sent on PUB (their seq is used and
	// they stay replayable), as an HWM overflow would do.
	dropFraction float64
	// restartEvery, when > 0, restarts the sequence at 0 (and empties the
	// replay ring) after that many batches, as a restarted publisher would.
	restartEvery int
	seed         uint64
}

// publisher is one data-parallel rank's KV-event publisher: a ZMQ PUB
// socket and an optional ROUTER replay socket, both used only by the
// goroutine running run. Batches arrive through a bounded queue; when it
// is full the engine blocks, as vLLM's does.
type publisher struct {
	cfg    KVEventsConfig
	opts   publisherOptions
	enc    eventEncoder
	log    *slog.Logger
	met    *rankMetrics
	queue  chan Batch
	pub    *goczmq.Sock
	router *goczmq.Sock
	// PubEndpoint and ReplayEndpoint are where clients reach the sockets.
	pubEndpoint, replayEndpoint string

	closeOnce sync.Once

	// owned by run
	seq     uint64
	sent    int
	ring    replayRing
	rng     *rand.Rand
	scratch []byte
}

func newPublisher(cfg KVEventsConfig, rank int, opts publisherOptions, log *slog.Logger, met *rankMetrics) (*publisher, error) {
	p := &publisher{
		cfg: cfg, opts: opts, log: log, met: met,
		enc:   eventEncoder{wire: opts.wire, bytesHashes: opts.bytesHashes},
		queue: make(chan Batch, max(1, min(cfg.MaxQueueSize, 1<<16))),
		ring:  replayRing{n: cfg.BufferSteps},
		rng:   rand.New(rand.NewPCG(opts.seed, uint64(rank))),
	}
	ep, err := rankEndpoint(cfg.Endpoint, rank)
	if err != nil {
		return nil, err
	}
	p.pub = goczmq.NewSock(goczmq.Pub)
	p.pub.SetSndhwm(cfg.HWM)
	p.pub.SetLinger(0)
	if p.pubEndpoint, err = attach(p.pub, ep, binds(ep)); err != nil {
		p.close()
		return nil, fmt.Errorf("kv events publisher: %w", err)
	}
	if cfg.ReplayEndpoint != "" {
		rep, err := rankEndpoint(cfg.ReplayEndpoint, rank)
		if err != nil {
			p.close()
			return nil, err
		}
		p.router = goczmq.NewSock(goczmq.Router)
		p.router.SetLinger(0)
		// A receive the poll announced can still block: a benchmark with
		// several subscribers per publisher hung in it at shutdown, with
		// the run loop never seeing ctx end. Give up on it instead.
		p.router.SetRcvtimeo(100)
		if p.replayEndpoint, err = attach(p.router, rep, true); err != nil {
			p.close()
			return nil, fmt.Errorf("kv events replay: %w", err)
		}
	}
	return p, nil
}

// attach binds or connects s and returns the endpoint clients should use.
func attach(s *goczmq.Sock, endpoint string, bind bool) (string, error) {
	if !bind {
		if strings.HasSuffix(endpoint, ":0") {
			// vLLM connects an endpoint without "*"; port 0 reaches nothing.
			return "", fmt.Errorf("connect %s: port 0 reaches nothing (bind an ephemeral port with tcp://HOST:*)", endpoint)
		}
		if err := s.Connect(endpoint); err != nil {
			return "", fmt.Errorf("connect %s: %w", endpoint, err)
		}
		return endpoint, nil
	}
	if _, err := s.Bind(endpoint); err != nil {
		return "", fmt.Errorf("bind %s: %w", endpoint, err)
	}
	got := s.LastEndpoint()
	got = strings.Replace(got, "://0.0.0.0:", "://127.0.0.1:", 1)
	got = strings.Replace(got, "://[::]:", "://[::1]:", 1)
	return got, nil
}

// publish queues a batch, blocking while the queue is full.
func (p *publisher) publish(ctx context.Context, b Batch) {
	select {
	case p.queue <- b:
	case <-ctx.Done():
	}
}

// restart makes the next batch go out with seq 0, as after a publisher restart.
func (p *publisher) restart(ctx context.Context) {
	p.publish(ctx, Batch{Rank: -1})
}

// run sends queued batches and serves replay requests until ctx ends.
func (p *publisher) run(ctx context.Context) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer p.close()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-p.queue:
			p.send(&b)
		case <-tick.C:
			// Send what is queued first, so a replay includes every batch
			// queued before the request arrived.
			for drained := false; !drained; {
				select {
				case b := <-p.queue:
					p.send(&b)
				default:
					drained = true
				}
			}
			p.serveReplays()
		}
	}
}

func (p *publisher) send(b *Batch) {
	if b.Rank < 0 {
		p.seq, p.sent = 0, 0
		p.ring.reset()
		return
	}
	if p.opts.restartEvery > 0 && p.sent == p.opts.restartEvery {
		p.seq, p.sent = 0, 0
		p.ring.reset()
	}
	payload := p.enc.appendBatch(nil, b)
	seq := p.seq
	p.seq++
	p.sent++
	p.ring.add(seq, payload)
	if p.opts.dropFraction > 0 && p.rng.Float64() < p.opts.dropFraction {
		p.met.eventsDropped.Inc()
		return
	}
	seq8 := binary.BigEndian.AppendUint64(p.scratch[:0], seq)
	if err := p.pub.SendMessage([][]byte{[]byte(p.cfg.Topic), seq8, payload}); err != nil {
		p.met.eventsDropped.Inc()
		p.log.Warn("kv events: send failed", "seq", seq, "err", err)
		return
	}
	p.met.batchesPublished.Inc()
}

// serveReplays answers every pending replay request.
func (p *publisher) serveReplays() {
	if p.router == nil {
		return
	}
	withTopic := p.opts.wire == WireMap
	for p.router.Events()&goczmq.Pollin != 0 {
		frames, err := p.router.RecvMessage()
		if err != nil {
			return
		}
		id, start, err := parseReplayRequest(frames)
		if err != nil {
			p.met.replayErrors.Inc()
			p.log.Warn("kv events: ignoring replay request", "err", err)
			continue
		}
		p.met.replays.Inc()
		for _, it := range p.ring.from(start) {
			if err := p.router.SendMessage(replayFrames(id, p.cfg.Topic, withTopic, it.seq, it.payload)); err != nil {
				break
			}
		}
		if err := p.router.SendMessage(replayEndFrames(id, withTopic)); err != nil {
			p.log.Warn("kv events: replay end not sent", "err", errors.Unwrap(err))
		}
	}
}

func (p *publisher) close() {
	p.closeOnce.Do(func() {
		if p.pub != nil {
			p.pub.Destroy()
		}
		if p.router != nil {
			p.router.Destroy()
		}
	})
}
