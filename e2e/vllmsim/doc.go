// Package vllmsim simulates vLLM v1 engines faithfully enough to judge
// request routing: continuous batching with chunked prefill under a token
// budget, a prefix cache of chained sha256_cbor block hashes with reference
// counts and LRU eviction, FCFS queueing and preemption, and the external
// surfaces a router sees — the OpenAI/Anthropic HTTP API with vLLM's SSE
// shapes and usage, KV-cache events over ZeroMQ with vLLM's framing and
// replay, and Prometheus metrics with vLLM's names.
//
// An [Engine] is the deterministic core of one engine (one data-parallel
// rank): given the same arrivals it makes the same decisions, so a
// [Cluster] can replay a workload on a virtual clock in seconds, and a
// [Server] runs the same engines on a scaled wall clock behind HTTP.
//
// The step time is a + b·(prefill tokens) + c·(decoding sequences) +
// d·(context tokens read); [Profiles] bundles realistic coefficients.
// Run the command with
//
//	go run ./e2e/cmd/vllm-sim --port 8000 --profile l40s-27b-fp8 --time-scale 20 \
//	    --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv-events"}'
//
// or in-process: NewServer with Config.Port 0 and endpoints "tcp://*:0",
// then read back Server.HTTPAddr, KVEventsEndpoints and ReplayEndpoints
// (or Server.Worker for a discovery.Worker). Server.State, CachedPrefix
// and CachedHashes give an oracle the true queues and cache contents.
//
// Latency metrics and engine timestamps are in simulated time; at
// --time-scale 1 they equal wall time.
//
// The package is test tooling: production packages must not import it.
package vllmsim
