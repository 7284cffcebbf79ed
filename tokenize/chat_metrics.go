package tokenize

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// ChatMetrics counts chat renders by API and result. One ChatMetrics is made
// per registry and shared by every ChatTemplate (one per model) through
// WithMetrics. A nil *ChatMetrics counts nothing.
type ChatMetrics struct {
	renders *prometheus.CounterVec
}

// NewChatMetrics registers warmpath_tokenize_chat_renders_total{api,result}
// on reg. result is one of ok, bad_request, unsupported, template_error.
func NewChatMetrics(o component.Options) (*ChatMetrics, error) {
	m := &ChatMetrics{renders: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath",
		Subsystem: "tokenize",
		Name:      "chat_renders_total",
		Help:      "Chat requests rendered to prompt text locally, by API (openai, anthropic) and result (ok, bad_request, unsupported, template_error).",
	}, []string{"api", "result"})}
	if err := o.Register("tokenize chat", m.renders); err != nil {
		return nil, err
	}
	return m, nil
}

// WithMetrics makes the ChatTemplate count its renders in m.
func WithMetrics(m *ChatMetrics) ChatOption {
	return func(c *ChatTemplate) { c.metrics = m }
}

func (m *ChatMetrics) observe(api string, err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrUnsupportedRequest):
		result = "unsupported"
	case errors.Is(err, ErrTemplate):
		result = "template_error"
	default:
		result = "bad_request"
	}
	m.renders.WithLabelValues(api, result).Inc()
}
