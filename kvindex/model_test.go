package kvindex

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/internal/clocktest"
)

// refIndex is the reference the index is checked against: per worker, the
// engine's block hashes with their reference counts and the live
// speculations, looked up by walking the prompt's engine hashes.
type refIndex struct {
	held map[string]map[uint64]int
	spec map[string]map[uint64]time.Time
	// hashes memoises contentHashes per prompt (by its first token's address).
	hashes map[*uint32][]uint64
}

// contentHashes returns, for each full block i of prompt, a content hash of
// its first i+1 blocks, standing in for vLLM's chained block hash: equal
// prefixes hash equal.
func contentHashes(prompt []uint32) []uint64 {
	h := fnv.New64a()
	var b [4]byte
	out := make([]uint64, len(prompt)/testBlock)
	for i := range out {
		for _, t := range prompt[i*testBlock : (i+1)*testBlock] {
			binary.LittleEndian.PutUint32(b[:], t)
			h.Write(b[:])
		}
		out[i] = h.Sum64()
	}
	return out
}

// hash returns the content hash of prompt's first n blocks.
func (r *refIndex) hash(prompt []uint32, n int) uint64 {
	hs, ok := r.hashes[&prompt[0]]
	if !ok {
		hs = contentHashes(prompt)
		r.hashes[&prompt[0]] = hs
	}
	return hs[n-1]
}

// lookup returns the reference's cached tokens on worker.
func (r *refIndex) lookup(worker string, prompt []uint32, now time.Time) int {
	limit := (len(prompt) - 1) / testBlock
	n := 0
	for n < limit {
		h := r.hash(prompt, n+1)
		if r.held[worker][h] == 0 && !now.Before(r.spec[worker][h]) {
			break
		}
		n++
	}
	return n * testBlock
}

// TestIndexMatchesReference drives the index and the reference with the
// same random stream of stores (whole chains and continuations, duplicated
// stores as vLLM emits them), removals, clears and speculations over shared
// prefixes, and compares every worker's cached tokens for every prompt.
func TestIndexMatchesReference(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			checkAgainstReference(t, seed)
		})
	}
}

func checkAgainstReference(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	clock := clocktest.New(time.Unix(1000, 0))
	const ttl = 2 * time.Second
	ix := newIndex(t, clockAt(clock.Now), specTTL(ttl))
	workers := []string{"w0", "w1", "w2"}
	ref := &refIndex{held: map[string]map[uint64]int{}, spec: map[string]map[uint64]time.Time{}, hashes: map[*uint32][]uint64{}}
	for _, w := range workers {
		ref.held[w], ref.spec[w] = map[uint64]int{}, map[uint64]time.Time{}
		apply(ix, w) // make the worker known
	}
	// Prompts: 6 shared prefixes of 4–24 blocks, each followed by one of
	// 4 tails of 1–8 blocks, plus a last partial block.
	var prompts [][]uint32
	for g := range 6 {
		prefix := seqTokens(g*100000, (4+rng.IntN(21))*testBlock)
		for k := range 4 {
			tail := seqTokens(g*100000+50000+k*1000, (1+rng.IntN(8))*testBlock+1+rng.IntN(testBlock-1))
			prompts = append(prompts, append(append([]uint32(nil), prefix...), tail...))
		}
	}
	var trace []string
	for step := range 1500 {
		w := workers[rng.IntN(len(workers))]
		p := prompts[rng.IntN(len(prompts))]
		full := len(p) / testBlock
		switch op := rng.IntN(10); {
		case op < 4: // a request computes blocks from its cached prefix on
			from := ref.lookup(w, p, clock.Now().Add(24*time.Hour)) / testBlock // real blocks only
			from = min(from, full)
			for from > 0 && ref.held[w][ref.hash(p, from)] == 0 {
				from-- // its parent must be really held
			}
			if rng.IntN(4) == 0 && from > 0 {
				from-- // re-store the last cached block, as the engine does on repeats
			}
			if from >= full {
				continue
			}
			to := from + 1 + rng.IntN(full-from)
			ev := Event{Kind: BlockStored, BlockSize: testBlock, TokenIDs: p[from*testBlock : to*testBlock]}
			for i := from; i < to; i++ {
				h := ref.hash(p, i+1)
				ev.BlockHashes = append(ev.BlockHashes, h)
				ref.held[w][h]++
				delete(ref.spec[w], h) // the real event replaces a speculation
			}
			if from > 0 {
				ev.HasParent, ev.ParentHash = true, ref.hash(p, from)
			}
			apply(ix, w, ev)
			trace = append(trace, fmt.Sprintf("store %s prompt %d blocks %d..%d", w, len(p), from, to))
		case op < 7: // the engine evicts some blocks of a prompt
			var ev Event
			ev.Kind = BlockRemoved
			for i := 1; i <= full; i++ {
				h := ref.hash(p, i)
				if ref.held[w][h] > 0 && rng.IntN(3) == 0 {
					ev.BlockHashes = append(ev.BlockHashes, h)
					if ref.held[w][h]--; ref.held[w][h] == 0 {
						delete(ref.held[w], h)
					}
				}
			}
			apply(ix, w, ev)
			trace = append(trace, fmt.Sprintf("remove %s prompt %d: %d blocks", w, len(p), len(ev.BlockHashes)))
		case op < 8: // warmpath routes a request here
			ix.Speculate(w, mkey, p, testBlock)
			trace = append(trace, fmt.Sprintf("speculate %s prompt %d", w, len(p)))
			until := clock.Now().Add(ttl)
			for i := full; i >= 1; i-- {
				h := ref.hash(p, i)
				if ref.held[w][h] > 0 {
					break // the cached prefix below is not speculated on
				}
				if ref.spec[w][h].Sub(clock.Now()) >= ttl/2 {
					break // speculated on recently, with the blocks below
				}
				ref.spec[w][h] = until
			}
		case op < 9:
			d := time.Duration(rng.IntN(800)) * time.Millisecond
			clock.Advance(d)
			// Expired speculation counts until a writer sweeps it; any
			// event does, and engines publish every step.
			apply(ix, w)
			trace = append(trace, fmt.Sprintf("advance %v", d))
		default:
			if rng.IntN(20) == 0 {
				apply(ix, w, Event{Kind: AllBlocksCleared})
				ref.held[w], ref.spec[w] = map[uint64]int{}, map[uint64]time.Time{}
				trace = append(trace, "clear "+w)
			}
		}
		now := clock.Now()
		for _, q := range prompts {
			got := map[string]int{}
			for _, m := range ix.Lookup(mkey, q, testBlock) {
				got[m.Worker] = m.CachedTokens()
			}
			for _, w := range workers {
				if want := ref.lookup(w, q, now); got[w] != want {
					for i := 1; i <= len(q)/testBlock; i++ {
						h := ref.hash(q, i)
						t.Logf("block %d: reference holds %d, speculated for %v more", i-1, ref.held[w][h], ref.spec[w][h].Sub(now))
					}
					t.Fatalf("step %d: worker %s prompt of %d tokens: index %d cached, reference %d; last operations:\n%s",
						step, w, len(q), got[w], want, strings.Join(trace[max(0, len(trace)-12):], "\n"))
				}
			}
		}
	}
}
