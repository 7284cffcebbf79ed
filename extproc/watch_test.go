package extproc

import (
	"strings"
	"testing"
	"time"
)

const openAIStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" +
	": keep-alive comment\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Héllo 世界\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":640,\"total_tokens\":650,\"completion_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":624}}}\n\n" +
	"data: [DONE]\n\n"

const anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":100,\"output_tokens\":0}}}\n\n" +
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
	"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

type watchResult struct {
	usage      Usage
	done       bool
	errMsg     string
	firstChunk int // index of the chunk in which the first token appeared
	badEvents  int
}

// feed writes chunks, chunk i at time i seconds, and reports the result.
func feed(contentType string, chunks []string) watchResult {
	w := newWatcher(contentType, 1<<20)
	t0 := time.Unix(0, 0)
	for i, c := range chunks {
		w.write([]byte(c), t0.Add(time.Duration(i)*time.Second))
	}
	w.finish(t0.Add(time.Duration(len(chunks)) * time.Second))
	r := watchResult{usage: w.usage, done: w.done, errMsg: w.errMsg, firstChunk: -1, badEvents: w.badEvents}
	if !w.firstToken.IsZero() {
		r.firstChunk = int(w.firstToken.Sub(t0) / time.Second)
	}
	return r
}

func TestWatcherSplitAnywhere(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, ct, stream string
		want             watchResult
	}{
		{"openai", "text/event-stream", openAIStream, watchResult{usage: Usage{640, 10, 624}, done: true}},
		{"openai crlf", "text/event-stream; charset=utf-8", strings.ReplaceAll(openAIStream, "\n", "\r\n"), watchResult{usage: Usage{640, 10, 624}, done: true}},
		{"openai bare cr", "text/event-stream", strings.ReplaceAll(openAIStream, "\n", "\r"), watchResult{usage: Usage{640, 10, 624}, done: true}},
		{"anthropic", "text/event-stream", anthropicStream, watchResult{usage: Usage{100, 7, -1}, done: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			whole := feed(tc.ct, []string{tc.stream})
			if whole.firstChunk != 0 {
				t.Fatalf("whole stream: first token not seen (chunk %d)", whole.firstChunk)
			}
			whole.firstChunk = 0
			if whole != tc.want {
				t.Fatalf("whole stream: got %+v, want %+v", whole, tc.want)
			}
			// Every split point, including inside multi-byte UTF-8 and CRLF.
			for i := 1; i < len(tc.stream); i++ {
				got := feed(tc.ct, []string{tc.stream[:i], tc.stream[i:]})
				got.firstChunk = 0
				if got != tc.want {
					t.Fatalf("split at %d (%q|%q): got %+v, want %+v", i, tc.stream[max(0, i-5):i], tc.stream[i:min(len(tc.stream), i+5)], got, tc.want)
				}
			}
		})
	}
}

// TestWatcherChunkings pins chunkings and endings an every-split test does
// not reach.
func TestWatcherChunkings(t *testing.T) {
	t.Parallel()
	huge := "data: {\"pad\":\"" + strings.Repeat("x", 9<<20) + "\",\"usage\":{\"prompt_tokens\":5}}\n\n"
	var hugeChunks []string
	for off := 0; off < len(huge); off += 64 << 10 {
		hugeChunks = append(hugeChunks, huge[off:min(off+64<<10, len(huge))])
	}
	tests := []struct {
		name   string
		chunks []string
		want   watchResult
	}{
		{
			"empty chunk between cr and lf",
			[]string{"data: {\"usage\":\r", "", "\ndata: {\"prompt_tokens\":3}}\r\n\r\n"},
			watchResult{usage: Usage{3, -1, -1}, firstChunk: -1},
		},
		{
			"stream cut before its blank line",
			[]string{"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "data: [DONE]"},
			watchResult{usage: Usage{-1, -1, -1}, done: true},
		},
		{
			"anthropic stop without its blank line",
			[]string{"event: message_stop\r\ndata: {}"},
			watchResult{usage: Usage{-1, -1, -1}, done: true, firstChunk: -1},
		},
		{
			// Bigger than the replayer's 8 MiB bound: the watcher holds it.
			"huge event",
			hugeChunks,
			watchResult{usage: Usage{5, -1, -1}, firstChunk: -1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := feed("text/event-stream", tc.chunks); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWatcherFirstTokenIsContentNotRole(t *testing.T) {
	t.Parallel()
	events := strings.SplitAfter(openAIStream, "\n\n")
	got := feed("text/event-stream", events)
	// events[0] is the role chunk, [1] a comment, [2] the first content.
	if got.firstChunk != 2 {
		t.Fatalf("first token at chunk %d, want 2", got.firstChunk)
	}
}

func TestWatcherMidStreamError(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, stream, want string }{
		{"openai error object", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine dead\",\"type\":\"InternalServerError\",\"code\":500}}\n\n", "engine dead"},
		{"anthropic error event", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", "Overloaded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := feed("text/event-stream", []string{tc.stream}); got.errMsg != tc.want {
				t.Fatalf("errMsg %q, want %q", got.errMsg, tc.want)
			}
		})
	}
}

func TestWatcherJSONBody(t *testing.T) {
	t.Parallel()
	body := `{"id":"cmpl-1","object":"text_completion","choices":[{"text":"hi","index":0}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}}`
	for i := 1; i < len(body); i += 7 {
		got := feed("application/json", []string{body[:i], body[i:]})
		if got.usage != (Usage{12, 3, 0}) || !got.done || got.firstChunk != -1 {
			t.Fatalf("split %d: %+v", i, got)
		}
	}
	// Over the limit: usage is unknown, nothing breaks.
	w := newWatcher("application/json", 10)
	w.write([]byte(body), time.Now())
	w.finish(time.Now())
	if w.usage != (Usage{-1, -1, -1}) || !w.truncated {
		t.Fatalf("over limit: usage %+v truncated %v", w.usage, w.truncated)
	}
}

func TestWatcherGarbage(t *testing.T) {
	t.Parallel()
	got := feed("text/event-stream", []string{"data: {not json\n\n", "data: [DONE]\n\n"})
	if got.badEvents != 1 || !got.done {
		t.Fatalf("got %+v", got)
	}
}

func FuzzWatcher(f *testing.F) {
	f.Add(openAIStream, 10, true)
	f.Add(anthropicStream, 33, true)
	f.Add(strings.ReplaceAll(openAIStream, "\n", "\r\n"), 1, true)
	f.Add(`{"usage":{"prompt_tokens":1}}`, 3, false)
	f.Fuzz(func(t *testing.T, stream string, split int, sse bool) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		whole := feed(ct, []string{stream})
		if split < 0 {
			split = -split
		}
		i := split % (len(stream) + 1)
		parts := feed(ct, []string{stream[:i], stream[i:]})
		// Where the split falls may move the first token's chunk, nothing else.
		whole.firstChunk, parts.firstChunk = 0, 0
		if whole != parts {
			t.Fatalf("split at %d changes the result: %+v vs %+v", i, whole, parts)
		}
	})
}
