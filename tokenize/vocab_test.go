package tokenize

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
)

// TestVocabTableActsAsMap checks the table against a map given the same
// keys: random ones that share prefixes, repeat (the later id wins), and
// include the empty key, then lookups of every key and of near misses.
func TestVocabTableActsAsMap(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1000, 40000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(n), 3))
			want := map[string]uint32{}
			var b vocabBuilder
			var keys []string
			for i := range n {
				k := make([]byte, r.IntN(6))
				for j := range k {
					k[j] = "abc\x00\xff"[r.IntN(5)]
				}
				if i > 0 && r.IntN(10) == 0 {
					k = []byte(keys[r.IntN(len(keys))])
				}
				id := r.Uint32()
				want[string(k)] = id
				keys = append(keys, string(k))
				if !b.add(k, id) {
					t.Fatalf("add(%q) refused", k)
				}
			}
			tab := b.build()
			if got := tab.len(); got != len(want) {
				t.Errorf("len() = %d, want %d", got, len(want))
			}
			for k, id := range want {
				if got, ok := tab.get(k); !ok || got != id {
					t.Errorf("get(%q) = %d, %v; want %d, true", k, got, ok, id)
				}
				if got, ok := tab.getBytes([]byte(k)); !ok || got != id {
					t.Errorf("getBytes(%q) = %d, %v; want %d, true", k, got, ok, id)
				}
				for _, miss := range []string{k + "d", "d" + k} {
					if _, in := want[miss]; in {
						continue
					}
					if got, ok := tab.get(miss); ok {
						t.Errorf("get(%q) = %d, true; want a miss", miss, got)
					}
				}
			}
		})
	}
}

func TestIDStrings(t *testing.T) {
	byID := []string{"a", "", "bcd", "", "ef"}
	s, ok := newIDStrings(byID)
	if !ok {
		t.Fatal("newIDStrings refused 5 bytes")
	}
	if s.len() != len(byID) {
		t.Errorf("len() = %d, want %d", s.len(), len(byID))
	}
	for id, want := range byID {
		if got := s.get(uint32(id)); got != want {
			t.Errorf("get(%d) = %q, want %q", id, got, want)
		}
	}
	if got := s.get(uint32(len(byID))); got != "" {
		t.Errorf("get past the end = %q, want empty", got)
	}
}

// TestLoadedTokenizerIsFewObjects checks that a loaded tokenizer leaves
// the collector few objects to mark: its vocabulary once held two per
// token (151K tokens for qwen3), which every collection marked.
func TestLoadedTokenizerIsFewObjects(t *testing.T) {
	const most = 20000
	for _, fam := range goldenFamilies {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tk, err := Load(filepath.Join("testdata", "models", fam))
		if err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := int64(after.HeapObjects) - int64(before.HeapObjects); n > most {
			t.Errorf("%s: a loaded tokenizer holds %d heap objects, want at most %d", fam, n, most)
		}
		runtime.KeepAlive(tk)
	}
}
