package harness

import (
	"slices"
	"strings"
	"time"

	"github.com/warmpath/warmpath/e2e/oracle"
	"github.com/warmpath/warmpath/extproc"
	"github.com/warmpath/warmpath/internal/app"
	"github.com/warmpath/warmpath/scoring"
)

// ProductPolicies are warmpath's configurable policies, in report order.
var ProductPolicies = []string{"warmpath", "random", "round-robin", "least-request", "prefix-max", "affinity", "dynamo-cost"}

// Policies returns a Policy per name; "oracle" is the e2e/oracle picker
// over the stack's simulators, "warmpath-<objective>" (warmpath-ttft,
// warmpath-e2e, warmpath-slo) the warmpath policy under that objective,
// every other name warmpath's config policy as configured by default.
func Policies(names ...string) []Policy {
	out := make([]Policy, len(names))
	for i, n := range names {
		out[i] = Policy{Name: n}
		switch obj, ok := objectiveOf(n); {
		case n == "oracle":
			out[i].Picker = OraclePicker
		case ok:
			out[i] = Policy{Name: scoring.PolicyWarmpath, Label: n, Config: func(c *app.Config, _ float64) { c.Scoring.Objective = obj }}
		}
	}
	return out
}

// objectiveOf returns the objective a warmpath-<objective> name selects.
func objectiveOf(name string) (scoring.Objective, bool) {
	o, ok := strings.CutPrefix(name, scoring.PolicyWarmpath+"-")
	obj := scoring.Objective(o)
	return obj, ok && slices.Contains(scoring.Objectives(), obj)
}

// IsPolicy reports whether Policies understands name.
func IsPolicy(name string) bool {
	_, ok := objectiveOf(name)
	return ok || name == "oracle" || slices.Contains(scoring.PolicyNames(), name)
}

// WithTargets returns p with the slo objective's default targets set to
// slo, in simulated time: warmpath, on the wall clock, gets them divided
// by the time scale.
func WithTargets(p Policy, slo scoring.SLO) Policy {
	inner := p.Config
	p.Config = func(c *app.Config, timeScale float64) {
		if inner != nil {
			inner(c, timeScale)
		}
		c.Scoring.DefaultSLO = scoring.SLO{TTFT: time.Duration(float64(slo.TTFT) / timeScale), TPOT: time.Duration(float64(slo.TPOT) / timeScale)}
	}
	return p
}

// OraclePicker builds the oracle over a stack's simulators.
func OraclePicker(sims []Sim, timeScale float64) extproc.Picker {
	ts := make([]oracle.Target, len(sims))
	for i, s := range sims {
		ts[i] = oracle.Target{Name: s.Name, Server: s.Server, Engine: s.Engine}
	}
	return oracle.New(ts, timeScale)
}
