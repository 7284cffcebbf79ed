package telemetry

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// GenAI semantic convention attribute keys (v1.41), defined here rather than
// imported so that the module does not depend on a semconv package that
// upstream has since emptied.
const (
	GenAIOperationName       = attribute.Key("gen_ai.operation.name")
	GenAIProviderName        = attribute.Key("gen_ai.provider.name")
	GenAIRequestModel        = attribute.Key("gen_ai.request.model")
	GenAIRequestMaxTokens    = attribute.Key("gen_ai.request.max_tokens")
	GenAIRequestChoiceCount  = attribute.Key("gen_ai.request.choice.count")
	GenAIRequestStream       = attribute.Key("gen_ai.request.stream")
	GenAIRequestID           = attribute.Key("gen_ai.request.id") // custom, as llm-d uses it: x-request-id
	GenAIResponseTTFC        = attribute.Key("gen_ai.response.time_to_first_chunk")
	GenAIUsageInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	GenAIUsageCacheRead      = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	GenAIInputMessages       = attribute.Key("gen_ai.input.messages")
	ServerAddress            = attribute.Key("server.address")
	ServerPort               = attribute.Key("server.port")
	ErrorType                = attribute.Key("error.type")
	HTTPResponseStatusCode   = attribute.Key("http.response.status_code")
	URLPath                  = attribute.Key("url.path")
	genAIUsageCacheCreation  = attribute.Key("gen_ai.usage.cache_creation.input_tokens")
	genAIUsageCacheWriteNext = attribute.Key("gen_ai.usage.cache_write.input_tokens")
)

// warmpath's own span attributes, under the warmpath.* namespace.
const (
	Policy                  = attribute.Key("warmpath.policy")
	Mode                    = attribute.Key("warmpath.mode")
	TokenizePath            = attribute.Key("warmpath.tokenize.path")
	TokenizeReason          = attribute.Key("warmpath.tokenize.reason")
	Candidates              = attribute.Key("warmpath.candidates")
	Worker                  = attribute.Key("warmpath.worker")
	Reason                  = attribute.Key("warmpath.reason")
	Tenant                  = attribute.Key("warmpath.tenant")
	PromptTokens            = attribute.Key("warmpath.prompt_tokens")
	StalePeers              = attribute.Key("warmpath.peers.stale")
	KVEventsSilent          = attribute.Key("warmpath.kv_events.silent")
	PredictedCachedTokens   = attribute.Key("warmpath.predicted.cached_tokens")
	PredictedQueueWait      = attribute.Key("warmpath.predicted.queue_wait")
	PredictedPrefill        = attribute.Key("warmpath.predicted.prefill")
	PredictedTTFT           = attribute.Key("warmpath.predicted.ttft")
	PredictedTPOT           = attribute.Key("warmpath.predicted.tpot")
	PredictedE2E            = attribute.Key("warmpath.predicted.e2e")
	PredictedSlowdown       = attribute.Key("warmpath.predicted.slowdown")
	PredictedOutputTokens   = attribute.Key("warmpath.predicted.output_tokens")
	Objective               = attribute.Key("warmpath.objective")
	SLOTTFT                 = attribute.Key("warmpath.slo.ttft")
	SLOTPOT                 = attribute.Key("warmpath.slo.tpot")
	ActualTTFT              = attribute.Key("warmpath.actual.ttft")
	ActualTPOT              = attribute.Key("warmpath.actual.tpot")
	ActualE2E               = attribute.Key("warmpath.actual.e2e")
	ActualCachedTokens      = attribute.Key("warmpath.actual.cached_tokens")
	TTFTError               = attribute.Key("warmpath.ttft_error")
	TPOTError               = attribute.Key("warmpath.tpot_error")
	E2EError                = attribute.Key("warmpath.e2e_error")
	Completion              = attribute.Key("warmpath.completion")
	UpstreamError           = attribute.Key("warmpath.upstream_error")
	RejectReason            = attribute.Key("warmpath.reject_reason")
	CandidateWorkers        = attribute.Key("warmpath.candidates.workers")
	CandidatePredictedTTFTs = attribute.Key("warmpath.candidates.predicted_ttft")
	CandidateCachedTokens   = attribute.Key("warmpath.candidates.cached_tokens")
)

// Span event names.
const (
	EventFirstToken = "gen_ai.first_token"
	EventLastToken  = "gen_ai.last_token"
)

// optInLatest is the OTEL_SEMCONV_STABILITY_OPT_IN value that selects the
// GenAI conventions' latest experimental names.
const optInLatest = "gen_ai_latest_experimental"

// Semconv says which edition of the GenAI conventions to emit. The zero
// value emits v1.41 names.
type Semconv struct {
	// Latest selects the semantic-conventions-genai names (opted in with
	// OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental).
	Latest bool
}

// SemconvFromEnv reads OTEL_SEMCONV_STABILITY_OPT_IN, a comma-separated
// list, through getenv.
func SemconvFromEnv(getenv func(string) string) Semconv {
	for v := range strings.SplitSeq(getenv("OTEL_SEMCONV_STABILITY_OPT_IN"), ",") {
		if strings.TrimSpace(v) == optInLatest {
			return Semconv{Latest: true}
		}
	}
	return Semconv{}
}

// CacheWriteKey is the attribute for input tokens written to the cache:
// gen_ai.usage.cache_creation.input_tokens in v1.41, renamed
// gen_ai.usage.cache_write.input_tokens later.
func (s Semconv) CacheWriteKey() attribute.Key {
	if s.Latest {
		return genAIUsageCacheWriteNext
	}
	return genAIUsageCacheCreation
}

// Operation returns gen_ai.operation.name and gen_ai.provider.name for an
// API surface ("chat", "completions", "messages"), and false for any other.
// OpenAI's chat and Anthropic's messages are both "chat"; the legacy
// completions API is "text_completion". The provider names the wire API
// (the telemetry flavour), as Envoy AI Gateway does.
func Operation(api string) (op, provider string, ok bool) {
	switch api {
	case "chat":
		return "chat", "openai", true
	case "completions":
		return "text_completion", "openai", true
	case "messages":
		return "chat", "anthropic", true
	}
	return "", "", false
}
