package scoring

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Objective names what the warmpath policy minimises (Config.Objective).
type Objective string

// The objectives.
const (
	// ObjectiveTTFT picks the lowest predicted time to first token.
	ObjectiveTTFT Objective = "ttft"
	// ObjectiveE2E picks the lowest predicted cost of the whole response:
	// its time to the last token, its time to first token again,
	// TTFTWeight times, and, weighted by SlowdownWeight, the time it adds
	// to the responses decoding on the worker.
	ObjectiveE2E Objective = "e2e"
	// ObjectiveSLO picks, among the candidates predicted to meet the
	// request's TTFT and TPOT targets, the one with the most headroom;
	// when none meets them, the least bad. A request without targets is
	// decided as under e2e.
	ObjectiveSLO Objective = "slo"
)

// Objectives returns the objective names Config.Objective accepts.
func Objectives() []Objective { return []Objective{ObjectiveTTFT, ObjectiveE2E, ObjectiveSLO} }

// SLO is a request's latency targets; a zero field sets none.
type SLO struct {
	// TTFT is the target time to first token, TPOT the target time per
	// output token after it.
	TTFT time.Duration `yaml:"ttft"`
	TPOT time.Duration `yaml:"tpot"`
}

// set reports whether s sets any target.
func (s SLO) set() bool { return s.TTFT > 0 || s.TPOT > 0 }

func (s SLO) String() string {
	var parts []string
	if s.TTFT > 0 {
		parts = append(parts, "ttft "+s.TTFT.String())
	}
	if s.TPOT > 0 {
		parts = append(parts, "tpot "+s.TPOT.String())
	}
	return strings.Join(parts, ", ")
}

// Met reports whether a time to first token and a time per output token
// meet s's targets; a zero time is unknown and meets any target.
func (s SLO) Met(ttft, tpot time.Duration) bool {
	return (s.TTFT <= 0 || ttft <= s.TTFT) && (s.TPOT <= 0 || tpot <= s.TPOT)
}

// ratio is the worst of c's predictions against s's targets, as a share
// of the target: at most 1 when c meets them all; 1 − ratio is c's
// headroom.
func (s SLO) ratio(c *Candidate) float64 {
	r := 0.0
	if s.TTFT > 0 {
		r = max(r, c.PredictedTTFT.Seconds()/s.TTFT.Seconds())
	}
	if s.TPOT > 0 {
		r = max(r, c.PredictedTPOT.Seconds()/s.TPOT.Seconds())
	}
	return r
}

// warmpathPolicy picks the candidate with the lowest cost under the
// configured objective. Near-equal candidates (within TieAbs or TieRel of
// the best cost) are broken towards the one with the fewest requests in
// flight, which spreads a burst instead of herding it.
//
// A prompt cached nowhere is a new prefix: where it lands is where its
// later requests will find it warm. Sending every new prefix to the
// fastest worker would crowd its cache while the others' sit unused, so
// for those the near-equal band is ColdTieRel wide.
type warmpathPolicy struct{}

func (warmpathPolicy) choose(v *view, score []float64) (int, string) {
	switch v.cfg.Objective {
	case ObjectiveTTFT:
		for i := range v.cands {
			score[i] = v.cands[i].PredictedTTFT.Seconds()
		}
		return banded(v, score, "predicted TTFT", func(c *Candidate, _ float64) string {
			return fmt.Sprintf("wait %.3fs + prefill %.3fs, %d cached", c.QueueWait.Seconds(), c.Prefill.Seconds(), c.CachedTokens)
		})
	case ObjectiveSLO:
		if v.slo.set() {
			return chooseSLO(v, score)
		}
		i, why := chooseE2E(v, score)
		return i, "no SLO for the request or its model: " + why
	}
	return chooseE2E(v, score)
}

