package scoring

import (
	"fmt"
	"math"
)

// Explanation is the JSON form of a Decision, as POST /debug/lookup and
// spans show it. Durations are in milliseconds.
type Explanation struct {
	Chosen         string              `json:"chosen"`
	Policy         string              `json:"policy"`
	Mode           Mode                `json:"mode"`
	Reason         string              `json:"reason"`
	TokenizePath   string              `json:"tokenize_path"`
	TokenizeReason string              `json:"tokenize_reason,omitempty"`
	PromptTokens   int                 `json:"prompt_tokens"`
	OutputTokens   int                 `json:"output_tokens"`
	MorePrefill    int                 `json:"more_prefill_tokens,omitempty"`
	Objective      Objective           `json:"objective,omitempty"`
	SLOTTFTMs      float64             `json:"slo_ttft_ms,omitempty"`
	SLOTPOTMs      float64             `json:"slo_tpot_ms,omitempty"`
	StalePeers     int                 `json:"stale_peers,omitempty"`
	Workers        []WorkerExplanation `json:"workers"`
	Shadow         []ShadowExplanation `json:"shadow,omitempty"`
}

// WorkerExplanation is one candidate of an Explanation.
type WorkerExplanation struct {
	Name            string  `json:"name"`
	CachedTokens    int     `json:"cached_tokens"`
	OffloadedTokens int     `json:"offloaded_tokens"`
	PredictedTTFTMs float64 `json:"predicted_ttft_ms"`
	QueueWaitMs     float64 `json:"queue_wait_ms"`
	PrefillMs       float64 `json:"prefill_ms"`
	OverheadMs      float64 `json:"overhead_ms"`
	PredictedTPOTMs float64 `json:"predicted_tpot_ms"`
	PredictedE2EMs  float64 `json:"predicted_e2e_ms"`
	SlowdownMs      float64 `json:"slowdown_ms"`
	InFlight        int     `json:"in_flight"`
	WorkAhead       int     `json:"work_ahead_tokens"`
	Decoding        int     `json:"decoding"`
	KVUsage         float64 `json:"kv_usage"`
	Score           float64 `json:"score"`
}

// ShadowExplanation is one shadow pick of an Explanation.
type ShadowExplanation struct {
	Policy          string  `json:"policy"`
	Worker          string  `json:"worker"`
	PredictedTTFTMs float64 `json:"predicted_ttft_ms"`
	RegretMs        float64 `json:"regret_ms"`
}

// Explain returns the JSON-ready explanation of d.
func (d *Decision) Explain() Explanation {
	e := Explanation{
		Chosen: d.Worker, Policy: d.Policy, Mode: d.Mode, Reason: d.Reason,
		TokenizePath: d.TokenizePath, TokenizeReason: d.TokenizeReason, PromptTokens: d.PromptTokens, OutputTokens: d.OutputTokens,
		Objective: d.Objective, SLOTTFTMs: ms(d.SLO.TTFT.Seconds()), SLOTPOTMs: ms(d.SLO.TPOT.Seconds()), StalePeers: d.StalePeers,
		MorePrefill: d.MorePrefillTokens,
		Workers:     make([]WorkerExplanation, len(d.Candidates)),
	}
	for i, c := range d.Candidates {
		e.Workers[i] = WorkerExplanation{
			Name: c.Worker, CachedTokens: c.CachedTokens, OffloadedTokens: c.OffloadedTokens,
			PredictedTTFTMs: ms(c.PredictedTTFT.Seconds()), QueueWaitMs: ms(c.QueueWait.Seconds()),
			PrefillMs: ms(c.Prefill.Seconds()), OverheadMs: ms(c.Overhead.Seconds()),
			PredictedTPOTMs: ms(c.PredictedTPOT.Seconds()), PredictedE2EMs: ms(c.PredictedE2E.Seconds()), SlowdownMs: ms(c.Slowdown.Seconds()),
			InFlight: c.InFlight, WorkAhead: c.WorkAhead, Decoding: c.Decoding, KVUsage: c.KVUsage, Score: c.Score,
		}
	}
	for _, s := range d.Shadow {
		e.Shadow = append(e.Shadow, ShadowExplanation{Policy: s.Policy, Worker: s.Worker,
			PredictedTTFTMs: ms(s.PredictedTTFT.Seconds()), RegretMs: ms(s.Regret.Seconds())})
	}
	return e
}

// Header returns a one-line summary of d for a debug response header, such
// as "w1; policy=warmpath; mode=exact; cached=624; ttft_ms=312.5; tpot_ms=21.3".
func (d *Decision) Header() string {
	return fmt.Sprintf("%s; policy=%s; mode=%s; cached=%d; ttft_ms=%.1f; tpot_ms=%.1f",
		d.Worker, d.Policy, d.Mode, d.Chosen.CachedTokens, ms(d.Chosen.PredictedTTFT.Seconds()), ms(d.Chosen.PredictedTPOT.Seconds()))
}

// ms converts seconds to milliseconds rounded to microseconds.
func ms(s float64) float64 { return math.Round(s*1e6) / 1e3 }
