package scoring

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the router's Prometheus instruments.
type metrics struct {
	decisions      *prometheus.CounterVec   // policy, mode
	inflight       prometheus.Gauge         // assignments held
	outcomes       *prometheus.CounterVec   // end
	unknownDone    prometheus.Counter       // Done for no live decision
	relError       prometheus.Histogram     // (predicted-actual)/actual
	cachedCheck    *prometheus.CounterVec   // result: exact, over, under
	cachedGap      *prometheus.GaugeVec     // worker: 1 while a gap is reported
	outliers       prometheus.Counter       // observations down-weighted
	resets         prometheus.Counter       // calibration covariance resets
	idleRestarts   prometheus.Counter       // calibrations restarted after idleness
	loadReports    *prometheus.CounterVec   // state: fresh, stale, missing
	staleIndex     prometheus.Counter       // candidates whose index view was stale
	shadowRegret   *prometheus.HistogramVec // policy
	shadowAgree    *prometheus.CounterVec   // policy
	prefillPerTok  *prometheus.GaugeVec     // worker: learned s/token
	stepOverhead   *prometheus.GaugeVec     // worker: learned s/step
	tokenizeErrors prometheus.Counter       // token source failures

	// The load-report counters, resolved once: they are hit per candidate.
	loadFresh, loadStale, loadMissing prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "warmpath", "scoring"
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "decisions_total", Help: "Routing decisions by deciding policy and mode (exact, remote-tokenized, approximate, load-only)."},
			[]string{"policy", "mode"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "inflight_assignments", Help: "Assignments decided and not yet ended."}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outcomes_total", Help: "Ended assignments by how they ended."}, []string{"end"}),
		unknownDone: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "unknown_done_total", Help: "Done calls for decisions not live (already ended or not from this router)."}),
		relError: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "ttft_prediction_relative_error", Help: "(predicted - actual) / actual TTFT of completed requests.",
			Buckets: []float64{-0.9, -0.5, -0.3, -0.2, -0.1, -0.05, 0, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5}}),
		cachedCheck: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "cached_tokens_predictions_total", Help: "Predicted cached tokens checked against the engine's cached_tokens: exact, over or under."},
			[]string{"result"}),
		cachedGap: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "cached_tokens_gap", Help: "1 while a worker's cached-token predictions persistently miss the engine's answer."},
			[]string{"worker"}),
		outliers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_outliers_total", Help: "Outcomes down-weighted as outliers by calibration."}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_resets_total", Help: "Runs of same-sign outliers taken as a worker changing speed, which restart its fit from the prior's uncertainty."}),
		idleRestarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_idle_restarts_total", Help: "Calibrations restarted from the pool's median model because the worker had no outcome for idle_relax while others had."}),
		loadReports: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "load_reports_total", Help: "Scraped load looked up per candidate: fresh, stale or missing."}, []string{"state"}),
		staleIndex: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stale_index_candidates_total", Help: "Candidates whose KV index view was stale when scored."}),
		shadowRegret: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "shadow_regret_seconds", Help: "Predicted TTFT of a shadow policy's pick minus that of the decision's pick.",
			Buckets: []float64{-1, -0.1, -0.01, 0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}},
			[]string{"policy"}),
		shadowAgree: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "shadow_agreements_total", Help: "Requests on which a shadow policy picked the decision's worker."}, []string{"policy"}),
		prefillPerTok: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "model_prefill_seconds_per_token", Help: "Calibrated prefill cost per token."}, []string{"worker"}),
		stepOverhead: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "model_step_overhead_seconds", Help: "Calibrated fixed cost per engine step."}, []string{"worker"}),
		tokenizeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "tokenize_failures_total", Help: "Requests for which no exact token ids could be had."}),
	}
	m.loadFresh = m.loadReports.WithLabelValues("fresh")
	m.loadStale = m.loadReports.WithLabelValues("stale")
	m.loadMissing = m.loadReports.WithLabelValues("missing")
	for _, c := range []prometheus.Collector{m.decisions, m.inflight, m.outcomes, m.unknownDone, m.relError,
		m.cachedCheck, m.cachedGap, m.outliers, m.resets, m.idleRestarts, m.loadReports, m.staleIndex, m.shadowRegret, m.shadowAgree,
		m.prefillPerTok, m.stepOverhead, m.tokenizeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register scoring metrics: %w", err)
		}
	}
	return m, nil
}
