package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

type requestCase struct {
	Name   string          `json:"name"`
	Family string          `json:"family"`
	Body   string          `json:"body"`
	VLLM   json.RawMessage `json:"vllm"`
}

func loadRequestCases(t testing.TB, kind string) []requestCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "chat", "cases_"+kind+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []requestCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// templateCache loads each family's template once per test binary.
type templateCache struct {
	mu sync.Mutex
	m  map[string]*ChatTemplate
}

func (c *templateCache) get(t testing.TB, family string) *ChatTemplate {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ct, ok := c.m[family]; ok {
		return ct
	}
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", family), WithClock(goldenNow))
	if err != nil {
		t.Fatal(err)
	}
	if c.m == nil {
		c.m = map[string]*ChatTemplate{}
	}
	c.m[family] = ct
	return ct
}

func mustJSON(t testing.TB, v jinja.Value) string {
	t.Helper()
	s, err := jinja.ToJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRenderRequestGoldens(t *testing.T) {
	t.Parallel()
	want := loadExpected(t, "requests")
	var cache templateCache
	for _, kind := range []string{"openai", "anthropic"} {
		for _, c := range loadRequestCases(t, kind) {
			t.Run(kind+"/"+c.Name, func(t *testing.T) {
				t.Parallel()
				ct := cache.get(t, c.Family)
				// The normalised conversation matches the one the golden was rendered from.
				ref, err := jinja.ParseJSON(c.VLLM)
				if err != nil {
					t.Fatal(err)
				}
				refD := ref.(*jinja.Dict)
				body, err := jinja.ParseJSON([]byte(c.Body))
				if err != nil {
					t.Fatal(err)
				}
				req := body.(*jinja.Dict)
				if kind == "anthropic" {
					if req, err = anthropicToOpenAI(req); err != nil {
						t.Fatal(err)
					}
				}
				in, err := ct.openAIInput(req)
				if err != nil {
					t.Fatal(err)
				}
				wantMsgs, _ := refD.Get("messages")
				if got, w := mustJSON(t, in.Messages), mustJSON(t, wantMsgs); got != w {
					t.Errorf("messages\n got %s\nwant %s", got, w)
				}
				wantTools, _ := refD.Get("tools")
				if got, w := mustJSON(t, in.Tools), mustJSON(t, wantTools); got != w {
					t.Errorf("tools\n got %s\nwant %s", got, w)
				}
				render := ct.RenderOpenAI
				if kind == "anthropic" {
					render = ct.RenderAnthropic
				}
				got, err := render([]byte(c.Body))
				w := want[kind+"/"+c.Name]
				if strings.HasPrefix(w, "RENDER ERROR") {
					if err == nil {
						t.Fatalf("rendered %q, want error %s", got, w)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got != w {
					t.Fatalf("mismatch\n%s", firstDiff(got, w))
				}
			})
		}
	}
}

func TestRenderOpenAIErrors(t *testing.T) {
	t.Parallel()
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		want error
	}{
		{"not json", `{"messages": [`, ErrBadRequest},
		{"not an object", `[1]`, ErrBadRequest},
		{"no messages", `{}`, ErrBadRequest},
		{"empty messages", `{"messages": []}`, ErrBadRequest},
		{"message not object", `{"messages": ["hi"]}`, ErrBadRequest},
		{"role not string", `{"messages": [{"role": 1, "content": "x"}]}`, ErrBadRequest},
		{"content number", `{"messages": [{"role": "user", "content": 5}]}`, ErrBadRequest},
		{"image part", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, ErrUnsupportedRequest},
		{"request template", `{"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ 1 }}"}`, ErrUnsupportedRequest},
		{"tools not list", `{"messages": [{"role": "user", "content": "x"}], "tools": {}}`, ErrBadRequest},
		{"tool without name", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]}`, ErrBadRequest},
		{"tool wrong type", `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval", "function": {"name": "f"}}]}`, ErrBadRequest},
		{"kwargs not object", `{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 3}`, ErrBadRequest},
		{"kwargs sets template", `{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"chat_template": "x"}}`, ErrBadRequest},
		{"generation prompt not bool", `{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"}`, ErrBadRequest},
		{"continue and generation prompt", `{"messages": [{"role": "user", "content": "x"}], "continue_final_message": true}`, ErrBadRequest},
		{"deep nesting", `{"messages": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ct.RenderOpenAI([]byte(tc.body))
			if err == nil {
				t.Fatal("want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRenderAnthropicErrors(t *testing.T) {
	t.Parallel()
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
		want error
	}{
		{"not json", `{`, ErrBadRequest},
		{"system number", `{"system": 3, "messages": [{"role": "user", "content": "x"}]}`, ErrBadRequest},
		{"content number", `{"messages": [{"role": "user", "content": 3}]}`, ErrBadRequest},
		{"image block", `{"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`, ErrUnsupportedRequest},
		{"tool_use without id", `{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]}`, ErrUnsupportedRequest},
		{"tools not list", `{"messages": [{"role": "user", "content": "x"}], "tools": 1}`, ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := ct.RenderAnthropic([]byte(tc.body)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestRenderOpenAIConcurrent renders with one ChatTemplate from many
// goroutines (run with -race): renders share the compiled template, the
// special tokens and default kwargs, and must not disturb each other.
func TestRenderOpenAIConcurrent(t *testing.T) {
	t.Parallel()
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "gpt-oss"), WithClock(goldenNow),
		WithDefaultKwargs([]byte(`{"reasoning_effort": "low"}`)))
	if err != nil {
		t.Fatal(err)
	}
	cases := loadRequestCases(t, "openai")
	want := make([]string, len(cases))
	for i, c := range cases {
		want[i], _ = ct.RenderOpenAI([]byte(c.Body))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 20 {
				i := (g + k) % len(cases)
				got, _ := ct.RenderOpenAI([]byte(cases[i].Body))
				if got != want[i] {
					t.Errorf("%s: concurrent render differs", cases[i].Name)
				}
			}
		})
	}
	wg.Wait()
}

// TestRenderSharedMessages renders every golden request (OpenAI and
// Anthropic) through one body parser, three times, so that from the second
// pass on the messages come from its cache and their converted, normalized
// and prepared forms from the derivations filed on them, and from the
// third the render memo replays what the second recorded for them: each
// render must still match its golden, and a request
// that tags its final message (continue_final_message) must not leave the
// tag on the shared message for the next request that repeats it.
func TestRenderSharedMessages(t *testing.T) {
	t.Parallel()
	want := loadExpected(t, "requests")
	var cache templateCache
	bp := NewBodyParser(1 << 20)
	render := func(kind string, c requestCase) {
		t.Helper()
		ct := cache.get(t, c.Family)
		b, err := bp.Parse([]byte(c.Body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.renderBody(b, kind == "anthropic")
		w := want[kind+"/"+c.Name]
		if strings.HasPrefix(w, "RENDER ERROR") {
			if err == nil {
				t.Errorf("%s/%s: rendered %q, want error %s", kind, c.Name, got, w)
			}
			return
		}
		if err != nil {
			t.Errorf("%s/%s: %v", kind, c.Name, err)
		} else if got != w {
			t.Errorf("%s/%s: mismatch\n%s", kind, c.Name, firstDiff(got, w))
		}
	}
	for range 3 {
		for _, kind := range []string{"openai", "anthropic"} {
			for _, c := range loadRequestCases(t, kind) {
				render(kind, c)
			}
		}
	}
	if bp.Stats().Hits == 0 {
		t.Fatal("the second pass reused no message: the test does not reach the derivations")
	}
	// The families whose message loops the memo takes and whose golden
	// messages are long enough for the body parser to keep (llama3's two
	// cases are not; TestRenderMemoMatchesRender covers it).
	for _, family := range []string{"qwen3", "gemma3"} {
		if cache.get(t, family).memoStats().Hits == 0 {
			t.Errorf("%s: the third pass replayed nothing: the test does not reach the render memo", family)
		}
	}

	// The same long messages, first with the final one continued, then
	// with a user message after it.
	long := strings.Repeat("a long enough message to be cached ", 4)
	msgs := `{"role":"user","content":"` + long + `"},{"role":"assistant","content":"` + long + `"}`
	cont := `{"messages":[` + msgs + `],"add_generation_prompt":false,"continue_final_message":true}`
	next := `{"messages":[` + msgs + `,{"role":"user","content":"and then?"}]}`
	ct := cache.get(t, "qwen3")
	fresh, err := ct.RenderOpenAI([]byte(next))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{cont, next} {
		b, err := bp.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.renderBody(b, false)
		if err != nil {
			t.Fatal(err)
		}
		if body == cont && strings.HasSuffix(got, "<|im_end|>\n") {
			t.Errorf("continued render closes the final message:\n%s", got)
		}
		if body == next && got != fresh {
			t.Errorf("render after a continued one differs from a fresh one\n%s", firstDiff(got, fresh))
		}
	}
}

// TestRenderSharedMessagesConcurrent is TestRenderSharedMessages from many
// goroutines at once (run with -race): the renders share the body parser's
// dicts, the derivations filed on them and the render memo's entries, and
// each must still match its golden.
func TestRenderSharedMessagesConcurrent(t *testing.T) {
	t.Parallel()
	want := loadExpected(t, "requests")
	cases := loadRequestCases(t, "openai")
	var cache templateCache
	bp := NewBodyParser(1 << 20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 3 * len(cases) {
				c := cases[(g+k)%len(cases)]
				b, err := bp.Parse([]byte(c.Body))
				if err != nil {
					t.Error(err)
					return
				}
				got, err := cache.get(t, c.Family).renderBody(b, false)
				switch w := want["openai/"+c.Name]; {
				case strings.HasPrefix(w, "RENDER ERROR"):
					if err == nil {
						t.Errorf("%s: rendered %q, want error %s", c.Name, got, w)
					}
				case err != nil:
					t.Errorf("%s: %v", c.Name, err)
				case got != w:
					t.Errorf("%s: mismatch\n%s", c.Name, firstDiff(got, w))
				}
			}
		})
	}
	wg.Wait()
	if cache.get(t, "qwen3").memoStats().Hits == 0 {
		t.Error("qwen3: no render replayed: the test does not reach the render memo")
	}
}
