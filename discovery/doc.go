// Package discovery owns the worker set: which vLLM servers exist, how to
// reach their HTTP, KV-event and replay endpoints, and whether they are fit
// to receive requests.
package discovery
