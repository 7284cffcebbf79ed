package tokenize

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// TestTemplateCorpus compares renders of many real templates with the
// reference renders made by testdata/chat/gen_template_corpus.py, three
// times each so that the render memo replays what it recorded. It is
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
	shared := map[string]*jinja.Dict{}
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
		// Equal messages are one Dict across conversations, as the body
		// parser's cache makes them across requests: the memo meets a
		// message it recorded in another conversation's context.
		for i, m := range msgs.(*jinja.List).Items {
			if md, ok := m.(*jinja.Dict); ok {
				k := mustJSON(t, md)
				if s, ok := shared[k]; ok {
					msgs.(*jinja.List).Items[i] = s
				} else {
					shared[k] = md
				}
			}
		}
		in := &chatInput{Messages: msgs.(*jinja.List)}
		in.Tools, _ = d.Get("tools")
		in.Documents, _ = d.Get("documents")
		if agp, ok := d.Get("add_generation_prompt"); ok {
			in.AddGenerationPrompt = agp.(bool)
		}
		if kw, ok := d.Get("kwargs"); ok {
			in.Kwargs = kw.(*jinja.Dict)
		}
		// Three renders of the same messages: the render memo marks them
		// in the first, records their iterations in the second and
		// replays them in the third, which must still match.
		for pass := range 3 {
			got, err := ct.render(in)
			switch {
			case it.Want == nil && err == nil:
				t.Errorf("%s/%s, render %d: rendered, want error %s", it.Template, it.Case, pass+1, *it.Error)
			case it.Want != nil && err != nil:
				t.Errorf("%s/%s, render %d: %v", it.Template, it.Case, pass+1, err)
			case it.Want != nil && got != *it.Want:
				t.Errorf("%s/%s, render %d: mismatch\n%s", it.Template, it.Case, pass+1, firstDiff(got, *it.Want))
			}
		}
	}
	replayed := 0
	for _, ct := range compiled {
		if ct.memoStats().Hits > 0 {
			replayed++
		}
	}
	t.Logf("%d conversations of %d templates compared, each rendered three times; the memo replayed iterations of %d templates",
		len(items), len(compiled), replayed)
	if replayed == 0 {
		t.Error("the memo replayed nothing: the test does not reach it")
	}
}
