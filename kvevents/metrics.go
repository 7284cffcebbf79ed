package kvevents

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the subscribers' Prometheus collectors.
type metrics struct {
	decodeErrors     prometheus.Counter
	emptyReceives    prometheus.Counter
	unsignalled      prometheus.Counter
	gaps             prometheus.Counter
	replays          *prometheus.CounterVec
	replayRounds     prometheus.Counter
	skipped          *prometheus.CounterVec
	skipUnknownEvent prometheus.Counter
	skipUnknownField prometheus.Counter
	skipOtherGroup   prometheus.Counter
}

// newMetrics builds the subscribers' collectors and registers them;
// notCaughtUp counts the streams not caught up when scraped (nil: none).
func newMetrics(o component.Options, notCaughtUp func() float64) (*metrics, error) {
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "warmpath", Subsystem: "kvevents", Name: "skipped_total",
		Help: "Decoded events or fields not handed to the index, by reason (unknown_event, unknown_field, other_group).",
	}, []string{"reason"})
	m := &metrics{
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "decode_errors_total",
			Help: "KV-event messages that could not be decoded (bad framing or msgpack).",
		}),
		emptyReceives: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "empty_receives_total",
			Help: "Receives on a KV-event stream that found no message where the socket's events check said one was (an interrupted ZMQ_EVENTS); the stream waits again.",
		}),
		unsignalled: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "unsignalled_total",
			Help: "Live KV-event messages found by asking the socket again after a wait of at most 100 ms timed out, not by its descriptor's signal: mostly ones never signalled (an interrupted ZMQ_EVENTS or receive), now and then one that arrived as the wait ended.",
		}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "gaps_total",
			Help: "Sequence gaps seen on KV-event streams.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "replays_total",
			Help: "Replays, by result (ok, truncated, incomplete, failed).",
		}, []string{"result"}),
		replayRounds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "warmpath", Subsystem: "kvevents", Name: "replay_rounds_total",
			Help: "Replay requests sent: a replay asks again from its first hole while the engine's answers arrive with holes.",
		}),
		skipped:          skipped,
		skipUnknownEvent: skipped.WithLabelValues("unknown_event"),
		skipUnknownField: skipped.WithLabelValues("unknown_field"),
		skipOtherGroup:   skipped.WithLabelValues("other_group"),
	}
	if notCaughtUp == nil {
		notCaughtUp = func() float64 { return 0 }
	}
	behind := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "warmpath", Subsystem: "kvevents", Name: "streams_not_caught_up",
		Help: "Worker streams whose replay from the start has not completed: warmpath does not know all of their cached blocks, and their workers do not count for readiness.",
	}, notCaughtUp)
	if err := o.Register("kvevents", m.decodeErrors, m.emptyReceives, m.unsignalled, m.gaps, m.replays, m.replayRounds, behind, skipped); err != nil {
		return nil, err
	}
	return m, nil
}
