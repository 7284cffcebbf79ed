package peers

import (
	"context"
	"crypto/hmac"
	"fmt"
	"net"
	"slices"
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
// version with a peer that speaks an older one (version 1, as the code
// before the lessons did; version 2, before a reservation's sequences), on
// either side of a follow.

const versionToken = "a shared secret of some length"

// TestOlderFollowerIsAnsweredInItsVersion: a follower saying hello in an
// older version gets a hello and frames in that version: in version 1 the
// ends carry no lesson, in version 2 they do; neither carries the
// reservation's sequences.
func TestOlderFollowerIsAnsweredInItsVersion(t *testing.T) {
	t.Parallel()
	for v := byte(minWireVersion); v < wireVersion; v++ {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			t.Parallel()
			followInVersion(t, v)
		})
	}
}

func followInVersion(t *testing.T, v byte) {
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
	h := hello{Version: v, ID: 99, Name: "old"}
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
	if err != nil || reply.Version != v {
		t.Fatalf("reply hello: version %d, %v; want version %d", reply.Version, err, v)
	}
	if want := proof([]byte(versionToken), h.Nonce, reply.ID); !hmac.Equal(want[:], reply.Proof[:]) {
		t.Fatal("the replica's proof does not check")
	}
	a.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w0", Decided: time.Now(), Prompt: 10, Uncached: 10, Seqs: 4})
	a.mesh.Ended(1, testLesson)
	for {
		in.Reset()
		if err := stream.RecvMsg(in); err != nil {
			t.Fatalf("before the end arrived: %v", err)
		}
		b := in.GetValue()
		if b[0] != v {
			t.Fatalf("frame in version %d, want %d", b[0], v)
		}
		evs, err := decodeEvents(nil, b, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == scoring.PeerReserved && ev.Assignment.ID == 1 && ev.Assignment.Seqs != 0 {
				t.Fatalf("a version %d follower got a reservation's sequences", v)
			}
			if ev.Kind == scoring.PeerEnded && ev.ID == 1 {
				if got := ev.Lesson != (scoring.Lesson{}); got != (v >= 2) {
					t.Fatalf("a version %d follower got a lesson: %v", v, got)
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
			e := encoder{v: 1}
			e.reset(now)
			e.reserved(&scoring.SharedAssignment{ID: 5, Worker: "w1", Decided: now, Prompt: 8, Uncached: 8})
			if err := stream.SendMsg(&wrapperspb.BytesValue{Value: e.frame(now)}); err != nil {
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
// version's hello; the follower says hello again one version older at once,
// down to version 1, and holds the old replica's ledger.
func TestFollowerFallsBackToVersion1(t *testing.T) {
	t.Parallel()
	old := startOldReplica(t)
	b := startReplica(t, testConfig(tokenFile(t, versionToken), old.addr))
	eventually(t, "b holds the old replica's assignment", func() bool { return len(b.ledger.held(idString(7))) == 1 })
	old.mu.Lock()
	defer old.mu.Unlock()
	want := []byte{}
	for v := byte(wireVersion); v >= minWireVersion; v-- {
		want = append(want, v)
	}
	if len(old.seen) < len(want) || !slices.Equal(old.seen[:len(want)], want) {
		t.Fatalf("hello versions the old replica got: %v, want %v first", old.seen, want)
	}
}
