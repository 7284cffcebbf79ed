package vllmsim

import (
	"errors"
	"hash/fnv"
	"testing"
	"time"
)

// smallEngine returns an engine with a fixed, easily computed step time:
// 1 ms + 1 µs per prefill token + 10 µs per decoding sequence.
func smallEngine(t *testing.T, blocks, budget, seqs int) *Engine {
	t.Helper()
	e, err := NewEngine(EngineConfig{BlockSize: 16, NumGPUBlocks: blocks, MaxNumBatchedTokens: budget, MaxNumSeqs: seqs,
		MaxModelLen: 1 << 20, Step: StepCost{Overhead: time.Millisecond, PrefillPerToken: time.Microsecond, DecodePerSeq: 10 * time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEngineChunkedPrefillAndRunningFirst(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 1000, 2048, 256)
	long := &Request{Prompt: synthTokens(1, 5000), MaxTokens: 3}
	if err := e.Add(long); err != nil {
		t.Fatal(err)
	}
	var steps []StepResult
	now := time.Duration(0)
	step := func() StepResult {
		s := e.Step(now)
		now += s.Duration
		steps = append(steps, s)
		return s
	}
	for _, want := range []int{2048, 2048, 904} {
		s := step()
		if s.PrefillTokens != want || s.DecodeSeqs != 0 {
			t.Fatalf("step %d: prefill %d decode %d, want prefill %d", len(steps), s.PrefillTokens, s.DecodeSeqs, want)
		}
		if want == 904 && (len(s.Outputs) != 1 || s.Outputs[0].Index != 0) {
			t.Fatalf("first token not produced by the last prefill chunk: %+v", s.Outputs)
		}
		if want != 904 && len(s.Outputs) != 0 {
			t.Fatalf("partial chunk produced a token")
		}
	}
	if want := 1*time.Millisecond + 904*time.Microsecond; steps[2].Duration != want {
		t.Errorf("step time %v, want %v", steps[2].Duration, want)
	}
	// A new long prompt shares the budget with the running decode, which
	// goes first.
	other := &Request{Prompt: synthTokens(2, 3000), MaxTokens: 1}
	if err := e.Add(other); err != nil {
		t.Fatal(err)
	}
	s := step()
	if s.DecodeSeqs != 1 || s.PrefillTokens != 2047 {
		t.Errorf("mixed step: decode %d prefill %d, want 1 and 2047", s.DecodeSeqs, s.PrefillTokens)
	}
}

func TestEngineMaxNumSeqs(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 1000, 2048, 2)
	for i := range 3 {
		if err := e.Add(&Request{Prompt: synthTokens(uint64(i), 20), MaxTokens: 5}); err != nil {
			t.Fatal(err)
		}
	}
	e.Step(0)
	if e.Running() != 2 || e.Waiting() != 1 {
		t.Errorf("running %d waiting %d, want 2 and 1", e.Running(), e.Waiting())
	}
}

func TestEngineHitsOnRunningAndCap(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 1000, 8192, 256)
	p := synthTokens(3, 80) // exactly 5 blocks
	a, b := &Request{Prompt: p, MaxTokens: 1}, &Request{Prompt: p, MaxTokens: 1}
	e.Add(a)
	e.Add(b)
	s := e.Step(0)
	if len(s.Outputs) != 2 || s.Outputs[0].CachedTokens != 0 || s.Outputs[1].CachedTokens != 64 {
		t.Fatalf("outputs %+v; want cached 0 then 64 (blocks of a request in the same step, capped at floor(79/16)*16)", s.Outputs)
	}
	if s.Queries != 160 || s.Hits != 64 {
		t.Errorf("queries %d hits %d", s.Queries, s.Hits)
	}
}

func TestEngineLRUEvictsTailFirst(t *testing.T) {
	t.Parallel()
	// 5 usable blocks: a 3-block request, then a 4-block one forces
	// evicting two of the first request's cached blocks.
	e := smallEngine(t, 6, 2048, 256)
	pa := synthTokens(4, 48)
	a := &Request{Prompt: pa, MaxTokens: 1}
	e.Add(a)
	e.Step(0)
	e.Add(&Request{Prompt: synthTokens(5, 64), MaxTokens: 1})
	s := e.Step(time.Second)
	var removed []BlockHash
	for _, ev := range s.Events {
		if ev.Kind == BlockRemoved {
			if len(ev.Hashes) != 1 {
				t.Fatalf("BlockRemoved with %d hashes", len(ev.Hashes))
			}
			removed = append(removed, ev.Hashes[0])
		}
	}
	if len(removed) != 2 || removed[0] != a.hashes[2] || removed[1] != a.hashes[1] {
		t.Fatalf("removed %v, want a's blocks 2 then 1 (tail first)", removed)
	}
	if s.Events[len(s.Events)-1].Kind != BlockStored {
		t.Errorf("evictions must precede the store that reuses the blocks: %v", s.Events)
	}
	if got := e.CachedPrefix(pa, ""); got != 16 {
		t.Errorf("a's head block should survive: cached prefix %d, want 16", got)
	}
}

func TestEnginePreemptsLatestRunning(t *testing.T) {
	t.Parallel()
	// 8 usable blocks. Two 48-token prompts (3 blocks each) decode until
	// they need more than the cache holds; the later one is preempted and
	// recomputed after the first finishes.
	e := smallEngine(t, 9, 2048, 256)
	a := &Request{Prompt: synthTokens(6, 48), MaxTokens: 40}
	b := &Request{Prompt: synthTokens(7, 48), MaxTokens: 40}
	e.Add(a)
	e.Add(b)
	c := NewCluster(e)
	var order []*Request
	c.OnOutput = func(_ int, o Output) {
		if o.Finished {
			order = append(order, o.Req)
		}
	}
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	if e.Preemptions() == 0 {
		t.Fatal("no preemption")
	}
	if len(order) != 2 || order[0] != a || order[1] != b {
		t.Errorf("finish order %v, want a then b", order)
	}
	if a.generated != 40 || b.generated != 40 || e.KVUsage() != 0 {
		t.Errorf("generated %d and %d, kv usage %v", a.generated, b.generated, e.KVUsage())
	}
}

func TestEngineResetAndAbort(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 100, 2048, 256)
	r := &Request{Prompt: synthTokens(8, 64), MaxTokens: 100}
	e.Add(r)
	e.Step(0)
	if e.ResetPrefixCache() {
		t.Error("reset succeeded while a request holds blocks")
	}
	e.Abort(r)
	if e.KVUsage() != 0 || !e.Idle() {
		t.Errorf("abort left usage %v idle %v", e.KVUsage(), e.Idle())
	}
	if !e.ResetPrefixCache() {
		t.Error("reset failed on an idle engine")
	}
	evs := e.TakeEvents()
	if len(evs) != 1 || evs[0].Kind != AllBlocksCleared {
		t.Errorf("events after reset %v", evs)
	}
	if e.CachedPrefix(r.Prompt, "") != 0 {
		t.Error("cache not empty after reset")
	}
}

