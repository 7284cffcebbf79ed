package extproc

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/internal/component"
	"github.com/warmpath/warmpath/scoring"
	"github.com/warmpath/warmpath/telemetry"
)

// Bucket boundaries. The GenAI ones are the semantic conventions' advice
// (v1.41 gen-ai-metrics.md).
var (
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	genAITPOTBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	// signedErrorBuckets hold actual − predicted TTFT in seconds.
	signedErrorBuckets = []float64{-10, -5, -2.5, -1, -0.5, -0.25, -0.1, -0.05, -0.025, -0.01, 0, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// relativeErrorBuckets hold |actual − predicted| / actual.
	relativeErrorBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10}
)

// tokenizePaths are the TokenizePath values counted by name; others count
// as "other".
var tokenizePaths = []string{"local", "remote", "request", "none"}

// observeMetrics are the decision-quality and GenAI request series: what
// was predicted, what happened, and the error between them.
type observeMetrics struct {
	decisions     *prometheus.CounterVec   // policy, mode
	tokenizePath  *prometheus.CounterVec   // path
	predictedTTFT *prometheus.HistogramVec // worker
	ttftError     *prometheus.HistogramVec // worker
	ttftRelError  *prometheus.HistogramVec // worker
	predictedTPOT *prometheus.HistogramVec // worker
	tpotError     *prometheus.HistogramVec // worker
	tpotRelError  *prometheus.HistogramVec // worker
	e2eRelError   *prometheus.HistogramVec // worker
	slo           *prometheus.CounterVec   // predicted, actual
	cachedTokens  *prometheus.CounterVec   // worker, source
	promptTokens  *prometheus.CounterVec   // worker
	tenants       *prometheus.CounterVec   // result

	// GenAI semantic-convention request metrics. genAILabels plus tenant
	// when tenant labels are on.
	genAITTFT     *prometheus.HistogramVec
	genAIDuration *prometheus.HistogramVec // + error_type
	genAITPOT     *prometheus.HistogramVec
	tokenUsage    *prometheus.HistogramVec // + gen_ai_token_type (v1.41)
	usageInput    *prometheus.CounterVec   // latest experimental names
	usageOutput   *prometheus.CounterVec
	usageCached   *prometheus.CounterVec
	latest        bool
	tenantLabels  bool
}

