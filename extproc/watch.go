package extproc

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/warmpath/warmpath/internal/sse"
)

// Usage is the token accounting a response reported. A field is -1 when the
// response did not report it.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
}

// watcher reads a response body as Envoy hands it over, chunk by chunk, and
// records the first and last content token and the usage. It understands
// OpenAI chunk streams and Anthropic event streams (text/event-stream) and
// plain JSON bodies; chunks may be split anywhere. It never modifies bytes.
// A watcher is used by one stream goroutine only.
type watcher struct {
	sse bool
	// maxJSON bounds the non-streamed body kept for its usage.
	maxJSON int

	// events splits an SSE body. It has no size bound: the watcher must
	// never fail a response, so it holds an event of any size.
	events    sse.Parser
	jsonBody  []byte // non-streamed body
	truncated bool   // jsonBody exceeded maxJSON

	firstToken time.Time
	lastToken  time.Time
	usage      Usage
	done       bool   // [DONE], message_stop, or a complete JSON body seen
	errMsg     string // an error event or error object in the stream
	badEvents  int    // events whose data was not valid JSON
}

func newWatcher(contentType string, maxJSON int) *watcher {
	return &watcher{
		sse:     bytes.HasPrefix(bytes.TrimSpace([]byte(contentType)), []byte("text/event-stream")),
		maxJSON: maxJSON,
		usage:   Usage{-1, -1, -1},
	}
}

// write consumes the next chunk, received at now.
func (w *watcher) write(p []byte, now time.Time) {
	if !w.sse {
		if w.truncated {
			return
		}
		if len(w.jsonBody)+len(p) > w.maxJSON {
			w.truncated, w.jsonBody = true, nil
			return
		}
		w.jsonBody = append(w.jsonBody, p...)
		return
	}
	// Unbounded and with an emit that never fails, Feed cannot fail.
	_ = w.events.Feed(p, func(event, data []byte) error {
		w.dispatch(event, data, now)
		return nil
	})
}

// streamEvent is the union of the fields the watcher reads from OpenAI
// chunks and Anthropic events.
type streamEvent struct {
	Type    string `json:"type"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage   *usageJSON      `json:"usage"`
	Error   json.RawMessage `json:"error"`
	Message *struct {
		Usage *usageJSON `json:"usage"`
	} `json:"message"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
	} `json:"delta"`
}

// usageJSON covers OpenAI's and Anthropic's usage objects.
type usageJSON struct {
	PromptTokens        *int `json:"prompt_tokens"`
	CompletionTokens    *int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokens          *int `json:"input_tokens"`
	OutputTokens         *int `json:"output_tokens"`
	CacheReadInputTokens *int `json:"cache_read_input_tokens"`
}

// dispatch interprets one SSE event received at now: its name (empty when
// the stream sent none) and its data, both valid only during the call.
func (w *watcher) dispatch(event, data []byte, now time.Time) {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		w.done = true
		return
	}
	ev, err := readEvent(data)
	if err != nil {
		w.badEvents++
		return
	}
	kind := string(event) // not kept, so the compiler needs no allocation
	if kind == "" {
		kind = string(ev.typ)
	}
	token := ev.choiceToken
	switch kind {
	case "content_block_delta":
		token = token || ev.deltaToken
	case "message_start":
		w.addUsage(ev.msgUsage)
	case "message_stop":
		w.done = true
	case "error":
		w.errMsg = errorText(ev.errRaw, data)
	}
	if ev.errRaw != nil && w.errMsg == "" {
		w.errMsg = errorText(ev.errRaw, data)
	}
	w.addUsage(ev.usage)
	if token {
		if w.firstToken.IsZero() {
			w.firstToken = now
		}
		w.lastToken = now
	}
}

// addUsage merges reported counts; Anthropic splits them over events.
func (w *watcher) addUsage(u usageFields) {
	set := func(dst *int, v optInt) {
		if v.ok {
			*dst = v.v
		}
	}
	set(&w.usage.PromptTokens, u.prompt)
	set(&w.usage.CompletionTokens, u.completion)
	set(&w.usage.CachedTokens, u.cached)
	set(&w.usage.PromptTokens, u.input)
	set(&w.usage.CompletionTokens, u.output)
	set(&w.usage.CachedTokens, u.cache)
}

// finish ends the body at now: a pending SSE event without its blank line is
// dispatched and a JSON body is read for its usage.
func (w *watcher) finish(now time.Time) {
	if w.sse {
		_ = w.events.Flush(func(event, data []byte) error {
			w.dispatch(event, data, now)
			return nil
		})
		return
	}
	if w.truncated || len(w.jsonBody) == 0 {
		return
	}
	ev, err := readEvent(w.jsonBody)
	if err != nil {
		w.badEvents++
		return
	}
	w.done = true
	w.addUsage(ev.usage)
	if ev.errRaw != nil {
		w.errMsg = errorText(ev.errRaw, w.jsonBody)
	}
	// A non-streamed body carries every token at once: its arrival is the
	// last token, and the first token's time is unknown.
	if w.usage.CompletionTokens > 0 {
		w.lastToken = now
	}
	w.jsonBody = nil
}

// errorText extracts a message from an error object, or returns the raw data.
func errorText(e json.RawMessage, data []byte) string {
	var v struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(e, &v) == nil && v.Message != "" {
		return v.Message
	}
	var s string
	if json.Unmarshal(e, &s) == nil && s != "" {
		return s
	}
	const max = 200
	if len(data) > max {
		data = data[:max]
	}
	return string(data)
}
