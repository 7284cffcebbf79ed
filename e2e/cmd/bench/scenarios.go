package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/warmpath/warmpath/e2e/harness"
	"github.com/warmpath/warmpath/e2e/replay"
	"github.com/warmpath/warmpath/e2e/vllmsim"
	"github.com/warmpath/warmpath/scoring"
)

// scenario is one benchmark: workers, a workload in simulated time, and
// what to report.
type scenario struct {
	name  string
	title string
	// about explains the scenario in BENCHMARKS.md.
	about string
	// workers and timeScale make the harness setup.
	workers   []harness.WorkerSpec
	timeScale float64
	// replay is the workload and load, in simulated time.
	replay replay.Config
	// sweep, when set, also runs this load (a rate sweep) for sweepPolicies
	// to find each one's peak goodput under replay.SLO.
	sweep         *replay.LoadConfig
	sweepPolicies []string
	// accuracyWarmup is the decisions left out of the prediction accuracy
	// reported; 0 leaves out the first quarter.
	accuracyWarmup int
	// targets are the slo objective's targets for this workload's model,
	// in simulated time (warmpath-slo runs with them).
	targets scoring.SLO
	// prepare writes input files (traces) into dir before the runs.
	prepare func(s *scenario, dir string) error
	// replicaRuns, when set, makes this a replicas scenario: instead of
	// once per policy, the workload runs once per configuration (a policy
	// on so many warmpath replicas, sharing ledgers or not) and round.
	replicaRuns []replicaRun
}

// policies returns the harness policies for names, warmpath-slo with the
// scenario's targets.
func (s *scenario) policies(names ...string) []harness.Policy {
	ps := harness.Policies(names...)
	for i, n := range names {
		if n == "warmpath-slo" {
			ps[i] = harness.WithTargets(ps[i], s.targets)
		}
	}
	return ps
}

func workers(n int, profile string, tune func(*vllmsim.EngineConfig)) []harness.WorkerSpec {
	out := make([]harness.WorkerSpec, n)
	for i := range out {
		out[i] = harness.WorkerSpec{Name: fmt.Sprintf("w%d", i), Profile: profile, Tune: tune}
	}
	return out
}

func mustSLO(s string) replay.SLO {
	slo, err := replay.ParseSLO(s)
	if err != nil {
		panic(err)
	}
	return slo
}

// tokenIDs is the workload base every scenario shares: exact token-id
// prompts to /v1/completions (the simulator has no tokenizer in this build,
// and ids make prompt lengths exact).
func tokenIDs(kind replay.WorkloadKind) replay.WorkloadConfig {
	return replay.WorkloadConfig{Kind: kind, API: replay.APICompletions, Model: "sim-model", TokenIDs: true, IgnoreEOS: true}
}

