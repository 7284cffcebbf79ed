package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/warmpath/warmpath/e2e/envoytest"
	"github.com/warmpath/warmpath/envoy"
)

// stampedUpstream streams chunks 1 ms apart and records when each was
// written, so the client can measure each chunk's delivery latency on the
// same clock.
type stampedUpstream struct {
	srv    *httptest.Server
	chunks int
	mu     sync.Mutex
	sent   map[string]time.Time // "req/seq" → write time
}

func newStampedUpstream(b *testing.B, chunks int) *stampedUpstream {
	u := &stampedUpstream{chunks: chunks, sent: map[string]time.Time{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		id := r.Header.Get("x-bench-id")
		if r.Header.Get("x-bench-mode") == "json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":4,"completion_tokens":1}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range u.chunks {
			time.Sleep(time.Millisecond)
			u.mu.Lock()
			u.sent[id+"/"+strconv.Itoa(i)] = time.Now()
			u.mu.Unlock()
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d\"}}]}\n\n", i)
			fl.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	b.Cleanup(u.srv.Close)
	return u
}

// extProcFilter returns the ext_proc filter config inside the bootstrap.
func extProcFilter(b *testing.B, bs *bootstrapv3.Bootstrap) (*filterv3.ExternalProcessor, func()) {
	l := bs.StaticResources.Listeners[0]
	any := l.FilterChains[0].Filters[0].GetTypedConfig()
	var hcm hcmv3.HttpConnectionManager
	if err := any.UnmarshalTo(&hcm); err != nil {
		b.Fatal(err)
	}
	var ep filterv3.ExternalProcessor
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&ep); err != nil {
		b.Fatal(err)
	}
	save := func() {
		a, err := anypb.New(&ep)
		if err != nil {
			b.Fatal(err)
		}
		hcm.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}
		h, err := anypb.New(&hcm)
		if err != nil {
			b.Fatal(err)
		}
		l.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: h}
	}
	return &ep, save
}

// benchEnvoy starts Envoy from envoy/envoy.yaml pointed at warmpath with
// the response body mode set (NONE turns response watching off).
func benchEnvoy(b *testing.B, extproc string, respBody filterv3.ProcessingMode_BodySendMode) string {
	bs, err := envoy.LoadBootstrap(filepath.Join(envoytest.RepoRoot(b), "envoy/envoy.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	bs.Admin.Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	bs.StaticResources.Listeners[0].Address.GetSocketAddress().PortSpecifier = &corev3.SocketAddress_PortValue{PortValue: 0}
	host, port, _ := strings.Cut(extproc, ":")
	pn, _ := strconv.Atoi(port)
	for _, c := range bs.StaticResources.Clusters {
		if c.Name == "warmpath" {
			setEndpoint(c, host, pn)
		}
	}
	ep, save := extProcFilter(b, bs)
	ep.ProcessingMode.ResponseBodyMode = respBody
	if respBody == filterv3.ProcessingMode_NONE {
		ep.ProcessingMode.ResponseTrailerMode = filterv3.ProcessingMode_SKIP
	}
	save()
	raw, err := envoy.MarshalBootstrap(bs)
	if err != nil {
		b.Fatal(err)
	}
	e := envoytest.Start(b, raw)
	return "http://" + e.Listeners["llm_ingress"]
}

// benchWarmpath runs warmpath as in production: the warmpath policy with
// the model's tokenizer local, so no request waits on a remote /tokenize.
func benchWarmpath(b *testing.B, upstream string) *warmpathProc {
	tok := filepath.Join(envoytest.RepoRoot(b), "tokenize/testdata/models/qwen3")
	return startWarmpath(b, fmt.Sprintf(`policy: warmpath
models: [{name: m, tokenizer: %q}]
workers: [{name: w0, address: %q, models: [m]}]
log: {level: warn}
`, tok, upstream))
}

func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

// BenchmarkEnvoyResponseChunk measures what response watching adds per
// streamed chunk through real Envoy: the same SSE stream with the ext_proc
// response body mode FULL_DUPLEX_STREAMED (warmpath sees and echoes every
// chunk) and NONE (Envoy forwards chunks without warmpath). It reports the
// delivery latency per chunk, upstream write to client read.
func BenchmarkEnvoyResponseChunk(b *testing.B) {
	const chunks = 50
	up := newStampedUpstream(b, chunks)
	wp := benchWarmpath(b, strings.TrimPrefix(up.srv.URL, "http://"))
	for _, mode := range []struct {
		name string
		m    filterv3.ProcessingMode_BodySendMode
	}{{"watch=off", filterv3.ProcessingMode_NONE}, {"watch=on", filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}} {
		url := benchEnvoy(b, wp.ExtProc, mode.m)
		b.Run(mode.name, func(b *testing.B) {
			var lat []time.Duration
			n := 0
			for b.Loop() {
				n++
				id := mode.name + strconv.Itoa(n)
				req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
				req.Header.Set("x-bench-id", id)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				rd := bufio.NewReader(resp.Body)
				for i := 0; ; {
					ln, err := rd.ReadString('\n')
					if err != nil {
						break
					}
					if strings.HasPrefix(ln, "data: {") {
						now := time.Now()
						up.mu.Lock()
						sent := up.sent[id+"/"+strconv.Itoa(i)]
						up.mu.Unlock()
						lat = append(lat, now.Sub(sent))
						i++
					}
				}
				resp.Body.Close()
			}
			b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs/chunk")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs/chunk")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkEnvoyRequestRoundTrip measures a small non-streamed request
// through real Envoy with warmpath deciding (ext_proc on the request path,
// response watching on) against the same Envoy listener where the client
// hits the upstream directly (reported as direct-p50-µs): the difference is
// Envoy plus warmpath's round trip.
func BenchmarkEnvoyRequestRoundTrip(b *testing.B) {
	up := newStampedUpstream(b, 0)
	wp := benchWarmpath(b, strings.TrimPrefix(up.srv.URL, "http://"))
	url := benchEnvoy(b, wp.ExtProc, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":1}`))
		req.Header.Set("x-bench-mode", "json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")

	// The same upstream directly, for reference.
	var direct []time.Duration
	for range 200 {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", up.srv.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":1}`))
		req.Header.Set("x-bench-mode", "json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		direct = append(direct, time.Since(t0))
	}
	b.ReportMetric(float64(percentile(direct, 0.5).Microseconds()), "direct-p50-µs")
}
