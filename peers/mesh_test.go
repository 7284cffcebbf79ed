package peers

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
)

// fakeLedger records what a Mesh applies to the router: the live
// assignments per peer, as the router's ledger would hold them, and the
// highest id that ended.
type fakeLedger struct {
	mu    sync.Mutex
	live  map[string]map[uint64]scoring.SharedAssignment
	drops int
	ended uint64
	// lessons are the lessons of ended assignments, in order.
	lessons []scoring.Lesson
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{live: map[string]map[uint64]scoring.SharedAssignment{}}
}

func (f *fakeLedger) ApplyPeer(peer string, evs []scoring.PeerEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.live[peer]
	if m == nil {
		m = map[uint64]scoring.SharedAssignment{}
		f.live[peer] = m
	}
	for _, ev := range evs {
		switch ev.Kind {
		case scoring.PeerReserved:
			m[ev.Assignment.ID] = ev.Assignment
		case scoring.PeerFirstToken:
			if a, ok := m[ev.ID]; ok {
				a.FirstAt = ev.At
				m[ev.ID] = a
			}
		case scoring.PeerEnded:
			delete(m, ev.ID)
			f.ended = max(f.ended, ev.ID)
			if ev.Lesson.Teaches() {
				f.lessons = append(f.lessons, ev.Lesson)
			}
		}
	}
}

func (f *fakeLedger) DropPeer(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, peer)
	f.drops++
}

func (f *fakeLedger) held(peer string) map[uint64]scoring.SharedAssignment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps(f.live[peer])
}

