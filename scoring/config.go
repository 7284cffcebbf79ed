package scoring

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// StepModel is the per-worker engine time model, in seconds. One engine step
// costs StepOverhead + PrefillPerToken × prefill tokens in the step +
// DecodePerSeq × decoding sequences + ContextPerToken × context tokens read;
// RequestOverhead is paid once per request (HTTP, sampling, first chunk).
// The same shape is used for the configured prior and for what calibration
// learns per worker.
type StepModel struct {
	// StepOverhead is the fixed cost of one engine step. Default 0.008 s.
	StepOverhead float64 `yaml:"step_overhead_seconds"`
	// PrefillPerToken is the cost of one prefilled token. Default 60e-6 s.
	PrefillPerToken float64 `yaml:"prefill_seconds_per_token"`
	// DecodePerSeq is the cost of one decoding sequence in a step. Default 100e-6 s.
	DecodePerSeq float64 `yaml:"decode_seconds_per_seq"`
	// ContextPerToken is the cost of one context token read by attention in
	// a step. Default 5e-9 s.
	ContextPerToken float64 `yaml:"context_seconds_per_token"`
	// RequestOverhead is the fixed cost per request. Default 0.005 s.
	RequestOverhead float64 `yaml:"request_overhead_seconds"`
}

func (m StepModel) vector() [numParams]float64 {
	return [numParams]float64{m.StepOverhead, m.PrefillPerToken, m.DecodePerSeq, m.ContextPerToken, m.RequestOverhead}
}

func stepModelOf(v [numParams]float64) StepModel {
	return StepModel{StepOverhead: v[0], PrefillPerToken: v[1], DecodePerSeq: v[2], ContextPerToken: v[3], RequestOverhead: v[4]}
}

