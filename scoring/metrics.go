package scoring

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
)

// metrics are the router's Prometheus series, grouped by the room that
// owns each fact. Decisions, predictions against outcomes and in-flight
// counts are observed by the ext_proc layer for every picker
// (warmpath_decisions_total, warmpath_ttft_prediction_*,
// warmpath_assignments_*); what is here only the router knows.
type metrics struct {
	// Gathering.
	loadReports *prometheus.CounterVec // state: fresh, stale, missing
	staleIndex  prometheus.Counter     // candidates whose index view was stale
	// The load-report counters, resolved once: they are hit per candidate.
	loadFresh, loadStale, loadMissing prometheus.Counter

	// Policy.
	shadowRegret *prometheus.HistogramVec // policy
	shadowAgree  *prometheus.CounterVec   // policy

	// Ledger.
	unknownDone prometheus.Counter // Done for no live decision

	// Learning.
	cachedCheck    *prometheus.CounterVec // result: exact, over, under
	cachedGap      *prometheus.GaugeVec   // worker: 1 while a gap is reported
	outliers       prometheus.Counter     // observations down-weighted
	resets         prometheus.Counter     // calibration covariance resets
	uncorroborated prometheus.Counter     // resets declined for the engine's figures
	disagreeing    prometheus.Counter     // outcomes of a source disagreeing with the others
	idleRestarts   prometheus.Counter     // calibrations restarted after idleness
	kvSilent       *prometheus.GaugeVec   // worker: 1 while flagged as publishing no KV events
	boundedFits    prometheus.Counter     // fits to a non-streamed answer's end
	unexplained    prometheus.Counter     // outcomes not fitted: unknown load was ahead
	prefillPerTok  *prometheus.GaugeVec   // worker: learned s/token
	stepOverhead   *prometheus.GaugeVec   // worker: learned s/step
	decodeFits     prometheus.Counter     // outcomes the decode model was fitted to
	peerLessons    prometheus.Counter     // peers' lessons fitted
	decodeStep     *prometheus.GaugeVec   // worker: learned s/decode step
	decodePerSeq   *prometheus.GaugeVec   // worker: learned s/sequence in a decode step
}

func newMetrics(o component.Options) (*metrics, error) {
	const ns, sub = "warmpath", "scoring"
	m := &metrics{
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
		unknownDone: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "unknown_done_total", Help: "Done calls for decisions not live (already ended or not from this router)."}),
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
		disagreeing: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_source_disagreeing_total", Help: "Outcomes whose source (the ext_proc client: its certificate's identity or its address) disagreed with the worker's other sources by more than 2x on first token against prediction: they cannot restart the worker's fit, and are weighed down to the others' count while that source reports most of the worker's outcomes."}),
		uncorroborated: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_uncorroborated_total", Help: "Outliers of a run that would restart a worker's fit which the engine's own first-token figures (vllm:time_to_first_token_seconds) did not corroborate: the restart was declined and the outlier stayed down-weighted."}),
		kvSilent: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "kv_events_silent", Help: "1 while the worker serves requests that must store KV blocks without publishing any KV event (wrong endpoint, connect instead of bind, prefix caching off); routing to it is blind to its cache."}, []string{"worker"}),
		boundedFits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_bounded_fits_total", Help: "Calibration fits to a non-streamed answer's duration, an upper bound of its first token, made because the model predicted the first token later than the whole answer."}),
		idleRestarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_idle_restarts_total", Help: "Calibrations restarted from the pool's median model because the worker had no outcome for idle_relax while others had."}),
		unexplained: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "calibration_unexplained_total", Help: "Outcomes calibration did not fit because, while they waited, the engine ran or queued requests no ledger knew of (another router's or a client's bypassing warmpath)."}),
		prefillPerTok: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "model_prefill_seconds_per_token", Help: "Calibrated prefill cost per token."}, []string{"worker"}),
		stepOverhead: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "model_step_overhead_seconds", Help: "Calibrated fixed cost per engine step."}, []string{"worker"}),
		decodeFits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "decode_calibrations_total", Help: "Streamed responses of 17 tokens or more the decode model was fitted to (time per output token against the batch their decode steps carried), this replica's and its peers'."}),
		peerLessons: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "peer_lessons_total", Help: "Outcomes of peer replicas' decisions this replica's models were fitted to (what each taught the peer's calibration, sent with its end)."}),
		decodeStep: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "decode_model_step_overhead_seconds", Help: "Calibrated fixed cost of a decode step, as time per output token shows it."}, []string{"worker"}),
		decodePerSeq: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "decode_model_seconds_per_sequence", Help: "Calibrated cost of one more decoding sequence in a step, as time per output token shows it."}, []string{"worker"}),
	}
	m.loadFresh = m.loadReports.WithLabelValues("fresh")
	m.loadStale = m.loadReports.WithLabelValues("stale")
	m.loadMissing = m.loadReports.WithLabelValues("missing")
	if err := o.Register("scoring", m.loadReports, m.staleIndex, m.shadowRegret, m.shadowAgree, m.unknownDone,
		m.cachedCheck, m.cachedGap, m.kvSilent, m.boundedFits, m.outliers, m.resets, m.uncorroborated, m.disagreeing, m.idleRestarts, m.unexplained, m.prefillPerTok, m.stepOverhead, m.decodeFits, m.peerLessons, m.decodeStep, m.decodePerSeq); err != nil {
		return nil, err
	}
	return m, nil
}

