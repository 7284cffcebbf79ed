package e2e

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRealEnvoyTricklingBodyGets408: a client that sends its headers and
// then its body a few bytes at a time, never finishing, is answered 408
// by warmpath's body deadline through a real Envoy, and the stream and its
// buffer are released.
func TestRealEnvoyTricklingBodyGets408(t *testing.T) {
	t.Parallel()
	w := startSim(t, "w0", false)
	h := startHealthEnvWith(t, strings.Replace(healthConfig("0s", "", w), "extproc:\n", "extproc:\n  body_timeout: 1s\n", 1), w)
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"model\":\"qwen3\",")); err != nil {
		t.Fatal(err)
	}
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(got)
			return
		}
		got <- resp
	}()
	// Trickle a byte every 200 ms until the answer comes.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case resp, ok := <-got:
			if !ok {
				t.Fatal("the connection ended without a response")
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408", resp.StatusCode)
			}
			if n := h.wp.metric(t, "warmpath_request_rejections_total", `reason="body_timeout"`); n != 1 {
				t.Errorf("rejections{reason=body_timeout} = %v", n)
			}
			waitFor(t, "the buffer released", func() bool { return h.wp.metric(t, "warmpath_buffered_bytes") == 0 })
			return
		case <-tick.C:
			_, _ = conn.Write([]byte(" ")) // the answer may have closed it
		case <-t.Context().Done():
			t.Fatal("no answer to a trickling body")
		}
	}
}
