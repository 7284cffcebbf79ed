package replay

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/wordlist/samples.json")

type sample struct {
	Name  string `json:"name"`
	Text  string `json:"text"`
	Words int    `json:"words"`
}

// samples returns generated prompt texts whose real token counts
// testdata/wordlist/count_samples.mjs measured.
func samples() []sample {
	var out []sample
	add := func(name string, t Text) {
		out = append(out, sample{Name: name, Text: t.String(), Words: t.Len()})
	}
	add("user-4", userText(1, 0, "r", 0, 0, 4))
	add("user-10", userText(1, 1, "r", 1, 0, 10))
	add("user-1000", userText(1, 377, "r", 377, 0, 1000))
	add("marker-large-index", marker(123456789))
	add("block-512", genText(newRand(2, hashString("block"), 7), 512))
	prefix := genText(newRand(3, hashString("prefix"), 0), 300)
	add("prefix-then-user", concat(prefix, userText(3, 42, "r", 42, 0, 200)))
	return out
}

// TestSampleTokenCounts checks that generated text is one token per word in
// the Qwen3 and Llama 3 tokenizers, as the Rust tokenizers library counted
// (testdata/wordlist/sample_counts.json, from count_samples.mjs).
func TestSampleTokenCounts(t *testing.T) {
	t.Parallel()
	got, err := json.MarshalIndent(samples(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	const path = "testdata/wordlist/samples.json"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("generated samples differ from %s: the generator changed; rerun with -update and count_samples.mjs", path)
	}
	b, err := os.ReadFile("testdata/wordlist/sample_counts.json")
	if err != nil {
		t.Fatal(err)
	}
	var counts map[string]map[string]int
	if err := json.Unmarshal(b, &counts); err != nil {
		t.Fatal(err)
	}
	for _, s := range samples() {
		c, ok := counts[s.Name]
		if !ok || len(c) != 2 {
			t.Fatalf("%s: no counts for both tokenizers: %v", s.Name, c)
		}
		for tok, n := range c {
			if n != s.Words {
				t.Errorf("%s: %s counts %d tokens for %d words", s.Name, tok, n, s.Words)
			}
		}
	}
}
