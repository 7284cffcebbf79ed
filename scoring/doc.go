// Package scoring decides which worker serves a request. Its unit is
// seconds of predicted time to first token, never a unitless weight: every
// decision can be explained as numbers. It holds warmpath's TTFT model, its
// online calibration, the load reservation, the degraded fallbacks and the
// baseline policies used for comparison.
package scoring
