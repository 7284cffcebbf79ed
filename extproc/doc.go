// Package extproc implements Envoy's external processing protocol
// (envoy.service.ext_proc.v3) for LLM request routing.
//
// One gRPC stream carries one HTTP request. On the request path the Server
// accumulates the body (FULL_DUPLEX_STREAMED, or BUFFERED), parses the
// OpenAI or Anthropic request, asks a Picker for a worker and answers with
// the destination header, envoy.lb dynamic metadata and clear_route_cache;
// in FULL_DUPLEX_STREAMED the header reply goes first, then the held body in
// chunks of at most 64 KiB. Bad input gets an ImmediateResponse with an
// OpenAI- or Anthropic-shaped JSON error. On the response path a watcher
// parses the SSE stream (or JSON body) without changing a byte, and the
// assignment ends exactly once — completed, aborted or expired — with the
// observed time to first token and usage handed back to the Picker.
//
// The package does not know how workers are scored: it depends on the
// Picker and Pool interfaces declared here.
package extproc
