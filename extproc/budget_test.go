package extproc

import (
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBudget(t *testing.T) {
	t.Parallel()
	b := budget{limit: 100}
	var h1, h2 holding
	if !h1.grow(&b, 60) || !h1.grow(&b, 40) || h1.grow(&b, 101) || b.held.Load() != 60 {
		t.Fatalf("held %d, holding %d: a holding grows to its capacity, never past the limit", b.held.Load(), h1.n)
	}
	if h2.grow(&b, 41) || !h2.grow(&b, 40) {
		t.Fatal("the second holding got past the limit, or not up to it")
	}
	h1.drop(&b)
	h1.drop(&b) // twice is once
	h2.drop(&b)
	if b.held.Load() != 0 {
		t.Fatalf("held %d after every drop", b.held.Load())
	}
	// Concurrent holders never take more than the limit together.
	b = budget{limit: 1000}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				var h holding
				if h.grow(&b, 300) {
					if n := b.held.Load(); n > 1000 {
						t.Errorf("held %d over the limit", n)
					}
					h.drop(&b)
				}
			}
		})
	}
	wg.Wait()
	if b.held.Load() != 0 {
		t.Fatalf("held %d after concurrent holders", b.held.Load())
	}
}

// TestBufferBudgetHeldBodies holds three large request bodies open on
// their streams: a fourth is answered 503 with Retry-After, counted, and
// holds nothing; once the streams end the budget is back to zero and
// requests are routed again.
func TestBufferBudgetHeldBodies(t *testing.T) {
	t.Parallel()
	const chunk = 900 << 10
	cfg := testConfig()
	cfg.MaxBodyBytes, cfg.MaxBufferedBytes = 1<<20, 3<<20
	h := newHarness(t, cfg)
	buffered := func() int64 { return h.srv.buffers.held.Load() }
	big := `{"model":"qwen3","prompt":"` + strings.Repeat("x", chunk-40)
	var held []*envoy
	for i := range 3 {
		e := h.open(t, fullDuplex, fullDuplex)
		e.requestHeaders("POST", "/v1/completions", false)
		e.requestBody(big, false) // the rest of the body never comes
		held = append(held, e)
		want := int64(i+1) * int64(len(big))
		waitUntil(t, "the body held", func() bool { return buffered() >= want })
	}
	if n := buffered(); n > cfg.MaxBufferedBytes {
		t.Fatalf("%d bytes buffered, over the budget of %d", n, cfg.MaxBufferedBytes)
	}
	e := h.open(t, fullDuplex, fullDuplex)
	e.requestHeaders("POST", "/v1/completions", false)
	e.requestBody(big, false)
	ir := e.recv().GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 503 {
		t.Fatalf("want ImmediateResponse 503 over the budget, got %v", ir)
	}
	if !hasHeader(ir.GetHeaders(), "retry-after", "2") {
		t.Error("503 without Retry-After")
	}
	if n := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues("buffer_budget")); n != 1 {
		t.Errorf("rejections{reason=buffer_budget} = %v", n)
	}
	e.cancel()
	for _, e := range held {
		e.cancel()
	}
	waitUntil(t, "every buffer released", func() bool { return buffered() == 0 })
	e = h.open(t, fullDuplex, fullDuplex)
	e.requestHeaders("POST", "/v1/completions", false)
	e.requestBody(`{"model":"qwen3","prompt":"hi"}`, true)
	if r := e.recv(); r.GetRequestHeaders() == nil {
		t.Fatalf("after the release: want the routing reply, got %v", r)
	}
}

// TestBufferBudgetResponseBody fills the budget with a held request body:
// a non-streamed response body that would pass it is passed on whole, its
// usage left unread and counted.
func TestBufferBudgetResponseBody(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxBodyBytes, cfg.MaxBufferedBytes = 1<<20, 1<<20
	h := newHarness(t, cfg)
	hold := h.open(t, fullDuplex, fullDuplex)
	hold.requestHeaders("POST", "/v1/completions", false)
	hold.requestBody(`{"model":"qwen3","prompt":"`+strings.Repeat("x", 900<<10), false)
	waitUntil(t, "the body held", func() bool { return h.srv.buffers.held.Load() >= 900<<10 })

	e := h.open(t, fullDuplex, fullDuplex)
	e.requestHeaders("POST", "/v1/completions", false)
	e.requestBody(`{"model":"qwen3","prompt":"hi"}`, true)
	e.recv() // headers reply
	e.recv() // the body, passed on
	e.responseHeaders("200", "application/json", false)
	e.recv()
	answer := `{"choices":[{"text":"` + strings.Repeat("y", 200<<10) + `"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`
	e.responseBody(answer, true)
	if got := e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(); len(got) != len(answer) {
		t.Fatalf("passed on %d bytes of a %d-byte answer", len(got), len(answer))
	}
	if n := testutil.ToFloat64(h.srv.m.watchEvents.WithLabelValues("buffer_budget")); n != 1 {
		t.Errorf("watch events{kind=buffer_budget} = %v", n)
	}
	if n := h.srv.buffers.held.Load(); n > cfg.MaxBufferedBytes {
		t.Errorf("%d bytes buffered, over the budget", n)
	}
}

// waitUntil polls cond; the test's deadline bounds a wait that never ends.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if d, ok := t.Deadline(); ok && time.Until(d) < 5*time.Second {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestBodyTimeout: a request whose body is still arriving BodyTimeout
// after its headers is answered 408, counted, and holds no buffer; a body
// that ends in time is routed.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		m    filterv3.ProcessingMode_BodySendMode
	}{{"full duplex", fullDuplex}, {"buffered", filterv3.ProcessingMode_BUFFERED}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.BodyTimeout = 20 * time.Millisecond
			h := newHarness(t, cfg)
			e := h.open(t, mode.m, fullDuplex)
			e.requestHeaders("POST", "/v1/completions", false)
			if mode.m == filterv3.ProcessingMode_BUFFERED {
				e.recv() // the header reply comes first in this mode
			} else {
				e.requestBody(`{"model":"qwen3","prompt":"a trickle`, false)
			}
			ir := e.recv().GetImmediateResponse()
			if ir == nil || ir.GetStatus().GetCode() != 408 {
				t.Fatalf("want ImmediateResponse 408 for a late body, got %v", ir)
			}
			if n := testutil.ToFloat64(h.srv.m.rejections.WithLabelValues("body_timeout")); n != 1 {
				t.Errorf("rejections{reason=body_timeout} = %v", n)
			}
			waitUntil(t, "the buffer released", func() bool { return h.srv.buffers.held.Load() == 0 })
		})
	}
}
