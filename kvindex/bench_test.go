package kvindex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// lookupIndex builds a realistic 64-worker index: a 512-block prompt whose
// prefix every worker holds to a different depth (8 to 512 blocks), and
// 4096 unrelated blocks per worker in 16-block chains, sharing first
// blocks across workers as system prompts do.
func lookupIndex(tb testing.TB, workers int) (*Index, []uint32) {
	ix := newIndex(tb, budget(1<<24))
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := randTokens(rng, 512*testBlock+1)
	for w := range workers {
		name := fmt.Sprintf("worker-%02d", w)
		depth := 8 + (w*504)/max(workers-1, 1)
		base := uint64(w) << 40
		ix.Apply(Source{Worker: name, Model: "m"}, []Event{storeEv(prompt, 0, depth, base, "")})
		for c := range 256 {
			toks := randTokens(rng, 16*testBlock)
			// Chains 0–31 start with one of 32 shared system prompts.
			if c < 32 {
				for i := range testBlock {
					toks[i] = uint32(c*testBlock + i)
				}
			}
			ev := storeEv(toks, 0, 16, base|uint64(c+1)<<20, "")
			ix.Apply(Source{Worker: name, Model: "m"}, []Event{ev})
		}
	}
	return ix, prompt
}

// BenchmarkLookup512x64 looks up a 512-block prompt over 64 workers and
// reports per-operation latency percentiles. Two references run in the
// same process with the same timing, each sized to the lookup's median:
// "reference", a pure computation (xorshift rounds, no memory traffic), and
// "reference-memory", which only reads the lookup's working set (the
// prompt's tokens, the nodes its walk visits) over and over. What they show
// above their medians is the machine's own tail for an operation of that
// length, without and with memory traffic, which the lookup pays too.
func BenchmarkLookup512x64(b *testing.B) {
	ix, prompt := lookupIndex(b, 64)
	if got := len(ix.Lookup(mkey, prompt, testBlock)); got != 64 {
		b.Fatalf("%d workers matched, want 64", got)
	}
	// Lookups log the chains they hit, and the next event batch moves them
	// up the LRU list. Engines publish every step, so in production the log
	// is drained every few lookups and reuses its storage: drain it here
	// every 32, untimed, after growing it once.
	drain := func() { ix.Apply(Source{Worker: "worker-00", Model: "m"}, nil) }
	for range 1024 {
		ix.Lookup(mkey, prompt, testBlock)
	}
	drain()
	n := 0
	var lookupP50 time.Duration
	b.Run("lookup", func(b *testing.B) {
		// As the router does: one buffer reused, so the lookup allocates nothing.
		var buf []Match
		lookupP50 = measureTail(b, func() { buf = ix.AppendLookup(buf[:0], mkey, prompt, testBlock) }, func() {
			if n++; n%32 == 0 {
				drain()
			}
		})
	})
	if lookupP50 == 0 {
		return
	}
	// Size the references to the lookup's median.
	spinRounds := calibrate(lookupP50, spin)
	b.Run("reference", func(b *testing.B) { measureTail(b, func() { spin(spinRounds) }, nil) })
	// The memory reference reads the lookup's working set instead: the
	// prompt's tokens and the nodes its walk visits, in the same order.
	drain()
	ix.Lookup(mkey, prompt, testBlock)
	path := touchedNodes(ix) // the walk's nodes
	drain()
	readRounds := calibrate(lookupP50, func(n int) { readSet(ix, prompt, path, n) })
	b.Run("reference-memory", func(b *testing.B) { measureTail(b, func() { readSet(ix, prompt, path, readRounds) }, nil) })
}

// calibrate returns the n for which fn(n) takes about target of wall
// time on a locked thread, from the medians of repeated runs. (Not thread
// CPU time: on this VM a pair of thread-clock reads costs microseconds,
// which would be counted in.)
func calibrate(target time.Duration, fn func(n int)) int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	median := func(n int) time.Duration {
		var ds []time.Duration
		for range 201 {
			t0 := time.Now()
			fn(n)
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return max(ds[len(ds)/2], 1)
	}
	n := 1
	for median(n) < target/8 && n < 1<<30 {
		n *= 2
	}
	for range 3 {
		n = max(1, int(float64(n)*float64(target)/float64(median(n))))
	}
	return n
}

