package telemetry

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSetup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     []string
		enabled bool
		wantErr error
	}{
		{name: "unset is off", env: nil, enabled: false},
		{name: "none is off", env: []string{"OTEL_TRACES_EXPORTER", "none"}, enabled: false},
		{name: "sdk disabled wins", env: []string{"OTEL_TRACES_EXPORTER", "console", "OTEL_SDK_DISABLED", "true"}, enabled: false},
		{name: "console", env: []string{"OTEL_TRACES_EXPORTER", "console"}, enabled: true},
		{name: "otlp default http", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, enabled: true},
		{name: "otlp grpc", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, enabled: true},
		{name: "otlp traces protocol wins", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "bogus", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}, enabled: true},
		{name: "unknown exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, wantErr: ErrUnknownExporter},
		{name: "unknown protocol", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, wantErr: ErrUnknownExporter},
		{name: "unknown sampler", env: []string{"OTEL_TRACES_EXPORTER", "console", "OTEL_TRACES_SAMPLER", "sometimes"}, wantErr: ErrUnknownSampler},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := Setup(t.Context(), Options{Getenv: envOf(tc.env...), Stdout: &bytes.Buffer{}})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// No collector listens here: shut down without waiting for an export.
			gone, cancel := context.WithCancel(t.Context())
			cancel()
			defer p.Shutdown(gone)
			if p.Enabled() != tc.enabled {
				t.Fatalf("Enabled() = %v, want %v", p.Enabled(), tc.enabled)
			}
			if tr := p.Tracer("t"); (tr != nil) != tc.enabled {
				t.Fatalf("Tracer() = %v with tracing enabled %v", tr, tc.enabled)
			} else if tr != nil {
				span := tr.Start(context.Background(), "s", trace.SpanKindServer, time.Now())
				if !span.IsRecording() {
					t.Fatal("span not recording with the default sampler")
				}
				span.End(time.Now())
			}
		})
	}
}

func TestConsoleExporterWritesSpans(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p, err := Setup(t.Context(), Options{Getenv: envOf("OTEL_TRACES_EXPORTER", "console"), Stdout: &out, ServiceName: "svc-under-test"})
	if err != nil {
		t.Fatal(err)
	}
	span := p.Tracer("t").Start(context.Background(), "chat qwen3", trace.SpanKindClient, time.Now())
	span.End(time.Now())
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"chat qwen3"`, `svc-under-test`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestSemconvFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		value  string
		latest bool
		cache  string
	}{
		{"unset", "", false, "gen_ai.usage.cache_creation.input_tokens"},
		{"other value", "http", false, "gen_ai.usage.cache_creation.input_tokens"},
		{"opted in", "gen_ai_latest_experimental", true, "gen_ai.usage.cache_write.input_tokens"},
		{"in a list", "http, gen_ai_latest_experimental", true, "gen_ai.usage.cache_write.input_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := SemconvFromEnv(envOf("OTEL_SEMCONV_STABILITY_OPT_IN", tc.value))
			if sc.Latest != tc.latest || string(sc.CacheWriteKey()) != tc.cache {
				t.Fatalf("got %+v %s", sc, sc.CacheWriteKey())
			}
		})
	}
}

func TestOperation(t *testing.T) {
	t.Parallel()
	tests := []struct{ api, op, provider string }{
		{"chat", "chat", "openai"},
		{"completions", "text_completion", "openai"},
		{"messages", "chat", "anthropic"},
		{"other", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.api, func(t *testing.T) {
			t.Parallel()
			op, prov, ok := Operation(tc.api)
			if op != tc.op || prov != tc.provider || ok != (tc.op != "") {
				t.Fatalf("Operation(%q) = %q %q %v", tc.api, op, prov, ok)
			}
		})
	}
}
