package extproc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/tokenize"
)

// apiOf maps an HTTP method and path to the request surface. Query strings
// are ignored; only POSTs to the three generation paths are parsed.
func apiOf(method, path string) scoring.API {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	if method != "POST" {
		return scoring.APIOther
	}
	switch path {
	case "/v1/chat/completions":
		return scoring.APIChat
	case "/v1/completions":
		return scoring.APICompletions
	case "/v1/messages":
		return scoring.APIMessages
	}
	return scoring.APIOther
}

// body is the routing view of an OpenAI or Anthropic request: the fields
// the router reads from the body parsed once (tokenize.Body), which the
// tokenizer renders from too.
type body struct {
	Model               *string
	Stream              bool
	MaxTokens           *int
	MaxCompletionTokens *int
	N                   *int
	CacheSalt           string
	Tools               rawRef
	System              rawRef
	Messages            rawRef
	Prompt              rawRef
}

// rawRef is a JSON value left unparsed: a slice of the body, which is not
// changed while the request lives.
type rawRef []byte

// routingFields reads b's routing fields from the parsed body pb. Errors
// are *badRequest.
func routingFields(pb *tokenize.Body) (body, error) {
	var b body
	var errs []error
	str := func(key string) (string, bool) {
		s, ok, err := pb.String(key)
		errs = append(errs, err)
		return s, ok
	}
	integer := func(key string) *int {
		n, ok, err := pb.Int(key)
		errs = append(errs, err)
		if !ok {
			return nil
		}
		return &n
	}
	if m, ok := str("model"); ok {
		b.Model = &m
	}
	var err error
	b.Stream, _, err = pb.Bool("stream")
	errs = append(errs, err)
	b.MaxTokens, b.MaxCompletionTokens = integer("max_tokens"), integer("max_completion_tokens")
	b.N = integer("n")
	b.CacheSalt, _ = str("cache_salt")
	for _, err := range errs {
		if err != nil {
			return body{}, badf("invalid type for %s", strings.TrimPrefix(err.Error(), tokenize.ErrBodyType.Error()+": "))
		}
	}
	b.Tools, b.System, b.Messages, b.Prompt = pb.Raw("tools"), pb.Raw("system"), pb.Raw("messages"), pb.Raw("prompt")
	return b, nil
}

// promptOf joins, in the order chat templates render them, the fields that
// decide the engine's prompt: tools, system (Anthropic), messages and
// prompt, each followed by a newline. Sampling fields, the stream flag and
// anything else around them are left out, so requests that share a
// conversation share a prefix of it whatever else differs. A body with one
// such field, as most have, gets that field itself rather than a copy of
// nearly the whole body (BenchmarkParseBody: 1.64 → 0.92 MB per request).
func (b *body) promptOf() []byte {
	var parts [4]rawRef
	n, size := 0, 0
	for _, p := range [...]rawRef{b.Tools, b.System, b.Messages, b.Prompt} {
		if p = bytes.TrimSpace(p); len(p) > 0 && string(p) != "null" {
			parts[n] = p
			n++
			size += len(p) + 1
		}
	}
	if n == 1 {
		return parts[0][:len(parts[0]):len(parts[0])]
	}
	out := make([]byte, 0, size)
	for _, p := range parts[:n] {
		out = append(append(out, p...), '\n')
	}
	return out
}

// input is what a span may capture as gen_ai.input.messages: the messages,
// or the completions prompt.
func (b *body) input() []byte {
	if len(b.Messages) > 0 {
		return b.Messages
	}
	return b.Prompt
}

// badRequest is a client error found while parsing a body; its message is
// safe to return to the client.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// parseBody parses raw once and fills r's Model, Stream, MaxTokens,
// CacheSalt, TokenIDs, Prompt and Body; it returns the request's input
// messages (or prompt) JSON for span capture. defaultModel is used when the
// body names none (vLLM serves its only model then); empty means the model
// is required. bodies parses it (nil: without a message cache). Errors are
// *badRequest.
func parseBody(r *scoring.Request, raw []byte, defaultModel string, bodies *tokenize.BodyParser) (input []byte, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, badf("request body is empty; expected a JSON object")
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' && json.Valid(t) {
		return nil, badf("request body must be a JSON object")
	}
	pb, err := bodies.Parse(raw)
	if err != nil {
		return nil, badf("request body is not valid JSON: %v", strings.TrimPrefix(err.Error(), tokenize.ErrBadRequest.Error()+": invalid JSON: "))
	}
	b, err := routingFields(pb)
	if err != nil {
		return nil, err
	}
	if err := fill(r, &b, defaultModel); err != nil {
		return nil, err
	}
	r.Body, r.Parsed = raw, pb
	r.Prompt = b.promptOf()
	return b.input(), nil
}

