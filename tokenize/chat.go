package tokenize

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// Errors returned by chat rendering. Each is wrapped with context; branch with
// errors.Is.
var (
	// ErrBadRequest means the request body is not a chat request this
	// package can read (invalid JSON, wrong field types).
	ErrBadRequest = errors.New("bad chat request")
	// ErrUnsupportedRequest means the request is valid but needs something local
	// rendering does not do exactly (images, audio, a request-supplied
	// template); the caller should use the worker's /tokenize instead.
	ErrUnsupportedRequest = errors.New("unsupported chat request")
	// ErrTemplate means the chat template failed, including its own
	// raise_exception.
	ErrTemplate = errors.New("chat template error")
)

// ChatTemplate renders chat requests to prompt text exactly as vLLM does
// with transformers' apply_chat_template. Templates are compiled once by
// LoadChatTemplate. A ChatTemplate is immutable and safe for concurrent use.
//
// vLLM does not use the chat template for every model: for gpt-oss
// (model_type "gpt_oss") its /v1/chat/completions renders with the Harmony
// library instead, while its /tokenize still applies the template. Route
// such models by the worker's own tokens, not by this renderer.
type ChatTemplate struct {
	templates map[string]*jinja.Template
	sources   map[string]string
	special   *jinja.Dict
	now       func() time.Time
	// openaiContent is true when the default template iterates over message
	// content, so vLLM passes content as a list of parts ("openai" format).
	openaiContent map[string]bool
	metrics       *ChatMetrics
	// memos keep each template's message iterations for the next turn
	// (jinja.Memo); nil when memoBytes is zero.
	memos         map[string]*jinja.Memo
	memoBytes     int
	contentFormat ContentFormat

	defaultKwargsJSON  []byte
	defaultKwargs      *jinja.Dict
	excludeToolsOnNone bool
}

// ChatOption configures LoadChatTemplate.
type ChatOption func(*ChatTemplate)

// ContentFormat is how message content reaches the template, as vLLM's
// --chat-template-content-format sets it.
type ContentFormat string

// Content formats.
const (
	// ContentAuto detects the format from the template: "openai" when it
	// loops over a message's content, else "string" (vLLM's default).
	ContentAuto ContentFormat = "auto"
	// ContentString joins text parts with "\n" into one string.
	ContentString ContentFormat = "string"
	// ContentOpenAI passes content as a list of {"type": "text", "text"} parts.
	ContentOpenAI ContentFormat = "openai"
)

// WithContentFormat overrides content-format detection; use the value the
// workers run with (--chat-template-content-format). The default is
// ContentAuto.
func WithContentFormat(f ContentFormat) ChatOption {
	return func(c *ChatTemplate) { c.contentFormat = f }
}

// WithDefaultKwargs sets template variables applied under every request's
// chat_template_kwargs, as vLLM's --default-chat-template-kwargs does. kwargs
// must be a JSON object; LoadChatTemplate reports an error otherwise.
func WithDefaultKwargs(kwargs []byte) ChatOption {
	return func(c *ChatTemplate) { c.defaultKwargsJSON = kwargs }
}

// WithExcludeToolsWhenToolChoiceNone drops the tools from the template when
// a request sets "tool_choice": "none", as vLLM does with
// --exclude-tools-when-tool-choice-none.
func WithExcludeToolsWhenToolChoiceNone() ChatOption {
	return func(c *ChatTemplate) { c.excludeToolsOnNone = true }
}

// DefaultRenderMemoBytes is the default budget of WithRenderMemo.
const DefaultRenderMemoBytes = 32 << 20

// WithRenderMemo bounds the memory of each template's render memo: the
// output of each message's iteration, which the next turn of the
// conversation replays instead of rendering the message again when its
// context is unchanged (jinja.Memo). The memo keeps the messages it holds
// alive beside the text. Zero turns it off; the default is
// DefaultRenderMemoBytes.
func WithRenderMemo(bytes int) ChatOption {
	return func(c *ChatTemplate) { c.memoBytes = bytes }
}

// memoStats returns the counters of the templates' render memos, summed.
func (c *ChatTemplate) memoStats() jinja.MemoStats {
	var s jinja.MemoStats
	for _, m := range c.memos {
		ms := m.Stats()
		s.Hits, s.Misses, s.Kept = s.Hits+ms.Hits, s.Misses+ms.Misses, s.Kept+ms.Kept
		s.Entries, s.Bytes = s.Entries+ms.Entries, s.Bytes+ms.Bytes
	}
	return s
}

// WithClock sets the clock behind the templates' strftime_now (default
// time.Now); tests use it to render dates deterministically.
func WithClock(now func() time.Time) ChatOption {
	return func(c *ChatTemplate) { c.now = now }
}

// LoadChatTemplate reads dir/tokenizer_config.json (and dir/chat_template.jinja
// when present) and compiles every chat template in it. It returns an error
// wrapping ErrNoChatTemplate when the directory defines none.
func LoadChatTemplate(dir string, opts ...ChatOption) (*ChatTemplate, error) {
	cfg, err := readTokenizerConfig(dir)
	if err != nil {
		return nil, err
	}
	return newChatTemplate(cfg, opts...)
}