func TestEngineRejects(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 10, 2048, 256)
	tests := []struct {
		name   string
		prompt []uint32
		want   error
	}{
		{"empty", nil, nil},
		{"larger than the cache", synthTokens(9, 9*16), ErrPromptTooLong},
	}
	for _, tt := range tests {
		err := e.Add(&Request{Prompt: tt.prompt, MaxTokens: 1})
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestEngineDeterministic runs the same workload twice and compares every
// output and event: the engine's decisions depend only on its inputs, so
// the live server makes the same ones at any time scale.
func TestEngineDeterministic(t *testing.T) {
	t.Parallel()
	run := func() uint64 {
		h := fnv.New64a()
		e := smallEngine(t, 200, 512, 8)
		c := NewCluster(e)
		c.OnStep = func(_ int, s StepResult) {
			for _, o := range s.Outputs {
				h.Write([]byte{byte(o.Token), byte(o.CachedTokens), byte(o.Index)})
			}
			for _, ev := range s.Events {
				for _, x := range ev.Hashes {
					h.Write(x[:4])
				}
			}
			h.Write([]byte{byte(s.Duration), byte(s.Preempted)})
		}
		for i := range 60 {
			p := append(synthTokens(uint64(i%5), 100), synthTokens(uint64(100+i), 50+i)...)
			c.Submit(time.Duration(i)*3*time.Millisecond, 0, &Request{Prompt: p, MaxTokens: 10 + i%7})
		}
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return h.Sum64()
	}
	if a, b := run(), run(); a != b {
		t.Errorf("two identical runs differ: %x vs %x", a, b)
	}
}

func TestScaledClock(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	c := scaledClock{start: start, scale: 20}
	if got := c.sim(start.Add(time.Second)); got != 20*time.Second {
		t.Errorf("sim = %v", got)
	}
	if got := c.wall(20 * time.Second); !got.Equal(start.Add(time.Second)) {
		t.Errorf("wall = %v", got)
	}
}

// TestEngineCacheSaltOnTheWire checks that a salted request's BlockStored
// carries the salt as block 0's extra key (and none on later blocks), and
// that only an identically salted request hits its blocks.
func TestEngineCacheSaltOnTheWire(t *testing.T) {
	t.Parallel()
	e := smallEngine(t, 100, 2048, 256)
	p := synthTokens(10, 40)
	e.Add(&Request{Prompt: p, MaxTokens: 1, CacheSalt: "tenant-a"})
	s := e.Step(0)
	if len(s.Events) != 1 || len(s.Events[0].Extra) != 2 {
		t.Fatalf("events %+v", s.Events)
	}
	b := eventEncoder{wire: WireMap}.appendBatch(nil, &Batch{Events: s.Events})
	v, err := decodeMsgpack(b)
	if err != nil {
		t.Fatal(err)
	}
	extra := v.([]any)[1].([]any)[0].(map[string]any)["extra_keys"].([]any)
	if len(extra) != 2 || len(extra[0].([]any)) != 1 || extra[0].([]any)[0] != "tenant-a" || extra[1] != nil {
		t.Errorf("extra_keys %v, want [[tenant-a] nil]", extra)
	}
	if got := e.CachedPrefix(p, "tenant-a"); got != 32 {
		t.Errorf("same salt: cached %d, want 32", got)
	}
	if got := e.CachedPrefix(p, "tenant-b"); got != 0 {
		t.Errorf("other salt: cached %d, want 0", got)
	}
}

// TestProfilesValid checks every built-in profile builds an engine and
// that a full-budget prefill step costs what its comments derive.
func TestProfilesValid(t *testing.T) {
	t.Parallel()
	for _, p := range Profiles() {
		t.Run(p.Name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewEngine(p.Engine); err != nil {
				t.Fatal(err)
			}
			c := p.Engine.Step
			full := c.Duration(p.Engine.MaxNumBatchedTokens, 0, p.Engine.MaxNumBatchedTokens)
			if full <= c.Overhead || full > 2*time.Second {
				t.Errorf("a full-budget prefill step takes %v", full)
			}
		})
	}
	if _, err := ProfileByName("nope"); err == nil {
		t.Error("unknown profile accepted")
	}
}
