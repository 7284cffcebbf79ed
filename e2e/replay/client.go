package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/warmpath/warmpath/internal/sse"
)

// WorkerHeader and ReasonHeader are the response headers naming the worker
// that served a request and why warmpath chose it, set when warmpath's
// extproc.debug_headers is enabled.
const (
	WorkerHeader = "x-warmpath-worker"
	ReasonHeader = "x-warmpath-reason"
)

// ClientMode says how requests map onto HTTP connections.
type ClientMode string

// The client modes.
const (
	// ClientShared is one connection pool for all requests, as benchmark
	// tools use.
	ClientShared ClientMode = "shared"
	// ClientSticky is Count independent clients, each with its own
	// kept-alive connections; session i always uses client i mod Count.
	// Behind a Kubernetes Service, which picks a pod per new connection,
	// each client sticks to one pod.
	ClientSticky ClientMode = "sticky"
	// ClientPerRequest opens a new connection for every request.
	ClientPerRequest ClientMode = "per-request"
)

// ClientConfig describes the clients.
type ClientConfig struct {
	// Mode defaults to shared.
	Mode ClientMode `json:"mode,omitempty" yaml:"mode"`
	// Count is the number of sticky clients. Default 1.
	Count int `json:"count,omitempty" yaml:"count"`
}

// newClients returns the HTTP clients for c. The caller closes their idle
// connections when done.
func newClients(c ClientConfig) []*http.Client {
	mk := func(keepAlive bool) *http.Client {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableKeepAlives = !keepAlive
		t.MaxIdleConnsPerHost = 1024
		t.DisableCompression = true
		return &http.Client{Transport: t}
	}
	switch c.Mode {
	case ClientSticky:
		out := make([]*http.Client, max(c.Count, 1))
		for i := range out {
			out[i] = mk(true)
		}
		return out
	case ClientPerRequest:
		return []*http.Client{mk(false)}
	default:
		return []*http.Client{mk(true)}
	}
}

// exchangeResult is a response's measure and its reply text.
type exchangeResult struct {
	Result
	reply string
}

// send posts body to url with client and measures the streamed response.
// Times are offsets from sent, read from clock. It never returns an error:
// failures are recorded in the result.
func send(ctx context.Context, client *http.Client, clock Clock, url string, api API, headers map[string]string, body []byte) exchangeResult {
	res := exchangeResult{Result: Result{PromptTokens: -1, CompletionTokens: -1, CachedTokens: -1}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		res.Error = fmt.Sprintf("request: %v", err)
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if api == APIMessages {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { res.ReusedConn = info.Reused },
	}))
	start := clock.Now()
	resp, err := client.Do(req)
	if err != nil {
		res.E2E = clock.Now().Sub(start)
		res.Error = fmt.Sprintf("transport: %v", err)
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	res.Worker = resp.Header.Get(WorkerHeader)
	res.Reason = resp.Header.Get(ReasonHeader)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.E2E = clock.Now().Sub(start)
		res.Error = fmt.Sprintf("http %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		return res
	}
	st, end, err := readStream(resp.Body, api, clock)
	res.E2E = end.Sub(start)
	if ft := st.firstToken(); !ft.IsZero() {
		res.TTFT = ft.Sub(start)
	}
	res.ITL = st.itl()
	res.PromptTokens, res.CompletionTokens, res.CachedTokens = st.promptTokens, st.completionTokens, st.cachedTokens
	res.reply = st.reply.String()
	switch {
	case err != nil:
		res.Error = err.Error()
	case st.errMsg != "":
		res.Error = "stream error: " + st.errMsg
	case st.firstToken().IsZero():
		res.Error = "stream: no tokens"
	}
	return res
}

// maxEventBytes bounds one SSE event (all its data lines together) and one
// pending line. A response that exceeds it is failed with
// sse.ErrEventTooLarge rather than buffered without limit.
const maxEventBytes = 8 << 20

// readStream reads an SSE body to its end, stamping each read with clock.
// It returns the state, the time the last byte arrived and any error: a
// transport error, a malformed or oversized event, or a stream that ended
// without its final event.
func readStream(body io.Reader, api API, clock Clock) (*streamState, time.Time, error) {
	st := newStreamState(api)
	p := sse.Parser{MaxEventBytes: maxEventBytes}
	buf := make([]byte, 32<<10)
	var now time.Time
	emit := func(event, data []byte) error { return st.onEvent(now, string(event), data) }
	for {
		n, rerr := body.Read(buf)
		now = clock.Now()
		if n > 0 {
			if err := p.Feed(buf[:n], emit); err != nil {
				return st, now, fmt.Errorf("stream: %w", err)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return st, now, fmt.Errorf("stream: read: %w", rerr)
		}
	}
	if err := p.Finish(); err != nil && !st.done {
		return st, now, fmt.Errorf("stream: %w", err)
	}
	if !st.done {
		return st, now, fmt.Errorf("stream: %w", errNoDone)
	}
	return st, now, nil
}
