package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BatchConfig sizes the span batcher; the zero value of a field means the
// OpenTelemetry default. BatchConfigFromEnv reads the standard OTEL_BSP_*
// variables.
type BatchConfig struct {
	// ScheduleDelay is the longest a span waits before it is exported
	// (OTEL_BSP_SCHEDULE_DELAY, default 5 s).
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export call (OTEL_BSP_EXPORT_TIMEOUT, 30 s).
	ExportTimeout time.Duration
	// MaxQueue is how many ended spans may wait; more are dropped and
	// counted (OTEL_BSP_MAX_QUEUE_SIZE, 2048).
	MaxQueue int
	// MaxBatch is the most spans per export; a full batch is exported at
	// once (OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512).
	MaxBatch int
}

func (c BatchConfig) withDefaults() BatchConfig {
	if c.ScheduleDelay <= 0 {
		c.ScheduleDelay = 5 * time.Second
	}
	if c.ExportTimeout <= 0 {
		c.ExportTimeout = 30 * time.Second
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 2048
	}
	if c.MaxBatch <= 0 || c.MaxBatch > c.MaxQueue {
		c.MaxBatch = min(512, c.MaxQueue)
	}
	return c
}

// BatchConfigFromEnv reads the OTEL_BSP_* variables (milliseconds and
// counts); values that do not parse as positive integers keep the default.
func BatchConfigFromEnv(getenv func(string) string) BatchConfig {
	num := func(k string) int {
		n, err := strconv.Atoi(getenv(k))
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	return BatchConfig{
		ScheduleDelay: time.Duration(num("OTEL_BSP_SCHEDULE_DELAY")) * time.Millisecond,
		ExportTimeout: time.Duration(num("OTEL_BSP_EXPORT_TIMEOUT")) * time.Millisecond,
		MaxQueue:      num("OTEL_BSP_MAX_QUEUE_SIZE"),
		MaxBatch:      num("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
	}.withDefaults()
}

// batcher queues ended spans and exports them from one goroutine, every
// ScheduleDelay or as soon as a batch is full. Ending a span takes a mutex
// and appends; only the span that fills a batch wakes the exporter.
type batcher struct {
	exp sdktrace.SpanExporter
	cfg BatchConfig
	log *slog.Logger

	mu      sync.Mutex
	queue   []*Span
	dropped uint64
	stopped bool

	full chan struct{} // a batch is ready; buffered 1
	stop chan struct{}
	done chan struct{}
}

func newBatcher(exp sdktrace.SpanExporter, cfg BatchConfig, log *slog.Logger) *batcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &batcher{exp: exp, cfg: cfg.withDefaults(), log: log,
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	b.queue = make([]*Span, 0, b.cfg.MaxBatch)
	go b.loop()
	return b
}

func (b *batcher) enqueue(s *Span) {
	b.mu.Lock()
	if b.stopped || len(b.queue) >= b.cfg.MaxQueue {
		b.dropped++
		b.mu.Unlock()
		return
	}
	b.queue = append(b.queue, s)
	ready := len(b.queue) == b.cfg.MaxBatch
	b.mu.Unlock()
	if ready {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// Dropped returns how many spans were dropped because the queue was full
// or the batcher had stopped.
func (b *batcher) Dropped() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTimer(b.cfg.ScheduleDelay)
	defer t.Stop()
	var reported uint64
	for {
		select {
		case <-t.C:
		case <-b.full:
		case <-b.stop:
			b.exportAll()
			return
		}
		b.exportAll()
		if d := b.Dropped(); d > reported {
			b.log.Warn("trace spans dropped: the export queue was full", "dropped", d-reported, "total", d)
			reported = d
		}
		t.Reset(b.cfg.ScheduleDelay)
	}
}

// exportAll exports the queue, a batch at a time.
func (b *batcher) exportAll() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.cfg.MaxBatch)
		if n == 0 {
			b.mu.Unlock()
			return
		}
		batch := make([]sdktrace.ReadOnlySpan, n)
		for i, s := range b.queue[:n] {
			batch[i] = s
		}
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ExportTimeout)
		if err := b.exp.ExportSpans(ctx, batch); err != nil {
			b.log.Warn("trace export failed", "spans", n, "err", err)
		}
		cancel()
	}
}

// Shutdown exports what is queued, stops the loop and shuts the exporter
// down; spans ended afterwards are dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	already := b.stopped
	b.stopped = true
	b.mu.Unlock()
	if !already {
		close(b.stop)
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return errors.Join(ctx.Err(), b.exp.Shutdown(ctx))
	}
	return b.exp.Shutdown(ctx)
}

// syncSink exports each span as it ends, on the caller's goroutine: for
// tests and debugging, where a span must be visible the moment it ends.
type syncSink struct {
	exp sdktrace.SpanExporter
	log *slog.Logger
}

func (s syncSink) enqueue(sp *Span) {
	if err := s.exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{sp}); err != nil {
		s.log.Warn("trace export failed", "err", err)
	}
}
