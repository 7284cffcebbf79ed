package tokenize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestPackWordTellsBytesApart checks the key's two properties: each of
// the word's bytes lands in the key (the loads only copy bytes, so
// changing any one byte must change the key, which makes it one-to-one
// for a given length), and nothing past the word's end is read.
func TestPackWordTellsBytesApart(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= wordCacheMaxLen; n++ {
		for range 50 {
			buf := make([]byte, n+8)
			for i := range buf {
				buf[i] = byte(r.UintN(256))
			}
			w := buf[:n:n]
			k0, k1, k2 := packWord(w)
			if j0, j1, j2 := packWord(slices.Clone(w)); [3]uint64{j0, j1, j2} != [3]uint64{k0, k1, k2} {
				t.Fatalf("packWord(%x) read past the word's end", w)
			}
			for i := range w {
				old := w[i]
				w[i] ^= 1 << r.UintN(8)
				if j0, j1, j2 := packWord(w); [3]uint64{j0, j1, j2} == [3]uint64{k0, k1, k2} {
					t.Fatalf("packWord of %d bytes ignores byte %d", n, i)
				}
				w[i] = old
			}
		}
	}
}

func TestWordCacheGetPut(t *testing.T) {
	c := newWordCache(wordCacheBits, 7)
	ids := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	for n := 1; n <= wordCacheMaxLen; n++ {
		w := []byte("abcdefghijklmnopqrstuvwxyz"[:n])
		want := ids[:1+n%wordCacheMaxIDs]
		c.put(w, want)
		got, ok := c.get(w, []uint32{99})
		if !ok || !slices.Equal(got, append([]uint32{99}, want...)) {
			t.Fatalf("get(%q) = %v, %v after put %v", w, got, ok, want)
		}
	}
	if _, ok := c.get([]byte("never put"), nil); ok {
		t.Error("a word never put was found")
	}
	// A prefix of a cached word is another word: same bytes, other length.
	c.put([]byte("ab\x00"), []uint32{5})
	if got, ok := c.get([]byte("ab"), nil); ok && !slices.Equal(got, ids[:1+2%wordCacheMaxIDs]) {
		t.Errorf("get(ab) = %v, the ids of ab\\x00", got)
	}
	long := []byte("a word longer than the slot holds")
	c.put(long, []uint32{1})
	if _, ok := c.get(long, nil); ok {
		t.Error("a word over wordCacheMaxLen bytes was cached")
	}
	many := []byte("many")
	c.put(many, make([]uint32, wordCacheMaxIDs+1))
	if _, ok := c.get(many, nil); ok {
		t.Error("a word of more than wordCacheMaxIDs ids was cached")
	}
	c.put(nil, []uint32{1})
	if _, ok := c.get(nil, nil); ok {
		t.Error("the empty word was cached")
	}
}

// TestWordCacheSetHoldsTwo puts words that share a set: the set keeps
// two of them (the point of its two ways), and a third replaces one, which
// then misses while the others that answer give their own ids.
func TestWordCacheSetHoldsTwo(t *testing.T) {
	c := newWordCache(wordCacheBits, 3)
	setOf := func(w []byte) *[2]wordSlot {
		k0, k1, k2 := packWord(w)
		return c.set(k0, k1, k2, len(w))
	}
	words := [][]byte{[]byte("first")}
	for i := 0; len(words) < 3; i++ {
		if w := fmt.Appendf(nil, "w%d", i); setOf(w) == setOf(words[0]) {
			words = append(words, w)
		}
	}
	idsOf := func(k int) []uint32 { return []uint32{uint32(k), uint32(10 + k)} }
	hits := func() (n int) {
		for k, w := range words {
			got, ok := c.get(w, nil)
			if ok && !slices.Equal(got, idsOf(k)) {
				t.Fatalf("get(%s) = %v, want %v", w, got, idsOf(k))
			}
			if ok {
				n++
			}
		}
		return n
	}
	c.put(words[0], idsOf(0))
	c.put(words[1], idsOf(1))
	if n := hits(); n != 2 {
		t.Fatalf("two words of one set: %d answer, want 2", n)
	}
	c.put(words[2], idsOf(2))
	if _, ok := c.get(words[2], nil); !ok {
		t.Fatal("the word put last does not answer")
	}
	if n := hits(); n != 2 {
		t.Fatalf("three words of one set: %d answer, want 2", n)
	}
}

// TestWordCacheConcurrent has writers and readers share slots: every hit
// must be the ids of the word asked for (run with -race too).
func TestWordCacheConcurrent(t *testing.T) {
	c := newWordCache(2, 1) // four slots: constant collisions
	idsOf := func(w []byte) []uint32 {
		out := make([]uint32, 1+len(w)%wordCacheMaxIDs)
		for i := range out {
			out[i] = uint32(w[0])<<8 | uint32(len(w))<<16 | uint32(i)
		}
		return out
	}
	words := make([][]byte, 64)
	for i := range words {
		words[i] = fmt.Appendf(nil, "%c%s", 'a'+i%26, "xxxxxxxxxxxxxxxxxxxxxx"[:i%20])
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20000 {
				w := words[r.IntN(len(words))]
				if got, ok := c.get(w, nil); ok {
					if !slices.Equal(got, idsOf(w)) {
						t.Errorf("get(%s) = %v, want %v", w, got, idsOf(w))
						return
					}
					continue
				}
				c.put(w, idsOf(w))
			}
		})
	}
	wg.Wait()
}

// BenchmarkWordCacheHit looks up a warm set of 4,096 words of 1 to
// wordCacheMaxLen bytes and 1 to wordCacheMaxIDs ids, in a cache of the
// size the tokenizer uses: the cost of a repeated word in a long prompt.
func BenchmarkWordCacheHit(b *testing.B) {
	c := newWordCache(wordCacheBits, 12345)
	r := rand.New(rand.NewPCG(3, 4))
	words := make([][]byte, 4096)
	for i := range words {
		w := make([]byte, 1+r.IntN(wordCacheMaxLen))
		for j := range w {
			w[j] = 'a' + byte(r.IntN(26))
		}
		words[i] = w
		c.put(w, make([]uint32, 1+r.IntN(wordCacheMaxIDs)))
	}
	ids := make([]uint32, 0, 64)
	hits := 0
	for b.Loop() {
		for _, w := range words {
			var ok bool
			if ids, ok = c.get(w, ids[:0]); ok {
				hits++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(words)), "ns/word")
	b.ReportMetric(float64(hits)/float64(b.N*len(words)), "hit-ratio")
}
