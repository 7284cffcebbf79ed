package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the ext_proc layer's Prometheus series. Label values are
// bounded: models are only configured names ("unknown" otherwise), workers
// only names from the pool.
type metrics struct {
	requests         *prometheus.CounterVec // api, model, code
	rejections       *prometheus.CounterVec // reason
	streamErrors     *prometheus.CounterVec // reason
	decision         prometheus.Histogram   // seconds
	inFlight         *prometheus.GaugeVec   // worker
	ended            *prometheus.CounterVec // end
	ttft             prometheus.Histogram   // seconds from the routing reply
	watchEvents      *prometheus.CounterVec // kind
	bodyHidden       prometheus.Counter
	sloHeaders       *prometheus.CounterVec // result
	chunkBytes       prometheus.Counter
	responseChunks   prometheus.Counter
	chunkDuration    prometheus.Histogram   // seconds
	subsetHints      *prometheus.CounterVec // form
	served           *prometheus.CounterVec // result
	selectionIgnored prometheus.Counter
}

// latencyBuckets span 1 ms to ~82 s, for TTFT and request durations.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 1.6, 25)

// decisionBuckets span 25 µs to 2.5 s, finest around the decision's
// budgets (DESIGN.md §5: p50 ≤ 0.5 ms, p99 ≤ 2 ms), which are bounds: the
// share of decisions within a budget is read from one bucket, not guessed
// by interpolating across a bucket that straddles it (doubling buckets put
// 2 ms inside 1.28–2.56 ms, where a p99 anywhere in the bucket reads the
// same).
var decisionBuckets = []float64{
	0.000025, 0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00065, 0.0008,
	0.001, 0.00125, 0.0015, 0.00175, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.0075,
	0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
}

// chunkBuckets span 1 µs to 0.25 s, with the response-watching budget
// (0.2 ms per chunk at p99) a bound.
var chunkBuckets = []float64{
	0.000001, 0.000002, 0.000005, 0.00001, 0.00002, 0.00003, 0.00005, 0.000075, 0.0001, 0.00015,
	0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25,
}

// newMetrics builds the ext_proc layer's series; buffered reads the bytes
// the streams' buffers hold when scraped.
func newMetrics(o component.Options, buffered func() int64, bodies prometheus.Collector) (*metrics, error) {
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
			Buckets: decisionBuckets,
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
		chunkDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "warmpath_response_chunk_duration_seconds",
			Help:    "Time warmpath spends on one response body chunk: from its arrival to the reply that passes it on (watching included).",
			Buckets: chunkBuckets,
		}),
		subsetHints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_subset_hints_total",
			Help: "Requests whose proxy sent an Endpoint Picker subset hint, by its form: list, string, or invalid (names no endpoint).",
		}, []string{"form"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_served_endpoint_reports_total",
			Help: "What the proxy reported as the endpoint that served a routed request: chosen, fallback (the assignment moved there), unknown (no candidate), or absent.",
		}, []string{"result"}),
		selectionIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_test_selection_headers_ignored_total",
			Help: "Requests carrying the conformance suite's test-epp-endpoint-selection header while the conformance test hooks are off; the header is ignored.",
		}),
	}
	bufferedBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "warmpath_buffered_bytes",
		Help: "Bytes held by every stream's buffers (request bodies until routed, non-streamed response bodies until read), bounded by extproc.max_buffered_bytes.",
	}, func() float64 { return float64(buffered()) })
	if err := o.Register("extproc", bufferedBytes, bodies, m.requests, m.rejections, m.streamErrors, m.decision, m.inFlight, m.ended, m.ttft,
		m.watchEvents, m.bodyHidden, m.sloHeaders, m.chunkBytes, m.responseChunks, m.chunkDuration, m.subsetHints, m.served, m.selectionIgnored); err != nil {
		return nil, err
	}
	return m, nil
}
