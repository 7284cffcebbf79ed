package kvindex

import "github.com/prometheus/client_golang/prometheus"

// metrics are the index's and subscribers' Prometheus collectors.
type metrics struct {
	events          [4]prometheus.Counter // by EventKind
	skipped         *prometheus.CounterVec
	skipOtherGroup  prometheus.Counter
	skipInvalid     prometheus.Counter
	skipUnreachable prometheus.Counter
	skipUnknownHash prometheus.Counter
	decodeErrors    prometheus.Counter
	gaps            prometheus.Counter
	replays         *prometheus.CounterVec
	resets          *prometheus.CounterVec
	entries         prometheus.Gauge
	nodes           prometheus.Gauge
	evictions       prometheus.Counter
	lookup          prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath", Subsystem: "kvindex", Name: "events_total",
		Help: "KV-cache events applied to the index, by type.",
	}, []string{"type"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath", Subsystem: "kvindex", Name: "skipped_total",
		Help: "Events, blocks or fields not applied, by reason (unknown_event, unknown_field, other_group, invalid, unreachable_parent, unknown_hash, too_many_streams).",
	}, []string{"reason"})
	m := &metrics{
		skipped:         skipped,
		skipOtherGroup:  skipped.WithLabelValues("other_group"),
		skipInvalid:     skipped.WithLabelValues("invalid"),
		skipUnreachable: skipped.WithLabelValues("unreachable_parent"),
		skipUnknownHash: skipped.WithLabelValues("unknown_hash"),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "decode_errors_total",
			Help: "KV-event messages that could not be decoded (bad framing or msgpack).",
		}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "gaps_total",
			Help: "Sequence gaps seen on KV-event streams.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "replays_total",
			Help: "Replay requests, by result (ok, truncated, failed).",
		}, []string{"result"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "resets_total",
			Help: "Times a worker stream's entries were cleared, by reason (seq_backwards, gap_no_replay, gap_after_replay, replay_truncated, replay_failed).",
		}, []string{"reason"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "entries",
			Help: "(block, worker) entries in the index, speculative ones included.",
		}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "blocks",
			Help: "Distinct block keys in the index.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "evictions_total",
			Help: "Blocks dropped to keep the index within its entry budget.",
		}),
		lookup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "lookup_duration_seconds",
			Help:    "Time to look up one prompt's cached prefix on every worker.",
			Buckets: prometheus.ExponentialBuckets(1e-7, 2.5, 12),
		}),
	}
	for _, k := range []EventKind{BlockStored, BlockRemoved, AllBlocksCleared} {
		m.events[k] = events.WithLabelValues(k.String())
	}
	m.events[0] = prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"})
	if reg != nil {
		reg.MustRegister(events, skipped, m.decodeErrors, m.gaps, m.replays, m.resets,
			m.entries, m.nodes, m.evictions, m.lookup)
	}
	return m
}
