package tokenize

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// goldenFamilies are the tokenizer files under testdata/models, with goldens in
// testdata/expected (see testdata/README.md).
var goldenFamilies = []string{"qwen3", "llama3", "deepseek-v3", "gpt-oss", "llama2", "gemma3"}

type goldenInput struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

type goldenExpected struct {
	Name    string   `json:"name"`
	Special bool     `json:"special"`
	IDs     []uint32 `json:"ids"`
}

func readJSONLinesGz[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var out []T
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func readGzipFile(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	buf := make([]byte, 1<<16)
	for {
		n, err := zr.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return string(b)
}

var (
	inputsOnce sync.Once
	inputsMap  map[string]string
)

// tokGoldenInputs returns every golden input text by name, the corpus included.
func tokGoldenInputs(t testing.TB) map[string]string {
	inputsOnce.Do(func() {
		ins := readJSONLinesGz[goldenInput](t, filepath.Join("testdata", "inputs.jsonl.gz"))
		inputsMap = make(map[string]string, len(ins)+1)
		for _, in := range ins {
			inputsMap[in.Name] = in.Text
		}
		inputsMap["corpus_1mb"] = readGzipFile(t, filepath.Join("testdata", "corpus_1mb.txt.gz"))
	})
	return inputsMap
}

var (
	tokMu    sync.Mutex
	tokCache = map[string]*Tokenizer{}
)

// loadGoldenTokenizer loads a test tokenizer once per test binary.
func loadGoldenTokenizer(t testing.TB, fam string) *Tokenizer {
	t.Helper()
	tokMu.Lock()
	defer tokMu.Unlock()
	if tk, ok := tokCache[fam]; ok {
		return tk
	}
	tk, err := Load(filepath.Join("testdata", "models", fam))
	if err != nil {
		t.Fatalf("Load(%s): %v", fam, err)
	}
	tokCache[fam] = tk
	return tk
}

func TestGoldens(t *testing.T) {
	t.Parallel()
	inputs := tokGoldenInputs(t)
	for _, fam := range goldenFamilies {
		t.Run(fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, fam)
			exp := readJSONLinesGz[goldenExpected](t, filepath.Join("testdata", "expected", fam+".jsonl.gz"))
			if len(exp) < 10000 {
				t.Fatalf("only %d goldens", len(exp))
			}
			bad := 0
			for _, e := range exp {
				text, ok := inputs[e.Name]
				if !ok {
					t.Fatalf("golden %q has no input", e.Name)
				}
				got := tk.Encode(text, e.Special)
				if !slices.Equal(got, e.IDs) {
					bad++
					if bad <= 5 {
						t.Errorf("%s special=%v: %s", e.Name, e.Special, diffIDs(tk, got, e.IDs))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%s: %d of %d goldens differ", fam, bad, len(exp))
			}
		})
	}
}

// diffIDs describes where two id lists first differ.
func diffIDs(tk *Tokenizer, got, want []uint32) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-3)
	show := func(ids []uint32) string {
		hi := min(len(ids), i+4)
		var s []string
		for _, id := range ids[lo:hi] {
			tok, _ := tk.token(id)
			s = append(s, tok)
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	return "at " + itoaForLog(i) + " of " + itoaForLog(len(want)) + ": got " + show(got) + " want " + show(want)
}

func itoaForLog(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
