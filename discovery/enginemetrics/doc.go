// Package enginemetrics reads the load of a vLLM server from its /metrics
// exposition: running and waiting requests, KV-cache usage, prefix-cache
// and preemption counters, LoRA state and the cache configuration
// (vllm:cache_config_info). It knows the current metric names and the
// older ones vLLM used before 0.10, and sums or averages over the engines
// of a data-parallel server.
//
// Input comes from the network and is untrusted: Parse never panics and
// returns errors wrapping ErrMalformed, ErrNotEngine or ErrInvalidValue.
// The package has no dependency beyond the Prometheus text parser, so it
// fuzzes fast (go test -fuzz FuzzParse ./discovery/enginemetrics).
package enginemetrics
