package extproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
	"github.com/warmpath/warmpath/tokenize"
)

// Picker chooses the worker for a request. The scoring package's Router
// implements it.
type Picker interface {
	// Pick chooses among ws: the healthy workers serving req.Model, never
	// empty. The decision is handed back to Done exactly once.
	Pick(ctx context.Context, req *scoring.Request, ws scoring.Workers) (*scoring.Decision, error)
	// Done reports how an assignment made by Pick ended.
	Done(d *scoring.Decision, o scoring.Outcome)
}

// FirstTokenObserver is implemented by pickers that want to know when a
// streamed response's first content token arrived (the request left the
// prefill queue), before the assignment ends.
type FirstTokenObserver interface {
	FirstToken(d *scoring.Decision)
}

// Reassigner is implemented by pickers that can move an assignment to
// another candidate of its decision: the proxy reported that a fallback
// endpoint served the request (it walked the destination list after a
// failure), so the load and the outcome belong to that worker. The
// scoring package's Router implements it.
type Reassigner interface {
	// Reassign attributes the assignment of d, which has not ended, to
	// worker, one of d's candidates; it reports whether it did.
	Reassign(d *scoring.Decision, worker string) bool
}

// Pool answers which workers may serve a model.
type Pool interface {
	// Candidates returns the healthy workers serving model, or every healthy
	// worker when model is "", and whether any worker (healthy or not)
	// serves the model at all.
	Candidates(model string) (ws []discovery.Worker, known bool)
	// Models lists the served model names.
	Models() []string
}

// ErrRetriedPast is what health hears of a worker the proxy walked past to
// a later endpoint of the destination list: it did not take the request
// (refused the connection or the stream, or reset it before the request).
var ErrRetriedPast = errors.New("the proxy retried the request on a later endpoint of the destination list")

// HealthReporter learns the status of each upstream response, so a worker
// that fails can be ejected. err is reserved for transport failures.
type HealthReporter interface {
	ReportResult(worker string, status int, err error)
}

// Server is the ext_proc gRPC service. Each Process call handles one HTTP
// request: it reads the body, asks the Picker for a worker, routes the
// request there, watches the response and ends the assignment. A Server is
// safe for concurrent use by many streams.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg    Config
	pool   Pool
	picker Picker
	health HealthReporter
	log    *slog.Logger
	now    func() time.Time
	m      *metrics
	om     *observeMetrics

	tr      *tracing // nil when tracing is off
	semconv telemetry.Semconv
	tenant  TenantConfig

	// inFlight counts assignments routed and not yet ended.
	inFlight atomic.Int64
	// buffers bounds the bytes all streams' buffers hold (budget.go).
	buffers budget
	// bodies parses request bodies, reusing the messages of earlier turns.
	bodies *tokenize.BodyParser
}

// Option configures optional parts of a Server.
type Option func(*Server)

// WithHealth reports upstream results to h.
func WithHealth(h HealthReporter) Option { return func(s *Server) { s.health = h } }

// New returns a Server that routes with picker among pool's workers. It
// fails when its metrics cannot be registered.
func New(cfg Config, pool Pool, picker Picker, o component.Options, opts ...Option) (*Server, error) {
	s := &Server{cfg: cfg, pool: pool, picker: picker, log: o.Log(), now: o.Now()}
	s.buffers.limit = cfg.MaxBufferedBytes
	s.bodies = tokenize.NewBodyParser(cfg.MessageCacheMiB << 20)
	for _, opt := range opts {
		opt(s)
	}
	var err error
	if s.m, err = newMetrics(o, s.buffers.held.Load, s.bodies.Collector()); err != nil {
		return nil, err
	}
	if s.om, err = newObserveMetrics(o, s.semconv, s.tenant.Labels); err != nil {
		return nil, err
	}
	return s, nil
}

// BufferedBytes returns the bytes every stream's buffers hold now.
func (s *Server) BufferedBytes() int64 { return s.buffers.held.Load() }

// InFlight returns the number of assignments routed and not yet ended.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// Process handles one ext_proc stream, that is one HTTP request. Its loop
// owns the exchange: Recv already returns as soon as the stream's context
// ends (client gone, Envoy reset, server stop), so no second goroutine
// stands between the stream and the loop. The other parties are the
// assignment's TTL timer, which may end the assignment (and only that) on
// its own goroutine, and cleanup waits for it; and the body timer, which
// answers 408 to a body that is late, under the exchange's mutex, which
// the loop holds while it handles a message. The deferred cleanup ends an
// unfinished assignment as aborted.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	ex := &exchange{stream: stream, log: s.log}
	defer s.cleanup(ex)
	in := newReceived()
	for {
		err := stream.RecvMsg(in)
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			s.m.streamErrors.WithLabelValues("recv").Inc()
			return err
		}
		ex.mu.Lock()
		err = s.handle(ctx, ex, in.ProcessingRequest)
		ex.mu.Unlock()
		if err != nil {
			var pe *protocolError
			if errors.As(err, &pe) {
				s.m.streamErrors.WithLabelValues("out_of_order").Inc()
				ex.trace.fail(err, s.now())
				ex.log.Warn("ext_proc protocol error", "err", err)
				return status.Error(codes.FailedPrecondition, err.Error())
			}
			if ctx.Err() != nil {
				return nil // the stream ended while we were sending
			}
			s.m.streamErrors.WithLabelValues("send").Inc()
			return err
		}
	}
}

// newRequestID returns 16 random hex digits.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
