package main

import "github.com/warmpath/warmpath/e2e/eppconformance"

// Why the reference picker (LWEPP v1.6.0, pkg/lwepp/handlers/server.go)
// fails the cases it fails, read from its source and from Envoy's ext_proc
// debug log of the same exchanges: lweppCauses are printed once under its
// results, and each failure names its causes.
var lweppCauses = []string{
	"Why the reference fails, from its source (`pkg/lwepp/handlers/server.go`) and Envoy's ext_proc debug log of the same exchanges:",
	"(A) " + whyEmptyBodyReply, "(B) " + whyBodyBeforeHeaders, "(C) " + whyBuffered, "(D) " + whyNoImmediate,
	"(E) " + whyNoHealth, "(F) " + whyOneEndpoint,
}

const (
	whyEmptyBodyReply = "LWEPP answers every request and response body chunk with an empty `BodyResponse` " +
		"instead of a `streamed_response`; in FULL_DUPLEX_STREAMED Envoy counts that reply spurious and " +
		"answers 500 (fail-closed), even for a body-less request, at its response body."
	whyBodyBeforeHeaders = "LWEPP holds its request-headers reply until the body's end_of_stream but answers each " +
		"earlier body chunk at once; Envoy sends even a small request body as a data chunk followed by an empty " +
		"end_of_stream chunk (its debug log: \"Sending a body chunk of 106 bytes, end_stream false\", then \"of 0 " +
		"bytes, end_stream true\"), so LWEPP's first body reply comes before its header reply, which Envoy counts " +
		"spurious (\"Spurious response message 3\") and answers 500."
	whyBuffered = "In BUFFERED mode Envoy sends the request body only after the request-headers reply, and LWEPP " +
		"sends that reply only after the body: neither moves until Envoy's message_timeout, a 504."
	whyNoImmediate = "An empty or unmatched subset makes LWEPP end the stream with a gRPC error (Internal: " +
		"\"no endpoints available\") instead of an ImmediateResponse 503; Envoy turns a failed stream into 500."
	whyNoHealth = "LWEPP registers only the ext_proc service name (on the ext_proc port) and `inference-extension` " +
		"(on its health port); the protocol's `liveness` and `readiness` services are NotFound."
	whyOneEndpoint = "LWEPP's RoundRobinPicker returns one endpoint, never fallbacks (optional in the protocol)."
)

// lweppWhy returns the reasons for the reference picker's failures behind
// data plane dp, by case ID.
func lweppWhy(dp eppconformance.DataPlane) map[string]string {
	// Cases by the listener they go through (see envoy.go).
	fdx := []string{"mode/full-duplex-sse", "mode/full-duplex-json", "large-body/full-duplex-2MiB"}
	buffered := []string{"mode/buffered", "large-body/buffered-512KiB"}
	withBody := []string{"destination/metadata-path", "destination/client-cannot-choose", "subset/list",
		"subset/list-two", "subset/string", "served/echo", "hook/endpoint-selection",
		"early-close/client-mid-response", "trailers/request", "concurrency/32-streams"}
	noEndpoint := []string{"subset/empty", "subset/none-eligible", "reject/503-body"}
	why := map[string]string{
		"subset/direct-empty": "(D)",
		"health/liveness":     "(E)",
		"health/readiness":    "(E)",
		"fallback/list":       "(F)",
	}
	set := func(ids []string, s string) {
		for _, id := range ids {
			why[id] = s
		}
	}
	set(fdx, "(A), (B)")
	set(buffered, "(C)")
	main := "(B)"
	if dp == eppconformance.FullDuplex || dp == "" {
		main = "(A), (B)"
		set([]string{"mode/headers-only", "trailers/response"}, "(A)")
	}
	set(withBody, main)
	set(noEndpoint, main+"; in order, still (D)")
	why["fallback/walk"] = main + "; (F)"
	return why
}
