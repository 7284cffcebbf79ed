package vllmsim

import (
	"encoding/json"
	"net/http"
	"strings"
)

// sseWriter writes server-sent events and flushes each one.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func newSSE(w http.ResponseWriter) sseWriter {
	return sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) open() error {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	return s.rc.Flush()
}

// event writes one event: an optional "event:" line and a JSON data line.
func (s *sseWriter) event(name string, v any) error {
	s.buf = s.buf[:0]
	if name != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, name...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, b...)
	s.buf = append(s.buf, "\n\n"...)
	return s.raw(s.buf)
}

func (s *sseWriter) raw(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

var doneLine = []byte("data: [DONE]\n\n")

// The OpenAI chunk shapes, in vLLM's field order. Fields vLLM leaves unset
// are omitted; explicit nulls are kept.

type chatChunk struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []any      `json:"choices"`
	Usage   *usageJSON `json:"usage,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatStreamChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatFinalChoice struct {
	chatStreamChoice
	StopReason *string `json:"stop_reason"`
}

type completionStreamChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}

// choiceUsage accumulates the usage of one choice.
type choiceUsage struct {
	prompt, completion, cached int
}

func (c *choiceUsage) add(o Output) {
	c.prompt, c.completion, c.cached = o.PromptTokens, o.Generated, o.CachedTokens
}

func sumUsage(cs []choiceUsage) (p, c, k int) {
	for _, u := range cs {
		p, c, k = p+u.prompt, c+u.completion, k+u.cached
	}
	return p, c, k
}

// openAIStream writes chat and completions streams.
type openAIStream struct {
	sseWriter
	s       *Server
	g       *gen
	started []bool
	use     []choiceUsage
}

var finishLength = "length"

func (o *openAIStream) begin() error {
	o.use = make([]choiceUsage, len(o.g.prompts))
	return o.open()
}

func (o *openAIStream) chunk(choices []any, u *usageJSON) chatChunk {
	obj := "chat.completion.chunk"
	if o.g.api == "completions" {
		obj = "text_completion"
	}
	return chatChunk{ID: o.g.id, Object: obj, Created: o.g.created, Model: o.g.model, Choices: choices, Usage: u}
}

func (o *openAIStream) token(i int, out Output) error {
	o.use[i].add(out)
	var u *usageJSON
	if o.g.contUsage {
		u = o.s.usage(out.PromptTokens, out.Generated, out.CachedTokens)
	}
	text := o.s.text(out.Token)
	var finish *string
	if out.Finished {
		finish = &finishLength
	}
	if o.g.api == "completions" {
		return o.event("", o.chunk([]any{completionStreamChoice{Index: i, Text: text, FinishReason: finish}}, u))
	}
	if !o.started[i] {
		o.started[i] = true
		empty := ""
		role := chatStreamChoice{Index: i, Delta: chatDelta{Role: "assistant", Content: &empty}}
		var ru *usageJSON
		if o.g.contUsage {
			ru = o.s.usage(out.PromptTokens, 0, out.CachedTokens)
		}
		if err := o.event("", o.chunk([]any{role}, ru)); err != nil {
			return err
		}
	}
	c := chatStreamChoice{Index: i, Delta: chatDelta{Content: &text}, FinishReason: finish}
	if out.Finished {
		return o.event("", o.chunk([]any{chatFinalChoice{chatStreamChoice: c}}, u))
	}
	return o.event("", o.chunk([]any{c}, u))
}

func (o *openAIStream) fail(_ http.ResponseWriter, err error) {
	o.event("", errorBody{Error: errorDetail{Message: err.Error(), Type: errorType(http.StatusBadRequest), Code: http.StatusBadRequest}})
	o.raw(doneLine)
}

func (o *openAIStream) end(http.ResponseWriter) {
	if o.g.usage {
		p, c, k := sumUsage(o.use)
		if o.event("", o.chunk([]any{}, o.s.usage(p, c, k))) != nil {
			return
		}
	}
	o.raw(doneLine)
}

// anthropicStream writes /v1/messages streams with Anthropic's events.
type anthropicStream struct {
	sseWriter
	s       *Server
	g       *gen
	started bool
	use     choiceUsage
}

type anthropicUsage struct {
	InputTokens          int  `json:"input_tokens"`
	OutputTokens         int  `json:"output_tokens"`
	CacheReadInputTokens *int `json:"cache_read_input_tokens,omitempty"`
}

func (a *anthropicStream) usage(u choiceUsage) anthropicUsage {
	au := anthropicUsage{InputTokens: u.prompt, OutputTokens: u.completion}
	if a.s.cfg.EnablePromptTokensDetails {
		au.CacheReadInputTokens = &u.cached
	}
	return au
}

func (a *anthropicStream) begin() error { return a.open() }

func (a *anthropicStream) token(_ int, out Output) error {
	if !a.started {
		a.started = true
		start := map[string]any{"type": "message_start", "message": anthropicMessage{
			ID: a.g.id, Type: "message", Role: "assistant", Content: []anthropicText{}, Model: a.g.model,
			Usage: a.usage(choiceUsage{prompt: out.PromptTokens, cached: out.CachedTokens}),
		}}
		if err := a.event("message_start", start); err != nil {
			return err
		}
		if err := a.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": anthropicText{Type: "text", Text: ""}}); err != nil {
			return err
		}
	}
	a.use.add(out)
	return a.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]string{"type": "text_delta", "text": a.s.text(out.Token)}})
}

func (a *anthropicStream) fail(_ http.ResponseWriter, err error) {
	a.event("error", map[string]any{"type": "error", "error": map[string]string{"type": "invalid_request_error", "message": err.Error()}})
}

func (a *anthropicStream) end(http.ResponseWriter) {
	if a.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) != nil {
		return
	}
	if a.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": "max_tokens", "stop_sequence": nil}, "usage": a.usage(a.use)}) != nil {
		return
	}
	a.event("message_stop", map[string]any{"type": "message_stop"})
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessage struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Content      []anthropicText `json:"content"`
	Model        string          `json:"model"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        anthropicUsage  `json:"usage"`
}

