package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Provider is warmpath's tracing setup: the span pipeline, the W3C
// propagator and the semantic-convention edition. Build one with Setup,
// NewProvider or Disabled.
type Provider struct {
	spans   *spans // nil when tracing is off
	prop    propagation.TextMapPropagator
	semconv Semconv
	close   func(context.Context) error
}

// spans is what a Provider's Tracers share.
type spans struct {
	sampler sdktrace.Sampler
	res     *resource.Resource
	sink    spanSink
}

// ErrUnknownExporter is returned by Setup for an OTEL_TRACES_EXPORTER or
// OTLP protocol value it does not know.
var ErrUnknownExporter = errors.New("unknown trace exporter")

// ErrUnknownSampler is returned by Setup for an OTEL_TRACES_SAMPLER value it
// does not know.
var ErrUnknownSampler = errors.New("unknown trace sampler")

// Options adjust Setup.
type Options struct {
	// Getenv reads the environment; nil means os.Getenv. (The OTLP
	// exporters read the process environment themselves.)
	Getenv func(string) string
	// Logger receives export failures and dropped-span warnings; nil
	// discards them.
	Logger *slog.Logger
	// Stdout receives spans for the "console"/"stdout" exporter; nil means
	// os.Stdout.
	Stdout io.Writer
	// ServiceName is service.name when OTEL_SERVICE_NAME does not set one.
	ServiceName string
	// Version is service.version.
	Version string
}

// Setup builds a Provider from the environment. With OTEL_SDK_DISABLED=true
// or without OTEL_TRACES_EXPORTER (or with "none") tracing is off: Tracer
// returns nil and Enabled reports false. Call Shutdown to flush and
// stop exporters.
func Setup(ctx context.Context, o Options) (*Provider, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	sc := SemconvFromEnv(getenv)
	exporter := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER")))
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || exporter == "" || exporter == "none" {
		return Disabled(sc), nil
	}
	sampler, err := SamplerFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch exporter {
	case "otlp":
		proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if proto == "" {
			proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: %w", proto, ErrUnknownExporter)
		}
	case "console", "stdout":
		w := o.Stdout
		if w == nil {
			w = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w))
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER %q (want otlp, console or none): %w", exporter, ErrUnknownExporter)
	}
	if err != nil {
		return nil, fmt.Errorf("trace exporter %s: %w", exporter, err)
	}
	res, err := newResource(ctx, o)
	if err != nil {
		return nil, errors.Join(err, exp.Shutdown(ctx))
	}
	return NewProvider(exp, sc, SpanOptions{Sampler: sampler, Resource: res, Batch: BatchConfigFromEnv(getenv), Logger: o.Logger}), nil
}

func newResource(ctx context.Context, o Options) (*resource.Resource, error) {
	name := o.ServiceName
	if name == "" {
		name = "warmpath"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	// Later detectors win: the environment overrides the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return res, nil
}

// SpanOptions say how a Provider samples and exports spans.
type SpanOptions struct {
	// Sampler decides which spans record; nil means parent-based always-on.
	Sampler sdktrace.Sampler
	// Resource describes the process on every span; nil means empty.
	Resource *resource.Resource
	// Batch sizes the export batches (zero fields: the defaults).
	Batch BatchConfig
	// Sync exports each span on the goroutine that ends it, for tests.
	Sync bool
	// Logger receives export failures; nil discards them.
	Logger *slog.Logger
}

// NewProvider exports spans to exp (the OTLP or stdout exporter, or a test's
// recorder). Shutdown flushes and shuts exp down.
func NewProvider(exp sdktrace.SpanExporter, sc Semconv, o SpanOptions) *Provider {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sp := &spans{sampler: o.Sampler, res: o.Resource}
	if sp.sampler == nil {
		sp.sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	if sp.res == nil {
		sp.res = resource.Empty()
	}
	p := &Provider{spans: sp, prop: newPropagator(), semconv: sc}
	if o.Sync {
		sp.sink = syncSink{exp: exp, log: log}
		p.close = exp.Shutdown
	} else {
		b := newBatcher(exp, o.Batch, log)
		sp.sink = b
		p.close = b.Shutdown
	}
	return p
}

func newPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Disabled returns a Provider with tracing off.
func Disabled(sc Semconv) *Provider {
	return &Provider{prop: newPropagator(), semconv: sc}
}

// Enabled reports whether spans are recorded and exported at all.
func (p *Provider) Enabled() bool { return p.spans != nil }

// Tracer returns a tracer whose spans carry the instrumentation scope
// name, or nil when tracing is off.
func (p *Provider) Tracer(scope string) *Tracer {
	if p.spans == nil {
		return nil
	}
	return &Tracer{spans: p.spans, scope: instrumentation.Scope{Name: scope}}
}

// Propagator returns the W3C trace-context and baggage propagator.
func (p *Provider) Propagator() propagation.TextMapPropagator { return p.prop }

// Semconv returns the convention edition in use.
func (p *Provider) Semconv() Semconv { return p.semconv }

// Shutdown flushes pending spans and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.close == nil {
		return nil
	}
	if err := p.close(ctx); err != nil {
		return fmt.Errorf("trace shutdown: %w", err)
	}
	return nil
}
