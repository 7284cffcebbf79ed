package tokenize

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
)

// metaspaceVariants are the pre-tokenizers of gen_synthetic.py's METASPACE.
var metaspaceVariants = map[string]string{
	"first":        `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false}`,
	"always_split": `{"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true}`,
	"never":        `{"type":"Metaspace","replacement":"▁","prepend_scheme":"never","split":false}`,
}

type metaspaceCase struct {
	Name    string   `json:"name"`
	IDs     []uint32 `json:"ids"`
	Decoded string   `json:"decoded"`
}

// TestMetaspace checks the Metaspace pre-tokenizer and decoder (newer
// Llama 2 and Mistral files) on Llama 2's model against the Rust library.
func TestMetaspace(t *testing.T) {
	t.Parallel()
	data, err := readTokenizerFile(filepath.Join("testdata", "models", "llama2"))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	inputs := tokGoldenInputs(t)
	for name, pre := range metaspaceVariants {
		t.Run(name, func(t *testing.T) {
			g := make(map[string]json.RawMessage, len(f))
			for k, v := range f {
				g[k] = v
			}
			g["normalizer"] = json.RawMessage("null")
			g["pre_tokenizer"] = json.RawMessage(pre)
			g["decoder"] = json.RawMessage(pre)
			patched, err := json.Marshal(g)
			if err != nil {
				t.Fatal(err)
			}
			tk, err := FromJSON(patched)
			if err != nil {
				t.Fatal(err)
			}
			cases := readJSONLinesGz[metaspaceCase](t, filepath.Join("testdata", "synthetic", "metaspace_"+name+"_expected.jsonl.gz"))
			bad := 0
			for _, c := range cases {
				got := tk.Encode(inputs[c.Name], true)
				if !slices.Equal(got, c.IDs) {
					if bad++; bad <= 5 {
						t.Errorf("%s: %s", c.Name, diffIDs(tk, got, c.IDs))
					}
				}
				if d := tk.Decode(c.IDs); d != c.Decoded {
					if bad++; bad <= 5 {
						t.Errorf("%s: decoded %q, want %q", c.Name, truncForLog(d), truncForLog(c.Decoded))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d differ", bad, len(cases))
			}
		})
	}
}