// learned records what one outcome taught about worker, and logs a reset
// or a change of the cached-token gap.
func (m *metrics) learned(worker string, l learned, log *slog.Logger) {
	if l.unexplained {
		m.unexplained.Inc()
	}
	if l.outlier {
		m.outliers.Inc()
	}
	if l.bounded {
		m.boundedFits.Inc()
	}
	if l.uncorroborated {
		m.uncorroborated.Inc()
	}
	if l.disagrees {
		m.disagreeing.Inc()
	}
	if l.firstDisagree {
		log.Warn("a source's outcomes disagree with the worker's other sources: they cannot restart its calibration and weigh no more than the others' (a client reporting false outcomes, or a proxy that measures wrong)",
			"worker", worker, "source", l.source)
	}
	if l.firstDecline {
		log.Warn("outcomes say the worker changed speed but its engine's own first-token figures disagree: calibration not restarted (a source reporting false outcomes, or a proxy that measures wrong)",
			"worker", worker)
	}
	if l.reset {
		m.resets.Inc()
		log.Info("worker changed speed: calibration restarted from the prior's uncertainty", "worker", worker)
	}
	var dec *StepModel
	if l.decoded {
		m.decodeFits.Inc()
		dec = &l.decodeModel
	}
	m.models(worker, l.model, dec)
	if l.checked {
		m.cachedCheck.WithLabelValues(l.cachedResult).Inc()
	}
	switch l.gap {
	case gapOpened:
		m.cachedGap.WithLabelValues(worker).Set(1)
		log.Warn("cached-token predictions persistently miss the engine's cached_tokens: tokenizer, chat template or block size mismatch, or lost KV events",
			"worker", worker, "miss_rate", l.gapRate, "mean_over_prediction_tokens", l.gapBias)
	case gapClosed:
		m.cachedGap.WithLabelValues(worker).Set(0)
		log.Info("cached-token predictions match the engine again", "worker", worker, "miss_rate", l.gapRate)
	}
}

// silence reports a change of worker's KV-event silence.
func (m *metrics) silence(worker string, c silenceChange, log *slog.Logger) {
	switch c {
	case silenceStarted:
		m.kvSilent.WithLabelValues(worker).Set(1)
		log.Warn("worker serves requests but publishes no KV events: routing to it is blind to its cache; check its kv_events endpoint (vLLM binds tcp://*:PORT, warmpath connects), the topic, and that prefix caching is on",
			"worker", worker, "requests", silenceAfter)
	case silenceEnded:
		m.kvSilent.WithLabelValues(worker).Set(0)
		log.Info("worker publishes KV events again", "worker", worker)
	}
}

// models shows worker's step model, and its decode model when dec is not
// nil (it was fitted or restarted).
func (m *metrics) models(worker string, cal StepModel, dec *StepModel) {
	m.prefillPerTok.WithLabelValues(worker).Set(cal.PrefillPerToken)
	m.stepOverhead.WithLabelValues(worker).Set(cal.StepOverhead)
	if dec != nil {
		m.decodeStep.WithLabelValues(worker).Set(dec.StepOverhead)
		m.decodePerSeq.WithLabelValues(worker).Set(dec.DecodePerSeq)
	}
}

// forget deletes worker's series.
func (m *metrics) forget(worker string) {
	m.kvSilent.DeleteLabelValues(worker)
	m.cachedGap.DeleteLabelValues(worker)
	m.prefillPerTok.DeleteLabelValues(worker)
	m.stepOverhead.DeleteLabelValues(worker)
	m.decodeStep.DeleteLabelValues(worker)
	m.decodePerSeq.DeleteLabelValues(worker)
}
