package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/internal/component"
)

func TestPipelinePaths(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var in map[string]any
		json.NewDecoder(r.Body).Decode(&in)
		if r.URL.Path != "/tokenize" {
			http.NotFound(w, r)
			return
		}
		ids := []int{7, 8, 9}
		if _, chat := in["messages"]; chat {
			ids = []int{1, 2}
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": ids, "count": len(ids), "max_model_len": 4096})
	}))
	defer worker.Close()
	reg := prometheus.NewRegistry()
	m, err := NewPipelineMetrics(component.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	local, err := NewPipeline("qwen3", "testdata/models/qwen3", 1<<20, m)
	if err != nil {
		t.Fatal(err)
	}
	remoteOnly, err := NewPipeline("other", "", 1<<20, m)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := Load("testdata/models/qwen3")
	tmpl, _ := LoadChatTemplate("testdata/models/qwen3")
	chat := []byte(`{"model":"qwen3","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Hello there"}]}`)
	text, err := tmpl.RenderOpenAI(chat)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		p        *Pipeline
		kind     Kind
		body     string
		remote   string
		wantPath string
		want     []uint32
		wantErr  bool
	}{
		{"local chat", local, KindChat, string(chat), "", PathLocal, tok.Encode(text, false), false},
		{"local completion adds specials", local, KindCompletion, `{"prompt":"Hello world"}`, "", PathLocal, tok.Encode("Hello world", true), false},
		{"local completion list", local, KindCompletion, `{"prompt":["Hi","x"],"add_special_tokens":false}`, "", PathLocal, tok.Encode("Hi", false), false},
		{"unsupported chat goes remote", local, KindChat, `{"messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"}`, worker.URL, PathRemote, []uint32{1, 2}, false},
		{"remote only chat", remoteOnly, KindChat, string(chat), worker.URL, PathRemote, []uint32{1, 2}, false},
		{"remote only completion", remoteOnly, KindCompletion, `{"prompt":"abc"}`, worker.URL, PathRemote, []uint32{7, 8, 9}, false},
		{"remote only, no worker", remoteOnly, KindChat, string(chat), "", "none", nil, true},
		{"messages have no remote form", remoteOnly, KindMessages, `{"messages":[]}`, worker.URL, "none", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids, path, err := tc.p.Tokenize(t.Context(), tc.kind, []byte(tc.body), tc.remote)
			if tc.wantErr {
				if !errors.Is(err, ErrNoTokens) {
					t.Fatalf("want ErrNoTokens, got %v", err)
				}
				return
			}
			if err != nil || path != tc.wantPath || !slices.Equal(ids, tc.want) {
				t.Fatalf("got %v %q %v; want %v %q", ids, path, err, tc.want, tc.wantPath)
			}
		})
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("other", "remote", "no_local_tokenizer")); got != 2 {
		t.Fatalf("remote count %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("qwen3", "remote", "unsupported_request")); got != 1 {
		t.Fatalf("unsupported count %v", got)
	}
}

