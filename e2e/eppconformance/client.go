package eppconformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// request is one HTTP request a case sends through the data plane.
type request struct {
	listener string
	method   string // default POST
	path     string // default /v1/chat/completions
	stream   bool
	pad      int // bytes of padding in the user message
	headers  map[string]string
	trailer  map[string]string // request trailers (h2c listener)
}

// response is what came back, with the body read whole.
type response struct {
	status   int
	header   http.Header
	trailer  http.Header
	body     string
	sentSHA  string // of the request body sent
	sentBody []byte
}

// chatBody is an OpenAI chat request of the pool's model whose user
// message is padded to about pad bytes.
func chatBody(stream bool, pad int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": model, "stream": stream, "max_tokens": 8,
		"messages": []any{map[string]any{"role": "user", "content": "hello " + strings.Repeat("x", pad)}},
	})
	return b
}

// do sends r to the data plane.
func (e *env) do(ctx context.Context, r request) (*response, error) {
	method, path := r.method, r.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/chat/completions"
	}
	if r.stream {
		path += "?stream=1"
	}
	var body []byte
	if method == http.MethodPost {
		body = chatBody(r.stream, r.pad)
	}
	var rd io.Reader = bytes.NewReader(body)
	if r.trailer != nil {
		rd = io.MultiReader(rd) // of unknown length: the trailers follow the body
	}
	req, err := http.NewRequestWithContext(ctx, method, e.dp.url(r.listener)+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	client := e.http
	if r.listener == "h2c" { // HTTP/2 end to end: HTTP/1.1 would drop trailers
		client = e.h2c
	}
	if r.trailer != nil {
		req.Trailer = http.Header{}
		for k, v := range r.trailer {
			req.Trailer.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	sum := sha256.Sum256(body)
	return &response{status: resp.StatusCode, header: resp.Header, trailer: resp.Trailer, body: string(b),
		sentSHA: hex.EncodeToString(sum[:]), sentBody: body}, nil
}

// backend returns the backend that answered and the destination list it
// received.
func (r *response) backend() (string, []string) {
	return r.header.Get(hdrBackend), splitList(r.header.Get(hdrReceivedDst))
}

func splitList(s string) []string {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// served checks a routed exchange: 200 from a pool endpoint, which is the
// first entry of the destination it received; the request body arrived
// whole and the response is the backend's, byte for byte. It returns the
// backend and the destination list.
func (e *env) served(r *response, stream bool) (string, []string, error) {
	if r.status != http.StatusOK {
		return "", nil, fmt.Errorf("status %d, body %.200q", r.status, r.body)
	}
	be, dst := r.backend()
	if !slices.Contains(e.pool.Endpoints, be) {
		return "", nil, fmt.Errorf("answered by %q, not a pool endpoint", be)
	}
	if len(dst) == 0 || dst[0] != be {
		return be, dst, fmt.Errorf("answered by %s but the destination it received is %q: the proxy did not follow the picker's first endpoint", be, dst)
	}
	for _, d := range dst {
		if !slices.Contains(e.pool.Endpoints, d) {
			return be, dst, fmt.Errorf("destination %q names %s, not a pool endpoint", dst, d)
		}
	}
	if got := r.header.Get(hdrBodySHA); r.sentBody != nil && got != r.sentSHA {
		return be, dst, fmt.Errorf("request body changed on the way: the backend read %s bytes, digest %.12s, sent %d bytes, digest %.12s",
			r.header.Get(hdrBodyLen), got, len(r.sentBody), r.sentSHA)
	}
	want := jsonResponse
	if stream {
		want = sseBody(3)
	}
	if r.sentBody != nil && r.body != want {
		return be, dst, fmt.Errorf("response body changed on the way: got %.200q", r.body)
	}
	return be, dst, nil
}

// subsetList is the header value that the data plane turns into a list
// subset hint.
func subsetList(eps ...string) string {
	vs := make([]*structpb.Value, len(eps))
	for i, ep := range eps {
		vs[i] = structpb.NewStringValue(ep)
	}
	b, _ := proto.Marshal(structpb.NewListValue(&structpb.ListValue{Values: vs}))
	return base64.StdEncoding.EncodeToString(b)
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// The direct tier: the suite plays Envoy on one ext_proc stream, for what
// a real Envoy does not let a client observe (the reply itself) or time
// (closing the stream at a chosen point).

// directStream is one ext_proc stream to the picker.
type directStream struct {
	st     extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	first  bool
}

func (e *env) openDirect(ctx context.Context) (*directStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := extprocv3.NewExternalProcessorClient(e.conn).Process(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open ext_proc stream: %w", err)
	}
	return &directStream{st: st, cancel: cancel, first: true}, nil
}

func (d *directStream) send(r *extprocv3.ProcessingRequest) error {
	if d.first {
		r.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
		d.first = false
	}
	return d.st.Send(r)
}

// headers sends request headers as Envoy does (raw_value, lower-case keys,
// pseudo-headers) with the forwarded metadata md.
func (d *directStream) headers(md *corev3.Metadata, eos bool, kv ...string) error {
	kv = append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "conformance", ":scheme", "http",
		"content-type", "application/json"}, kv...)
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return d.send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}})
}

