package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/e2e/vllmsim"
)

// engine is one fake vLLM worker as warmpath sees it: a /metrics and
// /health HTTP server whose gauges follow the requests the driver is
// playing on it, and a KV-event publisher (ZeroMQ PUB, bound as vLLM binds
// it) whose events say what the driver decided the engine stored and
// evicted. It runs no model: the driver plays the responses.
type engine struct {
	name    string
	http    *http.Server
	addr    string // host:port of the HTTP server
	events  string // the PUB endpoint warmpath connects to
	running atomic.Int64
	usage   atomic.Uint64 // float64 bits of kv_cache_usage_perc

	pub *vllmsim.EventPublisher

	mu     sync.Mutex
	held   map[vllmsim.BlockHash]bool
	groups [][]vllmsim.BlockHash // stored blocks, oldest first, by the request that stored them
	nHeld  int                   // blocks in groups
	cap    int                   // blocks held before the oldest group is evicted
}

func startEngine(ctx context.Context, name string, capBlocks int) (*engine, error) {
	e := &engine{name: name, held: map[vllmsim.BlockHash]bool{}, cap: capBlocks}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.addr = lis.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", e.serveMetrics)
	e.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = e.http.Serve(lis) }()

	pub, err := vllmsim.NewEventPublisher("kv-events")
	if err != nil {
		_ = e.http.Close()
		return nil, err
	}
	e.events, e.pub = pub.Endpoint(), pub
	go pub.Run(ctx)
	return e, nil
}

func (e *engine) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	lbl := `{engine="0",model_name="qwen3"}`
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %d\n", lbl, e.running.Load())
	fmt.Fprintf(&b, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s 0\n", lbl)
	fmt.Fprintf(&b, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s %g\n", lbl, math.Float64frombits(e.usage.Load()))
	b.WriteString("# TYPE vllm:cache_config_info gauge\n" +
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",num_gpu_blocks="40000",prefix_caching_hash_algo="sha256_cbor",engine="0"} 1` + "\n")
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_, _ = w.Write([]byte(b.String()))
}

// cached returns how many leading blocks of hashes the engine holds.
func (e *engine) cached(hashes []vllmsim.BlockHash) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for n < len(hashes) && e.held[hashes[n]] {
		n++
	}
	return n
}

// store publishes what the engine caches when it prefills a prompt whose
// full blocks are hashes: the blocks it did not hold, chained to those it
// did, and the eviction of its oldest stored blocks beyond its capacity.
// Pinned blocks (a family's prefix stored before the run) are never
// evicted: they stand for the hot prefixes an LRU keeps.
func (e *engine) store(hashes []vllmsim.BlockHash, tokens []uint32, pinned bool) {
	e.mu.Lock()
	from := 0
	for from < len(hashes) && e.held[hashes[from]] {
		from++
	}
	stored := hashes[from:]
	for _, h := range stored {
		e.held[h] = true
	}
	var evict []vllmsim.BlockHash
	if !pinned && len(stored) > 0 {
		e.groups = append(e.groups, stored)
		e.nHeld += len(stored)
		for e.nHeld > e.cap && len(e.groups) > 1 {
			for _, h := range e.groups[0] {
				delete(e.held, h)
			}
			evict = append(evict, e.groups[0]...)
			e.nHeld -= len(e.groups[0])
			e.groups = e.groups[1:]
		}
	}
	e.usage.Store(math.Float64bits(min(0.95, float64(e.nHeld)/float64(e.cap))))
	e.mu.Unlock()

	var evs []vllmsim.Event
	if len(stored) > 0 {
		ev := vllmsim.Event{Kind: vllmsim.BlockStored, Hashes: stored, Tokens: tokens[from*16 : len(hashes)*16], BlockSize: 16}
		if from > 0 {
			ev.Parent, ev.HasParent = hashes[from-1], true
		}
		evs = append(evs, ev)
	}
	if len(evict) > 0 {
		evs = append(evs, vllmsim.Event{Kind: vllmsim.BlockRemoved, Hashes: evict})
	}
	if len(evs) > 0 {
		e.send(evs)
	}
}

func (e *engine) send(evs []vllmsim.Event) {
	b := vllmsim.AppendBatch(nil, &vllmsim.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: evs}, vllmsim.WireMap, false)
	e.pub.Publish(b)
}

func (e *engine) close() { _ = e.http.Close() }
