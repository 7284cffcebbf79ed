package app

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/tokenize"
)

func TestTokenizeCommand(t *testing.T) {
	t.Parallel()
	const dir = "../../tokenize/testdata/models/qwen3"
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := tokenize.LoadChatTemplate(dir)
	chat := `{"model":"qwen3","messages":[{"role":"user","content":"Hi there"}]}`
	text, _ := tmpl.RenderOpenAI([]byte(chat))
	tests := []struct {
		name, flag, in string
		want           [][]uint32
		wantErr        bool
	}{
		{"text", "", `{"text":"Hello, world"}` + "\n" + `{"text":"x","add_special_tokens":false}`, [][]uint32{tok.Encode("Hello, world", true), tok.Encode("x", false)}, false},
		{"chat", "--chat", chat, [][]uint32{tok.Encode(text, false)}, false},
		{"bad line", "", `{"nope":1}`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"tokenize", "--tokenizer", dir}
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			var out, errOut strings.Builder
			err := run(t.Context(), args, strings.NewReader(tc.in), &out, &errOut)
			if tc.wantErr {
				if err == nil || !strings.Contains(out.String(), `"error"`) {
					t.Fatalf("want an error line, got %v %q", err, out.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err, errOut.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			for i, ln := range lines {
				var got struct{ IDs []uint32 }
				if err := json.Unmarshal([]byte(ln), &got); err != nil || !slices.Equal(got.IDs, tc.want[i]) {
					t.Fatalf("line %d: %s, want %v", i, ln, tc.want[i])
				}
			}
		})
	}
}
