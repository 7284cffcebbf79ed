package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

type flagsCase struct {
	Text    string   `json:"text"`
	Special bool     `json:"special"`
	IDs     []uint32 `json:"ids"`
	Decoded string   `json:"decoded"`
}

// TestSyntheticFlags checks added-token flags (lstrip, rstrip, single_word,
// normalized), a TemplateProcessing suffix and both merge formats against
// the Rust library (testdata/gen_synthetic.py).
func TestSyntheticFlags(t *testing.T) {
	t.Parallel()
	cases := readJSONLinesGz[flagsCase](t, filepath.Join("testdata", "synthetic", "flags_expected.jsonl.gz"))
	for _, file := range []string{"flags.json", "flags_strmerges.json"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", "synthetic", file))
			if err != nil {
				t.Fatal(err)
			}
			tk, err := FromJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			if tk.splitSafe {
				t.Error("lstrip/rstrip/single_word tokens must disable piecewise encoding")
			}
			for _, c := range cases {
				got := tk.Encode(c.Text, c.Special)
				if !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q, %v) = %v, want %v", c.Text, c.Special, got, c.IDs)
				}
				if d := tk.Decode(c.IDs); d != c.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, d, c.Decoded)
				}
			}
		})
	}
}

// patchedFlagsJSON returns a small valid tokenizer.json with one part replaced.
func patchedFlagsJSON(t *testing.T, part, value string) []byte {
	t.Helper()
	var f map[string]json.RawMessage
	data, err := os.ReadFile(filepath.Join("testdata", "synthetic", "flags.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(part, "model.") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(f["model"], &m); err != nil {
			t.Fatal(err)
		}
		m[strings.TrimPrefix(part, "model.")] = json.RawMessage(value)
		f["model"], _ = json.Marshal(m)
	} else {
		f[part] = json.RawMessage(value)
	}
	out, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFromJSONRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		part, value string
		unsupported bool
	}{
		{"WordPiece model", "model.type", `"WordPiece"`, true},
		{"BPE dropout", "model.dropout", `0.1`, true},
		{"subword prefix", "model.continuing_subword_prefix", `"##"`, true},
		{"word suffix", "model.end_of_word_suffix", `"</w>"`, true},
		{"NFKC", "normalizer", `{"type":"NFKC"}`, true},
		{"Lowercase in a sequence", "normalizer", `{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Lowercase"}]}`, true},
		{"regex Replace", "normalizer", `{"type":"Replace","pattern":{"Regex":" +"},"content":" "}`, true},
		{"Metaspace scheme", "pre_tokenizer", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes","split":true}`, true},
		{"Metaspace in a sequence", "pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true},{"type":"Split","pattern":{"String":"x"},"behavior":"Isolated","invert":false}]}`, true},
		{"unknown regex", "pre_tokenizer", `{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false}`, true},
		{"inverted split", "pre_tokenizer", `{"type":"Split","pattern":{"String":" "},"behavior":"Isolated","invert":true}`, true},
		{"Contiguous split", "pre_tokenizer", `{"type":"Split","pattern":{"String":" "},"behavior":"Contiguous","invert":false}`, true},
		{"ByteLevel regex", "pre_tokenizer", `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`, true},
		{"ByteLevel prefix space", "pre_tokenizer", `{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":false}`, true},
		{"RobertaProcessing", "post_processor", `{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0]}`, true},
		{"truncation", "truncation", `{"max_length":8,"strategy":"LongestFirst","stride":0,"direction":"Right"}`, true},
		{"padding", "padding", `{"strategy":"BatchLongest"}`, true},
		{"WordPiece decoder", "decoder", `{"type":"WordPiece","prefix":"##","cleanup":true}`, true},
		{"merge out of vocabulary", "model.merges", `[["x","zz"]]`, false},
		{"merge of three", "model.merges", `["a b c"]`, false},
		{"vocab not an object", "model.vocab", `[1,2]`, false},
		{"negative id", "model.vocab", `{"a":-1}`, false},
		{"unk not in vocab", "model.unk_token", `"<nope>"`, false},
		{"template without sequence", "post_processor", `{"type":"TemplateProcessing","single":[],"special_tokens":{}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromJSON(patchedFlagsJSON(t, tc.part, tc.value))
			if err == nil {
				t.Fatal("want an error")
			}
			if got := errors.Is(err, ErrUnsupported); got != tc.unsupported {
				t.Errorf("errors.Is(%v, ErrUnsupported) = %v, want %v", err, got, tc.unsupported)
			}
		})
	}
}

func TestFromJSONMalformed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "{", "[]", `{"model":1}`, `{"model":{"type":"BPE","vocab":{"a":0},"merges":[1]}}`} {
		if _, err := FromJSON([]byte(in)); err == nil {
			t.Errorf("FromJSON(%q): want an error", in)
		}
	}
}

func TestLoadPlainAndGzip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, err := readTokenizerFile(filepath.Join("testdata", "models", "llama2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	plain, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	gz := loadGoldenTokenizer(t, "llama2")
	text := "Hello <s> world ▁ 😀"
	if a, b := plain.Encode(text, true), gz.Encode(text, true); !slices.Equal(a, b) {
		t.Errorf("plain %v, gzip %v", a, b)
	}
	if _, err := Load(t.TempDir()); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(empty dir) = %v, want ErrNotExist", err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json.gz"), []byte("not gzip"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil {
		t.Error("Load(corrupt gzip): want an error")
	}
}

func TestTokenID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fam, tok string
		want     uint32
		ok       bool
	}{
		{"qwen3", "<|im_end|>", 151645, true},
		{"qwen3", "Ġthe", 279, true},
		{"qwen3", "<think>", 151667, true},
		{"qwen3", "no such token", 0, false},
		{"llama3", "<|begin_of_text|>", 128000, true},
		{"llama3", "Ċ", 198, true},
		{"llama2", "▁the", 272, true},
		{"llama2", "<0x0A>", 13, true},
		{"deepseek-v3", "<｜User｜>", 128803, true},
	}
	for _, tc := range tests {
		t.Run(tc.fam+"/"+tc.tok, func(t *testing.T) {
			t.Parallel()
			id, ok := loadGoldenTokenizer(t, tc.fam).TokenID(tc.tok)
			if id != tc.want || ok != tc.ok {
				t.Errorf("TokenID(%q) = %d, %v; want %d, %v", tc.tok, id, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestDecodeRoundTrip checks decode(encode(x)) == normalize(x) on the golden
// inputs for every family; SentencePiece-style files decode with the leading
// space their normalizer adds stripped or kept as their decoder says.
func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	inputs := tokGoldenInputs(t)
	for _, fam := range []string{"qwen3", "llama3", "deepseek-v3", "gpt-oss"} {
		t.Run(fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, fam)
			n := 0
			for name, text := range inputs {
				if !utf8.ValidString(text) {
					continue
				}
				want := applyNormalizers(tk.norm, text)
				if got := tk.Decode(tk.Encode(text, false)); got != want {
					t.Errorf("%s: decode(encode(x)) differs: %q vs %q", name, truncForLog(got), truncForLog(want))
					if n++; n > 3 {
						return
					}
				}
			}
		})
	}
}

func truncForLog(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func TestDecodeSentencePiece(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fam, text, want string
	}{
		{"llama2", "Hello world", "Hello world"},
		{"llama2", "  two spaces", "  two spaces"},
		{"llama2", "emoji 😀 and 中文", "emoji 😀 and 中文"},
		{"gemma3", "Hello world", "Hello world"},
		{"gemma3", "  two spaces\n", "  two spaces\n"},
	}
	for _, tc := range tests {
		t.Run(tc.fam+"/"+tc.text, func(t *testing.T) {
			t.Parallel()
			tk := loadGoldenTokenizer(t, tc.fam)
			if got := tk.Decode(tk.Encode(tc.text, false)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecodeInvalid(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "llama3")
	tests := []struct {
		name string
		ids  []uint32
		want string
	}{
		{"unknown id skipped", []uint32{1 << 30, 9906}, "Hello"},
		{"half of a multi-byte char", []uint32{160}, "\uFFFD"}, // "ä" is byte 0xE4
		{"special kept", []uint32{128000, 9906}, "<|begin_of_text|>Hello"},
		{"empty", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tk.Decode(tc.ids); got != tc.want {
				t.Errorf("Decode(%v) = %q, want %q", tc.ids, got, tc.want)
			}
		})
	}
}

// TestInvalidUTF8 checks that bytes Rust strings cannot hold never panic
// and byte-level models keep every byte.
func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, fam := range goldenFamilies {
		t.Run(fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, fam)
			for _, s := range []string{"\xff", "a\xc3", "\xe4\xb8", "ok \x80\x80 <|im_end|>\xf0\x9f\x98", "\xed\xa0\x80"} {
				ids := tk.Encode(s, true)
				if tk.model.byteLevel && tk.norm == nil {
					if got := []byte(tk.Decode(ids)); utf8.Valid([]byte(s)) && string(got) != s {
						t.Errorf("%q: round trip %q", s, got)
					}
				}
			}
		})
	}
}

func TestConcurrentEncode(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "gpt-oss")
	inputs := tokGoldenInputs(t)
	var texts []string
	for name, s := range inputs {
		if strings.HasPrefix(name, "named/") {
			texts = append(texts, s)
		}
	}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s, true)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range texts {
				j := (i + g) % len(texts)
				if got := tk.Encode(texts[j], true); !slices.Equal(got, want[j]) {
					t.Errorf("goroutine %d: text %d differs", g, j)
				}
			}
		})
	}
	wg.Wait()
}