func newChatTemplate(cfg *tokenizerConfig, opts ...ChatOption) (*ChatTemplate, error) {
	if len(cfg.templates) == 0 {
		return nil, fmt.Errorf("load chat template: %w", ErrNoChatTemplate)
	}
	c := &ChatTemplate{
		templates:     make(map[string]*jinja.Template, len(cfg.templates)),
		sources:       cfg.templates,
		special:       cfg.special,
		now:           time.Now,
		openaiContent: make(map[string]bool, len(cfg.templates)),
		memoBytes:     DefaultRenderMemoBytes,
	}
	for _, o := range opts {
		o(c)
	}
	if c.defaultKwargsJSON != nil {
		v, err := jinja.ParseJSON(c.defaultKwargsJSON)
		if err != nil {
			return nil, fmt.Errorf("load chat template: default kwargs: %w", err)
		}
		d, ok := v.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("load chat template: default kwargs must be a JSON object")
		}
		c.defaultKwargs = d
	}
	switch c.contentFormat {
	case "", ContentAuto, ContentString, ContentOpenAI:
	default:
		return nil, fmt.Errorf("load chat template: unknown content format %q", c.contentFormat)
	}
	for name, src := range cfg.templates {
		t, err := jinja.Compile(src)
		if err != nil {
			return nil, fmt.Errorf("compile chat template %q: %w", name, err)
		}
		c.templates[name] = t
		if c.memoBytes > 0 {
			if c.memos == nil {
				c.memos = make(map[string]*jinja.Memo, len(cfg.templates))
			}
			c.memos[name] = jinja.NewMemo(c.memoBytes)
		}
		switch c.contentFormat {
		case ContentString:
			c.openaiContent[name] = false
		case ContentOpenAI:
			c.openaiContent[name] = true
		default:
			c.openaiContent[name] = iteratesContent(src)
		}
	}
	return c, nil
}

// contentLoop finds a for loop over a message's content, the signal vLLM's
// content-format detection uses to choose the "openai" (list of parts) form.
var contentLoop = regexp.MustCompile(`\{%-?\s*for\s+\w+\s+in\s+\w+(\[\s*['"]content['"]\s*\]|\.content)\s*(-?%\}|\||if)`)

func iteratesContent(src string) bool { return contentLoop.MatchString(src) }

// TemplateNames returns the names of the compiled templates, sorted.
func (c *ChatTemplate) TemplateNames() []string {
	names := make([]string, 0, len(c.templates))
	for n := range c.templates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pick chooses the template as transformers' get_chat_template does.
func (c *ChatTemplate) pick(hasTools bool) (string, error) {
	if len(c.templates) == 1 {
		for n := range c.templates {
			return n, nil
		}
	}
	if hasTools {
		if _, ok := c.templates["tool_use"]; ok {
			return "tool_use", nil
		}
	}
	if _, ok := c.templates["default"]; ok {
		return "default", nil
	}
	return "", fmt.Errorf("pick chat template: several named templates and none is \"default\": %w", ErrNoChatTemplate)
}

// chatInput is a conversation ready for the template, already normalised
// the way vLLM normalises requests. Values are jinja value trees (see
// ParseJSON in the internal package); Render never modifies them.
type chatInput struct {
	Messages             *jinja.List
	Tools                jinja.Value // nil or *jinja.List
	Documents            jinja.Value // nil or *jinja.List
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	// Kwargs are extra template variables (chat_template_kwargs), applied
	// last so they override everything else, as in vLLM.
	Kwargs *jinja.Dict
	// SizeHint is the expected size of the rendered prompt in bytes (the
	// request body's size is a good one); zero means no hint.
	SizeHint int
}

const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// renderSlack is what the render's buffer reserves beyond the caller's
// hint (the body's size, which a conversation's text rarely exceeds: its
// JSON quotes, escapes and keys outweigh the template's role markers). A
// render that outgrows it grows the buffer as it goes, and jinja's Render
// copies the text to fit when the buffer ends up well over it.
const renderSlack = 256

// render runs transformers' apply_chat_template(tokenize=False) steps on in.
func (c *ChatTemplate) render(in *chatInput) (string, error) {
	agp, cfm := jinja.Value(in.AddGenerationPrompt), jinja.Value(in.ContinueFinalMessage)
	tools, docs := in.Tools, in.Documents
	extra := jinja.NewDict(4)
	for _, k := range in.Kwargs.Keys() {
		v, _ := in.Kwargs.Get(k)
		switch k {
		case "add_generation_prompt":
			agp = v
		case "continue_final_message":
			cfm = v
		case "tools":
			tools = v
		case "documents":
			docs = v
		case "chat_template", "tokenize":
			return "", fmt.Errorf("chat_template_kwargs may not set %q: %w", k, ErrBadRequest)
		default:
			extra.Set(k, v)
		}
	}
	if in.Messages == nil || len(in.Messages.Items) == 0 {
		return "", fmt.Errorf("render chat: empty conversation: %w", ErrBadRequest)
	}
	_, hasTools := tools.(*jinja.List)
	name, err := c.pick(hasTools)
	if err != nil {
		return "", err
	}
	tmpl, src := c.templates[name], c.sources[name]
	if truth(cfm) && truth(agp) {
		return "", fmt.Errorf("continue_final_message and add_generation_prompt are not compatible: %w", ErrBadRequest)
	}
	msgs, err := prepareMessages(in.Messages)
	if err != nil {
		return "", err
	}
	var finalText string
	if truth(cfm) {
		if finalText, err = tagFinalMessage(msgs, src); err != nil {
			return "", err
		}
	}
	vars := jinja.NewDict(c.special.Len() + extra.Len() + 4)
	for _, k := range c.special.Keys() {
		v, _ := c.special.Get(k)
		vars.Set(k, v)
	}
	for _, k := range extra.Keys() {
		v, _ := extra.Get(k)
		vars.Set(k, v)
	}
	vars.Set("messages", msgs)
	vars.Set("tools", tools)
	vars.Set("documents", docs)
	vars.Set("add_generation_prompt", agp)
	out, err := tmpl.Render(vars, jinja.RenderOptions{Now: c.now, SizeHint: in.SizeHint + renderSlack, Memo: c.memos[name]})
	if err != nil {
		return "", fmt.Errorf("render chat template %q: %w: %w", name, ErrTemplate, err)
	}
	if truth(cfm) {
		tag := strings.TrimSpace(continueTag)
		if !strings.Contains(out, strings.TrimSpace(finalText)) || !strings.Contains(out, tag) {
			return "", fmt.Errorf("continue_final_message: the final message does not appear in the rendered chat: %w", ErrTemplate)
		}
		loc := strings.LastIndex(out, tag)
		if strings.HasPrefix(out[loc:], continueTag) {
			out = out[:loc]
		} else {
			out = strings.TrimRightFunc(out[:loc], jinja.IsSpace)
		}
	}
	return out, nil
}

func truth(v jinja.Value) bool { return jinja.Truth(v) }

// prepareMessages applies transformers' own message preparation: keys whose
// value is None are dropped, and reasoning is aliased as
// {"thinking": r, **message, "reasoning_content": r}.
func prepareMessages(in *jinja.List) (*jinja.List, error) {
	out := &jinja.List{Items: make([]jinja.Value, len(in.Items))}
	for i, it := range in.Items {
		m, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("message %d is not an object: %w", i, ErrBadRequest)
		}
		out.Items[i] = prepareMessage(m)
	}
	return out, nil
}