// scenarios returns every scenario, in report order. repoRoot locates
// committed inputs (the Mooncake excerpt).
func scenarios(repoRoot string) []*scenario {
	seedShaped := tokenIDs(replay.WorkloadSynthetic)
	seedShaped.Synthetic = replay.SyntheticConfig{Requests: 150, Prompt: replay.Dist{Mean: 512}, Output: replay.Dist{Mean: 256},
		PrefixTokens: 14000, PrefixCount: 8}

	llmd := tokenIDs(replay.WorkloadSharedPrefix)
	llmd.SharedPrefix = replay.SharedPrefixConfig{Groups: 40, PromptsPerGroup: 6, SystemPromptLen: 6000,
		Question: replay.Dist{Mean: 1200}, Output: replay.Dist{Mean: 256}}

	indep := tokenIDs(replay.WorkloadSynthetic)
	indep.Synthetic = replay.SyntheticConfig{Requests: 200, Prompt: replay.Dist{Mean: 1024, Stdev: 512, Min: 64, Max: 4096},
		Output: replay.Dist{Mean: 256, Stdev: 128, Min: 16, Max: 512}}

	hetero := tokenIDs(replay.WorkloadSynthetic)
	hetero.Synthetic = replay.SyntheticConfig{Requests: 240, Prompt: replay.Dist{Mean: 3000, Stdev: 800, Min: 1500, Max: 5000},
		Output: replay.Dist{Mean: 192, Stdev: 64, Min: 64, Max: 320}}

	mooncake := tokenIDs(replay.WorkloadMooncake)
	mooncake.Trace = replay.TraceConfig{Path: filepath.Join(repoRoot, "e2e/replay/testdata/mooncake-synthetic-head100.jsonl"),
		MaxOutput: 256, MaxPrompt: 30000}

	skew := tokenIDs(replay.WorkloadMooncake)
	skew.Trace = replay.TraceConfig{MaxOutput: 128} // Path set by prepare

	accuracy := tokenIDs(replay.WorkloadSharedPrefix)
	accuracy.SharedPrefix = replay.SharedPrefixConfig{Groups: 16, PromptsPerGroup: 25, SystemPromptLen: 4000,
		Question: replay.Dist{Mean: 600, Stdev: 300, Min: 32, Max: 2000}, Output: replay.Dist{Mean: 128, Stdev: 64, Min: 8, Max: 256}}

	return []*scenario{
		{
			name:  "seed-shaped",
			title: "Seed-shaped: 3 L40S-like workers, 8 prefixes of 14K tokens, GuideLLM-like 512/256",
			about: "The shape of the public result warmpath answers: three L40S-class workers serving a ~27B FP8 model " +
				"(profile `l40s-27b-fp8`: 4,300 blocks of 16 = 68,800 tokens of KV cache each, budget 2,048), GuideLLM-style " +
				"requests of one of 8 shared 14,000-token prefixes (112K tokens in all: more than one worker's cache, less than " +
				"three) plus a unique 512-token prompt, 256 output tokens, 150 requests with Poisson arrivals at 0.45 requests/s. " +
				"The goodput sweep sends new requests behind the same 8 prefixes at each rate from 0.2 to 4 requests/s, on the same workers, " +
				"for 60 simulated seconds per rate and at least 80 requests, and takes the highest completed rate whose TTFT p90 is " +
				"within 8 s; a run's completed rate counts its whole duration, the last responses included.",
			workers:   workers(3, "l40s-27b-fp8", nil),
			timeScale: 2, // at 10, harness time between client and warmpath (×10) was a third of a hit's TTFT
			replay: replay.Config{Seed: 42, Workload: seedShaped, SLO: mustSLO("ttft:p90<=8s"),
				Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.45}},
			// Fresh prompts: each rate's run sends new prompts behind the same
			// 8 prefixes (as GuideLLM's sweep draws from one dataset), not
			// the last run's fully cached requests again.
			// A window of 60 s (at least 80 requests) per rate, so that the
			// top rates' completed rate is not capped by a fixed count.
			sweep: &replay.LoadConfig{Kind: replay.LoadSweep, Arrivals: replay.LoadPoisson, FreshPrompts: true,
				MaxDuration: replay.Duration(time.Minute), MinSessions: 80,
				Rates: []float64{0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0}},
			sweepPolicies: []string{"warmpath", "random"},
			targets:       scoring.SLO{TTFT: 2 * time.Second, TPOT: 60 * time.Millisecond},
		},
		{
			name:  "llm-d-shared-prefix",
			title: "llm-d shared prefix, scaled down: 40 groups × 6K-token prefix, 4 H100-like workers",
			about: "llm-d's inference-perf `shared_prefix` benchmark uses 150 groups × 5 prompts behind 6,000-token system " +
				"prompts (1,200-token questions, 1,000-token answers) on 8–16 GPUs. Scaled down to fit this machine: 40 groups × " +
				"6 prompts, 256-token answers, on 4 `h100-tp2-32b` workers whose caches are cut to 6,000 blocks (96K tokens) so " +
				"that, as in the original, the prefix set (240K tokens) exceeds one worker's cache. Poisson at 3 requests/s.",
			workers:   workers(4, "h100-tp2-32b", func(e *vllmsim.EngineConfig) { e.NumGPUBlocks = 6000 }),
			timeScale: 5,
			replay: replay.Config{Seed: 7, Workload: llmd, SLO: mustSLO("ttft:p90<=2s"),
				Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 3}},
			targets: scoring.SLO{TTFT: time.Second, TPOT: 30 * time.Millisecond},
		},
		skewed("skewed-hot-prefix", "Skewed: one hot 8K-token prefix on 80% of requests, 3 L40S-like workers",
			"A generated Mooncake-format trace (seeded; written next to the results): 240 requests, Poisson at 2 "+
				"requests/s; 80% start with the same 8,192-token prefix followed by a unique 512-token tail, 20% are unique "+
				"2,048-token prompts; 128 output tokens. Longest-prefix routing sends every hot request to one worker.",
			skew, 2, 1, 3),
		skewed("skewed-heavy", "Skewed, heavy: one hot 8K-token prefix with 1.5K-token tails, 3 L40S-like workers",
			skewedHeavyAbout, skew, 2.5, 3, 4),
		{
			name:  "independent",
			title: "Independent prompts: no shared prefix, 3 L40S-like workers",
			about: "200 requests with no common prefix (1,024 ± 512 prompt tokens, 256 ± 128 output tokens), Poisson at 1 " +
				"request/s: caches cannot help, so this checks that a cache-aware policy is no worse than load balancing.",
			workers:   workers(3, "l40s-27b-fp8", nil),
			timeScale: 10,
			replay: replay.Config{Seed: 11, Workload: indep, SLO: mustSLO("ttft:p90<=8s"),
				Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 1}},
			targets: scoring.SLO{TTFT: time.Second, TPOT: 60 * time.Millisecond},
		},
		{
			name: "heterogeneous",
			title: "Heterogeneous pool, independent prompts, closed loop: 4 workers that prefill at different speeds and " +
				"budgets and decode alike",
			about: "The pool where the lowest TTFT is not the fastest response. Four `l40s-27b-fp8` workers that decode alike " +
				"(35 ms steps, 0.15 ms per sequence) and prefill differently, none of it told to warmpath: `w0-fast` prefills " +
				"twice as fast (0.15 ms/token) in chunks of 4,096 tokens; `w1` is the profile (0.3 ms/token, budget 2,048); " +
				"`w2-small` has a budget of 512; `w3-slow` prefills at half speed (0.6 ms/token) with a budget of 1,024. " +
				"240 independent prompts (3,000 ± 800 tokens, 1,500–5,000) with 192 ± 64 output tokens (64–320), from 16 " +
				"clients that each send the next request when the last one ends. A worker that takes every prompt because " +
				"it prefills fastest runs a prefill chunk in most of its steps, and every sequence decoding there waits for it.",
			workers: []harness.WorkerSpec{
				{Name: "w0-fast", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) {
					e.Step.PrefillPerToken, e.MaxNumBatchedTokens = 150*time.Microsecond, 4096
				}},
				{Name: "w1", Profile: "l40s-27b-fp8"},
				{Name: "w2-small", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) { e.MaxNumBatchedTokens = 512 }},
				{Name: "w3-slow", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) {
					e.Step.PrefillPerToken, e.MaxNumBatchedTokens = 600*time.Microsecond, 1024
				}},
			},
			timeScale: 5,
			replay: replay.Config{Seed: 13, Workload: hetero, SLO: mustSLO("e2e:p90<=20s"),
				Load: replay.LoadConfig{Kind: replay.LoadConcurrent, Concurrency: 16}},
			targets: scoring.SLO{TTFT: 3 * time.Second, TPOT: 60 * time.Millisecond},
		},
		{
			name:  "mooncake",
			title: "Mooncake trace excerpt: first 100 requests, 4 H100-like workers",
			about: "The first 100 requests (28 s) of Mooncake's `synthetic_trace.jsonl` (Apache-2.0; committed in " +
				"e2e/replay/testdata), replayed at the recorded pace; hash ids expand to 512-token blocks; prompts cut at " +
				"30,000 tokens and outputs at 256. Many requests share their first blocks.",
			workers:   workers(4, "h100-tp2-32b", nil),
			timeScale: 2,
			replay: replay.Config{Seed: 1, Workload: mooncake, SLO: mustSLO("ttft:p90<=8s"),
				Load: replay.LoadConfig{Kind: replay.LoadTrace, TimeScale: 1}},
			targets: scoring.SLO{TTFT: 2 * time.Second, TPOT: 30 * time.Millisecond},
		},
		{
			name:  "accuracy",
			title: "Prediction accuracy: 4 heterogeneous workers",
			about: "Four workers warmpath is told nothing about: `l40s-27b-fp8` as is; one with half its prefill speed; one " +
				"with half its token budget (1,024) and half its cache; one twice as fast (0.15 ms/token, 20 ms steps). " +
				"400 requests from 16 groups behind 4,000-token prefixes (questions 600 ± 300 tokens, answers 128 ± 64), " +
				"Poisson at 1.5 requests/s. Accuracy counts the 200 decisions after the first 200. It runs at time scale 2: " +
				"the harness's own few milliseconds per request (Envoy, HTTP, scheduling on a shared machine) are multiplied " +
				"by the scale, and at 10 they would be a third of a cache hit's TTFT, measuring the harness instead of the model.",
			workers: []harness.WorkerSpec{
				{Name: "w0", Profile: "l40s-27b-fp8"},
				{Name: "w1-slow", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) { e.Step.PrefillPerToken = 600 * time.Microsecond }},
				{Name: "w2-small", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) {
					e.MaxNumBatchedTokens, e.NumGPUBlocks = 1024, 2150
				}},
				{Name: "w3-fast", Profile: "l40s-27b-fp8", Tune: func(e *vllmsim.EngineConfig) {
					e.Step.PrefillPerToken, e.Step.Overhead = 150*time.Microsecond, 20*time.Millisecond
				}},
			},
			timeScale: 2,
			replay: replay.Config{Seed: 5, Workload: accuracy, SLO: mustSLO("ttft:p90<=8s"),
				Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 1.5}},
			targets:        scoring.SLO{TTFT: time.Second, TPOT: 60 * time.Millisecond},
			accuracyWarmup: 200,
		},
		{
			name:  "replicas",
			title: "Replicas, seed-shaped: warmpath as 1, 2 and 4 replicas behind one Envoy",
			about: "The seed-shaped workload (8 shared 14,000-token prefixes, 512-token prompts, 256 output tokens, 150 " +
				"requests, Poisson at 0.45 requests/s) on the same three workers, routed by several warmpath replicas behind " +
				"one real Envoy, whose `warmpath` cluster balances ext_proc streams (one per request) over them round robin. " + replicasAbout +
				" Time scale 3 (seed-shaped runs at 2), so that two rounds of six runs take about 25 minutes.",
			workers:   workers(3, "l40s-27b-fp8", nil),
			timeScale: 3,
			replay: replay.Config{Seed: 42, Workload: seedShaped, SLO: mustSLO("ttft:p90<=2s"),
				Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.45}},
			replicaRuns:    replicaRuns,
			accuracyWarmup: 50,
		},
		func() *scenario {
			s := skewed("replicas-skewed", "Replicas, skewed-heavy: warmpath as 1, 2 and 4 replicas behind one Envoy",
				"The skewed-heavy trace (one hot 8,192-token prefix with 1,536-token tails on 80% of 240 requests at "+
					"2.5 requests/s, the rest unique 2,048-token prompts, 128 output tokens; one worker holding the hot prefix "+
					"saturates) on the same three workers, routed by several warmpath replicas behind one real Envoy, whose "+
					"`warmpath` cluster balances ext_proc streams (one per request) over them round robin. "+replicasAbout+
					" Time scale 2 (skewed-heavy runs at 10), as the accuracy scenario, so that the harness's own milliseconds weigh little "+
					"in the prediction error.",
				skew, 2.5, 3, 4)
			s.timeScale = 2
			s.replay.SLO = mustSLO("ttft:p90<=2s")
			s.replicaRuns, s.accuracyWarmup = replicaRuns, 80
			return s
		}(),
		{
			name:      "demo",
			title:     "Demo: a short shared-prefix workload on 3 L40S-like workers",
			about:     "60 requests behind 6 shared 8,000-token prefixes on three workers whose caches hold about two each.",
			workers:   workers(3, "l40s-27b-fp8", func(e *vllmsim.EngineConfig) { e.NumGPUBlocks = 1500 }),
			timeScale: 20,
			replay: replay.Config{Seed: 9, Workload: func() replay.WorkloadConfig {
				w := tokenIDs(replay.WorkloadSharedPrefix)
				w.SharedPrefix = replay.SharedPrefixConfig{Groups: 6, PromptsPerGroup: 10, SystemPromptLen: 8000,
					Question: replay.Dist{Mean: 256}, Output: replay.Dist{Mean: 64}}
				return w
			}(), SLO: mustSLO("ttft:p90<=8s"), Load: replay.LoadConfig{Kind: replay.LoadPoisson, Rate: 0.5}},
			targets: scoring.SLO{TTFT: 2 * time.Second, TPOT: 60 * time.Millisecond},
		},
	}
}

