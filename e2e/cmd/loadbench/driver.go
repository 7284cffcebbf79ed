package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

// response is how the driver plays a worker's answer once warmpath has
// routed a request: response headers, the first token after ttft, then a
// chunk per token every itl, the usage chunk and [DONE].
type response struct {
	ttft, itl time.Duration
	tokens    int
}

// outcome is what one request measured.
type outcome struct {
	sent    time.Time     // when the last body chunk was sent
	routing time.Duration // from then to the routing reply
	worker  string        // the endpoint warmpath chose ("" on failure)
	err     error
}

// bodyChunk is the size of the request body chunks, as Envoy forwards a
// client's body in FULL_DUPLEX_STREAMED mode (its read buffer).
const bodyChunk = 16 << 10

// bodyMode is how the driver sends a request body: as Envoy's ext_proc
// filter does in the request_body_mode of that name. The response is
// FULL_DUPLEX_STREAMED in both.
type bodyMode int

const (
	// fullDuplex (FULL_DUPLEX_STREAMED, the Inference Extension's
	// protocol): the body in bodyChunk pieces as it arrives; the processor
	// holds it, routes, and sends it back.
	fullDuplex bodyMode = iota
	// buffered (BUFFERED): Envoy answers the headers' ack, holds the whole
	// body up to its buffer limit and sends it in one message; the
	// processor routes in its reply and sends nothing of the body back.
	buffered
)

func (m bodyMode) String() string {
	if m == buffered {
		return "BUFFERED"
	}
	return "FULL_DUPLEX_STREAMED"
}

func parseBodyMode(s string) (bodyMode, error) {
	switch s {
	case "full-duplex":
		return fullDuplex, nil
	case "buffered":
		return buffered, nil
	}
	return 0, fmt.Errorf("body mode %q: want full-duplex or buffered", s)
}

// play sends one request on a new ext_proc stream as Envoy does in mode,
// waits for the routing reply, calls routed with the chosen endpoint, and
// plays the response through the stream.
func play(ctx context.Context, conn *grpc.ClientConn, mode bodyMode, body []byte, resp response, promptTokens int, routed func(endpoint string) (cached int)) outcome {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return outcome{err: err}
	}
	// Replies are read in their own goroutine, as Envoy reads them while it
	// keeps sending; the first that routes (or rejects) the request is
	// handed over. In BUFFERED mode the headers' reply is an ack that
	// comes first, and the body's reply routes.
	routing := make(chan *extprocv3.ProcessingResponse, 1)
	acked := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sent, ack := false, mode == buffered
		for {
			r, err := st.Recv()
			if err != nil {
				if ack {
					close(acked)
				}
				if !sent {
					close(routing)
				}
				return
			}
			switch {
			case ack && r.GetRequestHeaders() != nil:
				close(acked)
				ack = false
			case !sent && (r.GetImmediateResponse() != nil || !ack && routes(mode, r)):
				routing <- r
				sent = true
			}
		}
	}()
	defer func() {
		// After a whole exchange warmpath ends the stream; otherwise (or
		// if it does not) the stream is reset, as Envoy resets it.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		cancel()
		<-done
	}()

	hm := &corev3.HeaderMap{}
	for _, kv := range [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "llm.example"},
		{":scheme", "http"}, {"content-type", "application/json"}, {"content-length", fmt.Sprint(len(body))}} {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	reqMode, chunk := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, bodyChunk
	if mode == buffered {
		reqMode, chunk = filterv3.ProcessingMode_BUFFERED, len(body)
	}
	err = st.Send(&extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode: reqMode, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}})
	// Envoy sends a buffered body after the headers' reply, and none
	// after a reply that ends the exchange (a rejection) instead.
	var early *extprocv3.ProcessingResponse
	earlyOK, skipBody := false, false
	if err == nil && mode == buffered {
		select {
		case <-acked:
		case early, earlyOK = <-routing:
			skipBody = true
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	for off := 0; err == nil && !skipBody && off < len(body); off += chunk {
		end := min(off+chunk, len(body))
		err = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}})
	}
	if err != nil {
		cancel()
		return outcome{err: fmt.Errorf("send request: %w", err)}
	}
	o := outcome{sent: time.Now()}
	r, ok := early, earlyOK
	if !skipBody {
		r, ok = <-routing
	}
	o.routing = time.Since(o.sent)
	switch {
	case !ok:
		o.err = fmt.Errorf("stream ended before the routing reply")
		cancel()
		return o
	case r.GetImmediateResponse() != nil:
		o.err = fmt.Errorf("rejected: %d %.200s", r.GetImmediateResponse().GetStatus().GetCode(), r.GetImmediateResponse().GetBody())
		cancel()
		return o
	}
	common := r.GetRequestHeaders().GetResponse()
	if mode == buffered {
		common = r.GetRequestBody().GetResponse()
	}
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			o.worker = string(h.GetHeader().GetRawValue())
			if o.worker == "" {
				o.worker = h.GetHeader().GetValue()
			}
		}
	}
	if o.worker == "" {
		o.err = fmt.Errorf("routing reply sets no destination")
		cancel()
		return o
	}
	if i := strings.IndexByte(o.worker, ','); i >= 0 {
		o.worker = o.worker[:i]
	}
	cached := routed(o.worker)
	if err := playResponse(ctx, st, resp, promptTokens, cached); err != nil {
		o.err = err
		cancel()
	}
	return o
}

// routes reports whether r is the reply that routes a request sent in
// mode: the headers' reply in FULL_DUPLEX_STREAMED, the body's in BUFFERED.
func routes(mode bodyMode, r *extprocv3.ProcessingResponse) bool {
	if mode == buffered {
		return r.GetRequestBody() != nil
	}
	return r.GetRequestHeaders() != nil
}

func playResponse(ctx context.Context, st extprocv3.ExternalProcessor_ProcessClient, resp response, promptTokens, cached int) error {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")},
		{Key: "content-type", RawValue: []byte("text/event-stream")}}}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
		return fmt.Errorf("send response headers: %w", err)
	}
	t := time.NewTimer(resp.ttft)
	defer t.Stop()
	chunk := func(b string, eos bool) error {
		return st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}})
	}
	for i := range resp.tokens {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		t.Reset(resp.itl)
		if err := chunk(fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}`+"\n\n", i), false); err != nil {
			return fmt.Errorf("send response chunk: %w", err)
		}
	}
	usage := fmt.Sprintf(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\ndata: [DONE]\n\n",
		promptTokens, resp.tokens, promptTokens+resp.tokens, cached)
	if err := chunk(usage, true); err != nil {
		return fmt.Errorf("send usage: %w", err)
	}
	return st.CloseSend()
}
