// Package eppconformance is a black-box conformance suite for endpoint
// pickers: any ext_proc server that speaks the Gateway API Inference
// Extension's Endpoint Picker protocol (docs/proposals/004-endpoint-picker-protocol,
// v1.0.0) — warmpath, the Inference Extension's reference picker, llm-d's,
// Dynamo's. No endpoint-picker conformance profile exists upstream (the
// Inference Extension's conformance suite certifies gateways); this one
// tests the picker.
//
// A run puts a real Envoy (envoy.go: one listener per way of calling the
// picker) in front of the picker at Target.ExtProc and of a Pool of fake
// model servers, which the picker must be configured with, and runs every
// case of Cases in order: protocol modes (FULL_DUPLEX_STREAMED, BUFFERED,
// headers only), the destination (header and envoy.lb metadata agreeing,
// each path on its own, a client's own destination header never reaching
// the canary), the subset hint (list, comma string, empty, none eligible),
// fallbacks (the list, and Envoy walking it when the picked endpoint
// refuses), the served endpoint read back after that walk, 503 and 429
// bodies, the gRPC health services, early closes, large bodies, trailers
// over h2c and concurrent streams. Where Envoy cannot produce or show a
// case, the suite plays Envoy on a scripted ext_proc stream (the "direct"
// cases). Every case says its Level: required, optional (allowed by the
// protocol, not demanded) or test hook (the Inference Extension
// conformance suite's test-epp-endpoint-selection and
// x-conformance-test-served-endpoint, which a production picker must keep
// off).
//
// TestWarmpath runs the suite against warmpath inside go test (all cases
// must pass); go tool task conformance ADDR=host:port runs it against any
// picker (command e2e/cmd/eppconformance), and go tool task
// conformance:report writes REPORT.md, warmpath and the reference picker
// side by side. The reference picker is built by the module of its own in
// lwepp/, from the module proxy.
package eppconformance
