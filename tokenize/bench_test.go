package tokenize

import (
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

var rustPython = flag.String("tokenize.rust", "", "python with PyPI tokenizers: TestCompareRust times the Rust library on the corpus and prints Go's speed ratio")

// BenchmarkEncodeCorpus tokenizes the 1 MB corpus with each family: "warm"
// with one tokenizer throughout (as a server runs), "cold" with a fresh
// tokenizer for every iteration (its load not timed).
// Run single core: go test ./tokenize -run '^$' -bench EncodeCorpus -cpu 1 -count 6
func BenchmarkEncodeCorpus(b *testing.B) {
	corpus := tokGoldenInputs(b)["corpus_1mb"]
	for _, fam := range goldenFamilies {
		b.Run("warm/"+fam, func(b *testing.B) {
			tk := loadGoldenTokenizer(b, fam)
			n := len(tk.Encode(corpus, false))
			b.SetBytes(int64(len(corpus)))
			b.ResetTimer()
			c0 := cpuNow()
			for b.Loop() {
				tk.Encode(corpus, false)
			}
			cpu := cpuNow() - c0
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "tokens/cpu-s")
		})
	}
	for _, fam := range goldenFamilies {
		b.Run("cold/"+fam, func(b *testing.B) {
			data, err := readTokenizerFile(filepath.Join("testdata", "models", fam))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			var cpu time.Duration
			b.SetBytes(int64(len(corpus)))
			for b.Loop() {
				b.StopTimer()
				tk, err := FromJSON(data)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				c0 := cpuNow()
				n = len(tk.Encode(corpus, false))
				cpu += cpuNow() - c0
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "tokens/cpu-s")
		})
	}
}

// BenchmarkLoad parses a tokenizer.json (uncompressed, already in memory).
func BenchmarkLoad(b *testing.B) {
	for _, fam := range goldenFamilies {
		b.Run(fam, func(b *testing.B) {
			data, err := readTokenizerFile(filepath.Join("testdata", "models", fam))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			c0 := cpuNow()
			for b.Loop() {
				if _, err := FromJSON(data); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuNow()-c0)/float64(b.N), "cpu-ns/op")
			b.StopTimer()
			b.ReportMetric(retainedHeap(b, data)/(1<<20), "heap-MiB")
		})
	}
}

// BenchmarkCollectLoaded is a full garbage collection with one tokenizer
// loaded and nothing else live: the marking a router's every collection
// does for each model it serves. cpu-ns/op counts the work of every
// processor the collector used.
func BenchmarkCollectLoaded(b *testing.B) {
	for _, fam := range goldenFamilies {
		b.Run(fam, func(b *testing.B) {
			tk, err := Load(filepath.Join("testdata", "models", fam))
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			c0 := cpuNow()
			for b.Loop() {
				runtime.GC()
			}
			b.ReportMetric(float64(cpuNow()-c0)/float64(b.N), "cpu-ns/op")
			runtime.KeepAlive(tk)
		})
	}
}

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// retainedHeap returns the heap one loaded tokenizer keeps alive: the
// growth of the live heap over three tokenizers kept at once, divided by 3.
func retainedHeap(tb testing.TB, data []byte) float64 {
	before := liveHeap()
	var keep [3]*Tokenizer
	for i := range keep {
		tk, err := FromJSON(data)
		if err != nil {
			tb.Fatal(err)
		}
		keep[i] = tk
	}
	after := liveHeap()
	runtime.KeepAlive(keep)
	return (float64(after) - float64(before)) / 3
}

