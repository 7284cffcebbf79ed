package peers

import (
	"context"
	"crypto/hmac"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warmpath/warmpath/scoring"
)

// The tests of a rolling upgrade across wire versions: a replica of this
// version with a peer that speaks only version 1, as the code before the
// lessons did, on either side of a follow.

const versionToken = "a shared secret of some length"

// TestVersion1FollowerIsAnsweredInVersion1: a follower saying hello in
// version 1 gets a version 1 hello and version 1 frames, whose ends carry
// no lesson.
func TestVersion1FollowerIsAnsweredInVersion1(t *testing.T) {
	t.Parallel()
	a := startReplica(t, testConfig(tokenFile(t, versionToken)))
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+versionToken)
	stream, err := conn.NewStream(ctx, &serviceDesc.Streams[0], followMethod)
	if err != nil {
		t.Fatal(err)
	}
	h := hello{Version: 1, ID: 99, Name: "old"}
	if err := stream.SendMsg(&wrapperspb.BytesValue{Value: appendHello(nil, h, false)}); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	in := new(wrapperspb.BytesValue)
	if err := stream.RecvMsg(in); err != nil {
		t.Fatal(err)
	}
	reply, err := decodeHello(in.GetValue(), true)
	if err != nil || reply.Version != 1 {
		t.Fatalf("reply hello: version %d, %v; want version 1", reply.Version, err)
	}
	if want := proof([]byte(versionToken), h.Nonce, reply.ID); !hmac.Equal(want[:], reply.Proof[:]) {
		t.Fatal("the replica's proof does not check")
	}
	a.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w0", Decided: time.Now(), Prompt: 10, Uncached: 10})
	a.mesh.Ended(1, testLesson)
	for {
		in.Reset()
		if err := stream.RecvMsg(in); err != nil {
			t.Fatalf("before the end arrived: %v", err)
		}
		b := in.GetValue()
		if b[0] != 1 {
			t.Fatalf("frame in version %d, want 1", b[0])
		}
		evs, err := decodeEvents(nil, b, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == scoring.PeerEnded && ev.ID == 1 {
				if ev.Lesson != (scoring.Lesson{}) {
					t.Fatalf("a version 1 follower got a lesson: %+v", ev.Lesson)
				}
				return
			}
		}
	}
}

// oldReplica serves Follow as a replica of version 1 does: a hello of any
// other version is refused as malformed; then its hello and one
// reservation, in version 1.
type oldReplica struct {
	addr string
	mu   sync.Mutex
	seen []byte // the versions of the hellos it got
}

func startOldReplica(t *testing.T) *oldReplica {
	t.Helper()
	o := &oldReplica{}
	desc := grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Follow", ServerStreams: true, Handler: func(_ any, stream grpc.ServerStream) error {
			in := new(wrapperspb.BytesValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			b := in.GetValue()
			o.mu.Lock()
			o.seen = append(o.seen, b[0])
			o.mu.Unlock()
			if b[0] != 1 {
				return status.Error(codes.InvalidArgument, fmt.Sprintf("peers: malformed frame: byte 1: version %d, want 1", b[0]))
			}
			h, err := decodeHello(b, false)
			if err != nil {
				return status.Error(codes.InvalidArgument, err.Error())
			}
			reply := hello{Version: 1, ID: 7, Name: "old", Proof: proof([]byte(versionToken), h.Nonce, 7)}
			if err := stream.SendMsg(&wrapperspb.BytesValue{Value: appendHello(nil, reply, true)}); err != nil {
				return err
			}
			now := time.Now()
			var e encoder
			e.reset(now)
			e.reserved(&scoring.SharedAssignment{ID: 5, Worker: "w1", Decided: now, Prompt: 8, Uncached: 8})
			if err := stream.SendMsg(&wrapperspb.BytesValue{Value: e.frameIn(1, now)}); err != nil {
				return err
			}
			<-stream.Context().Done()
			return nil
		}}},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = lis.Addr().String()
	gs := grpc.NewServer()
	gs.RegisterService(&desc, struct{}{})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return o
}

// TestFollowerFallsBackToVersion1: a replica of version 1 refuses this
// version's hello; the follower says hello again in version 1 at once and
// holds the old replica's ledger.
func TestFollowerFallsBackToVersion1(t *testing.T) {
	t.Parallel()
	old := startOldReplica(t)
	b := startReplica(t, testConfig(tokenFile(t, versionToken), old.addr))
	eventually(t, "b holds the old replica's assignment", func() bool { return len(b.ledger.held(idString(7))) == 1 })
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.seen) < 2 || old.seen[0] != wireVersion || old.seen[1] != 1 {
		t.Fatalf("hello versions the old replica got: %v, want %d then 1", old.seen, wireVersion)
	}
}
