package replay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/sse"
)

const ms = time.Millisecond

func chatChunk(content string) string {
	return `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + content + `"}}]}` + "\n\n"
}

func TestReadStream(t *testing.T) {
	t.Parallel()
	usage := `data: {"choices":[],"usage":{"prompt_tokens":640,"completion_tokens":3,"total_tokens":643,"prompt_tokens_details":{"cached_tokens":512}}}` + "\n\n"
	tests := []struct {
		name       string
		api        API
		pieces     []timedPiece
		wantTTFT   time.Duration
		wantITL    time.Duration
		wantE2E    time.Duration
		wantUsage  [3]int // prompt, completion, cached
		wantText   string
		wantErr    error  // errors.Is target, nil for success
		wantErrMsg string // in-stream error
	}{
		{
			name: "openai chat with role chunk and usage",
			api:  APIChat,
			pieces: []timedPiece{
				{100 * ms, `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"},
				{0, chatChunk("Hel")},
				{20 * ms, chatChunk("lo")},
				{20 * ms, chatChunk("!")},
				{5 * ms, usage + "data: [DONE]\n\n"},
			},
			wantTTFT: 100 * ms, wantITL: 20 * ms, wantE2E: 145 * ms,
			wantUsage: [3]int{640, 3, 512}, wantText: "Hello!",
		},
		{
			name: "event split across reads",
			api:  APIChat,
			pieces: []timedPiece{
				{50 * ms, chatChunk("a")[:17]},
				{30 * ms, chatChunk("a")[17:]},
				{10 * ms, "data: [DO"},
				{0, "NE]\n\n"},
			},
			wantTTFT: 80 * ms, wantE2E: 90 * ms, wantUsage: [3]int{-1, -1, -1}, wantText: "a",
		},
		{
			name: "completions text chunks, usage without details",
			api:  APICompletions,
			pieces: []timedPiece{
				{40 * ms, `data: {"object":"text_completion","choices":[{"index":0,"text":" x"}]}` + "\n\n"},
				{10 * ms, `data: {"object":"text_completion","choices":[{"index":0,"text":" y"}]}` + "\n\n"},
				{0, `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}` + "\n\ndata: [DONE]\n\n"},
			},
			wantTTFT: 40 * ms, wantITL: 10 * ms, wantE2E: 50 * ms, wantUsage: [3]int{9, 2, 0}, wantText: " x y",
		},
		{
			name: "anthropic messages",
			api:  APIMessages,
			pieces: []timedPiece{
				{30 * ms, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":64,\"output_tokens\":1}}}\n\n"},
				{0, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"},
				{10 * ms, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"},
				{30 * ms, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n"},
				{0, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"},
				{0, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n"},
				{1 * ms, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
			},
			wantTTFT: 40 * ms, wantITL: 30 * ms, wantE2E: 71 * ms, wantUsage: [3]int{100, 2, 64}, wantText: "Hi there",
		},
		{
			// As vLLM's Messages endpoint streams: usage on message_start
			// and message_delta, no cache field, a bare [DONE] at the end.
			name: "anthropic messages from vllm",
			api:  APIMessages,
			pieces: []timedPiece{
				{25 * ms, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"qwen3\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":640,\"output_tokens\":0}}}\n\n"},
				{0, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"},
				{0, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"},
				{0, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"},
				{0, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"input_tokens\":640,\"output_tokens\":1}}\n\n"},
				{2 * ms, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\ndata: [DONE]\n\n"},
			},
			wantTTFT: 25 * ms, wantE2E: 27 * ms, wantUsage: [3]int{640, 1, -1}, wantText: "Hi",
		},
		{
			name: "error event mid-stream",
			api:  APIChat,
			pieces: []timedPiece{
				{10 * ms, chatChunk("a")},
				{10 * ms, `data: {"error":{"message":"engine dead","code":500}}` + "\n\ndata: [DONE]\n\n"},
			},
			wantTTFT: 10 * ms, wantE2E: 20 * ms, wantUsage: [3]int{-1, -1, -1}, wantText: "a", wantErrMsg: "engine dead",
		},
		{
			name:     "stream cut before done",
			api:      APIChat,
			pieces:   []timedPiece{{10 * ms, chatChunk("a")}, {5 * ms, `data: {"choi`}},
			wantTTFT: 10 * ms, wantE2E: 15 * ms, wantUsage: [3]int{-1, -1, -1}, wantText: "a", wantErr: sse.ErrTruncated,
		},
		{
			name:     "clean end without done",
			api:      APIChat,
			pieces:   []timedPiece{{10 * ms, chatChunk("a")}},
			wantTTFT: 10 * ms, wantE2E: 10 * ms, wantUsage: [3]int{-1, -1, -1}, wantText: "a", wantErr: errNoDone,
		},
		{
			name:      "event over the size bound",
			api:       APIChat,
			pieces:    []timedPiece{{10 * ms, chatChunk("a")}, {5 * ms, "data: " + strings.Repeat("x", maxEventBytes)}},
			wantTTFT:  10 * ms,
			wantE2E:   15 * ms,
			wantUsage: [3]int{-1, -1, -1},
			wantText:  "a",
			wantErr:   sse.ErrEventTooLarge,
		},
		{
			name:      "malformed json",
			api:       APIChat,
			pieces:    []timedPiece{{10 * ms, "data: {not json}\n\n"}},
			wantE2E:   10 * ms,
			wantUsage: [3]int{-1, -1, -1},
			wantErr:   errAnyDecode,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := clocktest.New(epoch)
			start := clock.Now()
			st, end, err := readStream(&timedReader{clock: clock, pieces: tt.pieces}, tt.api, clock)
			switch {
			case errors.Is(tt.wantErr, errAnyDecode):
				if err == nil || !strings.Contains(err.Error(), "decode chunk") {
					t.Fatalf("err = %v, want a decode error", err)
				}
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got := end.Sub(start); got != tt.wantE2E {
				t.Errorf("e2e = %v, want %v", got, tt.wantE2E)
			}
			var ttft time.Duration
			if ft := st.firstToken(); !ft.IsZero() {
				ttft = ft.Sub(start)
			}
			if ttft != tt.wantTTFT {
				t.Errorf("ttft = %v, want %v", ttft, tt.wantTTFT)
			}
			if got := st.itl(); got != tt.wantITL {
				t.Errorf("itl = %v, want %v", got, tt.wantITL)
			}
			if got := [3]int{st.promptTokens, st.completionTokens, st.cachedTokens}; got != tt.wantUsage {
				t.Errorf("usage = %v, want %v", got, tt.wantUsage)
			}
			if got := st.reply.String(); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
			if st.errMsg != tt.wantErrMsg {
				t.Errorf("errMsg = %q, want %q", st.errMsg, tt.wantErrMsg)
			}
		})
	}
}

var errAnyDecode = errors.New("any decode error")

// FuzzStreamDecode feeds arbitrary bytes through the parser and both
// decoders: they may reject the input but must not panic.
func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte(chatChunk("x") + "data: [DONE]\n\n"))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n"))
	f.Add([]byte(`data: {"error":"x"}` + "\n\n"))
	f.Add([]byte(`data: {"choices":[],"usage":{"prompt_tokens_details":null}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, api := range []API{APIChat, APIMessages} {
			clock := clocktest.New(epoch)
			st, _, _ := readStream(&timedReader{clock: clock, pieces: []timedPiece{{ms, string(b)}}}, api, clock)
			if st.itl() < 0 {
				t.Fatalf("negative itl")
			}
		}
	})
}