// collector gathers a non-streamed response.
type collector struct {
	s       *Server
	g       *gen
	choices []choiceAcc
}

type choiceAcc struct {
	text strings.Builder
	use  choiceUsage
}

func (c *collector) begin() error { return nil }

func (c *collector) token(i int, out Output) error {
	c.choices[i].text.WriteString(c.s.text(out.Token))
	c.choices[i].use.add(out)
	return nil
}

func (c *collector) fail(w http.ResponseWriter, err error) {
	c.s.writeError(w, badRequest("engine", "%v", err))
}

func (c *collector) end(w http.ResponseWriter) {
	uses := make([]choiceUsage, len(c.choices))
	for i := range c.choices {
		uses[i] = c.choices[i].use
	}
	p, n, k := sumUsage(uses)
	switch c.g.api {
	case "messages":
		stop := "max_tokens"
		a := anthropicStream{s: c.s}
		writeJSON(w, http.StatusOK, anthropicMessage{ID: c.g.id, Type: "message", Role: "assistant",
			Content: []anthropicText{{Type: "text", Text: c.choices[0].text.String()}}, Model: c.g.model,
			StopReason: &stop, Usage: a.usage(c.choices[0].use)})
	case "chat":
		type message struct {
			Role             string  `json:"role"`
			ReasoningContent *string `json:"reasoning_content"`
			Content          string  `json:"content"`
			ToolCalls        []any   `json:"tool_calls"`
		}
		type choice struct {
			Index        int       `json:"index"`
			Message      message   `json:"message"`
			Logprobs     *struct{} `json:"logprobs"`
			FinishReason string    `json:"finish_reason"`
			StopReason   *string   `json:"stop_reason"`
		}
		var cs []choice
		for i := range c.choices {
			cs = append(cs, choice{Index: i, Message: message{Role: "assistant", Content: c.choices[i].text.String(), ToolCalls: []any{}}, FinishReason: finishLength})
		}
		writeJSON(w, http.StatusOK, struct {
			ID               string     `json:"id"`
			Object           string     `json:"object"`
			Created          int64      `json:"created"`
			Model            string     `json:"model"`
			Choices          []choice   `json:"choices"`
			Usage            *usageJSON `json:"usage"`
			PromptLogprobs   *struct{}  `json:"prompt_logprobs"`
			KVTransferParams *struct{}  `json:"kv_transfer_params"`
		}{c.g.id, "chat.completion", c.g.created, c.g.model, cs, c.s.usage(p, n, k), nil, nil})
	default:
		type choice struct {
			Index          int       `json:"index"`
			Text           string    `json:"text"`
			Logprobs       *struct{} `json:"logprobs"`
			FinishReason   string    `json:"finish_reason"`
			StopReason     *string   `json:"stop_reason"`
			PromptLogprobs *struct{} `json:"prompt_logprobs"`
		}
		var cs []choice
		for i := range c.choices {
			cs = append(cs, choice{Index: i, Text: c.choices[i].text.String(), FinishReason: finishLength})
		}
		writeJSON(w, http.StatusOK, struct {
			ID               string     `json:"id"`
			Object           string     `json:"object"`
			Created          int64      `json:"created"`
			Model            string     `json:"model"`
			Choices          []choice   `json:"choices"`
			Usage            *usageJSON `json:"usage"`
			KVTransferParams *struct{}  `json:"kv_transfer_params"`
		}{c.g.id, "text_completion", c.g.created, c.g.model, cs, c.s.usage(p, n, k), nil})
	}
}

// tokenize serves POST /tokenize in its completion and chat forms.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var req struct {
		Model            string          `json:"model"`
		Prompt           *string         `json:"prompt"`
		Messages         json.RawMessage `json:"messages"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, badRequest("json", "invalid JSON body: %v", err))
		return
	}
	if req.Model != "" && !contains(s.cfg.ServedModelNames, req.Model) {
		s.writeError(w, &apiError{status: http.StatusNotFound, reason: "model", msg: "The model `" + req.Model + "` does not exist."})
		return
	}
	if s.tok == nil {
		s.writeError(w, badRequest("tokenizer", "%s", noTokenizerMsg))
		return
	}
	var ids []uint32
	switch {
	case req.Prompt != nil:
		ids, err = s.tok.TextPrompt(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case len(req.Messages) > 0:
		ids, err = s.tok.ChatPrompt(body)
	default:
		err = badRequest("prompt", "prompt or messages is required")
	}
	if err != nil {
		s.writeError(w, badRequest("tokenize", "%v", err))
		return
	}
	if ids == nil {
		ids = []uint32{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{len(ids), s.cfg.Engine.MaxModelLen, ids, nil})
}

// detokenize serves POST /detokenize.
func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var req struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, badRequest("json", "invalid JSON body: %v", err))
		return
	}
	if s.tok == nil {
		s.writeError(w, badRequest("tokenizer", "%s", noTokenizerMsg))
		return
	}
	text, err := s.tok.Decode(req.Tokens)
	if err != nil {
		s.writeError(w, badRequest("detokenize", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": text})
}
