package discovery

import "slices"

// Worker describes one vLLM server in the pool: where its HTTP API is, which
// model names it serves, and where its KV-cache events are published.
//
// A Worker is a value; snapshots hold copies and never mutate them after
// publication.
type Worker struct {
	// Name identifies the worker in logs, metrics and the index. Unique in a snapshot.
	Name string `yaml:"name"`
	// Address is the host:port of the worker's OpenAI-compatible HTTP server.
	Address string `yaml:"address"`
	// Models lists the served model names (what clients put in "model").
	Models []string `yaml:"models"`
	// KVEvents is the ZMQ PUB endpoint of data-parallel rank 0
	// (tcp://host:port); rank r publishes on port+r. Empty when the worker
	// publishes no KV events.
	KVEvents string `yaml:"kv_events"`
	// KVReplay is the ZMQ ROUTER replay endpoint of rank 0 (port+r for rank r).
	// Empty when replay is not offered.
	KVReplay string `yaml:"kv_replay"`
	// DataParallelSize is the number of data-parallel engine ranks behind
	// the worker's HTTP address. Zero means one.
	DataParallelSize int `yaml:"data_parallel_size"`
	// Protocol is how the worker's address speaks HTTP: "" (HTTP/1.1) or
	// ProtocolH2C (HTTP/2 over cleartext, an InferencePool's appProtocol
	// kubernetes.io/h2c); warmpath's own /health and /metrics requests use
	// it.
	Protocol string `yaml:"protocol"`
}

// ProtocolH2C is Worker.Protocol for HTTP/2 over cleartext.
const ProtocolH2C = "h2c"

// Serves reports whether w serves the model name.
func (w *Worker) Serves(model string) bool { return slices.Contains(w.Models, model) }

// Ranks returns the number of data-parallel ranks, at least one.
func (w *Worker) Ranks() int { return max(w.DataParallelSize, 1) }
