package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream is a small OpenAI-compatible server: it streams a fixed SSE
// response naming itself, and records what it received.
type upstream struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	bodies   []string
	aborted  int
	release  chan struct{} // closed to let "slow" requests finish
	streamed string        // the exact bytes of the last SSE response
}

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{name: name, release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.srv.URL, "http://") }

func sseFor(name string) []string {
	chunk := func(delta string) string {
		return fmt.Sprintf("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen3\",\"choices\":[{\"index\":0,\"delta\":{%s},\"finish_reason\":null}]}\n\n", delta)
	}
	return []string{
		chunk(`"role":"assistant","content":""`),
		chunk(`"content":"served by ` + name + `"`),
		chunk(`"content":" — ünïcödé ✓"`),
		"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen3\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"total_tokens\":23,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":16}}}\n\n",
		"data: [DONE]\n\n",
	}
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		return // 200, as vLLM answers
	}
	if !strings.HasPrefix(r.URL.Path, "/v1/") {
		// No /tokenize here: warmpath falls back to approximate routing.
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies = append(u.bodies, string(body))
	u.mu.Unlock()
	if r.URL.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"qwen3","owned_by":%q}]}`, u.name)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("x-upstream", u.name)
	fl := w.(http.Flusher)
	slow := r.Header.Get("x-test-mode") == "slow"
	var sent strings.Builder
	for i, c := range sseFor(u.name) {
		if slow && i == 2 {
			select {
			case <-r.Context().Done():
				u.mu.Lock()
				u.aborted++
				u.mu.Unlock()
				return
			case <-u.release:
			}
		}
		io.WriteString(w, c)
		sent.WriteString(c)
		fl.Flush()
		time.Sleep(2 * time.Millisecond)
	}
	u.mu.Lock()
	u.streamed = sent.String()
	u.mu.Unlock()
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

// foundation is Envoy + warmpath (round-robin, debug headers) + two upstreams.
type foundation struct {
	ups []*upstream
	wp  *warmpathProc
	url string
}

func startFoundation(t *testing.T) *foundation {
	t.Helper()
	f := &foundation{ups: []*upstream{newUpstream(t, "w0"), newUpstream(t, "w1")}}
	cfg := fmt.Sprintf(`policy: round-robin
models:
  - name: qwen3
workers:
  - {name: w0, address: %q, models: [qwen3]}
  - {name: w1, address: %q, models: [qwen3]}
extproc:
  debug_headers: true
  drain_timeout: 2s
log: {level: debug}
`, f.ups[0].addr(), f.ups[1].addr())
	f.wp = startWarmpath(t, cfg)
	e := startEnvoy(t, "envoy/envoy.yaml", f.wp.ExtProc)
	f.url = "http://" + e.Listeners["llm_ingress"]
	return f
}

const chatReq = `{"model":"qwen3","stream":true,"stream_options":{"include_usage":true},"max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`

func post(t *testing.T, ctx context.Context, url, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestRealEnvoyFoundation(t *testing.T) {
	f := startFoundation(t)

	t.Run("requests land where warmpath chose and bytes pass unchanged", func(t *testing.T) {
		for i := range 6 {
			// A client-supplied destination must be overwritten.
			resp := post(t, t.Context(), f.url+"/v1/chat/completions", chatReq, "x-gateway-destination-endpoint", "127.0.0.1:1")
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
			}
			chosen := resp.Header.Get("x-warmpath-worker")
			if served := resp.Header.Get("x-upstream"); chosen == "" || served != chosen {
				t.Fatalf("request %d: warmpath chose %q, served by %q", i, chosen, served)
			}
			want := strings.Join(sseFor(chosen), "")
			if string(b) != want {
				t.Fatalf("request %d: SSE bytes changed:\n got %q\nwant %q", i, b, want)
			}
		}
		for _, u := range f.ups {
			if u.count() != 3 {
				t.Fatalf("%s served %d requests, want 3 (round-robin)", u.name, u.count())
			}
			u.mu.Lock()
			if u.bodies[0] != chatReq {
				t.Fatalf("%s received body %q", u.name, u.bodies[0])
			}
			u.mu.Unlock()
		}
		waitFor(t, "6 completed assignments", func() bool {
			return f.wp.metric(t, "warmpath_assignments_ended_total", `end="completed"`) == 6
		})
		if n := f.wp.metric(t, "warmpath_time_to_first_token_seconds_count"); n != 6 {
			t.Fatalf("TTFT recorded %v times, want 6", n)
		}
		if n := f.wp.metric(t, "warmpath_requests_total", `code="200"`, `model="qwen3"`, `api="chat"`); n != 6 {
			t.Fatalf("requests_total{code=200} = %v", n)
		}
	})

	t.Run("non-generation paths pass to a worker", func(t *testing.T) {
		resp, err := http.Get(f.url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"object":"list"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, b)
		}
	})

	t.Run("client disconnect mid-stream releases the assignment", func(t *testing.T) {
		before := f.wp.metric(t, "warmpath_assignments_ended_total", `end="aborted"`)
		ctx, cancel := context.WithCancel(t.Context())
		resp := post(t, ctx, f.url+"/v1/chat/completions", chatReq, "x-test-mode", "slow")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// Read the role chunk and the first content chunk, then leave.
		rd := bufio.NewReader(resp.Body)
		for seen := 0; seen < 4; { // two events = two data lines + two blank lines
			if _, err := rd.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			seen++
		}
		cancel()
		resp.Body.Close()
		waitFor(t, "the aborted assignment to end", func() bool {
			return f.wp.metric(t, "warmpath_assignments_ended_total", `end="aborted"`) == before+1
		})
		waitFor(t, "no assignment in flight", func() bool {
			return f.wp.metric(t, "warmpath_assignments_in_flight") == 0
		})
	})

	t.Run("malformed body gets warmpath's 400", func(t *testing.T) {
		resp := post(t, t.Context(), f.url+"/v1/chat/completions", `{"model": "qwen3", "messages": [`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || e.Error.Type != "invalid_request_error" {
			t.Fatalf("status %d body %s", resp.StatusCode, b)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content-type %q", ct)
		}
	})

	t.Run("unknown model gets 404 naming the served models", func(t *testing.T) {
		resp := post(t, t.Context(), f.url+"/v1/messages", `{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(b), "qwen3") || !strings.Contains(string(b), `"type":"error"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, b)
		}
	})
}
