package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the ext_proc layer's Prometheus series. Label values are
// bounded: models are only configured names ("unknown" otherwise), workers
// only names from the pool.
type metrics struct {
	requests       *prometheus.CounterVec // api, model, code
	rejections     *prometheus.CounterVec // reason
	streamErrors   *prometheus.CounterVec // reason
	decision       prometheus.Histogram   // seconds
	inFlight       *prometheus.GaugeVec   // worker
	ended          *prometheus.CounterVec // end
	ttft           prometheus.Histogram   // seconds from the routing reply
	watchEvents    *prometheus.CounterVec // kind
	bodyHidden     prometheus.Counter
	sloHeaders     *prometheus.CounterVec // result
	chunkBytes     prometheus.Counter
	responseChunks prometheus.Counter
}

// latencyBuckets span 1 ms to ~82 s, for TTFT and request durations.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 1.6, 25)

func newMetrics(o component.Options) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_requests_total",
			Help: "Requests seen by the ext_proc server, by API, model and final HTTP status code.",
		}, []string{"api", "model", "code"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_request_rejections_total",
			Help: "Requests answered by warmpath itself instead of a worker, by reason.",
		}, []string{"reason"}),
		streamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_extproc_stream_errors_total",
			Help: "ext_proc streams that ended in a protocol error, by reason.",
		}, []string{"reason"}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warmpath_decision_duration_seconds",
			Help:    "Time from the end of the request body to the routing reply, including tokenization and scoring.",
			Buckets: prometheus.ExponentialBuckets(0.00002, 2, 18),
		}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "warmpath_assignments_in_flight",
			Help: "Requests warmpath has sent to each worker that have not ended.",
		}, []string{"worker"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_assignments_ended_total",
			Help: "Assignments ended, by how: completed, aborted or expired.",
		}, []string{"end"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warmpath_time_to_first_token_seconds",
			Help:    "Observed time from the routing decision to the first content token (from the request's arrival: gen_ai_server_time_to_first_token_seconds).",
			Buckets: latencyBuckets,
		}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_response_watch_events_total",
			Help: "Notable things seen while watching responses: error events, unparsable events, truncated bodies.",
		}, []string{"kind"}),
		bodyHidden: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_body_hidden_decisions_total",
			Help: "Requests routed on headers alone because Envoy's request body mode (STREAMED or NONE) sends the body after the routing reply.",
		}),
		sloHeaders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_slo_headers_total",
			Help: "Latency target headers (x-slo-ttft-ms, x-slo-tpot-ms) seen: ok, invalid (ignored: not a positive number of milliseconds up to an hour) or ignored (extproc.slo_headers is off).",
		}, []string{"result"}),
		chunkBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_response_watched_bytes_total",
			Help: "Response body bytes watched (and passed through unmodified).",
		}),
		responseChunks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_response_watched_chunks_total",
			Help: "Response body chunks watched.",
		}),
	}
	if err := o.Register("extproc", m.requests, m.rejections, m.streamErrors, m.decision, m.inFlight, m.ended, m.ttft,
		m.watchEvents, m.bodyHidden, m.sloHeaders, m.chunkBytes, m.responseChunks); err != nil {
		return nil, err
	}
	return m, nil
}
