package tokenize

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
)

// memoConversation grows a chat the ways chats grow (an assistant reply
// and a user message, tool calls and their results, a reasoning trace, a
// changed system prompt, an edited earlier turn) and gives each turn's
// request body.
type memoConversation struct {
	rng   *rand.Rand
	msgs  []map[string]any
	tools bool
	n     int
}

func (c *memoConversation) text() string {
	words := []string{"route", "the", "cache", "prefix", "worker", "ok", "\n", "</think>", "<tool_response>", "é", "  "}
	var b strings.Builder
	for range 1 + c.rng.IntN(8) {
		b.WriteString(words[c.rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	c.n++
	fmt.Fprintf(&b, "t%d", c.n)
	return b.String()
}

func (c *memoConversation) assistant() map[string]any {
	m := map[string]any{"role": "assistant", "content": c.text()}
	switch c.rng.IntN(5) {
	case 0:
		m["content"] = "<think>\n" + c.text() + "\n</think>\n\n" + c.text()
	case 1:
		m["reasoning_content"] = c.text()
	case 2:
		if c.tools {
			m["tool_calls"] = []any{map[string]any{"id": fmt.Sprint("call", c.n), "type": "function",
				"function": map[string]any{"name": "lookup", "arguments": map[string]any{"q": c.text()}}}}
		}
	}
	return m
}

// grow changes the conversation and reports the body of its next turn.
func (c *memoConversation) grow() []byte {
	last := c.msgs[len(c.msgs)-1]
	switch r := c.rng.IntN(10); {
	case last["role"] == "user":
		c.msgs = append(c.msgs, c.assistant())
	case last["tool_calls"] != nil:
		c.msgs = append(c.msgs, map[string]any{"role": "tool", "tool_call_id": "x", "content": c.text()})
		if c.rng.IntN(2) == 0 {
			c.msgs = append(c.msgs, map[string]any{"role": "tool", "tool_call_id": "y", "content": c.text()})
		}
	case r == 0 && c.msgs[0]["role"] == "system":
		c.msgs[0] = map[string]any{"role": "system", "content": c.text()}
	case r == 1 && len(c.msgs) > 3:
		i := 1 + c.rng.IntN(len(c.msgs)-2)
		if c.msgs[i]["role"] == "user" {
			c.msgs[i] = map[string]any{"role": "user", "content": c.text()}
		}
	default:
		if last["role"] != "assistant" && last["role"] != "tool" {
			c.msgs = append(c.msgs, c.assistant())
		}
		c.msgs = append(c.msgs, map[string]any{"role": "user", "content": c.text()})
	}
	req := map[string]any{"model": "m", "messages": c.msgs}
	if c.tools {
		req["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}}}
	}
	if c.rng.IntN(4) == 0 {
		req["add_generation_prompt"] = false
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// TestRenderMemoMatchesRender renders growing conversations through each
// family's template with the render memo and without, from one body
// parser (whose cache hands the same messages back as the same dicts):
// the text must be the same, byte for byte, and the memo must have
// replayed messages.
func TestRenderMemoMatchesRender(t *testing.T) {
	t.Parallel()
	// Whether each family's message loop can be kept: DeepSeek V3's
	// assigns namespace attributes in it and gpt-oss's calls macros, so
	// theirs run every time (and must still render the same).
	for fam, replays := range map[string]bool{"qwen3": true, "llama3": true, "gemma3": true, "deepseek-v3": false, "gpt-oss": false} {
		t.Run(fam, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("testdata", "models", fam)
			plain, err := LoadChatTemplate(dir, WithClock(goldenNow), WithRenderMemo(0))
			if err != nil {
				t.Fatal(err)
			}
			memo, err := LoadChatTemplate(dir, WithClock(goldenNow))
			if err != nil {
				t.Fatal(err)
			}
			bp := NewBodyParser(8 << 20)
			rendered := 0
			for seed := range uint64(6) {
				c := &memoConversation{rng: rand.New(rand.NewPCG(seed, 11)), tools: seed%2 == 1}
				if seed%3 != 2 {
					c.msgs = append(c.msgs, map[string]any{"role": "system", "content": c.text()})
				}
				c.msgs = append(c.msgs, map[string]any{"role": "user", "content": c.text()})
				for turn := range 30 {
					body := c.grow()
					pb, err := bp.Parse(body)
					if err != nil {
						t.Fatal(err)
					}
					want, werr := plain.renderBody(pb, false)
					got, gerr := memo.renderBody(pb, false)
					if (werr == nil) != (gerr == nil) || got != want {
						t.Fatalf("seed %d turn %d: with the memo\n%v\n%s\nwithout: %v", seed, turn, gerr, firstDiff(got, want), werr)
					}
					if werr == nil {
						rendered++
					}
				}
			}
			hits := memo.memoStats().Hits
			t.Logf("%d turns rendered, %d message iterations replayed", rendered, hits)
			if rendered == 0 || replays != (hits > 0) {
				t.Errorf("%d turns rendered, %d iterations replayed; want replays: %v", rendered, hits, replays)
			}
		})
	}
}
