// Package telemetry sets up OpenTelemetry tracing for warmpath from the
// standard OTEL_* environment variables and names the attributes warmpath
// puts on its spans.
//
// Tracing is off unless OTEL_TRACES_EXPORTER names an exporter ("otlp",
// "console" or "stdout"); when off, Setup returns a Provider whose Tracer
// is nil and whose Enabled method reports false, so callers skip all span
// work. OTLP exporters read their endpoint, headers, TLS and timeout
// from the OTEL_EXPORTER_OTLP_* variables; OTEL_EXPORTER_OTLP_PROTOCOL (or
// its _TRACES_ variant) chooses "grpc" or "http/protobuf" (the default). The
// sampler comes from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, the
// resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, and the
// batching from OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_EXPORT_TIMEOUT,
// OTEL_BSP_MAX_QUEUE_SIZE and OTEL_BSP_MAX_EXPORT_BATCH_SIZE. Nothing in
// this package touches OpenTelemetry's global providers.
//
// Spans are recorded by Tracer and Span, not by the SDK's tracer: a Span
// is a plain struct its one writer fills, ended spans queue under a mutex
// and one goroutine exports them in batches through the SDK's exporters.
// At 100% sampling the SDK's recording spans (a lock per call, attribute
// deduplication through a map at End, a batch-processor wake-up per span)
// cost more than the rest of a request's work; see BENCHMARKS.md.
//
// Attribute names follow the OpenTelemetry GenAI semantic conventions
// v1.41, the last release published inside semantic-conventions. Setting
// OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental selects the
// newer names of the semantic-conventions-genai repository where they
// differ (see Semconv).
package telemetry
