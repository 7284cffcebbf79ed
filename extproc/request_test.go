package extproc

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/tokenize"
)

func TestAPIOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path string
		want         scoring.API
	}{
		{"POST", "/v1/chat/completions", scoring.APIChat},
		{"POST", "/v1/chat/completions?x=1", scoring.APIChat},
		{"POST", "/v1/completions", scoring.APICompletions},
		{"POST", "/v1/messages", scoring.APIMessages},
		{"GET", "/v1/chat/completions", scoring.APIOther},
		{"POST", "/v1/embeddings", scoring.APIOther},
		{"POST", "/tokenize", scoring.APIOther},
		{"GET", "/v1/models", scoring.APIOther},
	}
	for _, tc := range tests {
		if got := apiOf(tc.method, tc.path); got != tc.want {
			t.Errorf("apiOf(%s %s) = %s, want %s", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestParseBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		api     scoring.API
		body    string
		def     string
		want    scoring.Request
		wantErr bool
	}{
		{"chat", scoring.APIChat, `{"model":"m","stream":true,"max_completion_tokens":9,"max_tokens":3,"messages":[]}`, "", scoring.Request{Model: "m", Stream: true, MaxTokens: 9}, false},
		{"default model", scoring.APIChat, `{"messages":[{"role":"user","content":"hi"}]}`, "only", scoring.Request{Model: "only"}, false},
		{"missing model", scoring.APIChat, `{"messages":[]}`, "", scoring.Request{}, true},
		{"prompt string", scoring.APICompletions, `{"model":"m","prompt":"abc"}`, "", scoring.Request{Model: "m", Prompts: 1}, false},
		{"prompt strings", scoring.APICompletions, `{"model":"m","prompt":["a","b"]}`, "", scoring.Request{Model: "m", Prompts: 2,
			MorePrompts: scoring.MorePrompts{Text: true, FirstBytes: 1, Parts: []scoring.PromptPart{{Size: 1}}}}, false},
		{"prompt strings sharing a prefix", scoring.APICompletions, `{"model":"m","prompt":["hello world","hello there","x","hello world!"]}`, "", scoring.Request{Model: "m", Prompts: 4,
			MorePrompts: scoring.MorePrompts{Text: true, FirstBytes: 11, Parts: []scoring.PromptPart{{Size: 11, Shared: 6}, {Size: 1}, {Size: 12, Shared: 11}}}}, false},
		{"prompt ids", scoring.APICompletions, `{"model":"m","prompt":[1,2,3],"cache_salt":"x"}`, "", scoring.Request{Model: "m", TokenIDs: []uint32{1, 2, 3}, CacheSalt: "x", Prompts: 1}, false},
		{"prompt id lists", scoring.APICompletions, `{"model":"m","prompt":[[4,5],[6],[4,5,6],[4]]}`, "", scoring.Request{Model: "m", TokenIDs: []uint32{4, 5}, Prompts: 4,
			MorePrompts: scoring.MorePrompts{Parts: []scoring.PromptPart{{Size: 1}, {Size: 3, Shared: 2}, {Size: 1, Shared: 1}}}}, false},
		{"negative id", scoring.APICompletions, `{"model":"m","prompt":[-1]}`, "", scoring.Request{}, true},
		{"empty prompt list", scoring.APICompletions, `{"model":"m","prompt":[]}`, "", scoring.Request{}, true},
		{"prompt object", scoring.APICompletions, `{"model":"m","prompt":{}}`, "", scoring.Request{}, true},
		{"no prompt", scoring.APICompletions, `{"model":"m"}`, "", scoring.Request{}, true},
		{"messages not array", scoring.APIChat, `{"model":"m","messages":"hi"}`, "", scoring.Request{}, true},
		{"anthropic", scoring.APIMessages, `{"model":"m","max_tokens":5,"messages":[],"stream":true}`, "", scoring.Request{Model: "m", MaxTokens: 5, Stream: true}, false},
		{"negative max_tokens", scoring.APIChat, `{"model":"m","max_tokens":-5,"messages":[]}`, "", scoring.Request{}, true},
		{"choices", scoring.APIChat, `{"model":"m","n":4,"messages":[]}`, "", scoring.Request{Model: "m", Choices: 4}, false},
		{"choices, completions", scoring.APICompletions, `{"model":"m","n":2,"prompt":"abc"}`, "", scoring.Request{Model: "m", Choices: 2, Prompts: 1}, false},
		{"choices null", scoring.APIChat, `{"model":"m","n":null,"messages":[]}`, "", scoring.Request{Model: "m"}, false},
		{"no choices", scoring.APIChat, `{"model":"m","n":0,"messages":[]}`, "", scoring.Request{}, true},
		{"choices not a number", scoring.APIChat, `{"model":"m","n":"2","messages":[]}`, "", scoring.Request{}, true},
		{"anthropic has no n", scoring.APIMessages, `{"model":"m","max_tokens":5,"n":3,"messages":[]}`, "", scoring.Request{Model: "m", MaxTokens: 5}, false},
		{"trailing garbage", scoring.APIChat, `{"model":"m","messages":[]} x`, "", scoring.Request{}, true},
		{"array body", scoring.APIChat, `[1]`, "", scoring.Request{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := scoring.Request{API: tc.api}
			_, err := parseBody(&r, []byte(tc.body), tc.def, nil)
			if tc.wantErr {
				var br *badRequest
				if !errors.As(err, &br) {
					t.Fatalf("want a badRequest error, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Model != tc.want.Model || r.Stream != tc.want.Stream || r.MaxTokens != tc.want.MaxTokens ||
				r.Choices != tc.want.Choices || r.Prompts != tc.want.Prompts || r.CacheSalt != tc.want.CacheSalt || !slices.Equal(r.TokenIDs, tc.want.TokenIDs) ||
				!reflect.DeepEqual(r.MorePrompts, tc.want.MorePrompts) {
				t.Fatalf("got %+v, want %+v", r, tc.want)
			}
		})
	}
}

// TestPromptOfOneField: a body with one prompt field lends it to
// Request.Prompt rather than copying it (on a 100K-token chat the copy is
// hundreds of kilobytes), and the lent slice cannot be appended into the
// body.
func TestPromptOfOneField(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	var r scoring.Request
	if _, err := parseBody(&r, raw, "", nil); err != nil {
		t.Fatal(err)
	}
	if want := `[{"role":"user","content":"hi"}]`; string(r.Prompt) != want {
		t.Fatalf("prompt %q, want %q", r.Prompt, want)
	}
	start := bytes.Index(raw, r.Prompt)
	if &r.Prompt[0] != &raw[start] {
		t.Error("the prompt is a copy of the messages, not the body's own bytes")
	}
	if cap(r.Prompt) != len(r.Prompt) {
		t.Errorf("cap %d, len %d: an append would write into the body", cap(r.Prompt), len(r.Prompt))
	}
}

// TestPromptOf: the approximate mode hashes Request.Prompt, which holds
// what decides the engine's prompt and nothing else, so that a sampling
// field before the messages cannot break affinity while a different
// system prompt or tool list does.
func TestPromptOf(t *testing.T) {
	t.Parallel()
	msgs := `[{"role":"user","content":"a long shared conversation"}]`
	tests := []struct {
		name  string
		api   scoring.API
		a, b  string
		equal bool
	}{
		{"sampling fields before messages", scoring.APIChat,
			`{"model":"m","messages":` + msgs + `}`, `{"temperature":0.7,"model":"m","top_p":0.9,"messages":` + msgs + `,"stream":true}`, true},
		{"field order", scoring.APIChat,
			`{"model":"m","tools":[{"type":"function"}],"messages":` + msgs + `}`, `{"messages":` + msgs + `,"tools":[{"type":"function"}],"model":"m"}`, true},
		{"different tools", scoring.APIChat,
			`{"model":"m","tools":[{"type":"function","name":"a"}],"messages":` + msgs + `}`, `{"model":"m","tools":[{"type":"function","name":"b"}],"messages":` + msgs + `}`, false},
		{"anthropic system", scoring.APIMessages,
			`{"model":"m","max_tokens":5,"system":"be brief","messages":` + msgs + `}`, `{"model":"m","max_tokens":5,"system":"be long","messages":` + msgs + `}`, false},
		{"completions prompt", scoring.APICompletions,
			`{"model":"m","prompt":"once upon a time","max_tokens":3}`, `{"max_tokens":9,"model":"m","prompt":"once upon a time"}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ra, rb := scoring.Request{API: tc.api}, scoring.Request{API: tc.api}
			if _, err := parseBody(&ra, []byte(tc.a), "", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := parseBody(&rb, []byte(tc.b), "", nil); err != nil {
				t.Fatal(err)
			}
			if len(ra.Prompt) == 0 || string(ra.Body) != tc.a {
				t.Fatalf("prompt %q, body %q", ra.Prompt, ra.Body)
			}
			if got := string(ra.Prompt) == string(rb.Prompt); got != tc.equal {
				t.Fatalf("prompts equal = %v, want %v:\n%s\n%s", got, tc.equal, ra.Prompt, rb.Prompt)
			}
		})
	}
}

func FuzzParseBody(f *testing.F) {
	for _, s := range []string{chatBody, `{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m","prompt":"x"}`, `{`, `null`, `{"model":"m","max_tokens":1,"messages":[]}`} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	apis := []scoring.API{scoring.APIChat, scoring.APICompletions, scoring.APIMessages}
	f.Fuzz(func(t *testing.T, body string, api uint8) {
		r := scoring.Request{API: apis[int(api)%len(apis)]}
		_, err := parseBody(&r, []byte(body), "", nil)
		var br *badRequest
		if err != nil && !errors.As(err, &br) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if err == nil && r.Model == "" {
			t.Fatal("accepted a request without a model")
		}
	})
}

// TestRoutingFields checks the routing view of a parsed body: typed
// fields, a clear error naming a field of the wrong type, and the raw JSON
// of the prompt fields as slices of the body, not copies.
func TestRoutingFields(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"model":"m","stream":true,"max_tokens":7,"tools":[{"a":1}],"messages":[{"role":"user","content":"hi"}],"prompt":"x"}`)
	pb, err := tokenize.ParseBody(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := routingFields(pb)
	if err != nil || *b.Model != "m" || !b.Stream || *b.MaxTokens != 7 || b.MaxCompletionTokens != nil {
		t.Fatalf("fields %+v, err %v", b, err)
	}
	for name, f := range map[string]rawRef{"tools": b.Tools, "messages": b.Messages, "prompt": b.Prompt} {
		i := bytes.Index(raw, f)
		if i < 0 || &raw[i] != &f[0] {
			t.Errorf("%s = %s is not a slice of the body", name, f)
		}
	}
	for body, want := range map[string]string{
		`{"model":5}`:             `invalid type for field "model": expected string`,
		`{"stream":"yes"}`:        `invalid type for field "stream": expected bool`,
		`{"max_tokens":1.5}`:      `invalid type for field "max_tokens": expected int`,
		`{"max_tokens":1e400000}`: `invalid type for field "max_tokens": expected int`,
	} {
		pb, err := tokenize.ParseBody([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if _, err := routingFields(pb); err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := clip("qwen3"); got != "qwen3" {
		t.Errorf("short input changed: %q", got)
	}
	long := strings.Repeat("é", 1<<19) // 1 MiB of two-byte characters
	got := clip(long)
	if len(got) > maxEcho+32 || !strings.HasSuffix(got, "… (1048576 bytes)") || !utf8.ValidString(got) {
		t.Errorf("clip of 1 MiB: %d bytes, %q…", len(got), got[:min(len(got), 40)])
	}
}
