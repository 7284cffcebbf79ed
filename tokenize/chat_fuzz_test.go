package tokenize

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// FuzzRenderOpenAI renders arbitrary request bodies with every family's
// template, seeded from the request goldens: no panic, no engine bug, a
// defined error class, the same result twice.
func FuzzRenderOpenAI(f *testing.F) {
	for _, kind := range []string{"openai", "anthropic"} {
		for _, c := range loadRequestCases(f, kind) {
			f.Add(c.Body, kind == "anthropic")
		}
	}
	f.Add(`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array","items":{"type":"object"}}}}}}]}`, false)
	var templates []*ChatTemplate
	for _, fam := range chatFamilies {
		ct, err := LoadChatTemplate(filepath.Join("testdata", "models", fam), WithClock(goldenNow))
		if err != nil {
			f.Fatal(err)
		}
		templates = append(templates, ct)
	}
	f.Fuzz(func(t *testing.T, body string, anthropic bool) {
		for _, ct := range templates {
			render := ct.RenderOpenAI
			if anthropic {
				render = ct.RenderAnthropic
			}
			out1, err1 := render([]byte(body))
			if err1 != nil {
				if errors.Is(err1, jinja.ErrInternal) {
					t.Fatalf("internal error: %v", err1)
				}
				if !errors.Is(err1, ErrBadRequest) && !errors.Is(err1, ErrUnsupportedRequest) && !errors.Is(err1, ErrTemplate) {
					t.Fatalf("error outside the defined classes: %v", err1)
				}
			}
			out2, err2 := render([]byte(body))
			if out1 != out2 || (err1 == nil) != (err2 == nil) {
				t.Fatal("not deterministic")
			}
		}
	})
}
