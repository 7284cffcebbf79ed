package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

var errNoDone = errors.New("stream ended without a final event")

// streamState accumulates what one streamed response tells the client: when
// content arrived, the reply text, usage and any in-stream error. It is fed
// decoded SSE events by onEvent, in arrival order.
type streamState struct {
	api API

	firstChunk   time.Time // first event carrying a choice or content block
	firstContent time.Time // first non-empty content delta
	lastContent  time.Time
	contentDelta int // number of non-empty content deltas
	reply        strings.Builder

	promptTokens     int // -1 until usage reports it
	completionTokens int
	cachedTokens     int

	done   bool   // [DONE] or message_stop seen
	errMsg string // in-stream error message
}

func newStreamState(api API) *streamState {
	return &streamState{api: api, promptTokens: -1, completionTokens: -1, cachedTokens: -1}
}

// openAIChunk is the part of a chat.completion.chunk or text_completion
// chunk the client reads.
type openAIChunk struct {
	Choices []struct {
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// anthropicEvent is the part of an Anthropic Messages stream event the client
// reads. vLLM reports input_tokens as the whole prompt (OpenAI's
// prompt_tokens), not Anthropic's uncached part, and sends no
// cache_read_input_tokens; when a server does send it, it is taken as the
// cached prompt tokens.
type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	Delta *struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Thinking string `json:"thinking"`
		Partial  string `json:"partial_json"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type anthropicUsage struct {
	InputTokens          *int `json:"input_tokens"`
	OutputTokens         *int `json:"output_tokens"`
	CacheReadInputTokens *int `json:"cache_read_input_tokens"`
}

// onEvent applies one SSE event received at now. It returns an error only for
// a malformed event; an error the server reports in the stream is recorded
// in errMsg.
func (s *streamState) onEvent(now time.Time, event string, data []byte) error {
	if s.api == APIMessages {
		return s.onAnthropic(now, event, data)
	}
	return s.onOpenAI(now, data)
}

func (s *streamState) onOpenAI(now time.Time, data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		s.done = true
		return nil
	}
	var c openAIChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("decode chunk: %w", err)
	}
	if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
		s.errMsg = errorMessage(c.Error)
	}
	if len(c.Choices) > 0 && s.firstChunk.IsZero() {
		s.firstChunk = now
	}
	for _, ch := range c.Choices {
		t := ch.Delta.Content + ch.Delta.ReasoningContent + ch.Delta.Reasoning + ch.Text
		if t == "" && len(ch.Delta.ToolCalls) == 0 {
			continue
		}
		s.content(now, ch.Delta.Content+ch.Text)
	}
	if u := c.Usage; u != nil {
		s.promptTokens = u.PromptTokens
		s.completionTokens = u.CompletionTokens
		if u.PromptTokensDetails != nil {
			s.cachedTokens = u.PromptTokensDetails.CachedTokens
		} else if s.cachedTokens < 0 {
			// vLLM before 0.31 omits the details when nothing was cached.
			s.cachedTokens = 0
		}
	}
	return nil
}

func (s *streamState) onAnthropic(now time.Time, event string, data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		// vLLM's Messages endpoint ends its stream with an OpenAI-style
		// terminator after message_stop (and after an error event).
		s.done = true
		return nil
	}
	var e anthropicEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("decode %q event: %w", event, err)
	}
	typ := e.Type
	if typ == "" {
		typ = event
	}
	switch typ {
	case "message_start":
		if e.Message != nil {
			s.anthropicUsage(e.Message.Usage)
		}
	case "content_block_start":
		if s.firstChunk.IsZero() {
			s.firstChunk = now
		}
	case "content_block_delta":
		if s.firstChunk.IsZero() {
			s.firstChunk = now
		}
		if e.Delta != nil && e.Delta.Text+e.Delta.Thinking+e.Delta.Partial != "" {
			s.content(now, e.Delta.Text)
		}
	case "message_delta":
		s.anthropicUsage(e.Usage)
	case "message_stop":
		s.done = true
	case "error":
		s.errMsg = "error event"
		if e.Error != nil {
			s.errMsg = e.Error.Type + ": " + e.Error.Message
		}
	}
	return nil
}

func (s *streamState) anthropicUsage(u *anthropicUsage) {
	if u == nil {
		return
	}
	if u.InputTokens != nil {
		s.promptTokens = *u.InputTokens
	}
	if u.OutputTokens != nil {
		s.completionTokens = *u.OutputTokens
	}
	if u.CacheReadInputTokens != nil {
		s.cachedTokens = *u.CacheReadInputTokens
	}
}

func (s *streamState) content(now time.Time, text string) {
	if s.firstContent.IsZero() {
		s.firstContent = now
	}
	s.lastContent = now
	s.contentDelta++
	s.reply.WriteString(text)
}

// errorMessage extracts a readable message from an OpenAI-style error value,
// which is either an object with "message" or a bare string.
func errorMessage(raw json.RawMessage) string {
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	var str string
	if json.Unmarshal(raw, &str) == nil && str != "" {
		return str
	}
	const limit = 200
	if len(raw) > limit {
		raw = raw[:limit]
	}
	return string(raw)
}

// ttft returns the time of the first token: the first content delta, or,
// for a reply whose tokens all decoded to empty text, the first chunk.
func (s *streamState) firstToken() time.Time {
	if !s.firstContent.IsZero() {
		return s.firstContent
	}
	return s.firstChunk
}

// itl returns the mean inter-token latency: the time between the first and
// last content delta divided by the number of gaps, counted in tokens when
// usage reports them and in deltas otherwise.
func (s *streamState) itl() time.Duration {
	if s.firstContent.IsZero() {
		return 0
	}
	n := s.completionTokens
	if n < 0 {
		n = s.contentDelta
	}
	if n < 2 {
		return 0
	}
	return s.lastContent.Sub(s.firstContent) / time.Duration(n-1)
}
