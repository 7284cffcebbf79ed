// Package scoring decides which worker serves a request. Its unit is
// seconds of predicted time to first token, never a unitless weight: every
// decision can be explained as numbers.
//
// A Router (see New) is the picker the ext_proc layer calls. It is a
// façade over rooms, each in its own file, that a decision passes through
// in order:
//
//   - Gathering (gather.go, sources.go, text.go) reads what is known before
//     the router's lock is taken, from most to least informed: exact token
//     ids (from the client, or through TokenSource: a local tokenizer or a
//     candidate worker's /tokenize) and each worker's cached prefix from the
//     KV index (PrefixIndex); or, without tokens, warmpath's own history of
//     which chunks of the prompt's text it routed where (approximate mode);
//     or nothing but load (load-only mode). The mode and the reason for
//     each step down are put on the Decision. It also reads every
//     candidate's scraped engine load (EngineLoad).
//   - Prediction (predict.go, model.go) prices the request on every
//     candidate with that worker's step model and its load.
//   - The policy (policy.go) chooses; shadow policies choose too, on the
//     same view, without effect.
//   - The ledger (ledger.go) is the one record of what is in flight: the
//     chosen worker's reservation, from Pick to Done.
//   - Learning (learn.go, calibrate.go, gap.go) takes what each outcome
//     teaches; a run of outliers restarts a worker's fit only when the
//     engine's own first-token figures corroborate it (corroborate.go).
//   - Metrics (metrics.go) are what only the router knows; decisions and
//     outcomes themselves are observed by the ext_proc layer, for every
//     picker alike.
//
// The TTFT model predicts, per candidate, the wait before the request's
// prefill starts (the prefill work of warmpath's own in-flight assignments
// on that worker, reconciled with the scraped vllm:num_requests_running and
// _waiting through EngineLoad, under a chunked-prefill step budget with
// running decodes served first), the time to prefill its uncached tokens
// and a fixed overhead, priced with a per-worker StepModel. Each completed
// request's actual TTFT and cached_tokens calibrate that worker's model
// online (a robust least-squares fit with forgetting, bounded below and
// regularised towards a configured prior), so heterogeneous pools are
// learned without being described. The cached-token prediction is checked
// against the engine's answer and a persistent gap is reported.
//
// The decode model (decode.go) predicts, per candidate, the time per
// output token the request will get and the time it adds to the responses
// decoding there, from a per-worker decode step model fitted to each
// watched response's inter-token time and the prefill routed to the worker
// lately. A decision reports the typical (median) time per output token,
// what a response of few tokens beside rare long prompts most likely sees,
// and counts the expected one in its predicted end to end.
//
// Load is reserved at decision time (so a concurrent burst sees it) and
// released by Done. Callers that see the response stream should call
// FirstToken at the first content chunk: from then on the prefill work
// ahead on a worker is what is really still prefilling.
//
// The deciding policy is warmpath's own (the lowest predicted cost under
// the configured Objective: TTFT, the whole response, or the request's
// latency targets; with an explained load-spreading tie-break, wider for
// prefixes cached nowhere so that new prefixes spread over all caches) or
// a baseline chosen by name: random, round-robin, least-request,
// prefix-max, affinity (llm-d style affinity until saturated) and
// dynamo-cost. All go through the same data
// path and reservation, and any of them can run in shadow on every request
// to measure predicted regret without changing the decision.
//
// For harnesses and the admin endpoint, Predict is the read-only form of
// Pick, Decision.Explain its JSON form and Model a worker's calibrated
// step model.
package scoring
