package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLLM is an in-test OpenAI/Anthropic server that streams SSE. Each
// reply is n content chunks ("tok0 ", "tok1 " …), where n is the request's
// max_tokens, then usage and the end event. It records every request body
// and client connection, and reports cached_tokens equal to the number of
// prompt words already seen in an earlier request's prompt (a crude prefix
// cache), so tests can check the usage plumbing.
type fakeLLM struct {
	t *testing.T
	// status, when not 0 or 200, is returned instead of a stream.
	status int
	// worker is set as the x-warmpath-worker header when not empty.
	worker string
	// gate, when set, is called once a request has been counted in flight
	// and before its stream starts; it may block.
	gate func(inflight int)
	// split writes each event in two flushes cut mid-line, to exercise the
	// client's incremental parser through real HTTP.
	split bool
	// midError sends an error event after the first chunk.
	midError bool
	// firstDelay is slept before the first chunk and chunkDelay before each
	// later one, so that measured times have a known order (never compared
	// with a threshold).
	firstDelay, chunkDelay time.Duration

	mu       sync.Mutex
	bodies   []map[string]any
	paths    []string
	remotes  map[string]int
	inflight int
	maxIn    int
	seen     map[string]bool
}

func newFakeLLM(t *testing.T) *fakeLLM {
	return &fakeLLM{t: t, remotes: map[string]int{}, seen: map[string]bool{}}
}

func (f *fakeLLM) start(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv
}

func (f *fakeLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	prompt := promptWords(body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.paths = append(f.paths, r.URL.Path)
	f.remotes[r.RemoteAddr]++
	f.inflight++
	f.maxIn = max(f.maxIn, f.inflight)
	inflight := f.inflight
	cached := 0
	for i := range prompt {
		if !f.seen[strings.Join(prompt[:i+1], " ")] {
			break
		}
		cached = i + 1
	}
	for i := range prompt {
		f.seen[strings.Join(prompt[:i+1], " ")] = true
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if f.gate != nil {
		f.gate(inflight)
	}
	if f.worker != "" {
		w.Header().Set(WorkerHeader, f.worker)
		w.Header().Set(ReasonHeader, "least predicted ttft")
	}
	if f.status != 0 && f.status != http.StatusOK {
		http.Error(w, `{"error":"fake failure"}`, f.status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	write := func(s string) {
		if f.split && len(s) > 4 {
			fmt.Fprint(w, s[:len(s)/2])
			flusher.Flush()
			s = s[len(s)/2:]
		}
		fmt.Fprint(w, s)
		flusher.Flush()
	}
	n := int(body["max_tokens"].(float64))
	time.Sleep(f.firstDelay)
	if r.URL.Path == "/v1/messages" {
		write(fmt.Sprintf("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":%d,\"cache_read_input_tokens\":%d,\"output_tokens\":0}}}\n\n", len(prompt), cached))
		write("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := range n {
			write(fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok%d \"}}\n\n", i))
		}
		write(fmt.Sprintf("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":%d}}\n\n", n))
		// vLLM follows message_stop with an OpenAI-style terminator.
		write("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: [DONE]\n\n")
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if chat {
		write(`data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	}
	for i := range n {
		if i > 0 {
			time.Sleep(f.chunkDelay)
		}
		if chat {
			write(fmt.Sprintf(`data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok%d "}}]}`+"\n\n", i))
		} else {
			write(fmt.Sprintf(`data: {"object":"text_completion","choices":[{"index":0,"text":"tok%d "}]}`+"\n\n", i))
		}
		if f.midError && i == 0 {
			write(`data: {"error":{"message":"engine died","code":500}}` + "\n\n")
			write("data: [DONE]\n\n")
			return
		}
	}
	write(fmt.Sprintf(`data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		len(prompt), n, len(prompt)+n, cached))
	write("data: [DONE]\n\n")
}

// promptWords returns the request's prompt as words (token ids rendered
// as decimal words), system message and history included.
func promptWords(body map[string]any) []string {
	var parts []string
	if s, ok := body["system"].(string); ok {
		parts = append(parts, s)
	}
	switch p := body["prompt"].(type) {
	case string:
		parts = append(parts, p)
	case []any:
		for _, id := range p {
			parts = append(parts, fmt.Sprint(id))
		}
	}
	if msgs, ok := body["messages"].([]any); ok {
		for _, m := range msgs {
			parts = append(parts, m.(map[string]any)["content"].(string))
		}
	}
	return strings.Fields(strings.Join(parts, " "))
}

func (f *fakeLLM) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

func (f *fakeLLM) connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.remotes)
}

func (f *fakeLLM) maxInflight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxIn
}
