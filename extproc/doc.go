// Package extproc implements Envoy's external processing protocol
// (envoy.service.ext_proc.v3) for LLM request routing.
//
// One gRPC stream carries one HTTP request, and one loop (Server.Process)
// owns its state, split in two rooms (the assignment's TTL timer may end
// the assignment from its own goroutine, and nothing else):
//
//   - the protocol (protocol.go, reply.go): what Envoy may send when in each
//     body mode and what warmpath owes it. The body is accumulated
//     (FULL_DUPLEX_STREAMED, or BUFFERED); the routing reply carries the
//     destination header, envoy.lb dynamic metadata and clear_route_cache,
//     and in FULL_DUPLEX_STREAMED it goes first, then the held body in
//     chunks of at most 64 KiB. Bad input gets an ImmediateResponse with an
//     OpenAI- or Anthropic-shaped JSON error;
//   - routing (route.go, request.go, watch.go): the body parsed once into a
//     scoring.Request, the candidates from the Pool, the Picker's decision,
//     the assignment, the response watched without changing a byte (SSE or
//     JSON) and the assignment's end, exactly once — completed, aborted or,
//     past Config.AssignmentTTL, expired — with the observed time to first
//     token and usage handed back to the Picker;
//   - the Gateway API Inference Extension's Endpoint Picker protocol
//     (epp.go, v1.0.0): the proxy's subset hint restricts the candidates
//     (503 when it leaves none), the destination may list fallbacks after
//     the chosen endpoint, the served endpoint the proxy reports on the
//     response moves the assignment to the worker that really served (a
//     Reassigner picker is told), per-endpoint predicted TTFTs may ride in
//     the metadata (the v1.1 proposal), shedding answers 429, and the
//     conformance suite's test-only hooks exist behind
//     Config.ConformanceTestHooks.
//
// The Server observes every decision and outcome, whichever Picker made
// it: decisions by mode, predicted against actual TTFT and cached tokens,
// assignments in flight and ended, and the GenAI request metrics and spans
// (trace.go, trace_metrics.go). Logs of one request carry its request_id.
//
// The package does not know how workers are scored: it depends on the
// Picker and Pool interfaces declared here.
package extproc
