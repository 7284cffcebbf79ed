package extproc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

// Config tunes a Server: the extproc section of warmpath's configuration.
// Build it with DefaultConfig, change what is needed and check it with
// Validate. Field comments give the unit and the default.
type Config struct {
	// DestinationHeader is the request header that carries the chosen
	// worker's host:port to Envoy. Default "x-gateway-destination-endpoint".
	DestinationHeader string `yaml:"destination_header"`
	// MetadataNamespace is the dynamic-metadata namespace the destination is
	// also written to (key DestinationHeader). Default "envoy.lb"; "-"
	// disables it.
	MetadataNamespace string `yaml:"metadata_namespace"`
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	// Default 16 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxResponseBytes bounds how much of a non-streamed response body is
	// kept to read its usage; the body itself always passes through.
	// Default 4 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// MaxBufferedBytes bounds the bytes all streams' buffers hold together:
	// request bodies until the routing reply, non-streamed response bodies
	// until their usage is read. A request whose body would pass it is
	// answered 503 with Retry-After; a response body that would is passed
	// through without its usage being read. The process's memory for them
	// is a small multiple (gRPC's message buffers, parsing; about three
	// times), which the default keeps within the 2 GiB deploy/ allows.
	// Default 256 MiB.
	MaxBufferedBytes int64 `yaml:"max_buffered_bytes"`
	// BodyTimeout bounds the time from the request headers to the end of
	// the request body; a request whose body is still arriving then is
	// answered 408, so a client trickling its body cannot hold a stream
	// and its buffer. Default 60s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MessageCacheMiB bounds the cache of parsed messages: the next turn
	// of a conversation repeats every earlier message byte for byte, and a
	// repeated message is found by its bytes and not decoded again. 0
	// turns it off. Default 64.
	MessageCacheMiB int `yaml:"message_cache_mib"`
	// BodyMode is assumed when Envoy sends no protocol_config (before
	// 1.34): "full_duplex" (default; FULL_DUPLEX_STREAMED both ways) or
	// "buffered" (BUFFERED request, STREAMED response).
	BodyMode string `yaml:"body_mode"`
	// DebugHeaders adds x-warmpath-worker and x-warmpath-reason to
	// responses. Default false.
	DebugHeaders bool `yaml:"debug_headers"`
	// AssignmentTTL ends an assignment whose response has not ended that
	// long after it was routed (the stream goes on; only the reservation
	// and the outcome end). Default 30m.
	AssignmentTTL time.Duration `yaml:"assignment_ttl"`
	// RetryAfter is the Retry-After value (seconds) on 503 and 429
	// replies. Default 1.
	RetryAfter int `yaml:"retry_after"`
	// SLOHeaders lets a request set its own latency targets for the slo
	// objective with x-slo-ttft-ms and x-slo-tpot-ms (milliseconds); off,
	// they are ignored and the model's configured targets apply. A client
	// that sets tight targets is sent where they are met, so turn it off,
	// or have the gateway strip them, where clients are not trusted with
	// that. Default true.
	SLOHeaders bool `yaml:"slo_headers"`

	// SubsetNamespace is the metadata namespace of the Endpoint Picker
	// protocol's subset hint: when Envoy forwards
	// filter_metadata[SubsetNamespace]["x-gateway-destination-endpoint-subset"]
	// (a list of ip:port, or a comma-separated string), only those endpoints
	// are candidates, and an empty or wholly ineligible subset is answered
	// 503. Default "envoy.lb.subset_hint"; "-" ignores subset hints.
	SubsetNamespace string `yaml:"subset_namespace"`
	// Fallbacks is how many more endpoints follow the chosen one in the
	// destination (header and metadata alike, "ip:port,ip:port,…"), the
	// next best candidates by the policy's score, so that a proxy that walks
	// the list (Envoy's override_host load balancer with a retry policy) can
	// retry within the pool. Default 0: one endpoint, which Envoy's
	// ORIGINAL_DST cluster requires (it reads the header as one address).
	Fallbacks int `yaml:"fallbacks"`
	// EndpointScores adds x-gateway-destination-endpoint-scores to the
	// envoy.lb metadata: a struct mapping every candidate's ip:port to its
	// predicted time to first token in seconds (lower is better), as
	// proposed for the protocol's v1.1 and emitted by llm-d behind
	// --emit-endpoint-scores. Default false.
	EndpointScores bool `yaml:"endpoint_scores"`
	// ShedTTFT answers 429 (with Retry-After) when every candidate's
	// predicted time to first token exceeds it: the request is shed rather
	// than queued. Every request is sheddable. Default 0: never shed.
	ShedTTFT time.Duration `yaml:"shed_ttft"`

	// ConformanceTestHooks turns on, FOR CONFORMANCE TESTS ONLY, the two
	// hooks of the Gateway API Inference Extension's conformance suite: the
	// request header test-epp-endpoint-selection (a comma-separated ip:port
	// list) restricts the candidates, and the response carries
	// x-conformance-test-served-endpoint, the served endpoint the proxy
	// reported. With it a client chooses its upstream: never enable it in
	// production. Default false (the selection header is ignored and
	// counted).
	ConformanceTestHooks bool `yaml:"conformance_test_hooks"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		DestinationHeader: "x-gateway-destination-endpoint",
		MetadataNamespace: "envoy.lb",
		MaxBodyBytes:      16 << 20,
		MaxResponseBytes:  4 << 20,
		MaxBufferedBytes:  256 << 20,
		BodyTimeout:       time.Minute,
		MessageCacheMiB:   64,
		BodyMode:          "full_duplex",
		AssignmentTTL:     30 * time.Minute,
		RetryAfter:        1,
		SLOHeaders:        true,
		SubsetNamespace:   "envoy.lb.subset_hint",
	}
}

// Validate reports every invalid field, joined.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !validHeaderName(c.DestinationHeader) {
		bad("destination_header: want a lower-case header name, got %q", c.DestinationHeader)
	}
	if c.MaxBodyBytes < 1 {
		bad("max_body_bytes: must be positive")
	}
	if c.MaxResponseBytes < 1 {
		bad("max_response_bytes: must be positive")
	}
	if c.MaxBufferedBytes < int64(c.MaxBodyBytes) {
		bad("max_buffered_bytes: must be at least max_body_bytes (%d), got %d", c.MaxBodyBytes, c.MaxBufferedBytes)
	}
	if c.MessageCacheMiB < 0 {
		bad("message_cache_mib: must not be negative")
	}
	if c.BodyTimeout <= 0 {
		bad("body_timeout: must be positive")
	}
	if c.BodyMode != "full_duplex" && c.BodyMode != "buffered" {
		bad("body_mode: want full_duplex or buffered, got %q", c.BodyMode)
	}
	if c.AssignmentTTL <= 0 {
		bad("assignment_ttl: must be positive")
	}
	if c.RetryAfter < 0 {
		bad("retry_after: must not be negative")
	}
	if c.SubsetNamespace == "" {
		bad(`subset_namespace: must not be empty ("-" ignores subset hints)`)
	}
	if c.Fallbacks < 0 || c.Fallbacks > maxFallbacks {
		bad("fallbacks: want 0 to %d, got %d", maxFallbacks, c.Fallbacks)
	}
	if c.ShedTTFT < 0 {
		bad("shed_ttft: must not be negative")
	}
	return errors.Join(errs...)
}

// modes returns the body modes assumed without a protocol_config.
func (c *Config) modes() (req, resp filterv3.ProcessingMode_BodySendMode) {
	if c.BodyMode == "buffered" {
		return filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED
	}
	return filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
}

// metadataNamespace is the namespace the destination is written to, ""
// when disabled.
func (c *Config) metadataNamespace() string {
	if c.MetadataNamespace == "-" {
		return ""
	}
	return c.MetadataNamespace
}

// subsetNamespace is the namespace of the subset hint, "" when hints are
// ignored.
func (c *Config) subsetNamespace() string {
	if c.SubsetNamespace == "-" {
		return ""
	}
	return c.SubsetNamespace
}

// servedNamespace is where the proxy reports the served endpoint: the
// destination's namespace, or the protocol's default when that is off.
func (c *Config) servedNamespace() string {
	if ns := c.metadataNamespace(); ns != "" {
		return ns
	}
	return "envoy.lb"
}

// validHeaderName reports whether h is a lower-case, non-pseudo header name.
func validHeaderName(h string) bool {
	return h != "" && strings.ToLower(h) == h && !strings.HasPrefix(h, ":")
}
