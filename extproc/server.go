package extproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// Picker chooses the worker for a request. The scoring package's policies
// implement it.
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

// Pool answers which workers may serve a model.
type Pool interface {
	// Candidates returns the healthy workers serving model, or every healthy
	// worker when model is "", and whether any worker (healthy or not)
	// serves the model at all.
	Candidates(model string) (ws []discovery.Worker, known bool)
	// Models lists the served model names.
	Models() []string
}

// HealthReporter learns the status of each upstream response, so a worker
// that fails can be ejected. err is reserved for transport failures.
type HealthReporter interface {
	ReportResult(worker string, status int, err error)
}

// Config tunes a Server. The zero value is not usable; fill every field.
type Config struct {
	// DestinationHeader carries the chosen worker's host:port to Envoy.
	DestinationHeader string
	// MetadataNamespace receives the destination as dynamic metadata too;
	// empty disables.
	MetadataNamespace string
	// MaxBodyBytes is the largest request body accepted (413 above).
	MaxBodyBytes int
	// MaxResponseBytes bounds the non-streamed response kept for its usage.
	MaxResponseBytes int
	// DefaultRequestMode and DefaultResponseMode are assumed when Envoy sends
	// no protocol_config (Envoy before 1.34).
	DefaultRequestMode, DefaultResponseMode filterv3.ProcessingMode_BodySendMode
	// DebugHeaders adds x-warmpath-worker and x-warmpath-reason to responses.
	DebugHeaders bool
	// RetryAfter is the Retry-After value, in seconds, on 503 replies.
	RetryAfter int
	// AssignmentTTL ends assignments whose end was never seen.
	AssignmentTTL time.Duration
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

	assignments *Registry
}

// Option configures optional parts of a Server.
type Option func(*Server)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithHealth reports upstream results to h.
func WithHealth(h HealthReporter) Option { return func(s *Server) { s.health = h } }

// New returns a Server that routes with picker among pool's workers and
// registers its metrics with reg.
func New(cfg Config, pool Pool, picker Picker, reg prometheus.Registerer, log *slog.Logger, opts ...Option) *Server {
	s := &Server{cfg: cfg, pool: pool, picker: picker, log: log, now: time.Now, m: newMetrics(reg)}
	for _, o := range opts {
		o(s)
	}
	s.om = newObserveMetrics(reg, s.semconv, s.tenant.Labels)
	s.assignments = NewRegistry(cfg.AssignmentTTL, s.now, s.ended)
	return s
}

// Run expires stale assignments until ctx ends.
func (s *Server) Run(ctx context.Context) error { return s.assignments.Run(ctx) }

// InFlight returns the number of assignments not yet ended.
func (s *Server) InFlight() int { return s.assignments.Len() }

// InFlightByWorker returns the assignments not yet ended, per worker.
func (s *Server) InFlightByWorker() map[string]int { return s.assignments.ByWorker() }

// Assignments returns the server's in-flight registry.
func (s *Server) Assignments() *Registry { return s.assignments }

// ended is the registry's end hook: metrics, health and the picker's feedback.
func (s *Server) ended(a *Assignment, o scoring.Outcome) {
	s.m.ended.WithLabelValues(string(o.End)).Inc()
	s.om.outcome(a.Decision, o)
	s.m.inFlight.WithLabelValues(a.Worker).Set(float64(s.assignments.InFlight(a.Worker)))
	// An assignment that ended before any response (the client left, or
	// the upstream never answered) says nothing certain about the worker;
	// the active health check judges those.
	if s.health != nil && o.HTTPStatus != 0 {
		s.health.ReportResult(a.Worker, o.HTTPStatus, nil)
	}
	s.picker.Done(a.Decision, o)
}

// Process handles one ext_proc stream, that is one HTTP request. Recv
// already returns as soon as the stream's context ends (client gone, Envoy
// reset, server stop), so the loop needs no second goroutine; the deferred
// cleanup ends an unfinished assignment as aborted.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ex := &exchange{s: s, stream: stream, ctx: stream.Context()}
	defer ex.cleanup()
	for {
		req, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			s.m.streamErrors.WithLabelValues("recv").Inc()
			return err
		}
		if err := ex.handle(req); err != nil {
			var pe *protocolError
			if errors.As(err, &pe) {
				s.m.streamErrors.WithLabelValues("out_of_order").Inc()
				ex.trace.fail(err, ex.s.now())
				s.log.Warn("ext_proc protocol error", "request_id", ex.req.ID, "err", err)
				return status.Error(codes.FailedPrecondition, err.Error())
			}
			if ex.ctx.Err() != nil {
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
