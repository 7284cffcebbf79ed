package tokenize

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadChatTemplateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		want  error
	}{
		{"missing config", map[string]string{}, fs.ErrNotExist},
		{"no template", map[string]string{"tokenizer_config.json": `{"bos_token": "<s>"}`}, ErrNoChatTemplate},
		{"null template", map[string]string{"tokenizer_config.json": `{"chat_template": null}`}, ErrNoChatTemplate},
		{"invalid json", map[string]string{"tokenizer_config.json": `{"chat_template": `}, nil},
		{"template not string", map[string]string{"tokenizer_config.json": `{"chat_template": 5}`}, nil},
		{"named template malformed", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default"}]}`}, nil},
		{"bad token type", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "bos_token": 5}`}, nil},
		{"added token without content", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "eos_token": {"lstrip": false}}`}, nil},
		{"syntax error", map[string]string{"tokenizer_config.json": `{"chat_template": "{% if %}"}`}, nil},
		{"unsupported statement", map[string]string{"tokenizer_config.json": `{"chat_template": "{% include 'x' %}"}`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadChatTemplate(writeDir(t, tc.files))
			if err == nil {
				t.Fatal("want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := LoadChatTemplate(filepath.Join("testdata", "models", "llama2")); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("llama2: err = %v, want ErrNoChatTemplate", err)
	}
}

func TestLoadChatTemplateForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		body  string
		want  string
	}{
		{
			name: "added token objects and extra special tokens",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ boi_token }}|{{ unk_token }}",
				"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
				"extra_special_tokens": {"boi_token": "<img>"}}`},
			body: `{"messages": [{"role": "user", "content": "x"}]}`,
			want: "<s>|</s>||<img>|",
		},
		{
			name:  "named templates pick default",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "D{{ tools is none }}"}, {"name": "tool_use", "template": "T{{ tools | length }}"}]}`},
			body:  `{"messages": [{"role": "user", "content": "x"}]}`,
			want:  "DTrue",
		},
		{
			name:  "named templates pick tool_use with tools",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T{{ tools | length }}"}]}`},
			body:  `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}`,
			want:  "T1",
		},
		{
			name: "chat_template.jinja wins over the config",
			files: map[string]string{
				"tokenizer_config.json": `{"chat_template": "config"}`,
				"chat_template.jinja":   "file {{ messages[0].content }}\n",
			},
			body: `{"messages": [{"role": "user", "content": "x"}]}`,
			want: "file x",
		},
		{
			name:  "kwargs override special tokens",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{{ bos_token }}{{ extra }}", "bos_token": "<s>"}`},
			body:  `{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"bos_token": "B", "extra": 1.0}}`,
			want:  "B1.0",
		},
		{
			name:  "reasoning_effort becomes a template variable",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "{{ reasoning_effort }}"}`},
			body:  `{"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high"}`,
			want:  "high",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ct, err := LoadChatTemplate(writeDir(t, tc.files))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ct.RenderOpenAI([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNamedTemplatesWithoutDefault(t *testing.T) {
	t.Parallel()
	ct, err := LoadChatTemplate(writeDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]}`}))
	if err != nil {
		t.Fatal(err)
	}
	if got := ct.TemplateNames(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("TemplateNames() = %v", got)
	}
	if _, err := ct.RenderOpenAI([]byte(`{"messages": [{"role": "user", "content": "x"}]}`)); !errors.Is(err, ErrNoChatTemplate) {
		t.Fatalf("err = %v, want ErrNoChatTemplate", err)
	}
}

func TestContentFormat(t *testing.T) {
	t.Parallel()
	files := map[string]string{"tokenizer_config.json": `{"chat_template": "{% for m in messages %}{{ m.content is string }}{% endfor %}"}`}
	body := []byte(`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}`)
	tests := []struct {
		format ContentFormat
		want   string
	}{
		{ContentAuto, "True"},
		{ContentString, "True"},
		{ContentOpenAI, "False"},
	}
	for _, tc := range tests {
		t.Run(string(tc.format), func(t *testing.T) {
			t.Parallel()
			ct, err := LoadChatTemplate(writeDir(t, files), WithContentFormat(tc.format))
			if err != nil {
				t.Fatal(err)
			}
			got, err := ct.RenderOpenAI(body)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := LoadChatTemplate(writeDir(t, files), WithContentFormat("xml")); err == nil {
		t.Fatal("unknown content format must be an error")
	}
}

func TestIteratesContent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		want bool
	}{
		{"{%- for item in message['content'] -%}", true},
		{"{% for part in msg.content %}", true},
		{"{% for c in message.content | selectattr('type', 'eq', 'text') %}", true},
		{"{{ message['content'] }}", false},
		{"{% for m in messages %}{{ m.content }}{% endfor %}", false},
	}
	for _, tc := range tests {
		if got := iteratesContent(tc.src); got != tc.want {
			t.Errorf("iteratesContent(%q) = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestDefaultKwargs(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": "{{ enable_thinking }}/{{ other }}"}`})
	ct, err := LoadChatTemplate(dir, WithDefaultKwargs([]byte(`{"enable_thinking": false, "other": 1}`)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ body, want string }{
		{`{"messages": [{"role": "user", "content": "x"}]}`, "False/1"},
		{`{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": true}}`, "True/1"},
	}
	for _, tc := range tests {
		got, err := ct.RenderOpenAI([]byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	for _, bad := range []string{`[1]`, `{`} {
		if _, err := LoadChatTemplate(dir, WithDefaultKwargs([]byte(bad))); err == nil {
			t.Errorf("default kwargs %s: want an error", bad)
		}
	}
}

func TestExcludeToolsWhenToolChoiceNone(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": "{{ tools | length if tools else 'none' }}"}`})
	body := []byte(`{"messages": [{"role": "user", "content": "x"}], "tool_choice": "none", "tools": [{"type": "function", "function": {"name": "f"}}]}`)
	for _, tc := range []struct {
		opts []ChatOption
		want string
	}{
		{nil, "1"},
		{[]ChatOption{WithExcludeToolsWhenToolChoiceNone()}, "none"},
	} {
		ct, err := LoadChatTemplate(dir, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ct.RenderOpenAI(body)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
