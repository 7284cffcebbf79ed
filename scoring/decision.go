package scoring

import (
	"math"
	"time"

	"github.com/warmpath/warmpath/discovery"
	"github.com/warmpath/warmpath/tokenize"
)

// API names the request surface a client used.
type API string

// The request surfaces warmpath parses. APIOther is any other path
// (/v1/models, /tokenize, /v1/embeddings …): it is routed by load alone.
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APIMessages    API = "messages"    // POST /v1/messages (Anthropic)
	APIOther       API = "other"
)

// Request is what the router knows about one LLM request when it decides.
// The extproc package parses the body once and fills it; pickers treat it
// as read-only.
type Request struct {
	// ID is the request id (x-request-id or generated), for logs and spans.
	ID string
	// API is the surface the request arrived on.
	API API
	// Path is the HTTP :path as the client sent it.
	Path string
	// Model is the served model name from the body ("" for APIOther).
	Model string
	// Prompt is what decides the engine's prompt, as the client wrote it:
	// the JSON of tools, system and messages (chat and messages APIs) or of
	// prompt (completions), without the sampling fields around them. The
	// approximate mode hashes it. Nil for APIOther. Read-only.
	Prompt []byte
	// Body is the complete request body as received, for the tokenizer
	// only, which renders it as the engine does. Read-only.
	Body []byte
	// Parsed is Body as the front end parsed it, so that the tokenizer
	// does not parse it again; nil lets the tokenizer parse Body.
	Parsed *tokenize.Body
	// TokenIDs holds the prompt when a completions client sent token ids
	// (the first prompt when it sent several); nil otherwise.
	TokenIDs []uint32
	// CacheSalt is vLLM's cache_salt field, empty when absent.
	CacheSalt string
	// LoRA is the LoRA adapter name when Model names an adapter, else empty.
	LoRA string
	// MaxTokens is max_tokens / max_completion_tokens, 0 when absent.
	MaxTokens int
	// Choices is the n field: how many completions the engine generates
	// for each prompt, each up to MaxTokens; 0 when absent (one).
	Choices int
	// Prompts is how many prompts a completions request sent (a list of
	// strings or of token-id lists); 0 or 1 is one. Routing follows the
	// first; MorePrompts describes the others, whose prefill loads the
	// worker too.
	Prompts     int
	MorePrompts MorePrompts
	// Stream reports whether the client asked for a streamed response.
	Stream bool
	// Tenant is the trusted tenant identity, empty when unknown.
	Tenant string
	// Source is who opened the stream that will report the request's
	// outcome: the identity of the ext_proc client's certificate under
	// mutual TLS, else its address. Calibration bounds each source's
	// influence on a worker (influence.go); empty is one source.
	Source string
	// SLO is the request's own latency targets (from headers the ext_proc
	// layer trusts); a zero field falls back to the model's configured one.
	SLO SLO
	// Arrived is when the request headers reached warmpath.
	Arrived time.Time
}

// MorePrompts describes the prompts after the first of a completions
// request of several. vLLM prefills each as a request of its own, queued
// behind the first, and finds the leading blocks a prompt shares with the
// first cached by then. Sizes are in tokens when the client sent token
// ids, in bytes when it sent text.
type MorePrompts struct {
	// Text says the sizes are bytes of text; FirstBytes is then the first
	// prompt's, which with its token count gives the ratio to convert.
	Text       bool
	FirstBytes int
	// Parts is each later prompt, in order.
	Parts []PromptPart
}

// PromptPart is one prompt of a completions request: its size and the
// size of its longest common prefix with the first prompt.
type PromptPart struct{ Size, Shared int }