// skewedHeavyAbout describes the skewed-heavy trace.
const skewedHeavyAbout = "The case longest-prefix routing overloads: as the skewed trace, but each hot request adds 1,536 unique " +
	"tokens and requests arrive at 2.5/s, so the hot prefix's own prefill work (80% × 2.5/s × 1,536 tokens × 0.3 ms) " +
	"is about 0.9 of one worker's prefill time, before its steps' overheads and decodes. One worker holding the " +
	"prefix saturates; three holding it run at about a third each. 240 requests, 128 output tokens."

// replicasAbout is what the replicas scenarios share.
const replicasAbout = "Every replica is its own warmpath server with the same configuration (which carries no worker speed: " +
	"each replica learns the speeds from outcomes) and its own KV index fed by every worker's events; with " +
	"sharing on, each also follows the others' in-flight ledgers and fits what their outcomes taught them (`peers`: a " +
	"shared token, each replica listing the earlier ones, heartbeat 100 ms, stale after 500 ms, expiry after 3 s, " +
	"lessons on); without, it learns from its own outcomes alone. Runs: warmpath on 1, 2 and 4 sharing " +
	"replicas, on 2 that do not share, and prefix-max on 1 and 2 (not sharing: it keeps no load model, so only its " +
	"speculated blocks could travel). Each round replays a new seed (round r: seed + r − 1) for every run, so rounds " +
	"show the spread over workloads and runs of the machine. The SLO is tighter than the other scenarios' so that its " +
	"attainment tells runs apart: a request meets it with TTFT ≤ 2 s (a cache hit takes about 0.3 s, an uncached " +
	"prefix 3–5 s)."

