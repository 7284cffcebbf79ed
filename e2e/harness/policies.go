package harness

import (
	"github.com/warmpath/warmpath/e2e/oracle"
	"github.com/warmpath/warmpath/extproc"
)

// ProductPolicies are warmpath's configurable policies, in report order.
var ProductPolicies = []string{"warmpath", "random", "round-robin", "least-request", "prefix-max", "affinity", "dynamo-cost"}

// Policies returns a Policy per name; "oracle" is the e2e/oracle picker
// over the stack's simulators, every other name is warmpath's config policy.
func Policies(names ...string) []Policy {
	out := make([]Policy, len(names))
	for i, n := range names {
		out[i] = Policy{Name: n}
		if n == "oracle" {
			out[i].Picker = OraclePicker
		}
	}
	return out
}

// OraclePicker builds the oracle over a stack's simulators.
func OraclePicker(sims []Sim, timeScale float64) extproc.Picker {
	ts := make([]oracle.Target, len(sims))
	for i, s := range sims {
		ts[i] = oracle.Target{Name: s.Name, Server: s.Server, Engine: s.Engine}
	}
	return oracle.New(ts, timeScale)
}
