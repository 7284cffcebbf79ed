package eppconformance

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Response headers every backend sets, read by the cases.
const (
	hdrBackend     = "x-conformance-backend"      // the backend's own ip:port
	hdrReceivedDst = "x-conformance-received-dst" // the destination header it received
	hdrBodySHA     = "x-conformance-body-sha256"  // of the request body it read
	hdrBodyLen     = "x-conformance-body-len"
	// Request headers a case may set to steer a backend.
	hdrSlow     = "x-conformance-slow"     // stream this many SSE chunks, 50 ms apart
	hdrTrailers = "x-conformance-trailers" // answer with trailers
	// Trailers.
	trlBackend = "x-conformance-backend-trailer"
	trlEcho    = "x-conformance-echo-trailer" // the request trailer x-conformance-request-trailer
	trlRequest = "x-conformance-request-trailer"
)

// Pool is the set of fake model servers the picker under test picks from,
// plus a canary: a server on an address no picker knows, which no request
// may ever reach (a client that sets the destination header itself would
// send it there). Each backend answers OpenAI chat and completions
// requests (SSE when "stream" is true, JSON otherwise) and reports, in
// response headers, who it is, which destination header it received and a
// digest of the body it read; it also serves /health, /v1/models and
// vLLM-style /metrics, so a picker that probes its workers finds them
// healthy and idle. A Pool is safe for concurrent use.
type Pool struct {
	// Endpoints are the backends' ip:port, in order.
	Endpoints []string
	// Canary is the canary's ip:port.
	Canary string

	backends []*backend
	canary   *backend
}

// StartPool serves a backend on each address (host:port; port 0 picks a
// free one) and a canary on a free loopback port.
func StartPool(addrs []string) (*Pool, error) {
	p := &Pool{}
	for _, a := range append(addrs, "127.0.0.1:0") {
		b, err := startBackend(a)
		if err != nil {
			p.Close()
			return nil, err
		}
		if len(p.backends) < len(addrs) {
			p.backends = append(p.backends, b)
			p.Endpoints = append(p.Endpoints, b.addr)
		} else {
			p.canary, p.Canary = b, b.addr
		}
	}
	return p, nil
}

// Close stops every server.
func (p *Pool) Close() {
	for _, b := range p.backends {
		b.close()
	}
	if p.canary != nil {
		p.canary.close()
	}
}

// backend returns the backend serving endpoint ep, or nil.
func (p *Pool) backend(ep string) *backend {
	for _, b := range p.backends {
		if b.addr == ep {
			return b
		}
	}
	return nil
}

// canaryHits is how many inference requests reached the canary.
func (p *Pool) canaryHits() int64 { return p.canary.hits.Load() }

// backend is one fake model server.
type backend struct {
	addr string
	srv  *http.Server
	done chan struct{}
	// hits counts inference requests answered (refused ones included).
	hits atomic.Int64
	// refusing makes inference requests fail with 503 (probes still
	// pass), so the proxy retries elsewhere; refused counts them and
	// refusedDst keeps the destination header of the last one.
	refusing   atomic.Bool
	refused    atomic.Int64
	mu         sync.Mutex
	refusedDst string
}

func startBackend(addr string) (*backend, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", addr, err)
	}
	b := &backend{addr: lis.Addr().String(), done: make(chan struct{})}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true) // the h2c listener's upstream
	b.srv = &http.Server{Handler: b, Protocols: &protos, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(b.done)
		_ = b.srv.Serve(lis)
	}()
	return b, nil
}

func (b *backend) close() {
	_ = b.srv.Close()
	<-b.done
}

// lastRefused returns the destination header of the last refused request.
func (b *backend) lastRefused() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refusedDst
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for _, m := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} {
			fmt.Fprintf(w, "# TYPE %s gauge\n%s{model_name=%q} 0\n", m, m, model)
		}
		return
	case "/tokenize": // vLLM's: a token per 4 bytes of the request, at most 4096
		n, _ := io.Copy(io.Discard, r.Body)
		ids := make([]int, min(max(n/4, 1), 4096))
		for i := range ids {
			ids[i] = 1 + i%50000
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 1 << 20, "tokens": ids})
		return
	case "/v1/models":
		w.Header().Set(hdrBackend, b.addr)
		w.Header().Set(hdrReceivedDst, r.Header.Get(destinationHeader))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, model)
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	b.hits.Add(1)
	h := sha256.New()
	n, err := io.Copy(h, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if b.refusing.Load() {
		b.refused.Add(1)
		b.mu.Lock()
		b.refusedDst = r.Header.Get(destinationHeader)
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"message":"refusing","type":"ServiceUnavailableError","code":503}}`)
		return
	}
	hd := w.Header()
	hd.Set(hdrBackend, b.addr)
	hd.Set(hdrReceivedDst, r.Header.Get(destinationHeader))
	hd.Set(hdrBodySHA, hex.EncodeToString(h.Sum(nil)))
	hd.Set(hdrBodyLen, strconv.FormatInt(n, 10))
	trailers := r.Header.Get(hdrTrailers) != ""
	if trailers {
		hd.Set("Trailer", trlBackend+", "+trlEcho)
	}
	chunks, _ := strconv.Atoi(r.Header.Get(hdrSlow))
	if wantsStream(r) {
		hd.Set("Content-Type", "text/event-stream")
		f, _ := w.(http.Flusher)
		for i, c := range sseChunks(max(chunks, 3)) {
			if chunks > 0 && i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := io.WriteString(w, c); err != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
	} else {
		hd.Set("Content-Type", "application/json")
		io.WriteString(w, jsonResponse)
	}
	if trailers {
		hd.Set(trlBackend, "done")
		hd.Set(trlEcho, r.Trailer.Get(trlRequest))
	}
}

// wantsStream reads the stream flag of the request; the body was consumed,
// so a case that wants SSE says so in the query (?stream=1) as well.
func wantsStream(r *http.Request) bool { return r.URL.Query().Get("stream") == "1" }

// model is the served model name of the pool.
const model = "conformance-model"

// destinationHeader is the Endpoint Picker protocol's destination header.
const destinationHeader = "x-gateway-destination-endpoint"

const jsonResponse = `{"id":"c1","object":"chat.completion","model":"` + model + `","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`

// sseChunks is a streamed chat response of n content chunks, the usage
// chunk and [DONE]: what every streamed case expects byte for byte.
func sseChunks(n int) []string {
	var out []string
	for i := range n {
		c, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "tok" + strconv.Itoa(i)}}}})
		out = append(out, "data: "+string(c)+"\n\n")
	}
	out = append(out, `data: {"id":"c1","object":"chat.completion.chunk","model":"`+model+`","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":`+strconv.Itoa(n)+`,"total_tokens":`+strconv.Itoa(7+n)+`}}`+"\n\n",
		"data: [DONE]\n\n")
	return out
}

// sseBody is sseChunks joined.
func sseBody(n int) string { return strings.Join(sseChunks(n), "") }
