package scoring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Policy names accepted by New and Config.Shadow.
const (
	PolicyWarmpath     = "warmpath"
	PolicyRandom       = "random"
	PolicyRoundRobin   = "round-robin"
	PolicyLeastRequest = "least-request"
	PolicyPrefixMax    = "prefix-max"
	PolicyAffinity     = "affinity"
	PolicyDynamoCost   = "dynamo-cost"
)

// view is what every policy sees of one request: the candidates with the
// TTFT model's predictions filled in, and each worker's load. Policies read
// it and never change it.
type view struct {
	cfg       *Config
	cands     []Candidate
	loads     []ledgerLoad
	uncached  []float64       // the request's own uncached tokens per candidate
	factor    []float64       // KV-pressure multiplier per candidate
	work      []workload      // the TTFT model's input per candidate
	kvWait    []time.Duration // predicted wait for KV blocks per candidate
	models    []StepModel     // each candidate's calibrated step model
	prompt    int
	out       float64 // the request's expected output tokens
	slo       SLO     // the request's targets under the slo objective
	blockSize int
	// reuse is the share of prompt tokens recent requests found cached on
	// their best candidate (see predictor.reuse); fewest the fewest
	// uncached tokens any candidate of this request has.
	reuse, fewest float64
	// seq numbers committed decisions; it rotates tie-breaks.
	seq uint64
}

// policy chooses one candidate of a view. The router reuses a view's
// storage for the next decision, so a policy keeps nothing of it. choose writes each candidate's
// figure of merit (lower is better) to score, which has one slot per
// candidate, and returns the chosen index and a short reason. A policy is
// called with the router's mutex held and may keep state of its own.
type policy interface {
	choose(v *view, score []float64) (int, string)
}

// policyTable returns a fresh constructor table. It is built as a value on
// each call: there is no global registry.
func policyTable() map[string]func(seed uint64) policy {
	return map[string]func(uint64) policy{
		PolicyWarmpath:     func(uint64) policy { return warmpathPolicy{} },
		PolicyRandom:       func(s uint64) policy { return &randomPolicy{rng: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))} },
		PolicyRoundRobin:   func(uint64) policy { return roundRobinPolicy{} },
		PolicyLeastRequest: func(uint64) policy { return leastRequestPolicy{} },
		PolicyPrefixMax:    func(uint64) policy { return prefixMaxPolicy{} },
		PolicyAffinity:     func(uint64) policy { return affinityPolicy{} },
		PolicyDynamoCost:   func(uint64) policy { return dynamoCostPolicy{} },
	}
}

// PolicyNames returns the names New accepts, sorted.
func PolicyNames() []string {
	var names []string
	for n := range policyTable() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// busy is a candidate's in-flight count as the load-spreading tie-break
// sees it: warmpath's own assignments plus those only the scrape shows.
func (v *view) busy(i int) int { return v.loads[i].inflight + v.loads[i].extra }

// lowest returns the candidate with the lowest score; candidates within tol
// of it are near-equal and the one with the fewest requests in flight wins
// among them, then the next in turn after the previous decision. It also
// returns how many were near-equal.
func lowest(v *view, score []float64, tol float64) (best, near int) {
	lo := math.Inf(1)
	for _, s := range score {
		lo = math.Min(lo, s)
	}
	n := len(score)
	best = -1
	for k := range n {
		i := (k + int(v.seq%uint64(n))) % n
		if score[i] > lo+tol {
			continue
		}
		near++
		if best < 0 || v.busy(i) < v.busy(best) {
			best = i
		}
	}
	return best, near
}

type randomPolicy struct{ rng *rand.Rand }

func (p *randomPolicy) choose(v *view, score []float64) (int, string) {
	clear(score)
	return p.rng.IntN(len(v.cands)), "uniformly at random"
}

type roundRobinPolicy struct{}

func (roundRobinPolicy) choose(v *view, score []float64) (int, string) {
	clear(score)
	return int(v.seq % uint64(len(v.cands))), "next in turn"
}

type leastRequestPolicy struct{}

func (leastRequestPolicy) choose(v *view, score []float64) (int, string) {
	for i := range v.cands {
		score[i] = float64(v.busy(i))
	}
	i, _ := lowest(v, score, 0)
	return i, fmt.Sprintf("fewest requests in flight (%d)", v.busy(i))
}

// prefixMaxPolicy picks the longest cached prefix, whatever the load; ties
// go to the least busy.
type prefixMaxPolicy struct{}

func (prefixMaxPolicy) choose(v *view, score []float64) (int, string) {
	for i, c := range v.cands {
		score[i] = -float64(c.CachedTokens)
	}
	i, _ := lowest(v, score, 0)
	return i, fmt.Sprintf("longest cached prefix (%d tokens)", v.cands[i].CachedTokens)
}

// affinityPolicy stays on the warmest worker until it is saturated: its
// estimated TTFT penalty, in-flight uncached tokens over the configured peak
// prefill rate, passes the threshold (llm-d's default scheduling). When all
// are saturated the least penalised wins.
type affinityPolicy struct{}

func (affinityPolicy) choose(v *view, score []float64) (int, string) {
	limit := v.cfg.AffinityThreshold.Seconds()
	anyOK := false
	for i := range v.cands {
		if v.loads[i].pendingUncached/v.cfg.PeakPrefillRate <= limit {
			anyOK = true
		}
	}
	for i, c := range v.cands {
		pen := v.loads[i].pendingUncached / v.cfg.PeakPrefillRate
		switch {
		case !anyOK:
			score[i] = pen
		case pen <= limit:
			score[i] = -float64(c.CachedTokens)
		default:
			score[i] = math.Inf(1)
		}
	}
	i, _ := lowest(v, score, 0)
	pen := v.loads[i].pendingUncached / v.cfg.PeakPrefillRate
	if !anyOK {
		return i, fmt.Sprintf("all saturated; least penalty %.3fs", pen)
	}
	return i, fmt.Sprintf("warmest unsaturated (%d cached, penalty %.3fs ≤ %.3fs)", v.cands[i].CachedTokens, pen, limit)
}

// dynamoCostPolicy minimises OverlapWeight × prefill blocks (the request's
// uncached blocks plus those waiting on the worker) + decode blocks (KV
// blocks held by the worker's requests plus the request's own), as Dynamo's
// KV router does.
type dynamoCostPolicy struct{}

func (dynamoCostPolicy) choose(v *view, score []float64) (int, string) {
	bs := float64(v.blockSize)
	own := math.Ceil(float64(v.prompt) / bs)
	for i := range v.cands {
		prefill := math.Ceil(v.uncached[i]/bs) + v.loads[i].pendingUncached/bs
		decode := float64(v.loads[i].blocks) + own
		score[i] = v.cfg.OverlapWeight*prefill + decode
	}
	i, _ := lowest(v, score, 0)
	return i, fmt.Sprintf("lowest block cost %.0f", score[i])
}
