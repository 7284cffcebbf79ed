package vllmsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// maxBody bounds request bodies.
const maxBody = 64 << 20

// apiError is an error with the HTTP status and vLLM error type to send.
type apiError struct {
	status int
	reason string // short label for the bad-request counter
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(reason, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// errorType returns vLLM's error type name for a status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	}
	return "InternalServerError"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// errorBody is vLLM's error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func (s *Server) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if ae.status < 500 {
		s.met.badRequests.WithLabelValues(s.model, ae.reason).Inc()
	}
	writeJSON(w, ae.status, errorBody{Error: errorDetail{Message: ae.msg, Type: errorType(ae.status), Code: ae.status}})
}

// streamOptions is the OpenAI stream_options object.
type streamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats bool  `json:"continuous_usage_stats"`
}

// genRequest holds the fields of chat, completions and messages requests
// the simulator acts on; other fields are accepted and ignored, as vLLM does.
type genRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	CacheSalt           *string         `json:"cache_salt"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	IgnoreEOS           bool            `json:"ignore_eos"`
}

// parseGenRequest decodes and validates the common fields of a body.
func parseGenRequest(body []byte, models []string) (*genRequest, error) {
	var g genRequest
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, badRequest("json", "invalid JSON body: %v", err)
	}
	if g.Model != "" && !contains(models, g.Model) {
		return nil, &apiError{status: http.StatusNotFound, reason: "model", msg: fmt.Sprintf("The model `%s` does not exist.", g.Model)}
	}
	if g.StreamOptions != nil && !g.Stream {
		return nil, badRequest("stream_options", "Stream options can only be defined when `stream=True`.")
	}
	if g.N != nil && *g.N != 1 {
		return nil, badRequest("n", "n=%d is not supported by the simulator (only n=1)", *g.N)
	}
	if g.CacheSalt != nil && *g.CacheSalt == "" {
		return nil, badRequest("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.")
	}
	for _, m := range []*int{g.MaxTokens, g.MaxCompletionTokens} {
		if m != nil && *m < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be at least 1, got %d.", *m)
		}
	}
	return &g, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// maxTokens returns the requested output length, or def when absent.
func (g *genRequest) maxTokens(def int) int {
	switch {
	case g.MaxCompletionTokens != nil:
		return *g.MaxCompletionTokens
	case g.MaxTokens != nil:
		return *g.MaxTokens
	}
	return def
}

// noTokenizerMsg answers text prompts when no tokenizer is configured,
// with the message vLLM gives under --skip-tokenizer-init.
const noTokenizerMsg = "You cannot pass text prompts when `skip_tokenizer_init` is True (vllm-sim runs without --tokenizer: send token ids)"

// parsePrompt decodes a completions prompt: a string, a list of strings, a
// list of token ids or a list of token-id lists. Exactly one of texts and
// ids is non-nil on success.
func parsePrompt(raw json.RawMessage) (texts []string, ids [][]uint32, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil, badRequest("prompt", "prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, badRequest("prompt", "prompt must be a string, a list of strings or a list of token ids")
	}
	if len(list) == 0 {
		return nil, nil, badRequest("prompt", "prompt must not be empty")
	}
	var one []uint32
	if err := json.Unmarshal(raw, &one); err == nil {
		return nil, [][]uint32{one}, nil
	}
	for _, item := range list {
		var t string
		if json.Unmarshal(item, &t) == nil {
			if ids != nil {
				return nil, nil, badRequest("prompt", "prompt mixes strings and token ids")
			}
			texts = append(texts, t)
			continue
		}
		var seq []uint32
		if err := json.Unmarshal(item, &seq); err != nil {
			return nil, nil, badRequest("prompt", "prompt item must be a string or a list of token ids (0 ≤ id < 2^32)")
		}
		if texts != nil {
			return nil, nil, badRequest("prompt", "prompt mixes strings and token ids")
		}
		ids = append(ids, seq)
	}
	return texts, ids, nil
}

// gen is one generation call being served.
type gen struct {
	api       string // "chat", "completions" or "messages"
	id        string
	created   int64
	model     string
	prompts   [][]uint32
	maxTokens []int
	salt      string
	stream    bool
	usage     bool // final usage chunk
	contUsage bool // usage on every chunk
}

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		return nil, badRequest("body", "reading body: %v", err)
	}
	return buf.Bytes(), nil
}

func (s *Server) newID(prefix string) string {
	n := s.ids.Add(1)
	x := n*0x9e3779b97f4a7c15 ^ s.cfg.Engine.Seed
	x ^= x >> 29
	return fmt.Sprintf("%s%016x%08x", prefix, x, n)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	g, err := parseGenRequest(body, s.cfg.ServedModelNames)
	if err != nil {
		s.writeError(w, err)
		return
	}
	texts, ids, err := parsePrompt(g.Prompt)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if texts != nil {
		if s.tok == nil {
			s.writeError(w, badRequest("tokenizer", "%s", noTokenizerMsg))
			return
		}
		addSpecial := g.AddSpecialTokens == nil || *g.AddSpecialTokens
		for _, t := range texts {
			p, err := s.tok.TextPrompt(t, addSpecial)
			if err != nil {
				s.writeError(w, badRequest("tokenize", "tokenizing prompt: %v", err))
				return
			}
			ids = append(ids, p)
		}
	}
	s.serveGen(w, r, g, "completions", ids, 16)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.templated(w, r, "chat")
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.templated(w, r, "messages")
}

// templated serves chat and messages requests, which need the tokenizer
// and chat template.
func (s *Server) templated(w http.ResponseWriter, r *http.Request, api string) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	g, err := parseGenRequest(body, s.cfg.ServedModelNames)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if len(bytes.TrimSpace(g.Messages)) == 0 {
		s.writeError(w, badRequest("messages", "messages is required"))
		return
	}
	if api == "messages" && g.MaxTokens == nil {
		s.writeError(w, badRequest("max_tokens", "max_tokens is required"))
		return
	}
	if s.tok == nil {
		s.writeError(w, badRequest("tokenizer", "%s", noTokenizerMsg))
		return
	}
	var p []uint32
	if api == "chat" {
		p, err = s.tok.ChatPrompt(body)
	} else {
		p, err = s.tok.AnthropicPrompt(body)
	}
	if err != nil {
		s.writeError(w, badRequest("template", "rendering prompt: %v", err))
		return
	}
	s.serveGen(w, r, g, api, [][]uint32{p}, 0)
}

// serveGen validates lengths, applies faults, runs the prompts on the
// engines and writes the response.
func (s *Server) serveGen(w http.ResponseWriter, r *http.Request, g *genRequest, api string, prompts [][]uint32, defMax int) {
	maxLen := s.cfg.Engine.MaxModelLen
	gn := &gen{api: api, created: time.Now().Unix(), model: s.model, prompts: prompts, stream: g.Stream}
	if g.Model != "" {
		gn.model = g.Model
	}
	if g.CacheSalt != nil {
		gn.salt = *g.CacheSalt
	}
	if g.Stream && g.StreamOptions != nil {
		gn.usage = g.StreamOptions.IncludeUsage == nil || *g.StreamOptions.IncludeUsage
		gn.contUsage = g.StreamOptions.ContinuousUsageStats
	}
	for _, p := range prompts {
		if len(p) == 0 {
			s.writeError(w, badRequest("prompt", "prompt must not be empty"))
			return
		}
		if len(p) >= maxLen {
			s.writeError(w, badRequest("length", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", maxLen, len(p)))
			return
		}
		def := defMax
		if def == 0 {
			def = maxLen - len(p)
			if s.cfg.DefaultMaxTokens > 0 {
				def = min(def, s.cfg.DefaultMaxTokens)
			}
		}
		mt := g.maxTokens(def)
		if len(p)+mt > maxLen {
			s.writeError(w, badRequest("length", "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", mt, maxLen, len(p), mt, maxLen, len(p)))
			return
		}
		gn.maxTokens = append(gn.maxTokens, mt)
	}
	switch api {
	case "chat":
		gn.id = s.newID("chatcmpl-")
	case "messages":
		gn.id = s.newID("msg_")
	default:
		gn.id = s.newID("cmpl-")
	}

	f, spike, dieAfter := s.drawFault()
	if spike > 0 {
		s.met.faults.WithLabelValues(s.model, "latency_spike").Inc()
		t := time.NewTimer(spike)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch f {
	case faultError:
		s.met.faults.WithLabelValues(s.model, "error").Inc()
		s.writeError(w, errors.New("simulated engine failure (fault injection)"))
		return
	case faultHang:
		s.met.faults.WithLabelValues(s.model, "hang").Inc()
		<-r.Context().Done()
		return
	case faultDie:
		if !gn.stream {
			dieAfter = -1 // a non-streamed request dies before its response
		}
		s.met.faults.WithLabelValues(s.model, "die").Inc()
	default:
		dieAfter = 0
	}

	notify := make(chan struct{}, 1)
	live := make([]*liveRequest, len(prompts))
	ranks := make([]*rank, len(prompts))
	for i, p := range prompts {
		live[i] = &liveRequest{req: &Request{ID: gn.id, Prompt: p, MaxTokens: gn.maxTokens[i], CacheSalt: gn.salt}, notify: notify}
		ranks[i] = s.pickRank()
		ranks[i].submit(live[i])
	}
	finished := make([]bool, len(live))
	defer func() {
		for i, l := range live {
			if !finished[i] {
				ranks[i].abort(l)
			}
		}
	}()
	if dieAfter < 0 {
		panic(http.ErrAbortHandler)
	}
	var out response
	switch {
	case !gn.stream:
		out = &collector{s: s, g: gn, choices: make([]choiceAcc, len(prompts))}
	case api == "messages":
		out = &anthropicStream{sseWriter: newSSE(w), s: s, g: gn}
	default:
		out = &openAIStream{sseWriter: newSSE(w), s: s, g: gn, started: make([]bool, len(prompts))}
	}
	if err := out.begin(); err != nil {
		return
	}
	var buf []Output
	tokens := 0
	for {
		all := true
		for i, l := range live {
			if finished[i] {
				continue
			}
			var done bool
			var err error
			buf, done, err = l.take(buf[:0])
			if err != nil {
				finished[i] = true
				out.fail(w, err)
				return
			}
			for _, o := range buf {
				if err := out.token(i, o); err != nil {
					return // client went away: the deferred abort frees the engine
				}
				tokens++
				if dieAfter > 0 && tokens >= dieAfter {
					panic(http.ErrAbortHandler)
				}
			}
			finished[i] = done
			all = all && done
		}
		if all {
			break
		}
		select {
		case <-notify:
		case <-r.Context().Done():
			return
		}
	}
	out.end(w)
}

// response writes one generation call's response, streamed or not.
type response interface {
	begin() error
	token(choice int, o Output) error
	fail(w http.ResponseWriter, err error)
	end(w http.ResponseWriter)
}

// text returns the text of one generated token.
func (s *Server) text(tok uint32) string {
	if s.tok != nil {
		if t, err := s.tok.Decode([]uint32{tok}); err == nil {
			return t
		}
	}
	return " " + simWords[int(tok)%len(simWords)]
}

// simWords give generated tokens readable text when no tokenizer is set.
var simWords = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there one all we their has been would when who will
more no if out so said what up its about than into them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before must
through back years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used take
three`)

// usageJSON is vLLM's UsageInfo, in its field order.
type usageJSON struct {
	PromptTokens        int               `json:"prompt_tokens"`
	TotalTokens         int               `json:"total_tokens"`
	CompletionTokens    int               `json:"completion_tokens"`
	PromptTokensDetails *promptTokensJSON `json:"prompt_tokens_details,omitempty"`
}

type promptTokensJSON struct {
	CachedTokens int `json:"cached_tokens"`
}

func (s *Server) usage(prompt, completion, cached int) *usageJSON {
	u := &usageJSON{PromptTokens: prompt, TotalTokens: prompt + completion, CompletionTokens: completion}
	if s.cfg.EnablePromptTokensDetails {
		u.PromptTokensDetails = &promptTokensJSON{CachedTokens: cached}
	}
	return u
}
