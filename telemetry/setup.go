package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Provider is warmpath's tracing setup: a tracer provider, the W3C
// propagator and the semantic-convention edition. Its zero value is not
// usable; build one with Setup or NewProvider.
type Provider struct {
	tp      trace.TracerProvider
	prop    propagation.TextMapPropagator
	semconv Semconv
	enabled bool
	close   func(context.Context) error
}

// ErrUnknownExporter is returned by Setup for an OTEL_TRACES_EXPORTER or
// OTLP protocol value it does not know.
var ErrUnknownExporter = errors.New("unknown trace exporter")

// Options adjust Setup.
type Options struct {
	// Getenv reads the environment; nil means os.Getenv. (The SDK's sampler
	// and the OTLP exporters read the process environment themselves.)
	Getenv func(string) string
	// Stdout receives spans for the "console"/"stdout" exporter; nil means
	// os.Stdout.
	Stdout io.Writer
	// ServiceName is service.name when OTEL_SERVICE_NAME does not set one.
	ServiceName string
	// Version is service.version.
	Version string
}

// Setup builds a Provider from the environment. With OTEL_SDK_DISABLED=true
// or without OTEL_TRACES_EXPORTER (or with "none") tracing is off: the
// tracer is a no-op and Enabled reports false. Call Shutdown to flush and
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
	var exp sdktrace.SpanExporter
	var err error
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
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return NewProvider(tp, sc, tp.Shutdown), nil
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

// NewProvider wraps a tracer provider (for instance one built in a test
// around a span recorder). shutdown may be nil.
func NewProvider(tp trace.TracerProvider, sc Semconv, shutdown func(context.Context) error) *Provider {
	return &Provider{
		tp:      tp,
		prop:    propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		semconv: sc,
		enabled: true,
		close:   shutdown,
	}
}

// Disabled returns a Provider with tracing off.
func Disabled(sc Semconv) *Provider {
	p := NewProvider(noop.NewTracerProvider(), sc, nil)
	p.enabled = false
	return p
}

// Enabled reports whether spans are recorded and exported at all.
func (p *Provider) Enabled() bool { return p.enabled }

// Tracer returns the named tracer.
func (p *Provider) Tracer(name string) trace.Tracer { return p.tp.Tracer(name) }

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
