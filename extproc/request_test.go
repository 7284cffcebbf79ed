package extproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/scoring"
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
		{"prompt string", scoring.APICompletions, `{"model":"m","prompt":"abc"}`, "", scoring.Request{Model: "m"}, false},
		{"prompt strings", scoring.APICompletions, `{"model":"m","prompt":["a","b"]}`, "", scoring.Request{Model: "m"}, false},
		{"prompt ids", scoring.APICompletions, `{"model":"m","prompt":[1,2,3],"cache_salt":"x"}`, "", scoring.Request{Model: "m", TokenIDs: []uint32{1, 2, 3}, CacheSalt: "x"}, false},
		{"prompt id lists", scoring.APICompletions, `{"model":"m","prompt":[[4,5],[6]]}`, "", scoring.Request{Model: "m", TokenIDs: []uint32{4, 5}}, false},
		{"negative id", scoring.APICompletions, `{"model":"m","prompt":[-1]}`, "", scoring.Request{}, true},
		{"empty prompt list", scoring.APICompletions, `{"model":"m","prompt":[]}`, "", scoring.Request{}, true},
		{"prompt object", scoring.APICompletions, `{"model":"m","prompt":{}}`, "", scoring.Request{}, true},
		{"no prompt", scoring.APICompletions, `{"model":"m"}`, "", scoring.Request{}, true},
		{"messages not array", scoring.APIChat, `{"model":"m","messages":"hi"}`, "", scoring.Request{}, true},
		{"anthropic", scoring.APIMessages, `{"model":"m","max_tokens":5,"messages":[],"stream":true}`, "", scoring.Request{Model: "m", MaxTokens: 5, Stream: true}, false},
		{"negative max_tokens", scoring.APIChat, `{"model":"m","max_tokens":-5,"messages":[]}`, "", scoring.Request{}, true},
		{"trailing garbage", scoring.APIChat, `{"model":"m","messages":[]} x`, "", scoring.Request{}, true},
		{"array body", scoring.APIChat, `[1]`, "", scoring.Request{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := scoring.Request{API: tc.api}
			_, err := parseBody(&r, []byte(tc.body), tc.def)
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
				r.CacheSalt != tc.want.CacheSalt || !slices.Equal(r.TokenIDs, tc.want.TokenIDs) {
				t.Fatalf("got %+v, want %+v", r, tc.want)
			}
		})
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
			if _, err := parseBody(&ra, []byte(tc.a), ""); err != nil {
				t.Fatal(err)
			}
			if _, err := parseBody(&rb, []byte(tc.b), ""); err != nil {
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
		_, err := parseBody(&r, []byte(body), "")
		var br *badRequest
		if err != nil && !errors.As(err, &br) {
			t.Fatalf("error of type %T: %v", err, err)
		}
		if err == nil && r.Model == "" {
			t.Fatal("accepted a request without a model")
		}
	})
}

// TestRawRefAliasesBody checks what rawRef relies on: json.Unmarshal hands
// an Unmarshaler a slice of its input, not a scratch copy that a later
// value would overwrite.
func TestRawRefAliasesBody(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"model":"m","tools":[{"a":1}],"messages":[{"role":"user","content":"hi"}],"prompt":"x"}`)
	var b body
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]rawRef{"tools": b.Tools, "messages": b.Messages, "prompt": b.Prompt} {
		i := bytes.Index(raw, f)
		if i < 0 || &raw[i] != &f[0] {
			t.Errorf("%s = %s is not a slice of the body", name, f)
		}
	}
}
