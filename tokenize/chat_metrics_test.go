package tokenize

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/component"
)

func TestChatMetricsCountResults(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewChatMetrics(component.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewChatMetrics(component.Options{Registerer: reg}); err == nil {
		t.Fatal("second registration on the same registry must fail")
	}
	ct, err := LoadChatTemplate(filepath.Join("testdata", "models", "gemma3"), WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	bodies := []struct {
		anthropic bool
		body      string
	}{
		{false, `{"messages":[{"role":"user","content":"hi"}]}`},
		{false, `{"messages":[{"role":"user","content":"hi"}]}`},
		{false, `not json`},
		{false, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`},
		{false, `{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`},
		{true, `{"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, b := range bodies {
		if b.anthropic {
			_, _ = ct.RenderAnthropic([]byte(b.body))
		} else {
			_, _ = ct.RenderOpenAI([]byte(b.body))
		}
	}
	const want = `
# HELP warmpath_tokenize_chat_renders_total Chat requests rendered to prompt text locally, by API (openai, anthropic) and result (ok, bad_request, unsupported, template_error).
# TYPE warmpath_tokenize_chat_renders_total counter
warmpath_tokenize_chat_renders_total{api="anthropic",result="ok"} 1
warmpath_tokenize_chat_renders_total{api="openai",result="bad_request"} 1
warmpath_tokenize_chat_renders_total{api="openai",result="ok"} 2
warmpath_tokenize_chat_renders_total{api="openai",result="template_error"} 1
warmpath_tokenize_chat_renders_total{api="openai",result="unsupported"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