func maps(m map[uint64]scoring.SharedAssignment) map[uint64]scoring.SharedAssignment {
	out := make(map[uint64]scoring.SharedAssignment, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// fakeIndex records speculated keys per worker.
type fakeIndex struct {
	mu   sync.Mutex
	keys map[string][]uint64
}

func (f *fakeIndex) SpeculateKeys(worker string, keys []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = map[string][]uint64{}
	}
	f.keys[worker] = append(f.keys[worker], keys...)
}

// received is the highest id whose end r's ledger got.
func (r *replica) received() uint64 {
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	return r.ledger.ended
}

// replica is one Mesh serving on a loopback :0 gRPC listener.
type replica struct {
	mesh   *Mesh
	ledger *fakeLedger
	index  *fakeIndex
	reg    *prometheus.Registry
	addr   string
	stop   func()
}

func tokenFile(t testing.TB, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testConfig(token string, static ...string) Config {
	c := DefaultConfig()
	c.TokenFile = token
	c.Static = static
	c.Heartbeat, c.StaleAfter, c.ExpireAfter = 10*time.Millisecond, 60*time.Millisecond, 200*time.Millisecond
	return c
}

// startReplica runs a Mesh with cfg until the test ends or stop is called.
func startReplica(t testing.TB, cfg Config) *replica {
	t.Helper()
	r := &replica{ledger: newFakeLedger(), index: &fakeIndex{}, reg: prometheus.NewRegistry()}
	m, err := New(cfg, component.Options{Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	r.mesh = m
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = lis.Addr().String()
	m.SetAdvertise(r.addr)
	gs := grpc.NewServer()
	m.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	wg.Go(func() { _ = m.Run(ctx, r.ledger, r.index) })
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			gs.Stop()
			wg.Wait()
		})
	}
	t.Cleanup(r.stop)
	return r
}

// eventually polls cond for up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTwoReplicasShareBothWays: b knows a's address only; a learns b's from
// b's follow and follows back. Each one's reservations, first tokens and
// ends (with their lessons) reach the other; a snapshot brings what was in
// flight before the stream opened; speculated keys reach the other's index.
func TestTwoReplicasShareBothWays(t *testing.T) {
	t.Parallel()
	tok := tokenFile(t, "a shared secret of some length")
	a := startReplica(t, testConfig(tok))
	now := time.Now()
	a.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w0", Decided: now, Prompt: 100, Uncached: 100})
	b := startReplica(t, testConfig(tok, a.addr))
	eventually(t, "b holds a's earlier assignment (snapshot)", func() bool { return len(b.ledger.held(a.mesh.ID())) == 1 })
	a.mesh.Reserved(scoring.SharedAssignment{ID: 2, Worker: "w1", Decided: now, Prompt: 64, Uncached: 32, SpecKeys: []uint64{7, 8}})
	a.mesh.FirstToken(1, now.Add(time.Millisecond))
	eventually(t, "b holds a's second assignment and first token", func() bool {
		h := b.ledger.held(a.mesh.ID())
		return len(h) == 2 && !h[1].FirstAt.IsZero()
	})
	b.index.mu.Lock()
	keys := slices.Clone(b.index.keys["w1"])
	b.index.mu.Unlock()
	if !slices.Equal(keys, []uint64{7, 8}) {
		t.Fatalf("b's index got keys %v for w1, want [7 8]", keys)
	}
	lesson := scoring.Lesson{Source: "addr:10.0.0.7", Ratio: 1.25,
		TTFT:   scoring.Fit{OK: true, X: [5]float64{3, 4096, 12, 9e6, 1}, Y: 0.5, Seen: 0.625},
		Decode: scoring.Fit{OK: true, X: [5]float64{63, 2048, 504, 4e6, 0}, Y: 1.5, Seen: 1.5}}
	a.mesh.Ended(1, lesson)
	eventually(t, "a's end reaches b", func() bool { return len(b.ledger.held(a.mesh.ID())) == 1 })
	b.ledger.mu.Lock()
	got := slices.Clone(b.ledger.lessons)
	b.ledger.mu.Unlock()
	if len(got) != 1 || got[0] != lesson {
		t.Fatalf("b got lessons %+v, want [%+v]", got, lesson)
	}
	b.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w2", Decided: now})
	eventually(t, "a follows b back and holds its assignment", func() bool { return len(a.ledger.held(b.mesh.ID())) == 1 })
	if got := testutil.ToFloat64(b.mesh.m.events.WithLabelValues("received")); got < 3 {
		t.Fatalf("b received %v events, want at least 3", got)
	}
}

// TestDeadReplicaExpires: when a replica stops, its peers keep its
// assignments (stale) until expire_after, then drop them; nothing of their
// own is lost.
func TestDeadReplicaExpires(t *testing.T) {
	t.Parallel()
	tok := tokenFile(t, "a shared secret of some length")
	cfg := testConfig(tok)
	cfg.ExpireAfter = 2 * time.Second // well past stale_after: the stale window is seen
	a := startReplica(t, cfg)
	bcfg := testConfig(tok, a.addr)
	bcfg.ExpireAfter = cfg.ExpireAfter
	b := startReplica(t, bcfg)
	a.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w0", Decided: time.Now()})
	eventually(t, "b holds a's assignment", func() bool { return len(b.ledger.held(a.mesh.ID())) == 1 })
	if n := b.mesh.StalePeers(); n != 0 {
		t.Fatalf("%d stale peers while a is up", n)
	}
	a.stop()
	eventually(t, "b sees a stale", func() bool { return b.mesh.StalePeers() == 1 })
	if n := len(b.ledger.held(a.mesh.ID())); n != 1 {
		t.Fatalf("b holds %d of a's assignments while a is only stale, want 1", n)
	}
	eventually(t, "b drops a's assignments", func() bool { return len(b.ledger.held(a.mesh.ID())) == 0 })
	if n := b.mesh.StalePeers(); n != 0 {
		t.Fatalf("%d stale peers after the drop", n)
	}
	if got := testutil.ToFloat64(b.mesh.m.expirations); got != 1 {
		t.Fatalf("expirations %v, want 1", got)
	}
}

// TestStrangersAreRefused: a follower with another token gets nothing, and
// a replica that cannot prove the token is not believed.
func TestStrangersAreRefused(t *testing.T) {
	t.Parallel()
	a := startReplica(t, testConfig(tokenFile(t, "the real shared secret here")))
	a.mesh.Reserved(scoring.SharedAssignment{ID: 1, Worker: "w0", Decided: time.Now()})
	intruder := startReplica(t, testConfig(tokenFile(t, "a guessed secret of length"), a.addr))
	eventually(t, "a refuses the intruder", func() bool {
		return testutil.ToFloat64(a.mesh.m.authFailures.WithLabelValues("follower")) >= 1
	})
	time.Sleep(50 * time.Millisecond)
	if len(intruder.ledger.held(a.mesh.ID())) != 0 {
		t.Fatal("a stranger read a's ledger")
	}
	if len(a.ledger.held(intruder.mesh.ID())) != 0 {
		t.Fatal("a holds a stranger's ledger")
	}
}

// TestSelfIsNotFollowed: an address that turns out to be this replica (a
// DNS name listing every replica, this one too) is dropped.
func TestSelfIsNotFollowed(t *testing.T) {
	t.Parallel()
	tok := tokenFile(t, "a shared secret of some length")
	a := startReplica(t, testConfig(tok))
	a.mesh.pmu.Lock()
	a.mesh.wanted[a.addr] = "static"
	a.mesh.pmu.Unlock()
	select {
	case a.mesh.trigger <- struct{}{}:
	default:
	}
	eventually(t, "a recognises itself", func() bool {
		a.mesh.pmu.Lock()
		defer a.mesh.pmu.Unlock()
		return a.mesh.self[a.addr]
	})
	if len(a.ledger.held(a.mesh.ID())) != 0 {
		t.Fatal("a follows itself")
	}
}
