package vllmsim

import (
	"bufio"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// BenchmarkStreaming200RPS drives one simulated worker (test profile, time
// scale 1, KV events published) with an open-loop load of 200 streaming
// completions per second (512 unique prompt tokens, 32 output tokens each)
// and reports whether the simulator's own CPU distorts simulated time:
//
//   - offered-req/s: the load sent (≈ 200 unless the client falls behind);
//   - done-req/s: requests completed per wall second, the last one's tail
//     included (≈ 200 when the worker keeps up);
//   - lag-p99-ms, lag-max-ms: how late engine steps started against the
//     scaled clock (upper bucket bounds of vllmsim_step_lag_seconds);
//   - cores: CPU used by the whole test process (simulator and load
//     generator together) per wall second;
//   - ttft-gap-ms: mean client-observed TTFT minus the engine's simulated
//     TTFT, i.e. what HTTP, scheduling and the simulator's CPU add.
//
// Run: go test ./e2e/vllmsim -run XXX -bench Streaming200RPS -benchtime 1000x -count 5
func BenchmarkStreaming200RPS(b *testing.B) {
	cfg := testConfig(b)
	cfg.TimeScale = 1
	// Cheap prefill, so the simulated engine has ample capacity and any
	// TTFT growth comes from the simulator, not from simulated queueing.
	cfg.Engine.Step.PrefillPerToken = time.Microsecond
	srv := startServer(b, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0}}
	prompts := make([]string, b.N)
	for i := range prompts {
		prompts[i] = fmt.Sprintf(`{"prompt":%s,"max_tokens":32,"stream":true,"stream_options":{"include_usage":true}}`,
			idsJSON(synthTokens(uint64(i)+1<<32, 512)))
	}
	const interval = 5 * time.Millisecond
	ttfts := make([]time.Duration, b.N)
	errs := make([]error, b.N)
	var wg sync.WaitGroup
	cpu0 := processCPU(b)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Go(func() {
			sent := time.Now()
			resp, err := client.Post("http://"+srv.HTTPAddr()+"/v1/completions", "application/json", strings.NewReader(prompts[i]))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				if first && strings.HasPrefix(sc.Text(), "data: ") {
					ttfts[i] = time.Since(sent)
					first = false
				}
			}
			if first {
				errs[i] = fmt.Errorf("status %d without data", resp.StatusCode)
			}
		})
	}
	offered := time.Since(start)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/elapsed.Seconds(), "cores")
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/offered.Seconds(), "offered-req/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "done-req/s")

	fams, err := srv.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	var engineTTFT float64
	for _, f := range fams {
		switch f.GetName() {
		case "vllmsim_step_lag_seconds":
			h := f.GetMetric()[0].GetHistogram()
			b.ReportMetric(bucketQuantile(h, 0.99)*1e3, "lag-p99-ms")
			b.ReportMetric(bucketQuantile(h, 1)*1e3, "lag-max-ms")
		case "vllm:time_to_first_token_seconds":
			h := f.GetMetric()[0].GetHistogram()
			engineTTFT = h.GetSampleSum() / float64(h.GetSampleCount())
		}
	}
	var sum time.Duration
	for _, d := range ttfts {
		sum += d
	}
	slices.Sort(ttfts)
	b.ReportMetric((sum.Seconds()/float64(b.N)-engineTTFT)*1e3, "ttft-gap-ms")
	b.ReportMetric(ttfts[len(ttfts)*99/100].Seconds()*1e3, "client-ttft-p99-ms")
}

// processCPU returns the CPU time (user + system) the test process used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bucketQuantile returns the upper bound of the bucket holding quantile q
// (+Inf as 1e9 seconds).
func bucketQuantile(h *dto.Histogram, q float64) float64 {
	want := uint64(q * float64(h.GetSampleCount()))
	for _, bk := range h.GetBucket() {
		if bk.GetCumulativeCount() >= want {
			return bk.GetUpperBound()
		}
	}
	return 1e9
}

// BenchmarkEngineDecodeStep measures the simulator's CPU per engine step
// with 64 decoding requests of 2K context (H100 profile, whose cache holds
// them for well over 2000 steps without preemption).
//
// Run: go test ./e2e/vllmsim -run XXX -bench EngineDecodeStep -benchtime 1000x -count 5
func BenchmarkEngineDecodeStep(b *testing.B) {
	const seqs = 64
	e, err := NewEngine(mustProfile("h100-tp2-32b").Engine)
	if err != nil {
		b.Fatal(err)
	}
	for i := range seqs {
		if err := e.Add(&Request{Prompt: synthTokens(uint64(i), 2048), MaxTokens: 1 << 20}); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Duration(0)
	for {
		s := e.Step(now)
		now += s.Duration
		if s.DecodeSeqs == seqs {
			break
		}
	}
	b.ResetTimer()
	for range b.N {
		s := e.Step(now)
		now += s.Duration
		if s.DecodeSeqs != seqs {
			b.Fatalf("%d decoding", s.DecodeSeqs)
		}
	}
}

// BenchmarkEngineAdmitLongPrompt measures admitting (hashing and looking
// up) a 14K-token prompt whose first 13.5K tokens are cached.
func BenchmarkEngineAdmitLongPrompt(b *testing.B) {
	e, err := NewEngine(mustProfile("l40s-27b-fp8").Engine)
	if err != nil {
		b.Fatal(err)
	}
	prefix := synthTokens(1, 13824)
	c := NewCluster(e)
	c.Submit(0, 0, &Request{Prompt: prefix, MaxTokens: 1})
	if err := c.Run(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		p := append(prefix[:len(prefix):len(prefix)], synthTokens(uint64(i)+2, 512)...)
		if got := e.CachedPrefix(p, ""); got != 13824 {
			b.Fatalf("cached %d", got)
		}
	}
}
