package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/clocktest"
	"github.com/warmpath/warmpath/internal/component"
)

// fakeTokenizeWorker is a /tokenize endpoint whose answer the test sets.
type fakeTokenizeWorker struct {
	mu     sync.Mutex
	status int
	body   string
	block  bool // hold the request until the client gives up
	calls  atomic.Int64
	last   map[string]json.RawMessage
}

func (w *fakeTokenizeWorker) set(status int, body string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status, w.body, w.block = status, body, false
}

func (w *fakeTokenizeWorker) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.calls.Add(1)
	if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
		http.Error(rw, "not found", http.StatusNotFound)
		return
	}
	data, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	_ = json.Unmarshal(data, &w.last)
	status, body, block := w.status, w.body, w.block
	w.mu.Unlock()
	if block {
		<-r.Context().Done()
		return
	}
	rw.WriteHeader(status)
	_, _ = io.WriteString(rw, body)
}

func (w *fakeTokenizeWorker) lastRequest() map[string]json.RawMessage {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func newTestRemoteClient(t *testing.T, opts ...RemoteOption) (*RemoteClient, *fakeTokenizeWorker, *clocktest.Clock, *prometheus.Registry) {
	t.Helper()
	w := &fakeTokenizeWorker{status: 200, body: `{"count":3,"max_model_len":4096,"tokens":[1,2,3],"token_strs":null}`}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	clk := clocktest.New(time.Unix(1_750_000_000, 0))
	reg := prometheus.NewRegistry()
	m, err := NewRemoteMetrics(component.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]RemoteOption{WithRemoteClock(clk.Now), WithRemoteMetrics(m), WithRemoteBreaker(3, 10*time.Second)}, opts...)
	return NewRemoteClient(srv.URL+"/", opts...), w, clk, reg
}

func TestRemoteForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func(ctx context.Context, c *RemoteClient) ([]uint32, error)
		want map[string]string // request fields
	}{
		{
			name: "completion",
			call: func(ctx context.Context, c *RemoteClient) ([]uint32, error) {
				return c.TokenizeCompletion(ctx, "qwen3", "Hello world", true)
			},
			want: map[string]string{"model": `"qwen3"`, "prompt": `"Hello world"`, "add_special_tokens": "true"},
		},
		{
			name: "chat keeps raw messages",
			call: func(ctx context.Context, c *RemoteClient) ([]uint32, error) {
				return c.TokenizeChat(ctx, RemoteChatRequest{
					Model:               "llama3",
					Messages:            json.RawMessage(`[{"role":"user","content":"hi","z":1.0,"a":12345678901234567890}]`),
					AddGenerationPrompt: true,
					ChatTemplateKwargs:  json.RawMessage(`{"enable_thinking":false}`),
				})
			},
			want: map[string]string{
				"model":                 `"llama3"`,
				"messages":              `[{"role":"user","content":"hi","z":1.0,"a":12345678901234567890}]`,
				"add_generation_prompt": "true",
				"add_special_tokens":    "false",
				"chat_template_kwargs":  `{"enable_thinking":false}`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, w, _, reg := newTestRemoteClient(t)
			ids, err := tc.call(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, []uint32{1, 2, 3}) {
				t.Errorf("ids = %v", ids)
			}
			got := w.lastRequest()
			for k, v := range tc.want {
				if string(got[k]) != v {
					t.Errorf("request %s = %s, want %s", k, got[k], v)
				}
			}
			if n := testutil.CollectAndCount(reg, "warmpath_tokenize_remote_requests_total"); n != 1 {
				t.Errorf("%d series, want 1", n)
			}
		})
	}
}

func TestRemoteErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		check  func(error) bool
		result string
	}{
		{"server error", 500, `{"error":"boom"}`, func(err error) bool {
			var se *RemoteStatusError
			return errors.As(err, &se) && se.Status == 500
		}, "http_5xx"},
		{"bad request", 400, `{"error":"no such model"}`, func(err error) bool {
			var se *RemoteStatusError
			return errors.As(err, &se) && se.Status == 400
		}, "http_4xx"},
		{"not json", 200, `<html>`, func(err error) bool { return errors.Is(err, ErrRemoteBadResponse) }, "bad_response"},
		{"no tokens", 200, `{"count":0}`, func(err error) bool { return errors.Is(err, ErrRemoteBadResponse) }, "bad_response"},
		{"count mismatch", 200, `{"count":5,"tokens":[1]}`, func(err error) bool { return errors.Is(err, ErrRemoteBadResponse) }, "bad_response"},
		{"negative id", 200, `{"tokens":[-1]}`, func(err error) bool { return errors.Is(err, ErrRemoteBadResponse) }, "bad_response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, w, _, reg := newTestRemoteClient(t)
			w.set(tc.status, tc.body)
			_, err := c.TokenizeCompletion(t.Context(), "m", "x", false)
			if err == nil || !tc.check(err) {
				t.Fatalf("err = %v", err)
			}
			want := strings.NewReader(`
# HELP warmpath_tokenize_remote_requests_total Calls of a worker's /tokenize endpoint by request form and result (ok, http_4xx, http_5xx, transport, timeout, bad_response, circuit_open, canceled).
# TYPE warmpath_tokenize_remote_requests_total counter
warmpath_tokenize_remote_requests_total{form="completion",result="` + tc.result + `"} 1
`)
			if err := testutil.GatherAndCompare(reg, want, "warmpath_tokenize_remote_requests_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRemoteCircuitBreaker(t *testing.T) {
	t.Parallel()
	c, w, clk, reg := newTestRemoteClient(t)
	ctx := t.Context()
	w.set(503, "overloaded")
	for i := range 3 {
		if _, err := c.TokenizeCompletion(ctx, "m", "x", false); err == nil || errors.Is(err, ErrRemoteCircuitOpen) {
			t.Fatalf("call %d: err = %v, want a status error", i, err)
		}
	}
	// open: no request reaches the worker
	before := w.calls.Load()
	if _, err := c.TokenizeCompletion(ctx, "m", "x", false); !errors.Is(err, ErrRemoteCircuitOpen) {
		t.Fatalf("err = %v, want ErrCircuitOpen", err)
	}
	if w.calls.Load() != before {
		t.Fatal("an open circuit sent a request")
	}
	// half-open after the cool-down: one failing trial opens it again
	clk.Advance(11 * time.Second)
	if _, err := c.TokenizeCompletion(ctx, "m", "x", false); err == nil || errors.Is(err, ErrRemoteCircuitOpen) {
		t.Fatalf("trial err = %v", err)
	}
	if _, err := c.TokenizeCompletion(ctx, "m", "x", false); !errors.Is(err, ErrRemoteCircuitOpen) {
		t.Fatalf("after failed trial err = %v, want ErrCircuitOpen", err)
	}
	// a successful trial closes it
	clk.Advance(11 * time.Second)
	w.set(200, `{"count":1,"tokens":[7]}`)
	for i := range 3 {
		if ids, err := c.TokenizeCompletion(ctx, "m", "x", false); err != nil || !slices.Equal(ids, []uint32{7}) {
			t.Fatalf("call %d after recovery: %v %v", i, ids, err)
		}
	}
	if got := testutil.ToFloat64(c.requests.WithLabelValues("completion", "circuit_open")); got != 2 {
		t.Errorf("circuit_open = %v, want 2", got)
	}
	_ = reg
}

func TestRemoteTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	c, w, _, _ := newTestRemoteClient(t, WithRemoteTimeout(20*time.Millisecond), WithRemoteBreaker(1, time.Minute))
	w.mu.Lock()
	w.block = true
	w.mu.Unlock()

	// the caller's own cancellation does not count against the worker
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.TokenizeCompletion(ctx, "m", "x", false); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if got := testutil.ToFloat64(c.requests.WithLabelValues("completion", "canceled")); got != 1 {
		t.Errorf("canceled = %v", got)
	}
	// a timeout does, and with a threshold of 1 opens the circuit
	if _, err := c.TokenizeCompletion(t.Context(), "m", "x", false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if got := testutil.ToFloat64(c.requests.WithLabelValues("completion", "timeout")); got != 1 {
		t.Errorf("timeout = %v", got)
	}
	if _, err := c.TokenizeCompletion(t.Context(), "m", "x", false); !errors.Is(err, ErrRemoteCircuitOpen) {
		t.Fatalf("err = %v, want ErrCircuitOpen", err)
	}
}

func TestRemoteChatWithoutMessages(t *testing.T) {
	t.Parallel()
	c, w, _, _ := newTestRemoteClient(t)
	if _, err := c.TokenizeChat(t.Context(), RemoteChatRequest{Model: "m"}); err == nil {
		t.Fatal("want an error")
	}
	if w.calls.Load() != 0 {
		t.Error("sent a request")
	}
}

func TestRemoteMetricsRegisterTwice(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := NewRemoteMetrics(component.Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRemoteMetrics(component.Options{Registerer: reg}); err == nil {
		t.Fatal("second registration: want an error")
	}
}

func TestRemoteWithoutMetrics(t *testing.T) {
	t.Parallel()
	w := &fakeTokenizeWorker{status: 200, body: `{"tokens":[4,5]}`}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	ids, err := NewRemoteClient(srv.URL).TokenizeCompletion(t.Context(), "", "x", true)
	if err != nil || !slices.Equal(ids, []uint32{4, 5}) {
		t.Fatalf("ids %v err %v", ids, err)
	}
}