// preparedKey files a message's prepared form on its normalized form
// (jinja.Dict.SetDerived), which a repeated message brings back.
type preparedKey struct{}

// prepareMessage is prepareMessages of one message.
func prepareMessage(m *jinja.Dict) *jinja.Dict {
	if v, ok := m.Derived(preparedKey{}); ok {
		return v.(*jinja.Dict)
	}
	clean := jinja.NewDict(m.Len() + 2)
	var reasoning jinja.Value
	// The names a message's reasoning may come under; the first is the
	// one templates read.
	for _, f := range [...]string{"reasoning_content", "thinking", "reasoning"} {
		if v, ok := m.Get(f); ok && v != nil && reasoning == nil {
			reasoning = v
		}
	}
	if reasoning != nil {
		clean.Set("thinking", reasoning)
	}
	for _, k := range m.Keys() {
		v, _ := m.Get(k)
		if v == nil {
			continue
		}
		clean.Set(k, v)
	}
	if reasoning != nil {
		clean.Set("reasoning_content", reasoning)
	}
	m.SetDerived(preparedKey{}, clean)
	return clean
}

// tagFinalMessage appends transformers' continue tag to the final message's
// content (or its last text part) and returns the untagged text. The
// message is replaced by a tagged copy: a prepared message may be shared
// with other requests (prepareMessage).
func tagFinalMessage(msgs *jinja.List, src string) (string, error) {
	last := msgs.Items[len(msgs.Items)-1].(*jinja.Dict).Clone()
	msgs.Items[len(msgs.Items)-1] = last
	final, ok := last.Get("content")
	if !ok || final == nil {
		return "", fmt.Errorf("continue_final_message: the final message has no content: %w", ErrBadRequest)
	}
	if !strings.Contains(src, "content") {
		return "", fmt.Errorf("continue_final_message: the template does not read content: %w", ErrTemplate)
	}
	switch f := final.(type) {
	case string:
		last.Set("content", f+continueTag)
		return f, nil
	case *jinja.List:
		for i := len(f.Items) - 1; i >= 0; i-- {
			part, ok := f.Items[i].(*jinja.Dict)
			if !ok {
				continue
			}
			if t, ok := part.Get("text"); ok {
				ts, _ := t.(string)
				np := part.Clone()
				np.Set("text", ts+continueTag)
				nl := &jinja.List{Items: append([]jinja.Value(nil), f.Items...)}
				nl.Items[i] = np
				last.Set("content", nl)
				return ts, nil
			}
		}
		return "", fmt.Errorf("continue_final_message: no text to continue in the final message: %w", ErrBadRequest)
	}
	return "", fmt.Errorf("continue_final_message: final content is not text: %w", ErrBadRequest)
}
