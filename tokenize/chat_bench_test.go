package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// conversationBody builds a deterministic OpenAI chat request of about
// approxTokens tokens (4 bytes of English-like text per token): a system
// prompt, one tool, and alternating user/assistant turns of ~400 tokens.
func conversationBody(approxTokens int) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while routing requests to workers " +
		"with warm caches predicts time to first token and compares it against queue wait prefill cost " +
		"tokenizer template cache block prefix session tenant model latency throughput é 中文 😀")
	r := rand.New(rand.NewPCG(1, 2))
	text := func(tokens int) string {
		var b strings.Builder
		for b.Len() < tokens*4 {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", text(300)}}
	total := 300
	for i := 0; total < approxTokens; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, text(400)})
		total += 400
	}
	if msgs[len(msgs)-1].Role == "assistant" {
		msgs = append(msgs, msg{"user", text(50)})
	}
	body, err := json.Marshal(map[string]any{
		"model":    "m",
		"messages": msgs,
		"tools": []any{map[string]any{"type": "function", "function": map[string]any{
			"name": "search", "description": "Search the index",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"q": map[string]any{"type": "string"}, "k": map[string]any{"type": "integer", "default": 10}}},
		}}},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// BenchmarkRenderOpenAI renders 8K- and 32K-token conversations from their
// request bodies (parse, normalise, render) with three families' templates.
func BenchmarkRenderOpenAI(b *testing.B) {
	for _, size := range []int{8000, 32000} {
		body := conversationBody(size)
		for _, fam := range []string{"qwen3", "llama3", "gpt-oss"} {
			b.Run(fmt.Sprintf("%dK/%s", size/1000, fam), func(b *testing.B) {
				benchRender(b, fam, body)
			})
		}
	}
}

func benchRender(b *testing.B, fam string, body []byte) {
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", fam), WithClock(goldenNow))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ct.RenderOpenAI(body); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := ct.RenderOpenAI(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRenderOpenAICached is BenchmarkRenderOpenAI for a conversation
// seen before: its body goes through a warm BodyParser, so the messages
// come from its cache with their normalized forms, and what is left is the
// template's own render.
func BenchmarkRenderOpenAICached(b *testing.B) {
	for _, size := range []int{8000, 32000} {
		body := conversationBody(size)
		for _, fam := range []string{"qwen3", "llama3", "gpt-oss"} {
			b.Run(fmt.Sprintf("%dK/%s", size/1000, fam), func(b *testing.B) {
				benchCachedRender(b, fam, body, false)
			})
		}
	}
}

// benchCachedRender renders body, seen before, through a warm BodyParser.
func benchCachedRender(b *testing.B, fam string, body []byte, anthropic bool) {
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", fam), WithClock(goldenNow))
	if err != nil {
		b.Fatal(err)
	}
	bp := NewBodyParser(64 << 20)
	render := func() {
		pb, err := bp.Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ct.renderBody(pb, anthropic); err != nil {
			b.Fatal(err)
		}
	}
	render()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		render()
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWarmTurn100K is what a Pipeline does for the next turn of a
// 100K-token conversation it has seen, a new user message appended: parse
// the body through a warm BodyParser, render it through the memo, and
// tokenize it through the prefix cache. Each iteration sends a different
// new message after the same earlier turns, as the users of one long
// conversation's edits and retries would.
func BenchmarkWarmTurn100K(b *testing.B) {
	dir := filepath.Join("testdata", "models", "qwen3")
	tk, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	ct, err := LoadChatTemplate(dir, WithClock(goldenNow), WithRenderMemo(16<<20))
	if err != nil {
		b.Fatal(err)
	}
	bp, pc := NewBodyParser(64<<20), NewPrefixCache(tk, 64<<20)
	turn := func(body []byte) {
		pb, err := bp.Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		text, err := ct.renderBody(pb, false)
		if err != nil {
			b.Fatal(err)
		}
		pc.Encode(text, false)
	}
	// conversationBody's turns without its tools, then a new user
	// message each time, written over the last one's in the same buffer.
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(conversationBody(100_000), &req); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[`)
	for _, m := range req.Messages[:len(req.Messages)-1] {
		body = append(append(body, m...), ',')
	}
	earlier := len(body)
	next := func(i int) []byte {
		body = fmt.Appendf(body[:earlier], `{"role":"user","content":"Question %d: what did the last answer leave out, and why?"}]}`, i)
		return body
	}
	turn(next(0)) // the turn seen before
	turn(next(1)) // the memo records what it marked
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	i := 2
	for b.Loop() {
		turn(next(i))
		i++
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkRenderAnthropicCached is BenchmarkRenderOpenAICached for the
// same conversation as a Messages request (the system prompt at the top).
func BenchmarkRenderAnthropicCached(b *testing.B) {
	var req struct {
		Model    string           `json:"model"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(conversationBody(32000), &req); err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"model": req.Model, "max_tokens": 256,
		"system": req.Messages[0]["content"], "messages": req.Messages[1:]})
	if err != nil {
		b.Fatal(err)
	}
	benchCachedRender(b, "qwen3", body, true)
}

// BenchmarkParseJSON32K isolates the request-body decoding step.
func BenchmarkParseJSON32K(b *testing.B) {
	body := conversationBody(32000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := jinja.ParseJSON(body); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

func TestConversationBodySize(t *testing.T) {
	t.Parallel()
	body := conversationBody(32000)
	if n := len(body); n < 120_000 || n > 160_000 {
		t.Fatalf("body is %d bytes, want about 128 KB", n)
	}
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := ct.RenderOpenAI(body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out, "<|im_start|>assistant\n") || strings.Count(out, "<|im_start|>") != 83 {
		t.Fatalf("unexpected render: %d turns, suffix %q", strings.Count(out, "<|im_start|>"), out[max(0, len(out)-40):])
	}
}

// BenchmarkLoadChatTemplate measures reading tokenizer_config.json and
// compiling its templates (B/op is the garbage made; the retained template
// is a small fraction of it).
func BenchmarkLoadChatTemplate(b *testing.B) {
	for _, fam := range chatFamilies {
		b.Run(fam, func(b *testing.B) {
			dir := filepath.Join("testdata", "models", fam)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := LoadChatTemplate(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