// fill copies the routing fields of b into r and checks them.
func fill(r *scoring.Request, b *body, defaultModel string) error {
	switch {
	case b.Model != nil && *b.Model != "":
		r.Model = *b.Model
	case defaultModel != "":
		r.Model = defaultModel
	default:
		return badf("field \"model\" is required")
	}
	r.Stream = b.Stream
	r.CacheSalt = b.CacheSalt
	switch {
	case b.MaxCompletionTokens != nil:
		r.MaxTokens = *b.MaxCompletionTokens
	case b.MaxTokens != nil:
		r.MaxTokens = *b.MaxTokens
	}
	if r.MaxTokens < 0 {
		return badf("max_tokens must not be negative")
	}
	// n: how many completions the engine generates (OpenAI's chat and
	// completions APIs; Anthropic's has none). vLLM refuses one below 1.
	if b.N != nil && (r.API == scoring.APIChat || r.API == scoring.APICompletions) {
		if *b.N < 1 {
			return badf("n must be at least 1")
		}
		r.Choices = *b.N
	}
	switch r.API {
	case scoring.APIChat, scoring.APIMessages:
		if !isJSONArray(b.Messages) {
			return badf("field \"messages\" is required and must be an array")
		}
		if r.API == scoring.APIMessages && b.MaxTokens == nil {
			return badf("field \"max_tokens\" is required")
		}
	case scoring.APICompletions:
		ids, n, more, err := promptTokenIDs(b.Prompt)
		if err != nil {
			return err
		}
		r.TokenIDs, r.Prompts, r.MorePrompts = ids, n, more
	}
	return nil
}

func isJSONArray(raw rawRef) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '['
}

// promptTokenIDs validates a completions prompt, which may be a string, a
// list of strings, a list of token ids or a list of such lists, and returns
// the token ids of the first prompt when the client sent ids, how many
// prompts it sent, and the sizes of those after the first.
func promptTokenIDs(raw rawRef) (ids []uint32, prompts int, more scoring.MorePrompts, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, 0, more, badf("field \"prompt\" is required")
	}
	switch raw[0] {
	case '"':
		return nil, 1, more, nil
	case '[':
	default:
		return nil, 0, more, badf("field \"prompt\" must be a string, a list of strings or a list of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, 0, more, badf("field \"prompt\": %v", err)
	}
	if len(items) == 0 {
		return nil, 0, more, badf("field \"prompt\" must not be empty")
	}
	switch items[0] = bytes.TrimSpace(items[0]); items[0][0] {
	case '"':
		var ss []string
		if err := json.Unmarshal(raw, &ss); err != nil {
			return nil, 0, more, badf("field \"prompt\": mixed list; want all strings or all token ids")
		}
		if len(ss) > 1 {
			texts := make([][]byte, len(ss))
			for i, s := range ss {
				texts[i] = []byte(s)
			}
			more = scoring.MorePrompts{Text: true, FirstBytes: len(ss[0]), Parts: laterPrompts(texts)}
		}
		return nil, len(ss), more, nil
	case '[':
		var lists [][]uint32
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, 0, more, badf("field \"prompt\": want lists of non-negative token ids")
		}
		if len(lists[0]) == 0 {
			return nil, 0, more, badf("field \"prompt\": empty token list")
		}
		if len(lists) > 1 {
			more.Parts = laterPrompts(lists)
		}
		return lists[0], len(lists), more, nil
	default:
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, 0, more, badf("field \"prompt\": want a list of non-negative token ids")
		}
		return ids, 1, more, nil
	}
}

// laterPrompts returns the size of each prompt after the first and of
// its longest common prefix with the first: in bytes for text, in tokens
// for token ids.
func laterPrompts[E byte | uint32](ps [][]E) []scoring.PromptPart {
	parts := make([]scoring.PromptPart, len(ps)-1)
	for i, p := range ps[1:] {
		n := 0
		for n < min(len(p), len(ps[0])) && p[n] == ps[0][n] {
			n++
		}
		parts[i] = scoring.PromptPart{Size: len(p), Shared: n}
	}
	return parts
}

// ParseRequest builds the routing view of a request exactly as the ext_proc
// server does, for read-only tools such as the admin API's POST
// /debug/lookup. defaultModel is used when the body names none. Errors are
// client errors whose text is safe to return.
func ParseRequest(method, path string, body []byte, defaultModel string) (scoring.Request, error) {
	r := scoring.Request{API: apiOf(method, path), Path: path, Body: body}
	if r.API == scoring.APIOther {
		return r, badf("path %q is not a generation endpoint", path)
	}
	_, err := parseBody(&r, body, defaultModel, nil)
	return r, err
}
