package peers

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
)

// Ledger is the router's side of sharing: *scoring.Router implements it.
type Ledger interface {
	ApplyPeer(peer string, evs []scoring.PeerEvent)
	DropPeer(peer string)
}

// Speculator enters the blocks a peer speculated on a worker:
// *kvindex.Index implements it.
type Speculator interface {
	SpeculateKeys(worker string, keys []uint64)
}

// Mesh shares this replica's in-flight ledger with its peers and applies
// theirs. It is the router's LedgerSink: each change of the router's own
// ledger is batched and streamed to every follower (the Follow method),
// and for every peer address (static, DNS, or learned from a follower that
// advertised itself) a follower loop streams that peer's changes into the
// router's ledger and the index. A peer silent for ExpireAfter has its
// assignments dropped.
//
// A Mesh is safe for concurrent use. Build it with New, hand it to the
// router as its sink, register its gRPC service with Register, and run it
// with Run.
type Mesh struct {
	cfg    Config
	token  []byte
	id     uint64
	name   string
	ledger Ledger     // set by Run
	spec   Speculator // set by Run
	log    *slog.Logger
	now    func() time.Time
	m      *metrics

	advertise atomic.Pointer[string]

	// The replica's own side: its live assignments (for a new follower's
	// snapshot), the batch being built and the followers it goes to.
	mu     sync.Mutex
	live   map[uint64]scoring.SharedAssignment
	enc    encoder
	subs   map[*subscriber]struct{}
	wake   chan struct{} // one slot: a batch is waiting
	lastTx time.Time     // last frame sent to followers

	// The peers' side.
	pmu     sync.Mutex
	wanted  map[string]string    // address → source (static, dns, learned)
	learned map[string]time.Time // learned address → last sign of life
	self    map[string]bool      // addresses that turned out to be this replica
	remotes map[uint64]*remote   // by replica id
	trigger chan struct{}        // one slot: membership changed

	dialCreds credentials.TransportCredentials
}

// remote is what this replica knows of one peer.
type remote struct {
	id        uint64
	name      string
	address   string
	connected bool
	lastHeard time.Time
	// held is set while the router holds the peer's assignments.
	held bool
}

// Option configures an optional part of a Mesh.
type Option func(*Mesh)

// WithDialCredentials sets the transport credentials peers are dialled
// with: TLS when the replicas' ext_proc port demands it. Default: none
// (plaintext h2c).
func WithDialCredentials(c credentials.TransportCredentials) Option {
	return func(m *Mesh) { m.dialCreds = c }
}

// New returns a Mesh configured by cfg, which must be enabled and valid: it
// reads the token.
func New(cfg Config, o component.Options, opts ...Option) (*Mesh, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("peers: no token_file: sharing is off")
	}
	tok, err := readToken(cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("peers: %w", err)
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:]) // crypto/rand.Read never fails
	host, _ := os.Hostname()
	mesh := &Mesh{
		cfg: cfg, token: tok, id: binary.LittleEndian.Uint64(idb[:]) | 1, name: host,
		log: o.Log(), now: o.Now(),
		live: make(map[uint64]scoring.SharedAssignment), subs: make(map[*subscriber]struct{}),
		wake:   make(chan struct{}, 1),
		wanted: make(map[string]string), learned: make(map[string]time.Time), self: make(map[string]bool),
		remotes: make(map[uint64]*remote), trigger: make(chan struct{}, 1),
		dialCreds: insecure.NewCredentials(),
	}
	for _, opt := range opts {
		opt(mesh)
	}
	if mesh.m, err = newMetrics(o, mesh); err != nil {
		return nil, err
	}
	mesh.enc.reset(mesh.now())
	for _, a := range cfg.Static {
		mesh.wanted[a] = "static"
	}
	return mesh, nil
}

// ID names this replica to its peers (and in their metrics and logs).
func (m *Mesh) ID() string { return idString(m.id) }

func idString(id uint64) string { return strconv.FormatUint(id, 16) }

// SetAdvertise sets the address sent to followed peers, when the
// configuration names none: the ext_proc listener's, once it is known.
func (m *Mesh) SetAdvertise(addr string) {
	if m.cfg.Advertise != "" {
		addr = m.cfg.Advertise
	}
	m.advertise.Store(&addr)
}

func (m *Mesh) advertised() string {
	if a := m.advertise.Load(); a != nil {
		return *a
	}
	return m.cfg.Advertise
}

