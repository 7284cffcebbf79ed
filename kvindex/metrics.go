package kvindex

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the index's Prometheus collectors.
type metrics struct {
	events          [4]prometheus.Counter // by EventKind; 0 is unused
	skipped         *prometheus.CounterVec
	skipInvalid     prometheus.Counter
	skipUnreachable prometheus.Counter
	skipUnknownHash prometheus.Counter
	resets          *prometheus.CounterVec
	entries         prometheus.Gauge
	nodes           prometheus.Gauge
	evictions       prometheus.Counter
	lookup          prometheus.Histogram
}

// newMetrics builds the index's collectors and registers them with reg
// unless it is nil.
func newMetrics(o component.Options) (*metrics, error) {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath", Subsystem: "kvindex", Name: "events_total",
		Help: "KV-cache events applied to the index, by type.",
	}, []string{"type"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath", Subsystem: "kvindex", Name: "skipped_total",
		Help: "Events or blocks the index could not apply, by reason (invalid, unreachable_parent, unknown_hash, too_many_streams).",
	}, []string{"reason"})
	m := &metrics{
		skipped:         skipped,
		skipInvalid:     skipped.WithLabelValues("invalid"),
		skipUnreachable: skipped.WithLabelValues("unreachable_parent"),
		skipUnknownHash: skipped.WithLabelValues("unknown_hash"),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvindex", Name: "resets_total",
			Help: "Times a worker stream's entries were cleared, by reason (seq_backwards, gap_no_replay, gap_after_replay, replay_truncated, replay_incomplete, replay_failed, replay_retry).",
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
	if err := o.Register("kvindex", events, skipped, m.resets, m.entries, m.nodes, m.evictions, m.lookup); err != nil {
		return nil, err
	}
	return m, nil
}
