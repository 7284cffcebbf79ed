package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// ErrRemoteCircuitOpen is returned by RemoteClient while its circuit breaker is
// open: the worker failed repeatedly and is not asked again until the
// cool-down has passed.
var ErrRemoteCircuitOpen = errors.New("tokenize remote: circuit open")

// ErrRemoteBadResponse is wrapped by errors for a /tokenize response that is not
// the JSON vLLM documents.
var ErrRemoteBadResponse = errors.New("tokenize remote: bad response")

// RemoteStatusError is returned for a non-2xx HTTP status from /tokenize.
type RemoteStatusError struct {
	Status int
	Body   string // the start of the response body
}

func (e *RemoteStatusError) Error() string {
	return fmt.Sprintf("tokenize remote: http status %d: %s", e.Status, e.Body)
}

// A RemoteClient asks a vLLM worker's POST /tokenize endpoint for the token
// ids of a prompt (completion form) or of a chat request (chat form). It is
// the fallback when no local tokenizer is configured for a model or local
// rendering fails.
//
// Every call has a timeout. After a number of consecutive failures
// (transport errors, timeouts, 5xx statuses and malformed responses; not 4xx
// statuses nor the caller's cancellation) the circuit opens and calls fail
// with ErrRemoteCircuitOpen without a request until a cool-down has passed; then
// one trial request is let through, and its success closes the circuit.
//
// A RemoteClient is safe for concurrent use.
type RemoteClient struct {
	url      string
	http     *http.Client
	timeout  time.Duration
	maxBody  int64
	now      func() time.Time
	failures int
	cooldown time.Duration
	requests *prometheus.CounterVec

	mu         sync.Mutex
	consecFail int
	openUntil  time.Time
	trial      bool // a half-open trial request is in flight
}

// A RemoteOption configures a RemoteClient.
type RemoteOption func(*RemoteClient)

// WithRemoteHTTPClient sets the HTTP client (default: a new http.Client).
func WithRemoteHTTPClient(c *http.Client) RemoteOption { return func(r *RemoteClient) { r.http = c } }

// WithRemoteTimeout sets the per-call timeout (default 2 s).
func WithRemoteTimeout(d time.Duration) RemoteOption { return func(r *RemoteClient) { r.timeout = d } }

// WithRemoteBreaker sets how many consecutive failures open the circuit (default
// 5) and for how long it stays open (default 10 s).
func WithRemoteBreaker(failures int, cooldown time.Duration) RemoteOption {
	return func(r *RemoteClient) { r.failures, r.cooldown = failures, cooldown }
}

// WithRemoteClock sets the clock the circuit breaker reads (tests).
func WithRemoteClock(now func() time.Time) RemoteOption { return func(r *RemoteClient) { r.now = now } }

// WithRemoteMetrics makes the client count its calls in m. Without it they are
// counted in metrics nobody collects.
func WithRemoteMetrics(m *RemoteMetrics) RemoteOption {
	return func(r *RemoteClient) { r.requests = m.requests }
}

// RemoteMetrics are the counters of RemoteClients:
// warmpath_tokenize_remote_requests_total{form,result}. One RemoteMetrics
// serves all clients of a process.
type RemoteMetrics struct {
	requests *prometheus.CounterVec
}

// NewRemoteMetrics creates the metrics and registers them with reg.
func NewRemoteMetrics(o component.Options) (*RemoteMetrics, error) {
	m := &RemoteMetrics{requests: newRemoteCounter()}
	if err := o.Register("tokenize remote", m.requests); err != nil {
		return nil, err
	}
	return m, nil
}

func newRemoteCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmpath_tokenize_remote_requests_total",
		Help: "Calls of a worker's /tokenize endpoint by request form and result (ok, http_4xx, http_5xx, transport, timeout, bad_response, circuit_open, canceled).",
	}, []string{"form", "result"})
}

