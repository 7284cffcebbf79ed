package peers

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The replica's side of a follow: a peer opens Follow, proves the token,
// and from then on receives this replica's ledger: a snapshot of what is
// in flight, then every change, batched, with heartbeats between.

const serviceName = "warmpath.peers.v1.Peers"

// followMethod is the full gRPC method name of Follow.
const followMethod = "/" + serviceName + "/Follow"

// followService is what the service descriptor's handler needs of a Mesh.
type followService interface {
	serveFollower(stream grpc.ServerStream, first []byte) error
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*followService)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Follow",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(wrapperspb.BytesValue)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(followService).serveFollower(stream, in.GetValue())
		},
	}},
	Metadata: "warmpath/peers",
}

// Register adds the peers service to s, the ext_proc gRPC server.
func (m *Mesh) Register(s grpc.ServiceRegistrar) { s.RegisterService(&serviceDesc, m) }

// subscriber is one follower's queue of frames. The sender closes ch when
// the follower falls so far behind that it must start over.
type subscriber struct {
	ch chan []byte
}

// subscriberQueue bounds the frames queued for one follower.
const subscriberQueue = 1024

// errOverflow ends a follower that fell behind; it reconnects and gets a
// new snapshot.
var errOverflow = errors.New("follower fell behind")

func (m *Mesh) authorized(stream grpc.ServerStream) bool {
	md, _ := metadata.FromIncomingContext(stream.Context())
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), m.token) == 1 {
			return true
		}
	}
	return false
}

func (m *Mesh) serveFollower(stream grpc.ServerStream, first []byte) error {
	if !m.authorized(stream) {
		m.m.authFailures.WithLabelValues("follower").Inc()
		return status.Error(codes.Unauthenticated, "peers: wrong or missing token")
	}
	h, err := decodeHello(first, false)
	if err != nil {
		m.m.decodeErrors.Inc()
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if addr := advertisedAddr(stream, h.Advertise); addr != "" && h.ID != m.id {
		m.learn(addr)
	}
	// Subscribed before the hello is answered, the follower gets every
	// change made after it reads the answer: the snapshot, then the rest.
	sub := &subscriber{ch: make(chan []byte, subscriberQueue)}
	snapshot := m.subscribe(sub)
	defer m.unsubscribe(sub)
	// A follower of an older version is answered in its own.
	reply := hello{Version: min(h.Version, wireVersion), ID: m.id, Name: m.name, Advertise: m.advertised(), Proof: proof(m.token, h.Nonce, m.id)}
	if err := stream.SendMsg(&wrapperspb.BytesValue{Value: appendHello(nil, reply, true)}); err != nil {
		return err
	}
	send := func(f []byte) error {
		if reply.Version < wireVersion {
			var err error
			if f, err = downgrade(f, reply.Version); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		return m.sendFrame(stream, f)
	}
	if err := send(snapshot); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case f, ok := <-sub.ch:
			if !ok {
				m.m.overflows.Inc()
				return status.Error(codes.ResourceExhausted, errOverflow.Error())
			}
			if err := send(f); err != nil {
				return err
			}
		}
	}
}

func (m *Mesh) sendFrame(stream grpc.ServerStream, f []byte) error {
	m.m.frames.WithLabelValues("sent").Inc()
	m.m.bytes.WithLabelValues("sent").Add(float64(len(f)))
	return stream.SendMsg(&wrapperspb.BytesValue{Value: f})
}

// advertisedAddr is the address a follower advertised, with the
// connection's source host when it named none.
func advertisedAddr(stream grpc.ServerStream, adv string) string {
	host, port, err := net.SplitHostPort(adv)
	if err != nil || port == "" || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		p, ok := peer.FromContext(stream.Context())
		if !ok {
			return ""
		}
		if host, _, err = net.SplitHostPort(p.Addr.String()); err != nil {
			return ""
		}
	}
	return net.JoinHostPort(host, port)
}

// subscribe flushes the batch under construction to the followers already
// there, then registers sub and returns a snapshot frame of every live
// assignment, so sub sees each change exactly once after it.
func (m *Mesh) subscribe(sub *subscriber) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.flushLocked(now, false)
	var e encoder
	e.reset(now)
	for _, a := range m.live {
		e.reserved(&a)
	}
	m.subs[sub] = struct{}{}
	return e.frame(now)
}

func (m *Mesh) unsubscribe(sub *subscriber) {
	m.mu.Lock()
	delete(m.subs, sub)
	m.mu.Unlock()
}

// send flushes batches to the followers when they fill and heartbeats when
// idle, until ctx ends.
func (m *Mesh) send(ctx context.Context) {
	t := time.NewTicker(m.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
			// Let the batch fill for a moment: one frame per decision
			// would cost more in gRPC than the decision itself.
			select {
			case <-ctx.Done():
				return
			case <-time.After(m.cfg.Linger):
			}
			m.mu.Lock()
			m.flushLocked(m.now(), false)
			m.mu.Unlock()
		case <-t.C:
			m.mu.Lock()
			m.flushLocked(m.now(), true)
			m.mu.Unlock()
		}
	}
}

// flushLocked sends the batch built so far to every follower, or an empty
// one as a heartbeat when heartbeat is set and nothing went out for a
// heartbeat period. m.mu must be held.
func (m *Mesh) flushLocked(t time.Time, heartbeat bool) {
	if len(m.subs) == 0 {
		m.enc.reset(t)
		return
	}
	if m.enc.n == 0 && (!heartbeat || t.Sub(m.lastTx) < m.cfg.Heartbeat) {
		return
	}
	f := m.enc.frame(t)
	m.m.events.WithLabelValues("sent").Add(float64(m.enc.n))
	m.enc.reset(t)
	m.lastTx = t
	for sub := range m.subs {
		select {
		case sub.ch <- f:
		default:
			close(sub.ch)
			delete(m.subs, sub)
		}
	}
}
