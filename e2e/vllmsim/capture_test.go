package vllmsim

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

// captureBatch is one line of testdata/vllm-0.31-capture/capture-excerpt.jsonl.
type captureBatch struct {
	Topic   string `json:"topic"`
	Seq     uint64 `json:"seq"`
	Payload []byte `json:"payload_b64"`
}

// captureRequest is one line of testdata/vllm-0.31-capture/workload.jsonl.
type captureRequest struct {
	Phase        string `json:"phase"`
	Idx          int    `json:"idx"`
	PromptLen    int    `json:"prompt_len"`
	CachedTokens int    `json:"cached_tokens"`
	PrefixID     string `json:"prefix_id"`
}

func readJSONLines[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
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

func loadCapture(t *testing.T) map[uint64][]byte {
	t.Helper()
	m := map[uint64][]byte{}
	for _, b := range readJSONLines[captureBatch](t, "testdata/vllm-0.31-capture/capture-excerpt.jsonl") {
		if b.Topic != "kv-events" {
			t.Fatalf("seq %d: topic %q", b.Seq, b.Topic)
		}
		m[b.Seq] = b.Payload
	}
	return m
}

// storedTokens extracts token_ids of the last BlockStored event of a
// captured map-era payload by decoding it with the test's msgpack reader.
func storedTokens(t *testing.T, payload []byte) []uint32 {
	t.Helper()
	v, err := decodeMsgpack(payload)
	if err != nil {
		t.Fatal(err)
	}
	events := v.([]any)[1].([]any)
	last := events[len(events)-1].(map[string]any)
	var out []uint32
	for _, x := range last["token_ids"].([]any) {
		out = append(out, uint32(x.(uint64)))
	}
	return out
}

// synthTokens returns n deterministic pseudo-random token ids < 100000.
func synthTokens(seed uint64, n int) []uint32 {
	out := make([]uint32, n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = uint32(x % 100000)
	}
	return out
}

// captureEngineConfig is the engine of the capture: Qwen3-0.6B, block size
// 16, 585 GPU blocks, PYTHONHASHSEED=0, sha256_cbor.
func captureEngineConfig() EngineConfig {
	cfg := mustProfile("test").Engine
	cfg.NumGPUBlocks = 585
	cfg.BlockSize = 16
	cfg.MaxNumBatchedTokens = 8192
	cfg.HashSeed = "0"
	return cfg
}

// captureWorkload loads the capture and returns its batches by seq, its
// requests, and the prompt of each request: the captured token ids where
// the capture has them (the shared prompts, whose stores appear at seq 0–2
// and 48–54), deterministic synthetic ids of the same lengths otherwise.
func captureWorkload(t *testing.T) (map[uint64][]byte, []captureRequest, func(captureRequest) []uint32) {
	t.Helper()
	capture := loadCapture(t)
	want := readJSONLines[captureRequest](t, "testdata/vllm-0.31-capture/workload.jsonl")

	p0 := storedTokens(t, capture[0])
	if len(p0) != 640 {
		t.Fatalf("seq 0 has %d tokens, want 640", len(p0))
	}
	shared := make([][]uint32, 8)
	shared[0] = p0
	for i := 1; i < 8; i++ {
		// Shared prompt i stores its 128-token suffix at seq i in the
		// shared phase and at seq 47+i in the recheck phase.
		seq := uint64(i)
		if i > 2 {
			seq = 47 + uint64(i)
		}
		shared[i] = append(slices.Clip(p0[:512]), storedTokens(t, capture[seq])...)
	}
	burstPrefix := synthTokens(100, 512)
	prompt := func(r captureRequest) []uint32 {
		switch r.Phase {
		case "burst":
			return append(slices.Clip(burstPrefix), synthTokens(200+uint64(r.Idx), 128)...)
		case "evict":
			return synthTokens(1000+uint64(r.Idx), 1024)
		}
		return shared[r.Idx]
	}

	return capture, want, prompt
}

// TestCaptureWorkload replays the workload that produced the real vLLM 0.31
// capture (same phases, prompt lengths, concurrency, cache size) and checks
// that the simulator reports the engine's own cached_tokens for every
// request, that its KV-event payloads for the captured prompts are
// byte-identical to the capture (timestamp aside), and that the stream has
// the capture's totals (154 stores, 7392 removes, 1 clear, 57 batches).
func TestCaptureWorkload(t *testing.T) {
	t.Parallel()
	capture, want, prompt := captureWorkload(t)

	eng, err := NewEngine(captureEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := NewCluster(eng)
	var batches []StepResult
	c.OnStep = func(_ int, s StepResult) {
		if len(s.Events) > 0 {
			batches = append(batches, s)
		}
	}
	got := map[*Request]int{}
	reqs := make([]*Request, len(want))
	// Phases run one after another; within a phase requests are
	// sequential, all at once (burst) or four at a time (evict), as the
	// capture's workload ran them.
	concurrency := map[string]int{"shared": 1, "repeat": 1, "burst": 8, "evict": 4, "recheck": 1, "after_reset": 1}
	var submit func() // recursive: completions submit the next requests
	next := 0
	inflight := 0
	submit = func() {
		for next < len(want) && inflight < concurrency[want[next].Phase] {
			if inflight > 0 && next > 0 && want[next].Phase != want[next-1].Phase {
				return // drain the phase first
			}
			r := want[next]
			req := &Request{ID: r.Phase, Prompt: prompt(r), MaxTokens: 1}
			reqs[next] = req
			if r.Phase == "after_reset" && r.Idx == 0 {
				c.Do(c.Now(), func() {
					if !eng.ResetPrefixCache() {
						t.Error("reset_prefix_cache failed on an idle engine")
					}
				})
			}
			c.Submit(c.Now()+time.Millisecond, 0, req)
			next++
			inflight++
		}
	}
	c.OnOutput = func(_ int, o Output) {
		if o.Finished {
			got[o.Req] = o.CachedTokens
			inflight--
			submit()
		}
	}
	c.OnReject = func(_ int, _ *Request, err error) { t.Fatal(err) }
	submit()
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	for i, r := range want {
		if reqs[i] == nil {
			t.Fatalf("%s[%d] never submitted", r.Phase, r.Idx)
		}
		if len(reqs[i].Prompt) != r.PromptLen {
			t.Fatalf("%s[%d]: prompt %d tokens, want %d", r.Phase, r.Idx, len(reqs[i].Prompt), r.PromptLen)
		}
		if g, ok := got[reqs[i]]; !ok || g != r.CachedTokens {
			t.Errorf("%s[%d]: cached_tokens %d (finished %v), engine reported %d", r.Phase, r.Idx, g, ok, r.CachedTokens)
		}
	}

	var stores, removes, clears int
	for _, b := range batches {
		for _, ev := range b.Events {
			switch ev.Kind {
			case BlockStored:
				stores++
			case BlockRemoved:
				removes++
			case AllBlocksCleared:
				clears++
			}
		}
	}
	if stores != 154 || removes != 7392 || clears != 1 || len(batches) != 57 {
		t.Errorf("stream totals: %d stores, %d removes, %d clears in %d batches; capture has 154, 7392, 1 in 57",
			stores, removes, clears, len(batches))
	}

	enc := eventEncoder{wire: WireMap}
	for seq, real := range capture {
		if seq >= uint64(len(batches)) {
			t.Fatalf("simulator published %d batches, capture has seq %d", len(batches), seq)
		}
		ours := enc.appendBatch(nil, &Batch{TS: 0, Events: batches[seq].Events})
		// Bytes 1..9 are the float64 timestamp; everything else must match.
		if len(ours) != len(real) || !bytes.Equal(ours[:1], real[:1]) || !bytes.Equal(ours[10:], real[10:]) {
			if seq >= 48 {
				// seq 48+ start with evictions of blocks from the evict phase,
				// whose prompts are not in the capture: compare the rest.
				checkEvictionBatch(t, seq, real, ours)
				continue
			}
			t.Errorf("seq %d payload differs:\n got  %s\n want %s", seq, hex.EncodeToString(ours), hex.EncodeToString(real))
		}
	}
}

// checkEvictionBatch compares a batch that removes blocks the test cannot
// reproduce (their tokens are not in the capture): the same number of
// single-hash BlockRemoved events with the same layout, then the identical
// BlockStored.
func checkEvictionBatch(t *testing.T, seq uint64, real, ours []byte) {
	t.Helper()
	rv, err := decodeMsgpack(real)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := decodeMsgpack(ours)
	if err != nil {
		t.Fatal(err)
	}
	re, oe := rv.([]any)[1].([]any), ov.([]any)[1].([]any)
	if len(re) != len(oe) {
		t.Fatalf("seq %d: %d events, capture has %d", seq, len(oe), len(re))
	}
	for i := range re {
		r, o := re[i].(map[string]any), oe[i].(map[string]any)
		if r["type"] != o["type"] {
			t.Fatalf("seq %d event %d: type %v, capture %v", seq, i, o["type"], r["type"])
		}
		if r["type"] == "BlockRemoved" {
			if len(o["block_hashes"].([]any)) != 1 || o["medium"] != r["medium"] || o["group_idx"] != r["group_idx"] {
				t.Errorf("seq %d event %d: %v, capture %v", seq, i, o, r)
			}
			continue
		}
		if !reflect.DeepEqual(r, o) {
			t.Errorf("seq %d BlockStored differs:\n got  %v\n want %v", seq, o, r)
		}
	}
}

// TestLiveCaptureWorkload runs the capture's workload through the live
// server — HTTP token-id completions, the scaled-clock engine loop, the ZMQ
// publisher and replay — and checks the engine's cached_tokens from the
// HTTP usage, the captured payload bytes from the replayed stream, and the
// stream totals that do not depend on how requests fall into steps.
func TestLiveCaptureWorkload(t *testing.T) {
	t.Parallel()
	capture, want, prompt := captureWorkload(t)
	cfg := testConfig(t)
	cfg.Engine = captureEngineConfig()
	cfg.TimeScale = 50
	cfg.KVEvents.BufferSteps = 1000
	srv := startServer(t, cfg)

	got := make([]int, len(want))
	run := func(i int) {
		evs := streamCompletion(t, srv, prompt(want[i]), 1)
		got[i] = checkCompletionStream(t, evs, 1).PromptTokensDetails.CachedTokens
	}
	concurrency := map[string]int{"burst": 8, "evict": 4}
	for i := 0; i < len(want); {
		phase := want[i].Phase
		if phase == "after_reset" && want[i].Idx == 0 {
			if resp := post(t, t.Context(), srv.HTTPAddr(), "/reset_prefix_cache", ""); resp.StatusCode != 200 {
				t.Fatalf("reset: %d", resp.StatusCode)
			}
		}
		n := max(1, concurrency[phase])
		var wg sync.WaitGroup
		for j := i; j < i+n && j < len(want) && want[j].Phase == phase; j++ {
			wg.Go(func() { run(j) })
		}
		wg.Wait()
		for i < len(want) && n > 0 && want[i].Phase == phase {
			i++
			n--
		}
	}
	// Concurrent requests reach the engine in any order, so compare each
	// phase's answers as a sorted list.
	byPhase := func(vals func(i int) int) map[string][]int {
		m := map[string][]int{}
		for i, r := range want {
			m[r.Phase] = append(m[r.Phase], vals(i))
		}
		for _, v := range m {
			slices.Sort(v)
		}
		return m
	}
	gotPhases, wantPhases := byPhase(func(i int) int { return got[i] }), byPhase(func(i int) int { return want[i].CachedTokens })
	for phase, w := range wantPhases {
		if !slices.Equal(gotPhases[phase], w) {
			t.Errorf("%s: cached_tokens %v, engine reported %v", phase, gotPhases[phase], w)
		}
	}

	seqs, payloads := replayAll(t, srv.ReplayEndpoints()[0], 0)
	if len(seqs) == 0 || seqs[0] != 0 {
		t.Fatalf("replayed seqs start %v", seqs[:min(3, len(seqs))])
	}
	var stores, removes, clears int
	for _, p := range payloads {
		v, err := decodeMsgpack(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range v.([]any)[1].([]any) {
			switch ev.(map[string]any)["type"] {
			case "BlockStored":
				stores++
			case "BlockRemoved":
				removes++
			case "AllBlocksCleared":
				clears++
			}
		}
	}
	if stores != 154 || removes != 7392 || clears != 1 {
		t.Errorf("stream totals: %d stores, %d removes, %d clears; capture has 154, 7392, 1", stores, removes, clears)
	}
	// The shared phase is sequential, so its first three batches are the
	// capture's seq 0–2, byte for byte after the timestamp.
	for seq := range uint64(3) {
		real, ours := capture[seq], payloads[seq]
		if len(ours) != len(real) || ours[0] != real[0] || !bytes.Equal(ours[10:], real[10:]) {
			t.Errorf("seq %d payload differs from the capture", seq)
		}
	}
}
