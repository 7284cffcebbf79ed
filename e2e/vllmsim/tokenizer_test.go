package vllmsim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/tokenize"
)

// TestRealTokenizer serves a chat request with the Qwen3 tokenizer files
// warmpath's own tests use and checks the prompt is the ids warmpath
// computes for it.
func TestRealTokenizer(t *testing.T) {
	t.Parallel()
	const dir = "../../tokenize/testdata/models/qwen3"
	pt, err := loadTokenizer(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.ServedModelNames = []string{"qwen3"}
	srv := startServer(t, cfg, WithTokenizer(pt))
	body := `{"model":"qwen3","max_tokens":3,"messages":[{"role":"user","content":"Héllo, how are you today?"}]}`
	resp, err := http.Post("http://"+srv.HTTPAddr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	tok, _ := tokenize.Load(dir)
	tmpl, _ := tokenize.LoadChatTemplate(dir)
	text, _ := tmpl.RenderOpenAI([]byte(body))
	if want := len(tok.Encode(text, false)); out.Usage.PromptTokens != want {
		t.Fatalf("prompt_tokens %d, want %d", out.Usage.PromptTokens, want)
	}
	if len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
		t.Fatalf("choices %+v", out.Choices)
	}
}