// proof is the HMAC that shows the token was known to whoever made it.
func proof(token []byte, nonce [16]byte, id uint64) [32]byte {
	h := hmac.New(sha256.New, token)
	h.Write(nonce[:])
	_ = binary.Write(h, binary.LittleEndian, id)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// The sink: the router's own ledger, on the decision path. Each call
// records the change for new followers' snapshots and, when anyone
// follows, encodes it into the batch the sender flushes.

// Reserved records a new assignment of this replica.
func (m *Mesh) Reserved(a scoring.SharedAssignment) {
	m.mu.Lock()
	if len(m.subs) > 0 {
		m.enc.reserved(&a)
	}
	a.SpecKeys = nil // speculation is short-lived; snapshots omit it
	m.live[a.ID] = a
	m.mu.Unlock()
	m.kick()
}

// FirstToken records that an assignment of this replica produced its first
// token.
func (m *Mesh) FirstToken(id uint64, at time.Time) {
	m.mu.Lock()
	if a, ok := m.live[id]; ok {
		a.FirstAt = at
		m.live[id] = a
		if len(m.subs) > 0 {
			m.enc.firstToken(id, at)
		}
	}
	m.mu.Unlock()
	m.kick()
}

// Ended records that an assignment of this replica ended, and sends what
// its outcome taught unless Config.Lessons is off.
func (m *Mesh) Ended(id uint64, l scoring.Lesson) {
	m.mu.Lock()
	if _, ok := m.live[id]; ok {
		delete(m.live, id)
		if len(m.subs) > 0 {
			var lp *scoring.Lesson
			if m.cfg.Lessons {
				lp = &l
			}
			m.enc.ended(id, lp)
		}
	}
	m.mu.Unlock()
	m.kick()
}

func (m *Mesh) kick() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// StalePeers returns how many peers whose assignments the router holds
// have been silent for longer than StaleAfter: decisions made now use a
// view of their load that may be behind.
func (m *Mesh) StalePeers() int {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	now, n := m.now(), 0
	for _, r := range m.remotes {
		if r.held && now.Sub(r.lastHeard) > m.cfg.StaleAfter {
			n++
		}
	}
	return n
}

// Run sends the replica's batches and heartbeats to its followers,
// follows every peer address into ledger and spec, resolves DNS and
// expires silent peers until ctx ends. It returns nil after every
// goroutine it started has stopped. Call it once.
func (m *Mesh) Run(ctx context.Context, ledger Ledger, spec Speculator) error {
	m.ledger, m.spec = ledger, spec
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { m.send(ctx) })
	if m.cfg.DNS != "" {
		wg.Go(func() { m.resolve(ctx) })
	}
	followers := map[string]context.CancelFunc{}
	tick := time.NewTicker(m.cfg.Heartbeat)
	defer tick.Stop()
	for {
		m.expire()
		want := m.addresses()
		for addr, stop := range followers {
			if !slices.Contains(want, addr) {
				stop()
				delete(followers, addr)
			}
		}
		for _, addr := range want {
			if _, ok := followers[addr]; !ok {
				fctx, stop := context.WithCancel(ctx)
				followers[addr] = stop
				wg.Go(func() { m.follow(fctx, addr) })
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.trigger:
		case <-tick.C:
		}
	}
}

// addresses returns the peer addresses to follow: wanted ones that are not
// this replica, learned ones while they show signs of life.
func (m *Mesh) addresses() []string {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	now := m.now()
	for a, at := range m.learned {
		if now.Sub(at) > 2*m.cfg.ExpireAfter && m.wanted[a] == "learned" {
			delete(m.learned, a)
			delete(m.wanted, a)
		}
	}
	var out []string
	for a := range m.wanted {
		if !m.self[a] {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// learn adds the address a follower advertised.
func (m *Mesh) learn(addr string) {
	m.pmu.Lock()
	if _, ok := m.wanted[addr]; !ok {
		m.wanted[addr] = "learned"
	}
	if m.wanted[addr] == "learned" {
		m.learned[addr] = m.now()
	}
	m.pmu.Unlock()
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// expire drops the assignments of peers silent for ExpireAfter.
func (m *Mesh) expire() {
	m.pmu.Lock()
	now := m.now()
	var drop []*remote
	for _, r := range m.remotes {
		if r.held && now.Sub(r.lastHeard) > m.cfg.ExpireAfter {
			r.held = false
			drop = append(drop, r)
		}
		if !r.held && !r.connected && now.Sub(r.lastHeard) > 2*m.cfg.ExpireAfter {
			delete(m.remotes, r.id)
		}
	}
	m.pmu.Unlock()
	for _, r := range drop {
		m.ledger.DropPeer(idString(r.id))
		m.m.expirations.Inc()
		m.log.Warn("peer silent: its assignments no longer load the workers", "peer", idString(r.id), "name", r.name,
			"address", r.address, "silent_for", now.Sub(r.lastHeard).Round(time.Millisecond))
	}
}

// PeerStatus is one peer as GET /debug/workers shows it.
type PeerStatus struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Address   string    `json:"address"`
	Source    string    `json:"source"`
	Connected bool      `json:"connected"`
	LastHeard time.Time `json:"last_heard,omitzero"`
	Stale     bool      `json:"stale"`
	// Held is false once the peer's assignments were dropped for silence.
	Held bool `json:"held"`
}

// Status returns every peer known, by address, and this replica's own id
// and followers.
func (m *Mesh) Status() map[string]any {
	m.pmu.Lock()
	now := m.now()
	var out []PeerStatus
	seen := map[string]bool{}
	for _, r := range m.remotes {
		seen[r.address] = true
		out = append(out, PeerStatus{ID: idString(r.id), Name: r.name, Address: r.address, Source: m.wanted[r.address],
			Connected: r.connected, LastHeard: r.lastHeard, Stale: now.Sub(r.lastHeard) > m.cfg.StaleAfter, Held: r.held})
	}
	for a, src := range m.wanted {
		if !seen[a] && !m.self[a] {
			out = append(out, PeerStatus{Address: a, Source: src})
		}
	}
	m.pmu.Unlock()
	slices.SortFunc(out, func(a, b PeerStatus) int { return strings.Compare(a.Address, b.Address) })
	m.mu.Lock()
	followers := len(m.subs)
	live := len(m.live)
	m.mu.Unlock()
	return map[string]any{"id": m.ID(), "name": m.name, "peers": out, "followers": followers, "shared_assignments": live}
}