func newObserveMetrics(o component.Options, sc telemetry.Semconv, tenantLabels bool) (*observeMetrics, error) {
	genAI := []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"}
	if tenantLabels {
		genAI = append(genAI, "tenant")
	}
	with := func(extra ...string) []string { return append(slices.Clone(genAI), extra...) }
	m := &observeMetrics{
		latest:       sc.Latest,
		tenantLabels: tenantLabels,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_decisions_total",
			Help: "Routing decisions, by policy and by mode (how much the router knew: exact, remote-tokenized, approximate, load-only).",
		}, []string{"policy", "mode"}),
		tokenizePath: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_tokenize_path_total",
			Help: "Decisions by where the prompt's token ids came from: local, remote, request, none.",
		}, []string{"path"}),
		predictedTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_predicted_ttft_seconds",
			Help:    "Predicted time to first token of the chosen worker at decision time (queue wait + prefill + overhead).",
			Buckets: latencyBuckets,
		}, []string{"worker"}),
		ttftError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_ttft_prediction_error_seconds",
			Help:    "Actual minus predicted time to first token, per worker; negative when the worker was faster than predicted.",
			Buckets: signedErrorBuckets,
		}, []string{"worker"}),
		ttftRelError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_ttft_prediction_relative_error",
			Help:    "Absolute TTFT prediction error relative to the actual TTFT, |actual - predicted| / actual, per worker.",
			Buckets: relativeErrorBuckets,
		}, []string{"worker"}),
		predictedTPOT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_predicted_tpot_seconds",
			Help:    "Predicted typical (median) time per output token of the chosen worker at decision time.",
			Buckets: genAITPOTBuckets,
		}, []string{"worker"}),
		tpotError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_tpot_prediction_error_seconds",
			Help:    "Actual minus predicted time per output token, per worker, for streamed responses of at least two tokens.",
			Buckets: []float64{-0.25, -0.1, -0.05, -0.025, -0.01, -0.005, -0.0025, -0.001, 0, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25},
		}, []string{"worker"}),
		tpotRelError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_tpot_prediction_relative_error",
			Help:    "Absolute TPOT prediction error relative to the actual TPOT, |actual - predicted| / actual, per worker.",
			Buckets: relativeErrorBuckets,
		}, []string{"worker"}),
		e2eRelError: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_e2e_prediction_relative_error",
			Help:    "Absolute error of the predicted time from decision to last token relative to the actual one, per worker (it includes the error of the expected output length).",
			Buckets: relativeErrorBuckets,
		}, []string{"worker"}),
		slo: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_slo_requests_total",
			Help: "Completed responses of decisions that had latency targets (the slo objective), by whether the chosen worker was predicted to meet them and whether it did (met or missed).",
		}, []string{"predicted", "actual"}),
		cachedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_cached_tokens_total",
			Help: "Prompt tokens served from the prefix cache, as predicted at decision time (source=predicted) and as the worker reported (source=actual); counted only for responses that reported usage.",
		}, []string{"worker", "source"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_prompt_tokens_total",
			Help: "Prompt tokens the worker reported, for the same responses as warmpath_cached_tokens_total (the denominator of the cache hit ratio).",
		}, []string{"worker"}),
		tenants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_tenant_identity_total",
			Help: "Tenant identity lookups from the trusted source: ok, missing, invalid, and client_header_ignored (a client-set tenant header that was not trusted and was removed).",
		}, []string{"result"}),
		genAITTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "GenAI semconv gen_ai.server.time_to_first_token: time from the request's arrival to its first content token.",
			Buckets: genAITTFTBuckets,
		}, genAI),
		genAIDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "GenAI semconv gen_ai.server.request.duration: time from the request's arrival to the end of its response; error_type is empty on success.",
			Buckets: genAIDurationBuckets,
		}, with("error_type")),
		genAITPOT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "GenAI semconv gen_ai.server.time_per_output_token: time after the first token divided by the output tokens after it.",
			Buckets: genAITPOTBuckets,
		}, genAI),
	}
	cs := []prometheus.Collector{m.decisions, m.tokenizePath, m.predictedTTFT, m.ttftError, m.ttftRelError,
		m.predictedTPOT, m.tpotError, m.tpotRelError, m.e2eRelError, m.slo,
		m.cachedTokens, m.promptTokens, m.tenants, m.genAITTFT, m.genAIDuration, m.genAITPOT}
	if sc.Latest {
		counter := func(name, help string) *prometheus.CounterVec {
			return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, genAI)
		}
		m.usageInput = counter("gen_ai_client_inference_usage_input_tokens_total", "GenAI semconv (latest experimental) gen_ai.client.inference.usage.input_tokens.")
		m.usageOutput = counter("gen_ai_client_inference_usage_output_tokens_total", "GenAI semconv (latest experimental) gen_ai.client.inference.usage.output_tokens.")
		m.usageCached = counter("gen_ai_client_inference_usage_cache_read_input_tokens_total", "GenAI semconv (latest experimental) gen_ai.client.inference.usage.cache_read.input_tokens.")
		cs = append(cs, m.usageInput, m.usageOutput, m.usageCached)
	} else {
		m.tokenUsage = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "GenAI semconv gen_ai.client.token.usage: tokens per request by gen_ai_token_type (input, output).",
			Buckets: genAITokenBuckets,
		}, with("gen_ai_token_type"))
		cs = append(cs, m.tokenUsage)
	}
	if err := o.Register("extproc observation", cs...); err != nil {
		return nil, err
	}
	return m, nil
}

// decided records a decision.
func (m *observeMetrics) decided(d *scoring.Decision) {
	mode := string(d.Mode)
	if mode == "" {
		mode = "unknown"
	}
	m.decisions.WithLabelValues(d.Policy, mode).Inc()
	path := d.TokenizePath
	if !slices.Contains(tokenizePaths, path) {
		path = "other"
	}
	m.tokenizePath.WithLabelValues(path).Inc()
	if d.Chosen.PredictedTTFT > 0 {
		m.predictedTTFT.WithLabelValues(d.Worker).Observe(d.Chosen.PredictedTTFT.Seconds())
	}
	if d.Chosen.PredictedTPOT > 0 {
		m.predictedTPOT.WithLabelValues(d.Worker).Observe(d.Chosen.PredictedTPOT.Seconds())
	}
}

