package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// Kind is the shape of a request body.
type Kind int

// Request kinds.
const (
	KindChat       Kind = iota // OpenAI /v1/chat/completions
	KindMessages               // Anthropic /v1/messages
	KindCompletion             // OpenAI /v1/completions with a text prompt
)

// Paths a Pipeline reports for the ids it returns.
const (
	PathLocal  = "local"  // this package's tokenizer and chat template
	PathRemote = "remote" // a worker's /tokenize
)

// ErrNoTokens means neither the local nor the remote path could produce
// exact ids; the error wrapping it says why.
var ErrNoTokens = errors.New("no exact tokens")

// Pipeline tokenizes the requests of one served model exactly as vLLM does:
// locally (tokenizer.json and the chat template) when the model has a
// tokenizer directory, else, or when local rendering cannot be exact,
// through a worker's /tokenize. A Pipeline is safe for concurrent use.
type Pipeline struct {
	model  string
	tok    *Tokenizer
	cache  *PrefixCache
	tmpl   *ChatTemplate
	tmplEr error // why there is no template, when tok is set
	m      *PipelineMetrics
	ropts  []RemoteOption

	mu     sync.Mutex
	remote map[string]*RemoteClient // by worker base URL
}

// PipelineMetrics counts tokenizations by model, path and result. Create one
// per registry and share it between pipelines.
type PipelineMetrics struct {
	requests *prometheus.CounterVec
	remote   *RemoteMetrics
	chat     *ChatMetrics
	prompts  *promptCaches
	memos    *renderMemos
}

// NewPipelineMetrics creates the tokenization metrics and registers them
// with o's registerer.
func NewPipelineMetrics(o component.Options) (*PipelineMetrics, error) {
	m := &PipelineMetrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmpath_tokenize_requests_total",
		Help: "Requests tokenized for routing, by model, path (local, remote, none) and reason a step was skipped or failed.",
	}, []string{"model", "path", "reason"}), prompts: newPromptCaches(), memos: newRenderMemos()}
	if err := o.Register("tokenize", m.requests, m.prompts, m.memos); err != nil {
		return nil, err
	}
	var err error
	if m.remote, err = NewRemoteMetrics(o); err != nil {
		return nil, err
	}
	if m.chat, err = NewChatMetrics(o); err != nil {
		return nil, err
	}
	return m, nil
}

// NewPipeline returns the pipeline of model. dir holds tokenizer.json and
// tokenizer_config.json; empty means remote only. cacheBytes bounds the
// conversation prefix cache. m may be nil.
func NewPipeline(model, dir string, cacheBytes int, m *PipelineMetrics, remote ...RemoteOption) (*Pipeline, error) {
	p := &Pipeline{model: model, m: m, remote: map[string]*RemoteClient{}, ropts: remote}
	if m != nil {
		p.ropts = append(p.ropts, WithRemoteMetrics(m.remote))
	}
	if dir == "" {
		return p, nil
	}
	tok, err := Load(dir)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", model, err)
	}
	p.tok, p.cache = tok, NewPrefixCache(tok, cacheBytes)
	if m != nil {
		m.prompts.add(model, p.cache)
	}
	// The render memo holds the rendered text of messages, a fraction of
	// what the prefix cache keeps of a conversation (its text, ids and
	// split marks). It holds the messages themselves weakly: the message
	// cache's budget is what keeps them.
	copts := []ChatOption{WithRenderMemo(cacheBytes / 4)}
	if m != nil {
		copts = append(copts, WithMetrics(m.chat))
	}
	p.tmpl, p.tmplEr = LoadChatTemplate(dir, copts...)
	if p.tmplEr != nil && !errors.Is(p.tmplEr, ErrNoChatTemplate) {
		return nil, fmt.Errorf("model %s: %w", model, p.tmplEr)
	}
	if m != nil && p.tmpl != nil {
		m.memos.add(model, p.tmpl)
	}
	return p, nil
}

// Pipelines are the pipelines of every served model, by name. A model
// that has none (one discovery found but the configuration does not list)
// gets a remote-only pipeline on first use. Pipelines is safe for
// concurrent use.
type Pipelines struct {
	m *PipelineMetrics

	mu      sync.Mutex
	byModel map[string]*Pipeline
}

// NewPipelines returns a set holding ps, which must have distinct models;
// pipelines created later count into m, which may be nil.
func NewPipelines(m *PipelineMetrics, ps ...*Pipeline) *Pipelines {
	set := &Pipelines{m: m, byModel: make(map[string]*Pipeline, len(ps))}
	for _, p := range ps {
		set.byModel[p.model] = p
	}
	return set
}

// Tokenize is [Pipeline.TokenizeBody] on the pipeline of model.
func (s *Pipelines) Tokenize(ctx context.Context, model string, kind Kind, body *Body, remoteBase string) ([]uint32, string, error) {
	return s.pipeline(model).TokenizeBody(ctx, kind, body, remoteBase)
}

func (s *Pipelines) pipeline(model string) *Pipeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.byModel[model]
	if p == nil {
		p, _ = NewPipeline(model, "", 0, s.m) // remote only: cannot fail
		s.byModel[model] = p
	}
	return p
}

// Local reports whether the pipeline has a local tokenizer.
func (p *Pipeline) Local() bool { return p.tok != nil }