// readSink keeps readSet's result alive.
var readSink uint64

// readSet reads the tokens of prompt and the key and holders of the nodes
// on path, in the index's own memory, a sixteenth of each at a time, n
// sixteenths in turn (16 read it all once): the lookup's memory traffic
// without its logic, in steps fine enough to size it to the lookup.
func readSet(ix *Index, prompt []uint32, path []uint32, n int) {
	const parts = 16
	var sum uint64
	for u := range n {
		p := u % parts
		for _, t := range prompt[p*len(prompt)/parts : (p+1)*len(prompt)/parts] {
			sum += uint64(t)
		}
		for _, ni := range path[p*len(path)/parts : (p+1)*len(path)/parts] {
			nd := ix.node(ni)
			sum ^= nd.key + nd.a
		}
	}
	readSink += sum
}

// spinSink keeps spin's result alive.
var spinSink uint64

// spin runs n rounds of xorshift: CPU work with no memory traffic.
func spin(n int) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	spinSink += x
}

// measureTail runs op once per benchmark iteration on a locked thread and
// reports wall and thread-CPU percentiles of op alone; between, when not
// nil, runs untimed before each op. It returns the wall median.
func measureTail(b *testing.B, op, between func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The cost of reading the clocks, subtracted from CPU samples.
	var probe []time.Duration
	var sink time.Duration
	for range 1000 {
		c0 := threadCPU()
		t0 := time.Now()
		sink += time.Since(t0)
		probe = append(probe, threadCPU()-c0)
	}
	_ = sink
	slices.Sort(probe)
	overhead := probe[len(probe)/2]
	wall := make([]time.Duration, 0, 1<<16)
	cpu := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		if between != nil {
			between()
		}
		// The wall clock inside the thread clock: reading the thread
		// clock is a system call, which the wall time must not include.
		c0 := threadCPU()
		t0 := time.Now()
		op()
		t1 := time.Now()
		c1 := threadCPU()
		if len(wall) < cap(wall) {
			wall = append(wall, t1.Sub(t0))
			cpu = append(cpu, c1-c0-overhead)
		}
	}
	slices.Sort(wall)
	slices.Sort(cpu)
	b.ReportMetric(float64(wall[len(wall)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(wall[len(wall)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "cpu-p50-ns")
	b.ReportMetric(float64(cpu[len(cpu)*99/100].Nanoseconds()), "cpu-p99-ns")
	return wall[len(wall)/2]
}

// BenchmarkMachineTail measures the machine's own tail, to read the
// lookup's p99 against. "stalls" spins on the clock for a second per
// iteration and reports how often the thread lost the CPU for more than
// 3 µs (an interrupt, the hypervisor running something else) and how
// long for: an operation of length L spans a stall with probability
// about rate × L, so once rate × L passes 1% its p99 is its median plus a
// stall. "spin=…" runs the pure-computation reference at fixed lengths
// to show it.
func BenchmarkMachineTail(b *testing.B) {
	b.Run("stalls", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var gaps []time.Duration
		var spent time.Duration
		for b.Loop() {
			start := time.Now()
			last := start
			for last.Sub(start) < time.Second {
				now := time.Now()
				if d := now.Sub(last); d > 3*time.Microsecond {
					gaps = append(gaps, d)
				}
				last = now
			}
			spent += last.Sub(start)
		}
		slices.Sort(gaps)
		b.ReportMetric(float64(len(gaps))/spent.Seconds(), "stalls/s")
		if len(gaps) > 0 {
			b.ReportMetric(float64(gaps[len(gaps)/2].Nanoseconds()), "stall-p50-ns")
			b.ReportMetric(float64(gaps[len(gaps)*9/10].Nanoseconds()), "stall-p90-ns")
		}
	})
	t0 := time.Now()
	spin(1 << 24)
	perRound := float64(time.Since(t0)) / (1 << 24)
	for _, us := range []int{2, 4, 6, 8, 10} {
		rounds := int(float64(us) * 1000 / perRound)
		b.Run(fmt.Sprintf("spin=%dus", us), func(b *testing.B) { measureTail(b, func() { spin(rounds) }, nil) })
	}
}

// BenchmarkIndexMemory measures heap bytes per (block, worker) entry with
// runtime.MemStats, for blocks held by 1, 8 and 64 workers.
func BenchmarkIndexMemory(b *testing.B) {
	for _, share := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("workers-per-block=%d", share), func(b *testing.B) {
			const entries = 1 << 19
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ix := newIndex(b, budget(entries*2))
				rng := rand.New(rand.NewPCG(1, uint64(share)))
				chains := entries / share / 16
				for c := range chains {
					toks := randTokens(rng, 16*testBlock)
					for w := range share {
						ev := storeEv(toks, 0, 16, uint64(c)<<8|uint64(w)<<40, "")
						ix.Apply(Source{Worker: fmt.Sprintf("w%d", w), Model: "m"}, []Event{ev})
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				n := ix.entries
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/entry")
				runtime.KeepAlive(ix)
			}
		})
	}
}

// BenchmarkApplyOverBudget applies one 16-block chain per operation from a
// worker flooding an index at its entry budget, beside 15 workers within
// their fair share: each store evicts as many blocks, and the budget's
// fairness passes over the other workers' blocks at the LRU tail.
func BenchmarkApplyOverBudget(b *testing.B) {
	const entryBudget = 1 << 16
	ix := newIndex(b, budget(entryBudget))
	rng := rand.New(rand.NewPCG(9, 10))
	for w := range 15 {
		for c := range entryBudget / 32 / 16 { // half their share each
			ix.Apply(Source{Worker: fmt.Sprintf("worker-%02d", w), Model: "m"},
				[]Event{storeEv(randTokens(rng, 16*testBlock), 0, 16, uint64(w)<<40|uint64(c)<<20, "")})
		}
	}
	chain := make([]uint32, 16*testBlock)
	src := Source{Worker: "flood", Model: "m"}
	for i := 0; b.Loop(); i++ {
		for k := range chain {
			chain[k] = uint32(i*len(chain) + k) // every chain new
		}
		ix.Apply(src, []Event{storeEv(chain, 0, 16, uint64(i)<<20, "")})
	}
}

// BenchmarkColdChain is a cold 100K-token prompt's work in the index: its
// 6,100 blocks entered as speculative on the chosen worker when it is
// routed, then stored by that worker's KV events, on an index already
// holding a million entries across 16 workers and evicting to stay within
// its budget. The op is one prompt; ns/block is per block of it.
func BenchmarkColdChain(b *testing.B) {
	const blocks = 6100
	ix := newIndex(b, budget(1<<20))
	rng := rand.New(rand.NewPCG(11, 12))
	workers := make([]string, 16)
	for w := range workers {
		workers[w] = fmt.Sprintf("worker-%02d", w)
		for c := range 1 << 20 / 16 / 1024 {
			ix.Apply(Source{Worker: workers[w], Model: "m"},
				[]Event{storeEv(randTokens(rng, 1024*testBlock), 0, 1024, uint64(w)<<40|uint64(c)<<20, "")})
		}
	}
	key := ChainKey{Model: "m"}
	chain := make([]uint32, blocks*testBlock)
	for i := 0; b.Loop(); i++ {
		for k := range chain {
			chain[k] = uint32(i*len(chain) + k) // every prompt new
		}
		w := workers[i%len(workers)]
		ix.Speculate(w, key, chain, testBlock)
		ix.Apply(Source{Worker: w, Model: "m"}, []Event{storeEv(chain, 0, blocks, 1<<60|uint64(i)<<20, "")})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*blocks), "ns/block")
}
