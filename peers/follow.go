package peers

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warmpath/warmpath/scoring"
)

// The follower's side: one loop per peer address streams that peer's
// ledger into the router (and its speculation into the index),
// reconnecting with backoff. On every (re)connection the peer's
// assignments are dropped and its snapshot replaces them.

// errSelf ends the follow of an address that turned out to be this
// replica.
var errSelf = errors.New("peers: the address is this replica")

// follow follows the peer at addr until ctx ends.
func (m *Mesh) follow(ctx context.Context, addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(m.dialCreds))
	if err != nil {
		m.log.Error("peer address", "address", addr, "err", err)
		return
	}
	defer func() { _ = conn.Close() }()
	backoff := 100 * time.Millisecond
	lastErr := ""
	version := byte(wireVersion)
	for ctx.Err() == nil {
		err := m.followOnce(ctx, conn, addr, version)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errOlderPeer) && version > minWireVersion:
			// An older replica: say hello again one version older, down
			// to the one it speaks. The next connection tries this
			// version's again, as the replica may have been upgraded by
			// then.
			version--
			continue
		case errors.Is(err, errSelf):
			m.pmu.Lock()
			m.self[addr] = true
			m.pmu.Unlock()
			return
		case err != nil && err.Error() != lastErr:
			lastErr = err.Error()
			m.log.Warn("peer stream", "address", addr, "err", err)
		}
		version = wireVersion
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// errOlderPeer: the replica refused the hello's wire version.
var errOlderPeer = errors.New("peers: the replica speaks an older wire version")

// refusedVersion reports whether err is a replica's refusal of a hello's
// version: InvalidArgument, with a message that says so.
func refusedVersion(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.InvalidArgument && strings.Contains(s.Message(), "version")
}

// followOnce runs one Follow stream to addr, saying hello in wire version
// version, until it fails.
func (m *Mesh) followOnce(ctx context.Context, conn *grpc.ClientConn, addr string, version byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+string(m.token))
	stream, err := conn.NewStream(ctx, &serviceDesc.Streams[0], followMethod)
	if err != nil {
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	h := hello{Version: version, ID: m.id, Name: m.name, Advertise: m.advertised()}
	_, _ = rand.Read(h.Nonce[:]) // crypto/rand.Read never fails
	if err := stream.SendMsg(&wrapperspb.BytesValue{Value: appendHello(nil, h, false)}); err != nil {
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	in := new(wrapperspb.BytesValue)
	if err := stream.RecvMsg(in); err != nil {
		if refusedVersion(err) && version > minWireVersion {
			return fmt.Errorf("follow %s: %w: %w", addr, errOlderPeer, err)
		}
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	theirs, err := decodeHello(in.GetValue(), true)
	if err != nil {
		m.m.decodeErrors.Inc()
		return fmt.Errorf("follow %s: %w", addr, err)
	}
	if want := proof(m.token, h.Nonce, theirs.ID); !hmac.Equal(want[:], theirs.Proof[:]) {
		m.m.authFailures.WithLabelValues("replica").Inc()
		return fmt.Errorf("follow %s: the replica did not prove the token", addr)
	}
	if theirs.ID == m.id {
		return errSelf
	}
	id := idString(theirs.ID)
	m.connected(theirs, addr)
	defer m.disconnected(theirs.ID)
	m.ledger.DropPeer(id) // what follows is the peer's ledger whole
	var evs []scoring.PeerEvent
	for {
		in.Reset()
		if err := stream.RecvMsg(in); err != nil {
			return fmt.Errorf("follow %s: %w", addr, err)
		}
		arrived := m.now()
		b := in.GetValue()
		m.m.frames.WithLabelValues("received").Inc()
		m.m.bytes.WithLabelValues("received").Add(float64(len(b)))
		if evs, err = decodeEvents(evs[:0], b, arrived); err != nil {
			m.m.decodeErrors.Inc()
			return fmt.Errorf("follow %s: %w", addr, err)
		}
		m.heard(theirs.ID, addr, arrived)
		if len(evs) == 0 {
			continue
		}
		m.m.events.WithLabelValues("received").Add(float64(len(evs)))
		m.ledger.ApplyPeer(id, evs)
		for i := range evs {
			if a := &evs[i].Assignment; evs[i].Kind == scoring.PeerReserved && len(a.SpecKeys) > 0 {
				m.spec.SpeculateKeys(a.Worker, a.SpecKeys)
			}
		}
	}
}

// connected records that a stream to the peer h is up.
func (m *Mesh) connected(h hello, addr string) {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	r, ok := m.remotes[h.ID]
	if !ok {
		r = &remote{id: h.ID}
		m.remotes[h.ID] = r
	}
	r.name, r.address, r.connected, r.held, r.lastHeard = h.Name, addr, true, true, m.now()
}

func (m *Mesh) disconnected(id uint64) {
	m.pmu.Lock()
	if r, ok := m.remotes[id]; ok {
		r.connected = false
	}
	m.pmu.Unlock()
}

// heard records a frame from peer id at addr.
func (m *Mesh) heard(id uint64, addr string, at time.Time) {
	m.pmu.Lock()
	if r, ok := m.remotes[id]; ok {
		r.lastHeard = at
	}
	if _, ok := m.learned[addr]; ok {
		m.learned[addr] = at
	}
	m.pmu.Unlock()
}

// resolve follows the DNS name's addresses until ctx ends.
func (m *Mesh) resolve(ctx context.Context) {
	host, port, _ := net.SplitHostPort(m.cfg.DNS) // validated
	t := time.NewTicker(m.cfg.DNSInterval)
	defer t.Stop()
	for {
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil && ctx.Err() == nil {
			m.m.dnsErrors.Inc()
			m.log.Warn("peers: resolve", "name", host, "err", err)
		}
		if err == nil {
			want := map[string]bool{}
			for _, ip := range ips {
				want[net.JoinHostPort(ip, port)] = true
			}
			m.pmu.Lock()
			for a, src := range m.wanted {
				if src == "dns" && !want[a] {
					delete(m.wanted, a)
				}
			}
			for a := range want {
				if m.wanted[a] == "" || m.wanted[a] == "learned" {
					m.wanted[a] = "dns"
				}
			}
			m.pmu.Unlock()
			select {
			case m.trigger <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
