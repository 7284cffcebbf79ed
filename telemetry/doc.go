// Package telemetry sets up OpenTelemetry tracing for warmpath from the
// standard OTEL_* environment variables and names the attributes warmpath
// puts on its spans.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter ("otlp",
// "console" or "stdout"): then Setup returns a Provider whose Tracer is a
// no-op and whose Enabled method reports false, so callers can skip all
// span work. OTLP exporters read their endpoint, headers, TLS and timeout
// from the OTEL_EXPORTER_OTLP_* variables; OTEL_EXPORTER_OTLP_PROTOCOL (or
// its _TRACES_ variant) chooses "grpc" or "http/protobuf" (the default). The
// sampler comes from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, the
// resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. Nothing in
// this package touches OpenTelemetry's global providers.
//
// Attribute names follow the OpenTelemetry GenAI semantic conventions
// v1.41, the last release published inside semantic-conventions. Setting
// OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental selects the
// newer names of the semantic-conventions-genai repository where they
// differ (see Semconv).
package telemetry