func (d *directStream) body(b []byte, eos bool) error {
	return d.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}})
}

// routing waits for the routing reply: the request_headers reply or an
// ImmediateResponse, skipping body replies.
func (d *directStream) routing() (*extprocv3.ProcessingResponse, error) {
	return d.until("a routing reply", func(r *extprocv3.ProcessingResponse) bool {
		return r.GetRequestHeaders() != nil || r.GetImmediateResponse() != nil
	})
}

// until receives until a reply satisfies want. The stream lives in the
// case's context, so the case's timeout bounds the wait.
func (d *directStream) until(what string, want func(*extprocv3.ProcessingResponse) bool) (*extprocv3.ProcessingResponse, error) {
	for {
		r, err := d.st.Recv()
		if err != nil {
			return nil, fmt.Errorf("the picker ended the stream before %s: %w", what, err)
		}
		if want(r) {
			return r, nil
		}
	}
}

// responseHeaders sends response headers with the forwarded metadata md.
func (d *directStream) responseHeaders(md *corev3.Metadata) error {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")},
		{Key: "content-type", RawValue: []byte("application/json")}}}
	return d.send(&extprocv3.ProcessingRequest{MetadataContext: md, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}})
}

// subsetMetadata is forwarded metadata holding a list subset hint.
func subsetMetadata(eps ...string) *corev3.Metadata {
	vs := make([]*structpb.Value, len(eps))
	for i, ep := range eps {
		vs[i] = structpb.NewStringValue(ep)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
		"x-gateway-destination-endpoint-subset": structpb.NewListValue(&structpb.ListValue{Values: vs})}}}}
}

func (d *directStream) close() {
	_ = d.st.CloseSend()
	d.cancel()
}

// directRoute sends a whole chat request on a new stream and returns the
// routing reply.
func (e *env) directRoute(ctx context.Context, md *corev3.Metadata, kv ...string) (*extprocv3.ProcessingResponse, error) {
	d, err := e.openDirect(ctx)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.headers(md, false, kv...); err != nil {
		return nil, err
	}
	if err := d.body(chatBody(false, 16), true); err != nil {
		return nil, err
	}
	return d.routing()
}

// destination reads the routing reply's destination: the header it sets
// (with how it sets it) and the envoy.lb metadata value.
func destination(r *extprocv3.ProcessingResponse) (header string, hv *corev3.HeaderValueOption, meta string) {
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == destinationHeader {
			hv = h
			header = string(h.GetHeader().GetRawValue())
			if header == "" {
				header = h.GetHeader().GetValue()
			}
		}
	}
	meta = r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()[destinationHeader].GetStringValue()
	return header, hv, meta
}