// TestCompareRust runs the Rust library (through Python) and this package on
// the same corpus, one core each, and logs the ratio of their speeds in
// tokens per CPU second (the machine may be shared). It is
// a measurement, not a check: it runs only with -tokenize.rust=PYTHON, e.g.
//
//	go test ./tokenize -run CompareRust -v -tokenize.rust=/work/venvs/tok-bpe/bin/python
func TestCompareRust(t *testing.T) {
	if *rustPython == "" {
		t.Skip("set -tokenize.rust=PYTHON to compare with the Rust library")
	}
	corpus := tokGoldenInputs(t)["corpus_1mb"]
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	for _, fam := range goldenFamilies {
		dir := filepath.Join("testdata", "models", fam)
		out, err := exec.CommandContext(t.Context(), *rustPython, filepath.Join("testdata", "bench_rust.py"),
			filepath.Join(dir, "tokenizer.json.gz"), filepath.Join("testdata", "corpus_1mb.txt.gz"), "3").Output()
		if err != nil {
			t.Fatalf("%s: bench_rust.py: %v", fam, err)
		}
		var rust struct {
			Tokens int     `json:"tokens"`
			ColdS  float64 `json:"cold_s"`
			WarmS  float64 `json:"warm_s"`
			LoadS  float64 `json:"load_s"`
		}
		if err := json.Unmarshal(out, &rust); err != nil {
			t.Fatalf("%s: %v: %s", fam, err, out)
		}
		data, err := readTokenizerFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		loadS, heap := measureLoad(t, data)
		// cold: the first Encode of a fresh tokenizer, best of 3; warm: the
		// same tokenizer again, best of 3
		cold, warm := time.Duration(1<<62), time.Duration(1<<62)
		n := 0
		for range 3 {
			tk, err := FromJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			start := cpuNow()
			n = len(tk.Encode(corpus, false))
			cold = min(cold, cpuNow()-start)
			start = cpuNow()
			tk.Encode(corpus, false)
			warm = min(warm, cpuNow()-start)
		}
		if n != rust.Tokens {
			t.Errorf("%s: %d tokens, Rust %d", fam, n, rust.Tokens)
		}
		mtps := func(d float64) float64 { return float64(n) / d / 1e6 }
		t.Logf("%-11s tokens=%d Mtok/cpu-s: go cold=%.2f warm=%.2f rust cold=%.2f warm=%.2f  ratio cold=%.1fx warm=%.1fx | load go=%.3fs rust=%.3fs | heap=%.1f MiB",
			fam, n, mtps(cold.Seconds()), mtps(warm.Seconds()), mtps(rust.ColdS), mtps(rust.WarmS),
			rust.ColdS/cold.Seconds(), rust.WarmS/warm.Seconds(), loadS, rust.LoadS, heap/(1<<20))
	}
}

// cpuNow returns the CPU time this process has used. The benchmarks report
// it beside wall time because the development machine is shared: wall time
// there includes waiting for a core.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureLoad returns the best of three FromJSON CPU times and the heap a
// loaded tokenizer retains.
func measureLoad(t *testing.T, data []byte) (float64, float64) {
	best := time.Duration(1 << 62)
	for range 3 {
		start := cpuNow()
		if _, err := FromJSON(data); err != nil {
			t.Fatal(err)
		}
		best = min(best, cpuNow()-start)
	}
	return best.Seconds(), retainedHeap(t, data)
}

// BenchmarkEncodeOwnVocabularies tokenizes texts that each draw their
// words from a vocabulary of their own (3,000 syllable compounds, beside
// common words), as long chats on different subjects do: every text
// brings words the last one did not use, so the merged-word cache is
// read across more memory than one text's repeats. "polluted" sweeps
// 16 MiB between texts, as a server's other work (bodies, the KV index)
// does between two prompts. Run single core:
//
//	go test ./tokenize -run '^$' -bench OwnVocabularies -cpu 1 -count 6
func BenchmarkEncodeOwnVocabularies(b *testing.B) {
	tk := loadGoldenTokenizer(b, "qwen3")
	texts := make([]string, 32)
	size := 0
	for i := range texts {
		texts[i] = ownVocabularyText(uint64(i), 60_000)
		size += len(texts[i])
	}
	for _, t := range texts { // the vocabularies' words merged once
		tk.Encode(t, false)
	}
	sweep := make([]byte, 16<<20)
	for _, pollute := range []bool{false, true} {
		name := "clean"
		if pollute {
			name = "polluted"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(size / len(texts)))
			i := 0
			for b.Loop() {
				if pollute {
					b.StopTimer()
					for j := 0; j < len(sweep); j += 64 {
						sweep[j]++
					}
					b.StartTimer()
				}
				tk.Encode(texts[i%len(texts)], false)
				i++
			}
		})
	}
}

// ownVocabularyText returns about n words of prose whose vocabulary is its
// own: a third of its words common English, the rest from 3,000
// compounds of one to three syllables chosen by seed.
func ownVocabularyText(seed uint64, n int) string {
	syllables := strings.Fields("ba de fi go hu ka le mi no pu ra se ti vo wu ya ze an el in on ur ist ion ent ash")
	common := strings.Fields("the of and to a in is that it for as on with was by at be this from or")
	r := rand.New(rand.NewPCG(seed, 99))
	own := make([]string, 3000)
	for i := range own {
		var w strings.Builder
		for range 1 + r.IntN(3) {
			w.WriteString(syllables[r.IntN(len(syllables))])
		}
		own[i] = w.String()
	}
	var b strings.Builder
	for i := range n {
		if r.IntN(3) == 0 {
			b.WriteString(common[r.IntN(len(common))])
		} else {
			b.WriteString(own[r.IntN(len(own))])
		}
		switch {
		case i%97 == 96:
			b.WriteString(".\n\n")
		case i%11 == 10:
			b.WriteString(", ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}