// skewed is a scenario replaying a generated skewed trace (see
// writeSkewedTrace) of 240 requests at rate, 80% of them behind the hot
// prefix with tail unique 512-token blocks, on 3 L40S-like workers; the
// trace's seed is the replay's.
func skewed(name, title, about string, workload replay.WorkloadConfig, rate float64, tail int, seed int64) *scenario {
	return &scenario{
		name: name, title: title, about: about,
		workers:   workers(3, "l40s-27b-fp8", nil),
		timeScale: 10,
		replay: replay.Config{Seed: seed, Workload: workload, SLO: mustSLO("ttft:p90<=8s"),
			Load: replay.LoadConfig{Kind: replay.LoadTrace, TimeScale: 1}},
		targets: scoring.SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond},
		prepare: func(s *scenario, dir string) error {
			p := filepath.Join(dir, "skewed-trace.jsonl")
			s.replay.Workload.Trace.Path = p
			return writeSkewedTrace(p, 240, rate, 0.8, tail, uint64(s.replay.Seed))
		},
	}
}

// writeSkewedTrace writes a Mooncake-format trace of n requests at rate
// (Poisson): a hot fraction share the same 16 leading hash ids (8,192
// tokens) and add tail unique ids; the others are 4 unique ids.
func writeSkewedTrace(path string, n int, rate, hot float64, tail int, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("skewed trace: %w", err)
	}
	w := bufio.NewWriter(f)
	r := rand.New(rand.NewPCG(seed, 0x5e3d))
	next := 16 // ids 0..15 are the hot prefix
	t := 0.0
	enc := json.NewEncoder(w)
	for range n {
		var ids []int
		if r.Float64() < hot {
			for i := range 16 {
				ids = append(ids, i)
			}
			for range tail {
				ids = append(ids, next)
				next++
			}
		} else {
			for range 4 {
				ids = append(ids, next)
				next++
			}
		}
		rec := struct {
			Timestamp    int   `json:"timestamp"`
			InputLength  int   `json:"input_length"`
			OutputLength int   `json:"output_length"`
			HashIDs      []int `json:"hash_ids"`
		}{int(t * 1000), len(ids) * 512, 128, ids}
		if err := enc.Encode(rec); err != nil {
			f.Close()
			return fmt.Errorf("skewed trace: %w", err)
		}
		t += r.ExpFloat64() / rate
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("skewed trace: %w", err)
	}
	return f.Close()
}
