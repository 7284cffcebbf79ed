package tokenize

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// TestTemplateCorpus compares renders of many real templates with the
// reference renders made by testdata/chat/gen_template_corpus.py. It is
// opt-in: set WARMPATH_TEMPLATE_CORPUS to the generated file.
func TestTemplateCorpus(t *testing.T) {
	path := os.Getenv("WARMPATH_TEMPLATE_CORPUS")
	if path == "" {
		t.Skip("set WARMPATH_TEMPLATE_CORPUS to a file made by testdata/chat/gen_template_corpus.py")
	}
	t.Parallel()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var items []struct {
		Template, Case, Src string
		Conv                json.RawMessage
		Want, Error         *string
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		t.Fatal(err)
	}
	special := jinja.NewDict(2)
	special.Set("bos_token", "<s>")
	special.Set("eos_token", "</s>")
	compiled := map[string]*ChatTemplate{}
	for _, it := range items {
		ct, ok := compiled[it.Template]
		if !ok {
			ct, err = newChatTemplate(&tokenizerConfig{templates: map[string]string{"default": it.Src}, special: special}, WithClock(goldenNow))
			if err != nil {
				t.Errorf("%s: %v", it.Template, err)
				continue
			}
			compiled[it.Template] = ct
		}
		cv, err := jinja.ParseJSON(it.Conv)
		if err != nil {
			t.Fatal(err)
		}
		d := cv.(*jinja.Dict)
		msgs, _ := d.Get("messages")
		in := &chatInput{Messages: msgs.(*jinja.List)}
		in.Tools, _ = d.Get("tools")
		in.Documents, _ = d.Get("documents")
		if agp, ok := d.Get("add_generation_prompt"); ok {
			in.AddGenerationPrompt = agp.(bool)
		}
		if kw, ok := d.Get("kwargs"); ok {
			in.Kwargs = kw.(*jinja.Dict)
		}
		got, err := ct.render(in)
		switch {
		case it.Want == nil && err == nil:
			t.Errorf("%s/%s: rendered, want error %s", it.Template, it.Case, *it.Error)
		case it.Want != nil && err != nil:
			t.Errorf("%s/%s: %v", it.Template, it.Case, err)
		case it.Want != nil && got != *it.Want:
			t.Errorf("%s/%s: mismatch\n%s", it.Template, it.Case, firstDiff(got, *it.Want))
		}
	}
	t.Logf("%d renders of %d templates compared", len(items), len(compiled))
}