// prefill returns the tokens the engine computes for the later prompts
// beside the first, whose prompt is firstTokens long: each one's tokens
// less the full blocks it shares with the first (never its last token,
// which vLLM always computes). Text is converted at the first prompt's
// own tokens per byte when both are known, else at bytesPerToken.
func (m *MorePrompts) prefill(firstTokens, blockSize int, bytesPerToken float64) float64 {
	if len(m.Parts) == 0 {
		return 0
	}
	perUnit := 1.0
	if m.Text {
		perUnit = 1 / bytesPerToken
		if m.FirstBytes > 0 && firstTokens > 0 {
			perUnit = float64(firstTokens) / float64(m.FirstBytes)
		}
	}
	bs := float64(max(blockSize, 1))
	sum := 0.0
	for _, p := range m.Parts {
		size := max(math.Round(float64(p.Size)*perUnit), 1)
		shared := min(math.Round(float64(p.Shared)*perUnit), size-1)
		sum += size - math.Floor(shared/bs)*bs
	}
	return sum
}

// MaxSequences bounds the sequences counted for one request. Neither the
// client's n nor its list of prompts has a bound of its own, and their
// product must neither overflow nor travel to peers as a count they refuse.
const MaxSequences = 1 << 16

// sequences is how many sequences the engine decodes for r: its choices
// for each of its prompts, up to MaxSequences.
func (r *Request) sequences() int {
	return min(min(max(r.Choices, 1), MaxSequences)*min(max(r.Prompts, 1), MaxSequences), MaxSequences)
}

// Mode says how much the router knew when it decided.
type Mode string

// Decision modes, from most to least informed.
const (
	ModeExact       Mode = "exact"            // local exact tokenization + index lookup
	ModeRemote      Mode = "remote-tokenized" // tokens from a worker's /tokenize
	ModeApproximate Mode = "approximate"      // text-block affinity from routing history
	ModeLoadOnly    Mode = "load-only"        // no prefix information at all
)

// Candidate is one worker considered for a request, with what the policy
// predicted for it. Durations are predictions, not measurements.
type Candidate struct {
	Worker  string
	Address string
	// CachedTokens is the predicted prefix-cache hit on this worker, in tokens
	// (GPU and offloaded together); OffloadedTokens is the offloaded part.
	CachedTokens    int
	OffloadedTokens int
	// QueueWait is the predicted time before the request's prefill starts,
	// Prefill the predicted time to compute its uncached tokens, Overhead
	// the fixed per-request cost; PredictedTTFT is their sum.
	QueueWait     time.Duration
	Prefill       time.Duration
	Overhead      time.Duration
	PredictedTTFT time.Duration
	// PredictedTPOT is the typical (median) time per output token after
	// the first, and PredictedE2E the expected time to the last token:
	// PredictedTTFT + (output tokens − 1) × the expected TPOT. The two
	// TPOTs part where few prompts arrive during a response: most such
	// responses see none of their prefill (see predictDecode).
	PredictedTPOT time.Duration
	PredictedE2E  time.Duration
	// Slowdown is the time the request would add, summed over the
	// sequences decoding on the worker, to their responses: its prefill
	// steps and its own decode share every step they run.
	Slowdown time.Duration
	// InFlight is the number of requests warmpath has in flight on the worker.
	InFlight int
	// WorkAhead is the prefill work queued before the request on the
	// worker, in tokens, and Decoding the sequences decoding there, both as
	// the TTFT model saw them (warmpath's assignments reconciled with the
	// last scrape).
	WorkAhead int
	Decoding  int
	// KVUsage is the scraped KV cache usage (0..1), -1 when unknown.
	KVUsage float64
	// Score is the policy's own figure of merit (lower is better); for the
	// warmpath policy it is the objective's cost in seconds (see Objective).
	Score float64
}

