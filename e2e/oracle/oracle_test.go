package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/scoring"
)

// startSims runs n simulators of the "test" profile in this process.
func startSims(t *testing.T, n int) ([]Target, scoring.Workers) {
	t.Helper()
	var ts []Target
	var ws scoring.Workers
	for i := range n {
		cfg := vllmsim.DefaultConfig()
		cfg.Port = 0
		srv, err := vllmsim.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		name := string(rune('a' + i))
		ts = append(ts, Target{Name: name, Server: srv, Engine: cfg.Engine})
		ws = append(ws, srv.Worker(name))
	}
	return ts, ws
}

func prompt(seed uint32, n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = seed*100000 + uint32(i)
	}
	return p
}

// complete sends a token-id prompt straight to a simulator and waits for the
// answer, leaving the prompt's blocks in its cache.
func complete(t *testing.T, addr string, ids []uint32) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": ids, "max_tokens": 2})
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestOraclePicks(t *testing.T) {
	t.Parallel()
	ts, ws := startSims(t, 3)
	warm := prompt(1, 800)
	complete(t, ws[1].Address, warm)
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }

	t.Run("the worker holding the prefix wins", func(t *testing.T) {
		p := New(ts, 1, WithClock(clock))
		q := append(append([]uint32(nil), warm[:640]...), prompt(2, 100)...)
		d, err := p.Pick(t.Context(), &scoring.Request{TokenIDs: q}, ws)
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker != "b" || d.Chosen.CachedTokens != 640 || d.Mode != scoring.ModeExact {
			t.Fatalf("chose %s with %d cached (%s): %s", d.Worker, d.Chosen.CachedTokens, d.Mode, d.Reason)
		}
	})
	t.Run("a prefix sent and still in flight counts as cached", func(t *testing.T) {
		p := New(ts, 1, WithClock(clock))
		first := prompt(3, 2000)
		d1, _ := p.Pick(t.Context(), &scoring.Request{TokenIDs: first}, ws)
		second := append(append([]uint32(nil), first[:1000]...), prompt(4, 50)...)
		d2, _ := p.Pick(t.Context(), &scoring.Request{TokenIDs: second}, ws)
		for _, c := range d2.Candidates {
			if want := map[bool]int{true: 992, false: 0}[c.Worker == d1.Worker]; c.CachedTokens != want {
				t.Fatalf("candidate %s: %d cached, want %d (first went to %s)", c.Worker, c.CachedTokens, want, d1.Worker)
			}
		}
		p.Done(d1, scoring.Outcome{End: scoring.EndCompleted})
		p.Done(d2, scoring.Outcome{End: scoring.EndCompleted})
		d3, _ := p.Pick(t.Context(), &scoring.Request{TokenIDs: second}, ws)
		for _, c := range d3.Candidates {
			if c.CachedTokens != 0 {
				t.Fatalf("after Done the flight still counts: %+v", c)
			}
		}
	})
	t.Run("queued prefill spreads unrelated prompts", func(t *testing.T) {
		p := New(ts, 1, WithClock(clock))
		seen := map[string]bool{}
		for i := range 3 {
			d, _ := p.Pick(t.Context(), &scoring.Request{TokenIDs: prompt(uint32(10+i), 1500)}, ws)
			seen[d.Worker] = true
			if d.Chosen.PredictedTTFT != d.Chosen.QueueWait+d.Chosen.Prefill || d.Chosen.Prefill <= 0 {
				t.Fatalf("prediction parts do not add up: %+v", d.Chosen)
			}
		}
		if len(seen) != 3 {
			t.Fatalf("three equal prompts went to %v", seen)
		}
	})
	t.Run("text prompts are routed by load only", func(t *testing.T) {
		p := New(ts, 1, WithClock(clock))
		d, err := p.Pick(t.Context(), &scoring.Request{Body: []byte(`{"prompt":"hi"}`)}, ws)
		if err != nil || d.Mode != scoring.ModeLoadOnly || d.Chosen.CachedTokens != 0 {
			t.Fatalf("decision %+v, err %v", d, err)
		}
	})
	t.Run("no candidates is an error", func(t *testing.T) {
		p := New(ts, 1, WithClock(clock))
		if _, err := p.Pick(t.Context(), &scoring.Request{}, nil); !errors.Is(err, ErrNoWorkers) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestWallConvertsSimulatedTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		scale float64
		sim   time.Duration
		want  time.Duration
	}{
		{"real time", 1, time.Second, time.Second},
		{"twenty times faster", 20, time.Second, 50 * time.Millisecond},
		{"invalid scale means real time", 0, time.Second, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := New(nil, tc.scale).wall(tc.sim); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
