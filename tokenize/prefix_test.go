package tokenize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// goldenConversation builds a long text of golden inputs, as turns of a chat.
func goldenConversation(t testing.TB, seed uint64, turns int) []string {
	inputs := tokGoldenInputs(t)
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		if n != "corpus_1mb" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	corpus := inputs["corpus_1mb"]
	rng := rand.New(rand.NewPCG(seed, 1))
	var prompts []string
	var sb strings.Builder
	sb.WriteString("<|im_start|>system\nYou are a helpful assistant working on the warmpath project.<|im_end|>\n")
	for range turns {
		switch rng.IntN(3) {
		case 0:
			sb.WriteString(inputs[names[rng.IntN(len(names))]])
		case 1:
			i := rng.IntN(len(corpus) - 3000)
			sb.WriteString(strings.ToValidUTF8(corpus[i:i+rng.IntN(3000)], ""))
		default:
			fmt.Fprintf(&sb, "<|im_start|>user\nTurn %d: what about %s?<|im_end|>\n<|im_start|>assistant\n", rng.IntN(100), names[rng.IntN(len(names))])
		}
		prompts = append(prompts, sb.String())
	}
	return prompts
}

func TestPrefixCacheExact(t *testing.T) {
	t.Parallel()
	for _, fam := range goldenFamilies {
		t.Run(fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, fam)
			for seed := range uint64(6) {
				c := NewPrefixCache(tk, 8<<20)
				for i, p := range goldenConversation(t, seed, 40) {
					special := i%2 == 0
					got := c.Encode(p, special)
					want := tk.Encode(p, special)
					if !slices.Equal(got, want) {
						t.Fatalf("seed %d turn %d (%d bytes): %s", seed, i, len(p), diffIDs(tk, got, want))
					}
				}
				st := c.Stats()
				if (tk.splitSafe || tk.spaceCut) && st.TailBytes == 0 {
					t.Errorf("seed %d: never re-tokenized only a tail: %+v", seed, st)
				}
			}
		})
	}
}

func TestPrefixCacheModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fam                 string
		splitSafe, spaceCut bool
	}{
		{"qwen3", true, false},
		{"llama3", true, false},
		{"deepseek-v3", true, false},
		{"gpt-oss", true, false},
		{"llama2", false, false}, // Prepend adds U+2581 to every piece
		{"gemma3", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, tc.fam)
			if tk.splitSafe != tc.splitSafe || tk.spaceCut != tc.spaceCut {
				t.Errorf("splitSafe, spaceCut = %v, %v; want %v, %v", tk.splitSafe, tk.spaceCut, tc.splitSafe, tc.spaceCut)
			}
		})
	}
}

func TestPrefixCacheRepeatAndBound(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "qwen3")
	prompts := goldenConversation(t, 99, 30)
	tests := []struct {
		name     string
		maxBytes int
	}{
		{"tiny budget stores nothing", 16},
		{"small budget evicts", 64 << 10},
		{"large budget keeps all", 64 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewPrefixCache(tk, tc.maxBytes)
			for range 2 {
				for _, p := range prompts {
					if got, want := c.Encode(p, false), tk.Encode(p, false); !slices.Equal(got, want) {
						t.Fatalf("%d bytes: %s", len(p), diffIDs(tk, got, want))
					}
				}
			}
			if st := c.Stats(); st.Bytes > tc.maxBytes {
				t.Errorf("holds %d bytes, budget %d", st.Bytes, tc.maxBytes)
			}
		})
	}
}

// TestPrefixCacheSharedResult appends to what Encode returns, as a caller
// may: the ids Encode returns for the same and the next texts afterwards
// must be unchanged, though the first result may be the cache's own slice.
func TestPrefixCacheSharedResult(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "qwen3")
	prompts := goldenConversation(t, 7, 12)
	c := NewPrefixCache(tk, 64<<20)
	for _, p := range prompts {
		got := c.Encode(p, false)
		if cap(got) != len(got) {
			t.Fatalf("result has spare capacity %d: an append would write into it", cap(got)-len(got))
		}
		_ = append(got, 1, 2, 3)
		if again, want := c.Encode(p, false), tk.Encode(p, false); !slices.Equal(again, want) {
			t.Fatalf("%d bytes after an append to the first result: %s", len(p), diffIDs(tk, again, want))
		}
	}
}