// NewRemoteClient returns a client for the worker at baseURL (for example
// "http://10.0.0.7:8000").
func NewRemoteClient(baseURL string, opts ...RemoteOption) *RemoteClient {
	c := &RemoteClient{
		url:      strings.TrimRight(baseURL, "/") + "/tokenize",
		http:     &http.Client{},
		timeout:  2 * time.Second,
		maxBody:  64 << 20,
		now:      time.Now,
		failures: 5,
		cooldown: 10 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	if c.requests == nil {
		c.requests = newRemoteCounter()
	}
	return c
}

// remoteCompletionRequest is the completion form of vLLM's /tokenize request.
type remoteCompletionRequest struct {
	Model            string `json:"model,omitempty"`
	Prompt           string `json:"prompt"`
	AddSpecialTokens bool   `json:"add_special_tokens"`
}

// RemoteChatRequest is the chat form of vLLM's /tokenize request. Messages,
// Tools and ChatTemplateKwargs are passed through as the client sent them,
// so key order and numbers survive. Every boolean is sent as set: vLLM's
// defaults (add_generation_prompt true, the others false) apply only to
// requests that omit them, so callers copy them from the chat request.
type RemoteChatRequest struct {
	Model                string          `json:"model,omitempty"`
	Messages             json.RawMessage `json:"messages"`
	AddGenerationPrompt  bool            `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	AddSpecialTokens     bool            `json:"add_special_tokens"`
	ChatTemplate         string          `json:"chat_template,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	Tools                json.RawMessage `json:"tools,omitempty"`
}

// TokenizeCompletion returns the ids of prompt, as vLLM's /tokenize
// completion form computes them.
func (c *RemoteClient) TokenizeCompletion(ctx context.Context, model, prompt string, addSpecialTokens bool) ([]uint32, error) {
	return c.call(ctx, "completion", remoteCompletionRequest{model, prompt, addSpecialTokens})
}

// TokenizeChat returns the ids of a rendered chat request, as vLLM's
// /tokenize chat form computes them (the same ids /v1/chat/completions
// would use for the prompt).
func (c *RemoteClient) TokenizeChat(ctx context.Context, req RemoteChatRequest) ([]uint32, error) {
	if len(req.Messages) == 0 {
		return nil, fmt.Errorf("tokenize remote: chat request without messages")
	}
	return c.call(ctx, "chat", req)
}

type remoteTokenizeResponse struct {
	Count  *int      `json:"count"`
	Tokens *[]uint32 `json:"tokens"`
}

func (c *RemoteClient) call(ctx context.Context, form string, body any) ([]uint32, error) {
	if !c.allow() {
		c.requests.WithLabelValues(form, "circuit_open").Inc()
		return nil, ErrRemoteCircuitOpen
	}
	ids, result, err := c.do(ctx, body)
	c.requests.WithLabelValues(form, result).Inc()
	switch result {
	case "ok", "http_4xx":
		c.record(true)
	case "canceled":
		c.release()
	default:
		c.record(false)
	}
	return ids, err
}

func (c *RemoteClient) do(ctx context.Context, body any) ([]uint32, string, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, "canceled", fmt.Errorf("tokenize remote: encode request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(payload))
	if err != nil {
		return nil, "canceled", fmt.Errorf("tokenize remote: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.classify(ctx, err), fmt.Errorf("tokenize remote: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return nil, c.classify(ctx, err), fmt.Errorf("tokenize remote: read response: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		result := "http_5xx"
		if resp.StatusCode < 500 {
			result = "http_4xx"
		}
		return nil, result, &RemoteStatusError{Status: resp.StatusCode, Body: string(data[:min(len(data), 512)])}
	}
	if int64(len(data)) > c.maxBody {
		return nil, "bad_response", fmt.Errorf("%w: body over %d bytes", ErrRemoteBadResponse, c.maxBody)
	}
	var r remoteTokenizeResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, "bad_response", fmt.Errorf("%w: %w", ErrRemoteBadResponse, err)
	}
	if r.Tokens == nil {
		return nil, "bad_response", fmt.Errorf("%w: no tokens", ErrRemoteBadResponse)
	}
	if r.Count != nil && *r.Count != len(*r.Tokens) {
		return nil, "bad_response", fmt.Errorf("%w: count %d but %d tokens", ErrRemoteBadResponse, *r.Count, len(*r.Tokens))
	}
	return *r.Tokens, "ok", nil
}

// classify names a transport error: the caller's cancellation is not the
// worker's failure, our own timeout is.
func (c *RemoteClient) classify(ctx context.Context, err error) string {
	switch {
	case ctx.Err() == nil:
		return "transport"
	case errors.Is(context.Cause(ctx), context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return "timeout"
	default:
		return "canceled"
	}
}

// allow reports whether a request may go out now.
func (c *RemoteClient) allow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consecFail < c.failures {
		return true
	}
	if c.now().Before(c.openUntil) || c.trial {
		return false
	}
	c.trial = true // half-open: let one request through
	return true
}

func (c *RemoteClient) record(ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trial = false
	if ok {
		c.consecFail = 0
		return
	}
	c.consecFail++
	if c.consecFail >= c.failures {
		c.openUntil = c.now().Add(c.cooldown)
	}
}

func (c *RemoteClient) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trial = false
}