// chooseE2E scores each candidate by its predicted E2E and the slowdown
// it imposes, weighted by SlowdownWeight, which also weighs what the pick
// costs the cache: prefilling a prefix another candidate holds writes a
// second copy over blocks the worker held for other prompts, which later
// requests will compute again in the measure the workload comes back for
// what caches hold (view.reuse). With no reuse (independent prompts) that
// costs nothing; with much, a decode a little faster elsewhere no longer
// outweighs the cache hit it gives up.
//
// TTFTWeight counts the request's own first token again. Where the
// fastest worker is wanted by every request, whole-response costs come out
// near equal, and which request takes its capacity changes little in sum;
// the first token, mostly whether the prefix is cached, then decides.
func chooseE2E(v *view, score []float64) (int, string) {
	for i := range v.cands {
		c := &v.cands[i]
		evicts := v.reuse * v.models[i].PrefillPerToken * max(v.uncached[i]-v.fewest, 0)
		score[i] = c.PredictedE2E.Seconds() + v.cfg.TTFTWeight*c.PredictedTTFT.Seconds() + v.cfg.SlowdownWeight*(c.Slowdown.Seconds()+evicts)
	}
	return banded(v, score, "predicted cost", func(c *Candidate, _ float64) string {
		return fmt.Sprintf("TTFT %.3fs (wait %.3fs + prefill %.3fs, %d cached), then %d tokens at %.1f ms, adding %.3fs to %d decoding there",
			c.PredictedTTFT.Seconds(), c.QueueWait.Seconds(), c.Prefill.Seconds(), c.CachedTokens,
			int(math.Round(v.out)), 1e3*c.PredictedTPOT.Seconds(), c.Slowdown.Seconds(), c.Decoding)
	})
}

// banded picks the lowest score, breaking near-equal ones towards the
// fewest in flight (see warmpathPolicy); what names the score and why
// describes the pick. The band is a share of the lowest predicted TTFT
// whatever the score: the time a whole response takes is common to every
// candidate, and a band relative to it would tie away every cache hit.
func banded(v *view, score []float64, what string, why func(*Candidate, float64) string) (int, string) {
	best, ttft := math.Inf(1), math.Inf(1)
	cold := true
	for i, c := range v.cands {
		best = math.Min(best, score[i])
		ttft = math.Min(ttft, c.PredictedTTFT.Seconds())
		cold = cold && c.CachedTokens == 0
	}
	rel := v.cfg.TieRel
	if cold {
		rel = v.cfg.ColdTieRel
	}
	tol := math.Max(v.cfg.TieAbs.Seconds(), rel*ttft)
	i, near := lowest(v, score, tol)
	c := &v.cands[i]
	switch {
	case near == 1:
		return i, fmt.Sprintf("lowest %s %.3fs: %s", what, score[i], why(c, score[i]))
	case cold:
		return i, fmt.Sprintf("prefix cached nowhere: %d candidates within %.3fs of the lowest %s %.3fs; fewest in flight (%d) wins, spreading new prefixes over the caches: %s",
			near, tol, what, best, v.busy(i), why(c, score[i]))
	}
	return i, fmt.Sprintf("%d candidates within %.3fs of the lowest %s %.3fs; fewest in flight (%d) wins: %s",
		near, tol, what, best, v.busy(i), why(c, score[i]))
}

// chooseSLO picks the candidate whose predictions have the most headroom
// against the request's targets; when none meets them, the one that
// misses them least.
func chooseSLO(v *view, score []float64) (int, string) {
	met := 0
	for i := range v.cands {
		score[i] = v.slo.ratio(&v.cands[i])
		if score[i] <= 1 {
			met++
		}
	}
	i, _ := lowest(v, score, v.cfg.TieRel)
	c := &v.cands[i]
	pred := fmt.Sprintf("TTFT %.3fs, TPOT %.1f ms", c.PredictedTTFT.Seconds(), 1e3*c.PredictedTPOT.Seconds())
	if met == 0 {
		return i, fmt.Sprintf("SLO missed: no candidate is predicted to meet %s; least bad at %.2f× the target: %s", v.slo, score[i], pred)
	}
	return i, fmt.Sprintf("%d of %d candidates predicted to meet %s; most headroom (%.0f%%): %s",
		met, len(v.cands), v.slo, 100*(1-score[i]), pred)
}