// Config holds the tuning of package scoring. Build it with DefaultConfig,
// change what is needed and check it with Validate. Field comments give the
// unit and the default.
type Config struct {
	// Shadow lists the policies evaluated in shadow on every request, besides
	// the one deciding (which is skipped if listed). Default none.
	Shadow []string `yaml:"shadow"`

	// Objective is what the warmpath policy minimises (see Objective):
	// ttft, e2e or slo. Default e2e.
	Objective Objective `yaml:"objective"`
	// SLOs gives the slo objective's targets per served model name, and
	// DefaultSLO those of the models not listed; a request's own targets
	// (Request.SLO) take precedence. Default none: with no target the slo
	// objective decides as e2e does.
	SLOs       map[string]SLO `yaml:"slos"`
	DefaultSLO SLO            `yaml:"default_slo"`
	// SlowdownWeight weighs, in the e2e objective, the time a request adds
	// to the responses already decoding on a worker against its own: 1
	// minimises the sum of all responses' times. Default 1.
	SlowdownWeight float64 `yaml:"slowdown_weight"`
	// TTFTWeight is how many times more the request's own time to first
	// token counts, in the e2e objective, on top of its time to the last
	// token: 0 weighs a second of waiting for the first token as a second
	// of decoding, 2 as three (why: chooseE2E). Default 2.
	TTFTWeight float64 `yaml:"ttft_weight"`
	// DefaultOutputTokens is the output length assumed for a request of a
	// model whose outputs have not been learned yet, when it sets no
	// max_tokens. Default 256.
	DefaultOutputTokens int `yaml:"default_output_tokens"`
	// RateWindow is the time constant over which each worker's rate of
	// routed prefill work is averaged; that work shares the steps of
	// every sequence decoding there. Default 10 s.
	RateWindow time.Duration `yaml:"rate_window"`

	// BlockSizes maps a served model name to its KV block size in tokens;
	// models not listed use DefaultBlockSize (default 16). They are not
	// read from the scoring section: the configuration's one place for a
	// block size is models[].block_size, which the app copies here.
	BlockSizes       map[string]int `yaml:"-"`
	DefaultBlockSize int            `yaml:"-"`

	// Prior is the step model every worker starts from before calibration.
	Prior StepModel `yaml:"prior"`
	// PriorSpread is the prior's relative standard deviation per parameter:
	// 1 means a worker 2× faster or slower than Prior is one sigma away.
	// Default 1.
	PriorSpread float64 `yaml:"prior_spread"`
	// Budget is the engine's token budget per step (max_num_batched_tokens),
	// per worker name, with DefaultBudget (default 8192) for the others.
	Budgets       map[string]int `yaml:"budgets"`
	DefaultBudget int            `yaml:"default_budget"`
	// KVBlocks gives a worker's KV cache size in blocks when the scrape
	// does not (LoadReport.KVBlocks); unknown sizes disable the
	// KV-admission wait. Default none.
	KVBlocks map[string]int `yaml:"kv_blocks"`

	// Forgetting is the calibration's forgetting factor per outcome, in
	// (0.9, 1]: the weight of an outcome n outcomes old is Forgetting^n.
	// Default 0.99.
	Forgetting float64 `yaml:"forgetting"`
	// NoiseRel is the expected relative noise of one TTFT measurement.
	// Default 0.1.
	NoiseRel float64 `yaml:"noise_rel"`
	// HuberK is the outlier threshold in robust residual scales: residuals
	// beyond it are down-weighted. Default 2.5.
	HuberK float64 `yaml:"huber_k"`

	// TieRel and TieAbs define near-equal candidates: within max(TieAbs,
	// TieRel × best) of the best predicted TTFT. Defaults 0.05 and 5 ms.
	TieRel float64       `yaml:"tie_rel"`
	TieAbs time.Duration `yaml:"tie_abs"`
	// ColdTieRel replaces TieRel when the prompt is cached on no
	// candidate: new prefixes are spread over all caches among workers
	// within this share of the best prediction. Default 0.5.
	ColdTieRel float64 `yaml:"cold_tie_rel"`

	// IdleRelax is how long a worker may go without an outcome, with
	// nothing in flight, while other workers have outcomes, before its
	// calibration restarts from the pool's typical model (the median of
	// the workers with outcomes in that time): a worker once judged slow
	// gets a request again and is measured anew, once per period. A pool
	// that is idle as a whole keeps its models. Any completed answer is an
	// outcome, streamed or not. 0 disables it. Default 30 s.
	IdleRelax time.Duration `yaml:"idle_relax"`

	// OffloadCost is the cost of one offloaded (non-GPU) cached token as a
	// fraction of computing it. Default 0.25.
	OffloadCost float64 `yaml:"offload_cost"`
	// KVHigh is the KV cache usage (0..1) above which preemption risk is
	// priced; at usage 1 the predicted time is multiplied by 1+KVPenalty.
	// Defaults 0.9 and 1.
	KVHigh    float64 `yaml:"kv_high"`
	KVPenalty float64 `yaml:"kv_penalty"`
	// DefaultUncached is the uncached tokens assumed for a request that the
	// scrape shows but warmpath did not route, until outcomes teach the
	// worker's average. Default 512.
	DefaultUncached int `yaml:"default_uncached"`

	// TextChunk is the approximate mode's text block in bytes (default 1024);
	// BytesPerToken converts bytes to estimated tokens (default 4);
	// TextHistory bounds the remembered blocks per worker (default 16384);
	// TextTTL forgets blocks not routed for that long (default 10 min).
	TextChunk     int           `yaml:"text_chunk"`
	BytesPerToken float64       `yaml:"bytes_per_token"`
	TextHistory   int           `yaml:"text_history"`
	TextTTL       time.Duration `yaml:"text_ttl"`

	// CachedGapRate is the share of requests whose predicted cached tokens
	// miss the engine's answer above which a worker's gap is reported
	// (default 0.2), once at least CachedGapMin outcomes (default 20) were seen.
	CachedGapRate float64 `yaml:"cached_gap_rate"`
	CachedGapMin  int     `yaml:"cached_gap_min"`

	// PeakPrefillRate (tokens/s, default 20000) and AffinityThreshold
	// (default 1 s) configure the affinity policy: stay on the warmest
	// worker while its in-flight uncached tokens / PeakPrefillRate stay
	// under the threshold.
	PeakPrefillRate   float64       `yaml:"peak_prefill_rate"`
	AffinityThreshold time.Duration `yaml:"affinity_threshold"`
	// OverlapWeight weighs prefill blocks against decode blocks in the
	// dynamo-cost policy. Default 1.
	OverlapWeight float64 `yaml:"overlap_weight"`
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Objective:           ObjectiveE2E,
		SlowdownWeight:      1,
		TTFTWeight:          2,
		DefaultOutputTokens: 256,
		RateWindow:          10 * time.Second,
		DefaultBlockSize:    16,
		Prior: StepModel{
			StepOverhead:    0.008,
			PrefillPerToken: 60e-6,
			DecodePerSeq:    100e-6,
			ContextPerToken: 5e-9,
			RequestOverhead: 0.005,
		},
		PriorSpread:       1,
		DefaultBudget:     8192,
		Forgetting:        0.99,
		NoiseRel:          0.1,
		HuberK:            2.5,
		TieRel:            0.05,
		TieAbs:            5 * time.Millisecond,
		ColdTieRel:        0.5,
		IdleRelax:         30 * time.Second,
		OffloadCost:       0.25,
		KVHigh:            0.9,
		KVPenalty:         1,
		DefaultUncached:   512,
		TextChunk:         1024,
		BytesPerToken:     4,
		TextHistory:       1 << 14,
		TextTTL:           10 * time.Minute,
		CachedGapRate:     0.2,
		CachedGapMin:      20,
		PeakPrefillRate:   20000,
		AffinityThreshold: time.Second,
		OverlapWeight:     1,
	}
}

