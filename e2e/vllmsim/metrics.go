package vllmsim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the simulator's Prometheus collectors, named and labelled
// as vLLM's (model_name, engine). Latency histograms are in simulated
// seconds, which equal wall seconds at time scale 1.
type metrics struct {
	running, waiting, kvUsage                  *prometheus.GaugeVec
	queries, hits, preemptions                 *prometheus.CounterVec
	promptTokens, generationTokens             *prometheus.CounterVec
	success                                    *prometheus.CounterVec
	ttft, itl, e2e, queueTime, prefillTime     *prometheus.HistogramVec
	iterationTokens                            *prometheus.HistogramVec
	cacheConfig                                *prometheus.GaugeVec
	stepLag                                    *prometheus.HistogramVec
	batchesPublished, eventsDropped            *prometheus.CounterVec
	replays, replayErrors, faults, badRequests *prometheus.CounterVec
	stalls                                     *prometheus.CounterVec
}

// vLLM's TTFT buckets.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
	2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// vLLM's request latency buckets.
var requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// vLLM's inter-token latency buckets.
var itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
	5.0, 7.5, 10.0, 20.0, 40.0, 80.0}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	l := []string{"model_name", "engine"}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, l)
	}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		// prometheus_client (Python) appends _total to counters; the Go client does not.
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name + "_total", Help: help}, append(append([]string{}, l...), extra...))
	}
	hist := func(name, help string, b []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, l)
	}
	m := &metrics{
		running:          gauge("vllm:num_requests_running", "Number of requests in model execution batches."),
		waiting:          gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
		kvUsage:          gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
		queries:          counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
		hits:             counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
		preemptions:      counter("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
		promptTokens:     counter("vllm:prompt_tokens", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens", "Number of generation tokens processed."),
		success:          counter("vllm:request_success", "Count of successfully processed requests.", "finished_reason"),
		ttft:             hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets),
		itl:              hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets),
		e2e:              hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets),
		queueTime:        hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets),
		prefillTime:      hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets),
		iterationTokens: hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
			[]float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}),
		cacheConfig: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig"},
			[]string{"block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization", "num_gpu_blocks", "prefix_caching_hash_algo", "engine"}),
		stepLag: hist("vllmsim_step_lag_seconds",
			"How late (wall seconds) engine steps started against the scaled clock: the simulator's own CPU distorting simulated time.",
			[]float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1}),
		batchesPublished: counter("vllmsim_kv_event_batches_published", "KV-event batches sent on the PUB socket."),
		eventsDropped:    counter("vllmsim_kv_event_batches_dropped", "KV-event batches not sent (fault injection or send error)."),
		replays:          counter("vllmsim_kv_event_replays", "Replay requests served."),
		replayErrors:     counter("vllmsim_kv_event_replay_errors", "Malformed replay requests ignored."),
		stalls:           counter("vllmsim_step_stalls", "Engine steps lengthened by an injected stall."),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllmsim_faults_injected_total",
			Help: "Faults injected into requests."}, []string{"model_name", "fault"}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllmsim_bad_requests_total",
			Help: "Requests rejected with a 4xx status, by reason."}, []string{"model_name", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.running, m.waiting, m.kvUsage, m.queries, m.hits, m.preemptions,
		m.promptTokens, m.generationTokens, m.success, m.ttft, m.itl, m.e2e, m.queueTime, m.prefillTime,
		m.iterationTokens, m.cacheConfig, m.stepLag, m.batchesPublished, m.eventsDropped, m.replays,
		m.replayErrors, m.faults, m.badRequests, m.stalls} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// rankMetrics are the collectors of one engine, curried with its labels.
type rankMetrics struct {
	running, waiting, kvUsage                prometheus.Gauge
	queries, hits, preemptions               prometheus.Counter
	promptTokens, generationTokens           prometheus.Counter
	success                                  *prometheus.CounterVec
	ttft, itl, e2e, queueTime, prefillTime   prometheus.Observer
	iterationTokens, stepLag                 prometheus.Observer
	batchesPublished, eventsDropped, replays prometheus.Counter
	replayErrors, stalls                     prometheus.Counter
}

func (m *metrics) rank(model string, rank int, cfg EngineConfig) *rankMetrics {
	l := prometheus.Labels{"model_name": model, "engine": strconv.Itoa(rank)}
	m.cacheConfig.With(prometheus.Labels{
		"block_size": strconv.Itoa(cfg.BlockSize), "cache_dtype": "auto", "enable_prefix_caching": "True",
		"gpu_memory_utilization": "0.9", "num_gpu_blocks": strconv.Itoa(cfg.NumGPUBlocks),
		"prefix_caching_hash_algo": "sha256_cbor", "engine": strconv.Itoa(rank),
	}).Set(1)
	return &rankMetrics{
		running: m.running.With(l), waiting: m.waiting.With(l), kvUsage: m.kvUsage.With(l),
		queries: m.queries.With(l), hits: m.hits.With(l), preemptions: m.preemptions.With(l),
		promptTokens: m.promptTokens.With(l), generationTokens: m.generationTokens.With(l),
		success: m.success.MustCurryWith(l),
		ttft:    m.ttft.With(l), itl: m.itl.With(l), e2e: m.e2e.With(l), queueTime: m.queueTime.With(l),
		prefillTime: m.prefillTime.With(l), iterationTokens: m.iterationTokens.With(l), stepLag: m.stepLag.With(l),
		batchesPublished: m.batchesPublished.With(l), eventsDropped: m.eventsDropped.With(l),
		replays: m.replays.With(l), replayErrors: m.replayErrors.With(l), stalls: m.stalls.With(l),
	}
}
