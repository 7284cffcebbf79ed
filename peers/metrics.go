package peers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the mesh's series.
type metrics struct {
	frames       *prometheus.CounterVec // direction: sent, received
	bytes        *prometheus.CounterVec // direction
	events       *prometheus.CounterVec // direction
	authFailures *prometheus.CounterVec // side: follower (we refused one), replica (one failed to prove the token)
	decodeErrors prometheus.Counter
	overflows    prometheus.Counter
	expirations  prometheus.Counter
	dnsErrors    prometheus.Counter
}

func newMetrics(o component.Options, mesh *Mesh) (*metrics, error) {
	const ns, sub = "warmpath", "peer"
	m := &metrics{
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "frames_total",
			Help: "Ledger frames exchanged with peer replicas, by direction (sent to followers, received from followed peers)."}, []string{"direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "bytes_total",
			Help: "Bytes of ledger frames exchanged with peer replicas, by direction."}, []string{"direction"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "events_total",
			Help: "Ledger changes (reservations, first tokens, ends) exchanged with peer replicas, by direction."}, []string{"direction"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "auth_failures_total",
			Help: "Peer streams refused for a wrong token, by side: follower (one asked to follow this replica), replica (one this replica followed did not prove the token)."}, []string{"side"}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "decode_errors_total",
			Help: "Peer frames that could not be decoded; the stream is restarted."}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "overflows_total",
			Help: "Followers cut off for falling behind; they reconnect and start from a snapshot."}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "expirations_total",
			Help: "Peers whose assignments were dropped after expire_after without a frame."}),
		dnsErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dns_errors_total",
			Help: "Failed resolutions of peers.dns."}),
	}
	for _, d := range []string{"sent", "received"} {
		m.frames.WithLabelValues(d)
		m.bytes.WithLabelValues(d)
		m.events.WithLabelValues(d)
	}
	if err := o.Register("peers", m.frames, m.bytes, m.events, m.authFailures, m.decodeErrors, m.overflows, m.expirations,
		m.dnsErrors, &stateCollector{mesh}); err != nil {
		return nil, err
	}
	return m, nil
}

// stateCollector exposes the peers by state and the followers, read when
// scraped.
type stateCollector struct{ m *Mesh }

var (
	peersDesc = prometheus.NewDesc("warmpath_peers", "Peer replicas by state: connected (frames arriving), stale (no frame for stale_after, assignments still held), down (assignments dropped, or never connected).",
		[]string{"state"}, nil)
	followersDesc = prometheus.NewDesc("warmpath_peer_followers", "Peer replicas following this replica's ledger now.", nil, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- peersDesc
	ch <- followersDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	var connected, stale, down float64
	m.pmu.Lock()
	now := m.now()
	ids := map[string]bool{}
	for _, r := range m.remotes {
		ids[r.address] = true
		switch {
		case r.held && now.Sub(r.lastHeard) <= m.cfg.StaleAfter:
			connected++
		case r.held:
			stale++
		default:
			down++
		}
	}
	for a := range m.wanted {
		if !ids[a] && !m.self[a] {
			down++
		}
	}
	m.pmu.Unlock()
	m.mu.Lock()
	followers := float64(len(m.subs))
	m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(peersDesc, prometheus.GaugeValue, connected, "connected")
	ch <- prometheus.MustNewConstMetric(peersDesc, prometheus.GaugeValue, stale, "stale")
	ch <- prometheus.MustNewConstMetric(peersDesc, prometheus.GaugeValue, down, "down")
	ch <- prometheus.MustNewConstMetric(followersDesc, prometheus.GaugeValue, followers)
}