// outcome records prediction quality for an ended assignment of d: c is
// the candidate it is attributed to (the chosen one, or the fallback the
// proxy reported as served), whose predictions it is held against.
func (m *observeMetrics) outcome(d *scoring.Decision, c scoring.Candidate, o scoring.Outcome) {
	if o.TTFT > 0 && c.PredictedTTFT > 0 {
		diff := (o.TTFT - c.PredictedTTFT).Seconds()
		m.ttftError.WithLabelValues(c.Worker).Observe(diff)
		m.ttftRelError.WithLabelValues(c.Worker).Observe(math.Abs(diff) / o.TTFT.Seconds())
	}
	if tpot := o.TPOT(); tpot > 0 && c.PredictedTPOT > 0 {
		diff := (tpot - c.PredictedTPOT).Seconds()
		m.tpotError.WithLabelValues(c.Worker).Observe(diff)
		m.tpotRelError.WithLabelValues(c.Worker).Observe(math.Abs(diff) / tpot.Seconds())
	}
	if e2e := o.E2E(); e2e > 0 && c.PredictedE2E > 0 {
		m.e2eRelError.WithLabelValues(c.Worker).Observe(math.Abs((e2e - c.PredictedE2E).Seconds()) / e2e.Seconds())
	}
	if d.SLO.TTFT > 0 || d.SLO.TPOT > 0 {
		if o.End == scoring.EndCompleted && o.TTFT > 0 {
			m.slo.WithLabelValues(metLabel(d.SLO.Met(c.PredictedTTFT, c.PredictedTPOT)),
				metLabel(d.SLO.Met(o.TTFT, o.TPOT()))).Inc()
		}
	}
	if o.CachedTokens >= 0 && o.PromptTokens >= 0 {
		m.cachedTokens.WithLabelValues(c.Worker, "actual").Add(float64(o.CachedTokens))
		m.cachedTokens.WithLabelValues(c.Worker, "predicted").Add(float64(c.CachedTokens))
		m.promptTokens.WithLabelValues(c.Worker).Add(float64(o.PromptTokens))
	}
}

func metLabel(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// genAIRequest is what the GenAI request metrics need about one request.
type genAIRequest struct {
	api, model, tenant string
	arrived, end       time.Time
	firstToken         time.Time
	lastToken          time.Time
	errorType          string
	input, output      int // -1 when unknown
}

// request records the GenAI semconv request metrics.
func (m *observeMetrics) request(r genAIRequest) {
	op, provider, ok := telemetry.Operation(r.api)
	if !ok {
		return
	}
	ls := []string{op, provider, r.model}
	if m.tenantLabels {
		ls = append(ls, r.tenant)
	}
	with := func(extra ...string) []string { return append(slices.Clone(ls), extra...) }
	m.genAIDuration.WithLabelValues(with(r.errorType)...).Observe(r.end.Sub(r.arrived).Seconds())
	if !r.firstToken.IsZero() {
		m.genAITTFT.WithLabelValues(ls...).Observe(r.firstToken.Sub(r.arrived).Seconds())
		if r.output > 1 && r.lastToken.After(r.firstToken) {
			m.genAITPOT.WithLabelValues(ls...).Observe(r.lastToken.Sub(r.firstToken).Seconds() / float64(r.output-1))
		}
	}
	if m.latest {
		if r.input >= 0 {
			m.usageInput.WithLabelValues(ls...).Add(float64(r.input))
		}
		if r.output >= 0 {
			m.usageOutput.WithLabelValues(ls...).Add(float64(r.output))
		}
		return
	}
	if r.input >= 0 {
		m.tokenUsage.WithLabelValues(with("input")...).Observe(float64(r.input))
	}
	if r.output >= 0 {
		m.tokenUsage.WithLabelValues(with("output")...).Observe(float64(r.output))
	}
}

// cachedUsage records cache-read input tokens under the latest names.
func (m *observeMetrics) cachedUsage(r genAIRequest, cached int) {
	op, provider, ok := telemetry.Operation(r.api)
	if !ok || !m.latest || cached < 0 {
		return
	}
	ls := []string{op, provider, r.model}
	if m.tenantLabels {
		ls = append(ls, r.tenant)
	}
	m.usageCached.WithLabelValues(ls...).Add(float64(cached))
}

// statusErrorType is error.type for a final status code string: "" for
// success, the code for HTTP errors, "aborted" when no response came.
func statusErrorType(code string) string {
	n, err := strconv.Atoi(code)
	switch {
	case err != nil || n == 0:
		return "aborted"
	case n >= 400:
		return code
	}
	return ""
}
