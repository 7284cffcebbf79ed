package tokenize

import (
	"encoding/json"
	"flag"
	"os/exec"
	"path/filepath"
	"runtime"
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

// retainedHeap returns the heap one loaded tokenizer keeps alive: the
// growth of the live heap over three tokenizers kept at once, divided by 3.
func retainedHeap(tb testing.TB, data []byte) float64 {
	live := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	var keep [3]*Tokenizer
	for i := range keep {
		tk, err := FromJSON(data)
		if err != nil {
			tb.Fatal(err)
		}
		keep[i] = tk
	}
	after := live()
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