func TestPrefixCacheConcurrent(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "llama3")
	c := NewPrefixCache(tk, 4<<20)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i, p := range goldenConversation(t, uint64(g%2), 15) {
				if got, want := c.Encode(p, true), tk.Encode(p, true); !slices.Equal(got, want) {
					t.Errorf("goroutine %d turn %d: %s", g, i, diffIDs(tk, got, want))
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkPrefixCacheSecondTurn re-tokenizes a 32K-token conversation that
// gained one more turn, after the conversation itself was seen.
func BenchmarkPrefixCacheSecondTurn(b *testing.B) {
	for _, fam := range []string{"qwen3", "llama3", "gpt-oss", "gemma3"} {
		b.Run(fam, func(b *testing.B) {
			tk := loadGoldenTokenizer(b, fam)
			corpus := tokGoldenInputs(b)["corpus_1mb"]
			// 32K tokens of mixed text in chat turns
			var sb strings.Builder
			for i := 0; len(tk.Encode(sb.String(), false)) < 32000; i++ {
				fmt.Fprintf(&sb, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n",
					corpus[i*7000:i*7000+3000], corpus[i*7000+3000:i*7000+6000])
			}
			first := sb.String()
			turns := make([]string, 128)
			for i := range turns {
				turns[i] = first + fmt.Sprintf("<|im_start|>user\nAnd what about question %d? Please explain the details.<|im_end|>\n<|im_start|>assistant\n", i)
			}
			fresh := func() *PrefixCache {
				c := NewPrefixCache(tk, 256<<20)
				c.Encode(first, false)
				return c
			}
			c := fresh()
			if got, want := c.Encode(turns[0], false), tk.Encode(turns[0], false); !slices.Equal(got, want) {
				b.Fatal("cache result differs")
			}
			c = fresh()
			var cpu time.Duration
			i := 0
			b.ResetTimer()
			c0 := cpuNow()
			for b.Loop() {
				if i == len(turns) {
					// every turn is cached now: start again from the first turn only
					b.StopTimer()
					cpu += cpuNow() - c0
					c, i = fresh(), 0
					c0 = cpuNow()
					b.StartTimer()
				}
				c.Encode(turns[i], false)
				i++
			}
			cpu += cpuNow() - c0
			b.StopTimer()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
			st := c.Stats()
			b.ReportMetric(float64(st.TailBytes)/float64(st.Hits), "tailbytes/hit")
			b.ReportMetric(float64(st.Misses), "misses")
		})
	}
}

// TestPrefixCacheSiblings checks texts that share a prefix with a cached
// text without extending it: requests under one system prompt, a text cut
// short of a cached one, and a conversation whose middle changed. Each
// must be exact, and those sharing a long prefix must reuse it.
func TestPrefixCacheSiblings(t *testing.T) {
	t.Parallel()
	for _, fam := range goldenFamilies {
		t.Run(fam, func(t *testing.T) {
			tk := loadGoldenTokenizer(t, fam)
			prompts := goldenConversation(t, 7, 30)
			system := prompts[len(prompts)-1]
			c := NewPrefixCache(tk, 64<<20)
			check := func(what, text string) {
				t.Helper()
				if got, want := c.Encode(text, false), tk.Encode(text, false); !slices.Equal(got, want) {
					t.Fatalf("%s (%d bytes): %s", what, len(text), diffIDs(tk, got, want))
				}
			}
			for i := range 40 {
				check(fmt.Sprintf("sibling %d", i), system+fmt.Sprintf("<|im_start|>user\nQuestion %d: which of these %d items matters?<|im_end|>\n", i, i*7))
			}
			st := c.Stats()
			if (tk.splitSafe || tk.spaceCut) && (st.Hits < 39 || st.TailBytes > 39*2048) {
				t.Errorf("siblings of one long prefix: %+v, want 39 hits re-tokenizing a short tail each", st)
			}
			for _, cut := range []int{len(system) / 3, len(system) - 1, len(system) / 2} {
				check(fmt.Sprintf("cut at %d", cut), system[:cut])
			}
			edited := system[:len(system)/2] + " an edit in the middle " + system[len(system)/2:]
			check("edited middle", edited)
		})
	}
}

// A conversation's turns each contain the last one, so the cache keeps
// one entry for the whole conversation, not a copy per turn, and still
// answers a repeat of any earlier turn from it.
func TestPrefixCacheConversationIsOneEntry(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "qwen3")
	c := NewPrefixCache(tk, 64<<20)
	check := func(what, text string) {
		t.Helper()
		if got, want := c.Encode(text, false), tk.Encode(text, false); !slices.Equal(got, want) {
			t.Fatalf("%s (%d bytes): %s", what, len(text), diffIDs(tk, got, want))
		}
	}
	// Each turn as a chat template renders it: the history, then the
	// generation prompt, which the next turn replaces by the reply.
	const gen = "<|im_start|>assistant\n"
	turns := goldenConversation(t, 5, 40)
	for i, p := range turns {
		check(fmt.Sprintf("turn %d", i), p+gen)
	}
	last := turns[len(turns)-1] + gen
	st := c.Stats()
	if st.Entries != 1 || st.Bytes > 8*len(last) {
		t.Errorf("after %d turns: %d entries, %d bytes; want 1 entry of about the last turn's %d bytes", len(turns), st.Entries, st.Bytes, len(last))
	}
	early := 0 // the first turn long enough to be cached at all
	for len(turns[early]+gen) < 2*checkpointSpacing {
		early++
	}
	for _, i := range []int{len(turns) - 1, len(turns) - 2, len(turns) / 2, early} {
		before := c.Stats()
		check(fmt.Sprintf("repeat of turn %d", i), turns[i]+gen)
		if after := c.Stats(); after.Hits != before.Hits+1 || after.TailBytes-before.TailBytes > 1024 {
			t.Errorf("repeat of turn %d: %+v then %+v; want a hit re-tokenizing a short tail", i, before, after)
		}
	}
	// A branch from an earlier turn is a second entry; the conversation's
	// own stays and keeps answering.
	branch := turns[len(turns)/2] + "<|im_start|>user\n" + strings.Repeat("Another question entirely. ", 40) + "<|im_end|>\n" + gen
	check("branch", branch)
	check("next turn", turns[len(turns)-1]+"<|im_start|>assistant\nAn answer.<|im_end|>\n"+gen)
	if st := c.Stats(); st.Entries != 2 {
		t.Errorf("after a branch and a next turn: %d entries, want 2", st.Entries)
	}
}

// An entry evicted between a request's lookup and its store is not
// replaced a second time: the cache's byte count stays the sum of the
// entries it holds.
func TestPrefixCacheBaseEvictedBeforeStore(t *testing.T) {
	t.Parallel()
	tk := loadGoldenTokenizer(t, "qwen3")
	turns := goldenConversation(t, 3, 12)
	first, next := turns[len(turns)-2], turns[len(turns)-1]
	c := NewPrefixCache(tk, 64<<20)
	c.Encode(first, false)
	cps := c.checkpoints(next)
	base, shared := c.lookup(next, cps)
	if base == nil {
		t.Fatal("the next turn found no base")
	}
	c.mu.Lock()
	c.evict(base) // as another request's store would
	c.mu.Unlock()
	c.store(next, cps, tk.Encode(next, false), nil, base, shared)
	st := c.Stats()
	c.mu.Lock()
	held := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		held += el.Value.(*prefixEntry).size
	}
	c.mu.Unlock()
	if st.Entries != 1 || st.Bytes != held {
		t.Errorf("%d entries, %d bytes counted, %d held; want 1 entry counted as held", st.Entries, st.Bytes, held)
	}
	if got, want := c.Encode(next, false), tk.Encode(next, false); !slices.Equal(got, want) {
		t.Fatalf("after the store: %s", diffIDs(tk, got, want))
	}
}
