// Package oracle is the upper bound of the routing benchmark: a picker that
// sees what no production router can, the simulated workers' true prefix
// caches and queues (through the vllmsim API), and their true step-cost
// coefficients.
//
// For every candidate it takes the true cached prefix (or the prefix the
// oracle itself sent there and that is still being computed), predicts the
// prefill time from the engine's real cost model, adds the prefill work it
// has already queued on that worker, and picks the lowest predicted time to
// first token. It implements the extproc.Picker interface, so a harness runs
// it inside warmpath's own server (internal/app.ServeWithPicker) through the
// same Envoy data path as the product's policies.
//
// It lives under e2e/ because it needs the simulator: production packages
// must not import it.
package oracle
