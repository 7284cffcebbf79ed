package kvevents

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/kvindex"
)

// mapStored writes a map-era BlockStored shaped like the vLLM 0.31 capture.
func (e *enc) mapStored(s stored) *enc {
	e.mp(11).str("type").str("BlockStored").str("block_hashes").arr(len(s.hashes))
	for _, h := range s.hashes {
		e.uint(h)
	}
	e.str("parent_block_hash")
	if s.parent == nil {
		e.nil()
	} else {
		e.uint(*s.parent)
	}
	e.str("token_ids").arr(len(s.tokens))
	for _, t := range s.tokens {
		e.uint(uint64(t))
	}
	e.str("block_size").uint(uint64(s.blockSize)).str("lora_id").nil().str("medium").str("GPU").
		str("lora_name").nil().str("extra_keys").arr(len(s.hashes))
	for range s.hashes {
		e.nil()
	}
	return e.str("group_idx").uint(0).str("kv_cache_spec_kind").str("full_attention")
}

func (e *enc) mapRemoved(h uint64) *enc {
	return e.mp(4).str("type").str("BlockRemoved").str("block_hashes").arr(1).uint(h).
		str("medium").str("GPU").str("group_idx").uint(0)
}

// ingestStream builds a cyclic stream of n payloads like the capture's
// eviction phase: each batch evicts the 8 blocks stored window batches
// earlier, one event per block, then stores 8 new blocks under a shared
// 32-block prefix. It returns the payloads and the block events they carry.
func ingestStream(n, window int) ([][]byte, int) {
	rng := rand.New(rand.NewPCG(3, 4))
	const per = 8
	prefix := randTokens(rng, 32*testBlock)
	prefixHashes := make([]uint64, 32)
	for i := range prefixHashes {
		prefixHashes[i] = rng.Uint64()
	}
	hashes := func(b int) []uint64 {
		out := make([]uint64, per)
		for i := range out {
			out[i] = uint64(b)<<8 | uint64(i) | 1<<62
		}
		return out
	}
	var payloads [][]byte
	events := 0
	first := batch(1, func(e *enc) {
		e.mapStored(stored{hashes: prefixHashes, tokens: prefix, blockSize: testBlock})
	})
	payloads = append(payloads, first)
	events += 32
	for b := range n {
		toks := randTokens(rng, per*testBlock)
		parent := prefixHashes[31]
		evs := 1
		if b >= window {
			evs += per
		}
		payloads = append(payloads, batch(evs, func(e *enc) {
			if b >= window {
				for _, h := range hashes(b - window) {
					e.mapRemoved(h)
				}
			}
			e.mapStored(stored{hashes: hashes(b), parent: &parent, tokens: toks, blockSize: testBlock})
		}))
		events += evs - 1 + per
	}
	return payloads, events
}

// BenchmarkIngest measures decoding, converting and applying KV-event
// payloads to an index, one stream on one goroutine, as a stream does;
// blocks/s counts stored plus removed blocks.
func BenchmarkIngest(b *testing.B) {
	payloads, events := ingestStream(2000, 64)
	var bytes int
	for _, p := range payloads {
		bytes += len(p)
	}
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	var d Decoder
	var bt Batch
	var c converter
	m, err := newMetrics(component.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	src := kvindex.Source{Worker: "w0", Model: "m"}
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	for b.Loop() {
		ix := newIndex(b, nil)
		for _, p := range payloads {
			if err := d.Decode(p, &bt); err != nil {
				b.Fatal(err)
			}
			ix.Apply(src, c.convert(&bt, m))
		}
	}
	b.ReportMetric(float64(events*b.N)/time.Since(start).Seconds(), "blocks/s")
	b.ReportMetric(float64(events*b.N)/(processCPU()-cpu0).Seconds(), "blocks/cpu-s")
}

// BenchmarkDecode measures decoding alone on the same stream.
func BenchmarkDecode(b *testing.B) {
	payloads, events := ingestStream(2000, 64)
	var d Decoder
	var bt Batch
	b.ReportAllocs()
	start, cpu0 := time.Now(), processCPU()
	for b.Loop() {
		for _, p := range payloads {
			if err := d.Decode(p, &bt); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(events*b.N)/time.Since(start).Seconds(), "blocks/s")
	b.ReportMetric(float64(events*b.N)/(processCPU()-cpu0).Seconds(), "blocks/cpu-s")
}

// processCPU returns the CPU time of the whole process, user plus system,
// garbage collection included. The build machine is shared, so benchmarks
// also report CPU time, which other processes do not inflate the way they
// inflate wall-clock time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
