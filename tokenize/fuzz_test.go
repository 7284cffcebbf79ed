package tokenize

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode checks the invariants the goldens show for every input: no
// panic, determinism, ids inside the vocabulary, the post-processor's
// tokens around the text, decode(encode(x)) == normalize(x) for byte-level
// models, and PrefixCache agreeing with Encode after seeing a prefix. The
// golden inputs are its seed corpus.
//
//	go test ./tokenize -run '^$' -fuzz FuzzEncode -fuzztime 60s
func FuzzEncode(f *testing.F) {
	inputs := tokGoldenInputs(f)
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		if n != "corpus_1mb" && (strings.HasPrefix(n, "named/") || strings.HasPrefix(n, "probe/") || i%40 == 0) {
			f.Add(inputs[n], uint16(len(inputs[n])/2))
		}
	}
	toks := []*Tokenizer{loadGoldenTokenizer(f, "qwen3"), loadGoldenTokenizer(f, "gpt-oss"), loadGoldenTokenizer(f, "deepseek-v3"), loadGoldenTokenizer(f, "llama2"), loadGoldenTokenizer(f, "gemma3")}
	f.Fuzz(func(t *testing.T, s string, cut uint16) {
		for _, tk := range toks {
			ids := tk.Encode(s, false)
			if again := tk.Encode(s, false); !slices.Equal(ids, again) {
				t.Fatalf("not deterministic: %v then %v", ids, again)
			}
			n := uint32(tk.VocabSize())
			for _, id := range ids {
				if id >= n {
					t.Fatalf("id %d outside vocabulary of %d", id, n)
				}
			}
			special := tk.Encode(s, true)
			want := slices.Concat(tk.prefixIDs, ids, tk.suffixIDs)
			if !slices.Equal(special, want) {
				t.Fatalf("with special tokens %v, want %v", special, want)
			}
			if tk.model.byteLevel && utf8.ValidString(s) {
				if got, want := tk.Decode(ids), applyNormalizers(tk.norm, s); got != want {
					t.Fatalf("decode(encode(x)) = %q, want %q", got, want)
				}
			}
			if len(s) >= checkpointSpacing {
				c := NewPrefixCache(tk, 1<<20)
				k := int(cut) % len(s)
				c.Encode(s[:k], false)
				if got := c.Encode(s, false); !slices.Equal(got, ids) {
					t.Fatalf("PrefixCache after %d bytes: %s", k, diffIDs(tk, got, ids))
				}
			}
		}
	})
}

// FuzzFromJSON feeds tokenizer.json variants to the loader (whose vocab and
// merges scanner is hand-written): it must return a Tokenizer or an error,
// never panic, and a Tokenizer it returns must encode without panicking.
//
//	go test ./tokenize -run '^$' -fuzz FuzzFromJSON -fuzztime 60s
func FuzzFromJSON(f *testing.F) {
	flags, err := os.ReadFile(filepath.Join("testdata", "synthetic", "flags.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(flags)
	strMerges, err := os.ReadFile(filepath.Join("testdata", "synthetic", "flags_strmerges.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(strMerges)
	for _, s := range []string{
		`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`,
		`{"model":{"type":"BPE","vocab":{"\u0041":0,"\\":1,"A\\":2},"merges":[["A","\\"]]},"added_tokens":[{"id":3,"content":"<x>","special":true}]}`,
		`{"model":{"type":"BPE","vocab":{},"merges":[]},"normalizer":{"type":"Replace","pattern":{"String":" "},"content":"▁"},"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}}`,
		`{"model":{"type":"BPE","vocab":{"a":4294967295}}}`,
		`{"model":{"type":"BPE","vocab":{"a":0},"merges":["a"]}}`,
		`{"model":{"type":"BPE","vocab":{"a":0}`,
		`{"model":{"type":"BPE","vocab":{"a":0}}} trailing`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := FromJSON(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "a b", "ab <x> A\\ \u00e9\u0301", "\xff\xfe"} {
			ids := tk.Encode(s, true)
			_ = tk.Decode(ids)
		}
	})
}
