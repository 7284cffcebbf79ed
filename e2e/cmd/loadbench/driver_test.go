package main

import (
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rejecter is an ext_proc server that answers a request's headers with a
// 429, as warmpath sheds a request before its body.
type rejecter struct {
	extprocv3.UnimplementedExternalProcessorServer
	bodies chan int // body messages received after the rejection
}

func (p *rejecter) Process(st extprocv3.ExternalProcessor_ProcessServer) error {
	req, err := st.Recv()
	if err != nil {
		return err
	}
	if req.GetRequestHeaders() == nil {
		return nil
	}
	if err := st.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: []byte("shed")}}}); err != nil {
		return err
	}
	n := 0
	for {
		req, err := st.Recv()
		if err != nil {
			p.bodies <- n
			return nil
		}
		if req.GetRequestBody() != nil {
			n++
		}
	}
}

// TestPlayRejectedBeforeTheBody: a request rejected in reply to its
// headers ends with the rejection in either body mode, and in BUFFERED
// mode its body is never sent, as Envoy sends none after a local reply.
func TestPlayRejectedBeforeTheBody(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	p := &rejecter{bodies: make(chan int, 2)}
	extprocv3.RegisterExternalProcessorServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	for _, mode := range []bodyMode{fullDuplex, buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			done := make(chan outcome, 1)
			go func() {
				done <- play(t.Context(), conn, mode, []byte(`{"messages":[]}`), response{}, 0, func(string) int {
					t.Error("a rejected request was routed")
					return 0
				})
			}()
			var o outcome
			select {
			case o = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("play did not return after the rejection")
			}
			if o.err == nil || !strings.Contains(o.err.Error(), "rejected: 429") {
				t.Errorf("outcome error %v, want the rejection", o.err)
			}
			if n := <-p.bodies; mode == buffered && n != 0 {
				t.Errorf("BUFFERED: %d body messages sent after the rejection, want none", n)
			}
		})
	}
}
