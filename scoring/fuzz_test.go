package scoring

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/warmpath/warmpath/kvindex"
)

// FuzzPickDone drives a router with untrusted inputs: the request body
// (hashed for the approximate history), client token ids, and the outcome
// values parsed from the engine's response (TTFT, prompt and cached tokens,
// any of which may be absurd). The router must never panic, must always
// choose one of the candidates, keep its predictions finite and
// non-negative, and release every reservation.
func FuzzPickDone(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), []byte{1, 0, 0, 0, 2, 0, 0, 0}, int64(50e6), 2, 0, uint8(0))
	f.Add([]byte{}, []byte{}, int64(0), -1, -1, uint8(1))
	f.Add(make([]byte, 4096), make([]byte, 4*2048), int64(-5), 1<<40, -1<<40, uint8(2))
	f.Add([]byte("x"), []byte{0xff, 0xff, 0xff, 0xff}, int64(1<<62), 0, 1<<30, uint8(3))
	f.Fuzz(func(t *testing.T, body, rawIDs []byte, ttft int64, promptTokens, cachedTokens int, sel uint8) {
		cfg := DefaultConfig()
		cfg.TextChunk = 64
		cfg.Shadow = PolicyNames()
		names := PolicyNames()
		g := newRig(t, names[int(sel)%len(names)], cfg, &fakeTokens{err: errTokenize})
		var ids []uint32
		for i := 0; i+4 <= len(rawIDs); i += 4 {
			ids = append(ids, binary.LittleEndian.Uint32(rawIDs[i:]))
		}
		ws := pool(1 + int(sel)%5)
		if len(ids) > 16 {
			g.index.store(ws[0].Name, kvindex.ChainKey{Model: "m"}, ids, len(ids)/16*16, 16, sel%2 == 0)
		}
		g.load.reports[ws[0].Name] = loadReport{Running: promptTokens % 1000, Waiting: cachedTokens % 1000,
			HasKVUsage: true, KVUsage: float64(sel) / 100, Scraped: g.clock.Now()}
		for round := range 3 {
			req := &Request{API: APIChat, Model: "m", Prompt: body, Body: body}
			if round != 1 {
				req.TokenIDs = ids
			}
			d, err := g.r.Pick(t.Context(), req, ws)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range d.Candidates {
				found = found || c.Worker == d.Worker
				if c.PredictedTTFT < 0 || c.QueueWait < 0 || c.Prefill < 0 || c.CachedTokens < 0 || c.CachedTokens > max(d.PromptTokens, 0) {
					t.Fatalf("bad candidate %+v for %d prompt tokens", c, d.PromptTokens)
				}
			}
			if !found {
				t.Fatalf("chose %q, not a candidate", d.Worker)
			}
			g.r.Done(d, Outcome{End: EndCompleted, TTFT: time.Duration(ttft), PromptTokens: promptTokens, CachedTokens: cachedTokens})
		}
		p, err := g.r.Predict(t.Context(), &Request{Model: "m", TokenIDs: ids}, ws)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Candidates {
			if c.InFlight != 0 || c.PredictedTTFT < 0 {
				t.Fatalf("after Done: %+v", c)
			}
		}
	})
}
