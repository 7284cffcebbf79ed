// Package replay is a benchmark client for OpenAI- and Anthropic-compatible
// LLM servers: it sends a reproducible workload to a base URL (normally
// Envoy's listener in front of warmpath) under a load profile, measures every
// streamed response, and reports latency percentiles, goodput under an SLO
// and prefix-cache hit rate as JSON, Markdown and plots.
//
// # Reproducibility
//
// A Config's Seed fixes the workload (every prompt's text or token ids) and
// the arrival schedule (constant, Poisson or trace offsets). A harness runs
// the same Config once per routing policy, changing only Label and BaseURL,
// and merges the reports with Compare; WriteMarkdown and WritePlots render
// the comparison.
//
// # Workloads
//
// Generate builds sessions: GuideLLM-style synthetic prompts with shared
// prefixes sent as a system message; inference-perf's shared_prefix groups,
// optionally multi-turn; multi-turn chat with think time; coding sessions that
// re-send a large project context; Mooncake JSONL traces (each hash id a
// deterministic block of tokens) and Azure 2023 CSV traces.
//
// Text prompts are built from a list of English words each of which is one
// token, bare or after a space, in the Qwen3 and Llama 3 tokenizers, so n
// words joined by spaces are exactly n tokens there (checked against the
// Rust tokenizers library; see testdata/README.md). A prompt's unique marker
// is four such words. Chat templates add their own tokens around messages,
// and other vocabularies give close but not exact counts. For exact lengths
// with any tokenizer set WorkloadConfig.TokenIDs to send token-id prompts to
// /v1/completions.
//
// # Load profiles
//
// Closed loops (synchronous, concurrent N) keep a fixed number of sessions in
// flight; open loops (constant rate, seeded Poisson, trace replay with a time
// scale, throughput) start sessions on a schedule regardless of the server.
// A sweep runs synchronous and throughput, then rates between them; a
// goodput search bisects for the largest rate that meets the SLO. By default
// every run of a sweep or search sends the same requests, which the workers
// may still hold from the run before: LoadConfig.FreshPrompts sends new
// prompts behind the same shared prefixes each run, FreshPrefixes new
// prefixes too.
//
// # Measures
//
// Each request records TTFT (sending to the first non-empty content delta),
// mean inter-token latency, end-to-end latency, HTTP status, usage (with
// prompt_tokens_details.cached_tokens, requested through
// stream_options.include_usage), and the x-warmpath-worker and
// x-warmpath-reason response headers (warmpath sets them when its
// extproc.debug_headers is on).
// The SSE parser is incremental and accepts events split anywhere.
//
// # Clients
//
// A shared connection pool (the default), sticky clients that each keep
// their own connections (what a Kubernetes Service sees: one pod per
// connection), or a new connection per request.
package replay