// Validate reports every invalid field, joined.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, s := range c.Shadow {
		if !slices.Contains(PolicyNames(), s) {
			bad("shadow: unknown policy %q", s)
		}
	}
	switch c.Objective {
	case ObjectiveTTFT, ObjectiveE2E, ObjectiveSLO:
	default:
		bad("objective: %q is not one of %v", c.Objective, Objectives())
	}
	for m, slo := range c.SLOs {
		if slo.TTFT < 0 || slo.TPOT < 0 {
			bad("slos[%s]: targets must not be negative", m)
		}
	}
	if c.DefaultSLO.TTFT < 0 || c.DefaultSLO.TPOT < 0 {
		bad("default_slo: targets must not be negative")
	}
	if !(c.SlowdownWeight >= 0) {
		bad("slowdown_weight: %v is negative", c.SlowdownWeight)
	}
	if !(c.TTFTWeight >= 0) {
		bad("ttft_weight: %v is negative", c.TTFTWeight)
	}
	if c.DefaultOutputTokens <= 0 {
		bad("default_output_tokens: %d is not positive", c.DefaultOutputTokens)
	}
	if c.RateWindow <= 0 {
		bad("rate_window: %v is not positive", c.RateWindow)
	}
	if c.DefaultBlockSize <= 0 {
		bad("default block size: %d is not positive", c.DefaultBlockSize)
	}
	for m, b := range c.BlockSizes {
		if b <= 0 {
			bad("block size of model %s: %d is not positive", m, b)
		}
	}
	for i, v := range c.Prior.vector() {
		if !(v >= 0) {
			bad("prior: parameter %d is %v, want >= 0", i, v)
		}
	}
	if c.Prior.PrefillPerToken <= 0 {
		bad("prior.prefill_seconds_per_token: %v is not positive", c.Prior.PrefillPerToken)
	}
	if !(c.PriorSpread > 0) {
		bad("prior_spread: %v is not positive", c.PriorSpread)
	}
	if c.DefaultBudget <= 0 {
		bad("default_budget: %d is not positive", c.DefaultBudget)
	}
	for w, b := range c.Budgets {
		if b <= 0 {
			bad("budgets[%s]: %d is not positive", w, b)
		}
	}
	for w, b := range c.KVBlocks {
		if b <= 0 {
			bad("kv_blocks[%s]: %d is not positive", w, b)
		}
	}
	if !(c.Forgetting > 0.9 && c.Forgetting <= 1) {
		bad("forgetting: %v is not in (0.9, 1]", c.Forgetting)
	}
	if !(c.NoiseRel > 0) {
		bad("noise_rel: %v is not positive", c.NoiseRel)
	}
	if !(c.HuberK > 0) {
		bad("huber_k: %v is not positive", c.HuberK)
	}
	if !(c.TieRel >= 0) || c.TieAbs < 0 || !(c.ColdTieRel >= 0) {
		bad("tie_rel, tie_abs, cold_tie_rel: %v, %v, %v must not be negative", c.TieRel, c.TieAbs, c.ColdTieRel)
	}
	if c.IdleRelax < 0 {
		bad("idle_relax: %v is negative", c.IdleRelax)
	}
	if !(c.OffloadCost >= 0 && c.OffloadCost <= 1) {
		bad("offload_cost: %v is not in [0, 1]", c.OffloadCost)
	}
	if !(c.KVHigh >= 0 && c.KVHigh < 1) {
		bad("kv_high: %v is not in [0, 1)", c.KVHigh)
	}
	if !(c.KVPenalty >= 0) {
		bad("kv_penalty: %v is negative", c.KVPenalty)
	}
	if c.DefaultUncached < 0 {
		bad("default_uncached: %d is negative", c.DefaultUncached)
	}
	if c.TextChunk <= 0 || !(c.BytesPerToken > 0) || c.TextHistory <= 0 || c.TextTTL <= 0 {
		bad("text_chunk, bytes_per_token, text_history, text_ttl: must be positive")
	}
	if !(c.CachedGapRate > 0 && c.CachedGapRate <= 1) || c.CachedGapMin <= 0 {
		bad("cached_gap_rate, cached_gap_min: %v, %d out of range", c.CachedGapRate, c.CachedGapMin)
	}
	if !(c.PeakPrefillRate > 0) || c.AffinityThreshold <= 0 {
		bad("peak_prefill_rate, affinity_threshold: must be positive")
	}
	if !(c.OverlapWeight >= 0) {
		bad("overlap_weight: %v is negative", c.OverlapWeight)
	}
	return errors.Join(errs...)
}

func (c *Config) blockSize(model string) int {
	if b, ok := c.BlockSizes[model]; ok {
		return b
	}
	return c.DefaultBlockSize
}

// slo returns the targets for a request of model that asked for own:
// each target the request sets, else the model's, else the default's.
func (c *Config) slo(model string, own SLO) SLO {
	base, ok := c.SLOs[model]
	if !ok {
		base = c.DefaultSLO
	}
	if own.TTFT > 0 {
		base.TTFT = own.TTFT
	}
	if own.TPOT > 0 {
		base.TPOT = own.TPOT
	}
	return base
}

func (c *Config) budget(worker string) int {
	if b, ok := c.Budgets[worker]; ok {
		return b
	}
	return c.DefaultBudget
}
