package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

// The echo processor is the reference the client-side figures are read
// against: an ext_proc server in its own process that speaks the same
// exchange as warmpath (in FULL_DUPLEX_STREAMED the body held until its
// end, then the routing reply and the body echoed; in BUFFERED the
// headers acked and the body's reply routing; each response message
// answered) but decides nothing, routing round-robin. Its client latency
// under the same load on the same cores is what the driver, gRPC and the
// machine cost; what warmpath adds is the difference. loadbench runs it by
// re-executing itself with echoEnv set.

// echoEnv names the environment variable that makes loadbench serve as the
// echo processor; its value is the comma-separated worker addresses.
const echoEnv = "LOADBENCH_ECHO_WORKERS"

// serveEcho serves the echo processor on a loopback port until the
// process is killed, printing the ready line startWarmpath waits for.
func serveEcho(workers []string, stdout io.Writer) error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {})
	go func() { _ = http.Serve(admin, mux) }()
	// The flow-control windows warmpath serves with (internal/app), so the
	// floor is the same transport's.
	srv := grpc.NewServer(grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(16<<20))
	extprocv3.RegisterExternalProcessorServer(srv, &echo{workers: workers})
	fmt.Fprintf(stdout, "warmpath ready extproc=%s admin=%s\n", lis.Addr(), admin.Addr())
	return srv.Serve(lis)
}

type echo struct {
	extprocv3.UnimplementedExternalProcessorServer
	workers []string
	next    atomic.Uint64
}

func (e *echo) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	buffered := false
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if pc := req.GetProtocolConfig(); pc != nil {
			buffered = pc.GetRequestBodyMode() == filterv3.ProcessingMode_BUFFERED
		}
		var reply []*extprocv3.ProcessingResponse
		switch r := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if buffered {
				// Envoy sends the buffered body after this ack; the body's
				// reply routes, and none of the body comes back.
				reply = append(reply, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
					RequestHeaders: &extprocv3.HeadersResponse{}}})
				break
			}
			// Reserve the body's buffer from its content-length, as warmpath
			// does, so the floor does not count a growing buffer's copies.
			for _, h := range r.RequestHeaders.GetHeaders().GetHeaders() {
				if !strings.EqualFold(h.GetKey(), "content-length") {
					continue
				}
				if n, err := strconv.Atoi(string(h.GetRawValue())); err == nil {
					body = make([]byte, 0, min(n, 64<<20))
				}
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, r.RequestBody.GetBody()...)
			if !r.RequestBody.GetEndOfStream() {
				continue
			}
			w := e.workers[e.next.Add(1)%uint64(len(e.workers))]
			route := &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(w)}}}}}
			if buffered {
				reply = append(reply, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
					RequestBody: &extprocv3.BodyResponse{Response: route}}})
				body = nil
				break
			}
			reply = append(reply, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: route}}})
			for len(body) > 0 {
				n := min(len(body), bodyChunk)
				reply = append(reply, echoChunk(false, body[:n], n == len(body)))
				body = body[n:]
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			reply = append(reply, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			reply = append(reply, echoChunk(true, r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream()))
		}
		for _, m := range reply {
			if err := st.Send(m); err != nil {
				return err
			}
		}
		if req.GetResponseBody().GetEndOfStream() {
			return nil // the exchange is whole: end the stream, as warmpath does
		}
	}
}

func echoChunk(response bool, b []byte, eos bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	if response {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
}

// echoMain serves as the echo processor when loadbench was started as one.
func echoMain() bool {
	v := os.Getenv(echoEnv)
	if v == "" {
		return false
	}
	if err := serveEcho(strings.Split(v, ","), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench echo:", err)
		os.Exit(1)
	}
	return true
}