// Decision is a picker's answer for one request. It is created by Pick and
// handed back to Done exactly once when the assignment ends.
type Decision struct {
	// Worker is the chosen worker; Address its HTTP host:port, which becomes
	// the upstream destination.
	Worker  string
	Address string
	// Policy names the policy that decided; Mode how much it knew.
	Policy string
	Mode   Mode
	// TokenizePath says where token ids came from ("local", "remote",
	// "request", "none") and TokenizeReason why a step was skipped.
	TokenizePath   string
	TokenizeReason string
	// PromptTokens is the prompt length in tokens (0 when unknown), and
	// OutputTokens the output length the decode predictions assumed:
	// what max_tokens and the model's learned outputs make likely.
	PromptTokens int
	OutputTokens int
	// MorePrefillTokens is what a completions request's prompts after the
	// first add to its prefill (MorePrompts), in tokens; 0 for one prompt.
	MorePrefillTokens int
	// Objective is what the warmpath policy minimised ("" for the
	// baselines), and SLO the targets it checked under the slo objective.
	Objective Objective
	SLO       SLO
	// Chosen is what the policy predicted for the chosen worker.
	Chosen Candidate
	// Candidates lists every worker considered, in input order.
	Candidates []Candidate
	// Reason is a short human-readable explanation of the choice.
	Reason string
	// Decided is when the decision was made.
	Decided time.Time
	// KVSilent is set when the chosen worker has served requests that must
	// have stored KV blocks without publishing a single KV event: its
	// cached prefixes are unknown to the index, so the choice was blind
	// to them.
	KVSilent bool
	// StalePeers is the number of peer replicas whose share of the ledger
	// was behind (nothing heard from them for a while) when it was made.
	StalePeers int
	// Shadow lists what each shadow policy would have picked for the same
	// request, with warmpath's predicted TTFT for that pick. Shadow
	// evaluation never changes the decision.
	Shadow []ShadowPick
}

// ShadowPick is a shadow policy's choice for a request.
type ShadowPick struct {
	Policy        string
	Worker        string
	PredictedTTFT time.Duration
	// Regret is PredictedTTFT minus the decision's predicted TTFT.
	Regret time.Duration
}

// End says how an assignment ended.
type End string

// Assignment endings. Every assignment ends exactly once.
const (
	EndCompleted End = "completed" // the response finished
	EndAborted   End = "aborted"   // client went away, stream cancelled or upstream error
	EndExpired   End = "expired"   // timed cleanup: no end seen within the TTL
)

// Outcome is what actually happened to a routed request.
type Outcome struct {
	End End
	// HTTPStatus is the upstream response status, 0 if none was seen.
	HTTPStatus int
	// TTFT is the time from the decision to the first content token, 0 when no
	// token was seen.
	TTFT time.Duration
	// Decode is the time from the first content token to the last, 0 when
	// fewer than two were seen; with CompletionTokens it gives the
	// response's time per output token.
	Decode time.Duration
	// Duration is the time from the decision to the end.
	Duration time.Duration
	// PromptTokens, CompletionTokens and CachedTokens come from the response's
	// usage; -1 when the response did not report them.
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
	// Error is the error the upstream reported (an HTTP error status or an
	// error event mid-stream), empty when none.
	Error string
}

// refused reports whether the engine answered without running the
// request: a 4xx (a prompt over the context length, a bad parameter, a
// rate limit) comes before any engine step, and stores no block.
func (o Outcome) refused() bool { return o.HTTPStatus >= 400 }

// TPOT is the response's time per output token after the first, 0 when
// fewer than two tokens or no decode time were seen.
func (o Outcome) TPOT() time.Duration {
	if o.CompletionTokens < 2 || o.Decode <= 0 {
		return 0
	}
	return o.Decode / time.Duration(o.CompletionTokens-1)
}

// E2E is the time from the decision to the last token, 0 when no token was
// seen: what Candidate.PredictedE2E predicts.
func (o Outcome) E2E() time.Duration {
	if o.TTFT <= 0 {
		return 0
	}
	return o.TTFT + o.Decode
}

// Workers is the set of candidate workers a picker chooses from: healthy,
// serving the request's model. It is never empty when passed to a picker.
type Workers = []discovery.Worker