// TestPipelines: each model's request goes to its own pipeline; a model
// with none (discovery found it, the configuration does not list it) gets
// a remote-only pipeline, kept for the next request.
func TestPipelines(t *testing.T) {
	t.Parallel()
	local, err := NewPipeline("qwen3", "testdata/models/qwen3", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := NewPipelines(nil, local)
	body, err := ParseBody([]byte(`{"prompt":"Hello there"}`))
	if err != nil {
		t.Fatal(err)
	}
	ids, path, err := set.Tokenize(t.Context(), "qwen3", KindCompletion, body, "")
	if err != nil || path != PathLocal || len(ids) == 0 {
		t.Fatalf("configured model: ids %v path %q err %v", ids, path, err)
	}
	_, path, err = set.Tokenize(t.Context(), "unlisted", KindCompletion, body, "")
	if !errors.Is(err, ErrNoTokens) || path != "none" {
		t.Fatalf("unlisted model without a worker to ask: path %q err %v", path, err)
	}
	if p := set.pipeline("unlisted"); p.Local() || p != set.pipeline("unlisted") {
		t.Fatal("the unlisted model's pipeline is not one remote-only pipeline")
	}
}

func TestParseBody(t *testing.T) {
	t.Parallel()
	b, err := ParseBody([]byte(` {"model":"a","Model":"b","stream":true,"max_tokens":12,"n":1.5,"big":123456789012345678901234567890,` +
		`"messages":[{"role":"user","content":"hi"}],"model":"c","salt":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok, err := b.String("model"); s != "c" || !ok || err != nil {
		t.Errorf(`String("model") = %q, %v, %v; want the last value "c"`, s, ok, err)
	}
	if v, ok, err := b.Bool("stream"); !v || !ok || err != nil {
		t.Errorf(`Bool("stream") = %v, %v, %v`, v, ok, err)
	}
	if n, ok, err := b.Int("max_tokens"); n != 12 || !ok || err != nil {
		t.Errorf(`Int("max_tokens") = %v, %v, %v`, n, ok, err)
	}
	for _, key := range []string{"n", "big", "stream"} {
		if _, _, err := b.Int(key); !errors.Is(err, ErrBodyType) {
			t.Errorf("Int(%q): err %v, want ErrBodyType", key, err)
		}
	}
	if _, ok, err := b.String("salt"); ok || err != nil {
		t.Errorf(`String("salt") of null: ok %v err %v, want absent`, ok, err)
	}
	if got := string(b.Raw("messages")); got != `[{"role":"user","content":"hi"}]` {
		t.Errorf(`Raw("messages") = %s`, got)
	}
	if b.Raw("tools") != nil || b.Kind("tools") != "null" || b.Kind("messages") != "array" || b.Kind("n") != "number" {
		t.Error("Raw or Kind of an absent or present field is wrong")
	}
	for _, bad := range []string{``, `[1,2]`, `"x"`, `{"a":1`, `{"a":1} {}`, `{"a":}`} {
		if _, err := ParseBody([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("ParseBody(%q): err %v, want ErrBadRequest", bad, err)
		}
	}
}

// TestPipelineHeapWithinBudgets tokenizes many distinct short chats, enough
// to fill the prompt cache and evict from it, and expects the heap to grow
// by about the caches' budgets: a cached prompt must not keep alive the
// larger buffer it was rendered into. Not parallel: it reads the process's
// heap.
func TestPipelineHeapWithinBudgets(t *testing.T) {
	const cacheBytes = 2 << 20 // and a quarter more for the render memo
	p, err := NewPipeline("qwen3", "testdata/models/qwen3", cacheBytes, nil)
	if err != nil {
		t.Fatal(err)
	}
	chat := func(i int) {
		body, err := ParseBody(fmt.Appendf(nil, `{"model":"qwen3","messages":[{"role":"system","content":"You answer in one line."},`+
			`{"role":"user","content":"Question %d: %s"}]}`, i, strings.Repeat("what does this word mean? ", 30)))
		if err != nil {
			t.Fatal(err)
		}
		if _, path, err := p.TokenizeBody(t.Context(), KindChat, body, ""); err != nil || path != PathLocal {
			t.Fatalf("chat %d: path %q, err %v", i, path, err)
		}
	}
	chat(-1) // the tokenizer's and the template's tables, made on first use
	before := liveHeap()
	for i := range 4000 {
		chat(i)
	}
	grew := int64(liveHeap()) - int64(before)
	st := p.cache.Stats()
	if st.Misses < 4000 || st.Bytes < cacheBytes*3/4 {
		t.Fatalf("prompt cache %+v: want every chat a miss and the cache about full", st)
	}
	// It grows by 1.4 times the budgets (the caches' own counts leave out
	// some bookkeeping); with each prompt in a buffer sized for the
	// template's source as well, it grew by 3.1 times.
	if budget := int64(cacheBytes + cacheBytes/4); grew > 2*budget {
		t.Fatalf("the heap grew by %d bytes, over twice the caches' budgets (%d bytes; prompt cache %d entries, %d bytes by its own count)", grew, budget, st.Entries, st.Bytes)
	}
	runtime.KeepAlive(p)
}