// Tokenize returns the prompt ids of body and the path that produced them.
// The ids may be shared with the pipeline's prompt cache: the caller must
// not change them.
// remoteBase is the base URL (http://host:port) of a worker serving the
// model, used when the local path is missing or cannot be exact; empty
// disables the remote path. The error wraps ErrNoTokens and says why each
// path failed.
func (p *Pipeline) Tokenize(ctx context.Context, kind Kind, body []byte, remoteBase string) ([]uint32, string, error) {
	b, err := ParseBody(body)
	if err != nil {
		p.count("none", reasonOf(err))
		return nil, "none", fmt.Errorf("%w: %v", ErrNoTokens, err)
	}
	return p.TokenizeBody(ctx, kind, b, remoteBase)
}

// TokenizeBody is Tokenize of a body parsed before: the router parses each
// body once, for its own fields and for the chat template.
func (p *Pipeline) TokenizeBody(ctx context.Context, kind Kind, b *Body, remoteBase string) ([]uint32, string, error) {
	if b.root == nil {
		return p.Tokenize(ctx, kind, b.raw, remoteBase)
	}
	ids, lerr := p.local(kind, b)
	if lerr == nil {
		p.count(PathLocal, "")
		return ids, PathLocal, nil
	}
	if remoteBase == "" {
		p.count("none", "no_remote")
		return nil, "none", fmt.Errorf("%w: local: %v; remote: no worker to ask", ErrNoTokens, lerr)
	}
	ids, rerr := p.viaRemote(ctx, kind, b.raw, remoteBase)
	if rerr == nil {
		p.count(PathRemote, reasonOf(lerr))
		return ids, PathRemote, nil
	}
	p.count("none", reasonOf(lerr))
	return nil, "none", fmt.Errorf("%w: local: %v; remote: %v", ErrNoTokens, lerr, rerr)
}

var errNoLocal = errors.New("no local tokenizer configured")

func (p *Pipeline) local(kind Kind, b *Body) ([]uint32, error) {
	if p.tok == nil {
		return nil, errNoLocal
	}
	switch kind {
	case KindChat, KindMessages:
		if p.tmpl == nil {
			return nil, p.tmplEr
		}
		text, err := p.tmpl.renderBody(b, kind == KindMessages)
		if err != nil {
			return nil, err
		}
		// vLLM renders special tokens into the text; it adds none.
		return p.cache.Encode(text, false), nil
	default:
		c, err := parseCompletion(b.raw)
		if err != nil {
			return nil, err
		}
		return p.cache.Encode(c.Prompt, c.addSpecial()), nil
	}
}

func (p *Pipeline) viaRemote(ctx context.Context, kind Kind, body []byte, base string) ([]uint32, error) {
	c := p.client(base)
	switch kind {
	case KindChat:
		var r struct {
			Messages             json.RawMessage `json:"messages"`
			AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
			ContinueFinalMessage bool            `json:"continue_final_message"`
			AddSpecialTokens     bool            `json:"add_special_tokens"`
			ChatTemplate         string          `json:"chat_template"`
			ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
			Tools                json.RawMessage `json:"tools"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		agp := r.AddGenerationPrompt == nil || *r.AddGenerationPrompt // vLLM's default
		return c.TokenizeChat(ctx, RemoteChatRequest{
			Model: p.model, Messages: r.Messages, AddGenerationPrompt: agp, ContinueFinalMessage: r.ContinueFinalMessage,
			AddSpecialTokens: r.AddSpecialTokens, ChatTemplate: r.ChatTemplate, ChatTemplateKwargs: r.ChatTemplateKwargs, Tools: r.Tools,
		})
	case KindCompletion:
		cr, err := parseCompletion(body)
		if err != nil {
			return nil, err
		}
		return c.TokenizeCompletion(ctx, p.model, cr.Prompt, cr.addSpecial())
	}
	return nil, errors.New("vLLM's /tokenize has no Messages form")
}

func (p *Pipeline) client(base string) *RemoteClient {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.remote[base]
	if !ok {
		c = NewRemoteClient(base, p.ropts...)
		p.remote[base] = c
	}
	return c
}

func (p *Pipeline) count(path, reason string) {
	if p.m != nil {
		p.m.requests.WithLabelValues(p.model, path, reason).Inc()
	}
}

// reasonOf names why the local path failed, as a bounded metric label.
func reasonOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNoLocal):
		return "no_local_tokenizer"
	case errors.Is(err, ErrNoChatTemplate):
		return "no_chat_template"
	case errors.Is(err, ErrUnsupportedRequest):
		return "unsupported_request"
	case errors.Is(err, ErrTemplate):
		return "template_error"
	case errors.Is(err, ErrBadRequest):
		return "bad_request"
	}
	return "other"
}

// completion is the part of a /v1/completions body the tokenizer needs.
type completion struct {
	Prompt           string
	AddSpecialTokens *bool `json:"add_special_tokens"`
}

// addSpecial is vLLM's default for completions: special tokens are added.
func (c completion) addSpecial() bool { return c.AddSpecialTokens == nil || *c.AddSpecialTokens }

func parseCompletion(body []byte) (completion, error) {
	var r struct {
		Prompt           json.RawMessage `json:"prompt"`
		AddSpecialTokens *bool           `json:"add_special_tokens"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return completion{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	c := completion{AddSpecialTokens: r.AddSpecialTokens}
	if err := json.Unmarshal(r.Prompt, &c.Prompt); err == nil {
		return c, nil
	}
	var list []string
	if err := json.Unmarshal(r.Prompt, &list); err != nil || len(list) == 0 {
		return completion{}, fmt.Errorf("%w: prompt is not text", ErrBadRequest)
	}
	c.Prompt = list[0] // routing follows the first prompt
	return c, nil
}
