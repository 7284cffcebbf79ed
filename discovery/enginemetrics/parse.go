package enginemetrics

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Engine metric names, as vLLM's /metrics exposes them (prometheus_client
// text format: counters carry _total).
const (
	metricRunning        = "vllm:num_requests_running"
	metricWaiting        = "vllm:num_requests_waiting"
	metricKVUsage        = "vllm:kv_cache_usage_perc"
	metricGPUUsage       = "vllm:gpu_cache_usage_perc" // before vLLM 0.10; deprecated then removed
	metricPrefixQueries  = "vllm:prefix_cache_queries_total"
	metricPrefixHits     = "vllm:prefix_cache_hits_total"
	metricGPUPrefixQuery = "vllm:gpu_prefix_cache_queries_total" // old name
	metricGPUPrefixHits  = "vllm:gpu_prefix_cache_hits_total"    // old name
	metricPreemptions    = "vllm:num_preemptions_total"
	metricLoRAInfo       = "vllm:lora_requests_info"
	metricCacheConfig    = "vllm:cache_config_info"
	// The first-token histogram's sum and count only: their sample lines
	// are kept without the family's TYPE line, so they parse as untyped.
	metricTTFTSum   = "vllm:time_to_first_token_seconds_sum"
	metricTTFTCount = "vllm:time_to_first_token_seconds_count"
)

var wantedMetrics = map[string]bool{
	metricRunning: true, metricWaiting: true, metricKVUsage: true, metricGPUUsage: true,
	metricPrefixQueries: true, metricPrefixHits: true, metricGPUPrefixQuery: true, metricGPUPrefixHits: true,
	metricPreemptions: true, metricLoRAInfo: true, metricCacheConfig: true,
	metricTTFTSum: true, metricTTFTCount: true,
}

// Errors of Parse. They are wrapped; test with errors.Is.
var (
	// ErrMalformed means the exposition is not valid Prometheus text.
	ErrMalformed = errors.New("malformed metrics exposition")
	// ErrNotEngine means the exposition holds neither
	// vllm:num_requests_running nor vllm:num_requests_waiting: the address
	// is probably not a vLLM server.
	ErrNotEngine = errors.New("no vllm engine metrics")
	// ErrInvalidValue means a kept metric has a value that cannot be a
	// load figure (negative, NaN or infinite) or a malformed info label.
	ErrInvalidValue = errors.New("invalid engine metric value")
)

// Metrics are the load figures of one vLLM server, summed over its
// engines (data-parallel ranks) and served model names.
type Metrics struct {
	// Running and Waiting are vllm:num_requests_running and
	// vllm:num_requests_waiting.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// KVCacheUsage is the fraction (0..1) of KV blocks in use, averaged over
	// engines: vllm:kv_cache_usage_perc, or the older
	// vllm:gpu_cache_usage_perc when the newer is absent. HasKVCacheUsage
	// is false when neither is exposed.
	KVCacheUsage    float64 `json:"kv_cache_usage"`
	HasKVCacheUsage bool    `json:"has_kv_cache_usage"`
	// PrefixCacheQueries and PrefixCacheHits are the cumulative token
	// counters vllm:prefix_cache_{queries,hits}_total (or their older
	// vllm:gpu_ names). Take differences between scrapes for a hit rate.
	PrefixCacheQueries float64 `json:"prefix_cache_queries"`
	PrefixCacheHits    float64 `json:"prefix_cache_hits"`
	// Preemptions is the cumulative vllm:num_preemptions_total.
	Preemptions float64 `json:"preemptions"`
	// TTFTCount and TTFTSeconds are the cumulative count and sum of the
	// engine's own vllm:time_to_first_token_seconds histogram: the first
	// tokens it measured itself. HasTTFT is false when it exposes none.
	TTFTCount   float64 `json:"ttft_count"`
	TTFTSeconds float64 `json:"ttft_seconds"`
	HasTTFT     bool    `json:"has_ttft"`
	// Engines is the number of distinct engine label values seen.
	Engines int `json:"engines"`
	// LoRA is the newest vllm:lora_requests_info; nil without LoRA.
	LoRA *LoRAInfo `json:"lora,omitempty"`
	// CacheConfig is read from vllm:cache_config_info; nil when absent.
	CacheConfig *CacheConfig `json:"cache_config,omitempty"`
	// KVBlocks is the KV cache size in blocks: num_gpu_blocks of
	// vllm:cache_config_info summed over engines; 0 when unknown.
	KVBlocks int `json:"kv_blocks"`
}

// LoRAInfo is the adapter state vLLM publishes in the labels of
// vllm:lora_requests_info.
type LoRAInfo struct {
	MaxLoRA int      `json:"max_lora"`
	Running []string `json:"running"`
	Waiting []string `json:"waiting"`
}

// CacheConfig is the part of vLLM's cache configuration that decides
// whether warmpath's view of the KV cache can match the engine's.
type CacheConfig struct {
	BlockSize     int    `json:"block_size"`
	NumGPUBlocks  int    `json:"num_gpu_blocks"`
	PrefixCaching bool   `json:"prefix_caching"`
	HashAlgo      string `json:"hash_algo,omitempty"`
}

// Parse reads a vLLM /metrics exposition in the Prometheus text format
// (version 0.0.4, as prometheus_client writes it) and extracts the engine
// load. Lines of other metric families are dropped before the
// expfmt parser sees them, so histograms and process metrics cost almost
// nothing. It never panics on bad input; errors wrap ErrMalformed,
// ErrNotEngine or ErrInvalidValue.
func Parse(exposition []byte) (Metrics, error) {
	var p Parser
	return p.Parse(exposition)
}

// A Parser parses expositions like Parse, reusing its buffer between
// calls. The zero value is ready to use. A Parser must not be used by
// several goroutines at once.
type Parser struct {
	buf []byte
}

// Parse is like the package-level Parse.
func (p *Parser) Parse(exposition []byte) (Metrics, error) {
	p.buf = filterExposition(p.buf[:0], exposition)
	return parseFiltered(p.buf)
}

// filterExposition appends to dst the lines of src that belong to wanted
// metric families: their samples and their HELP and TYPE comments.
func filterExposition(dst, src []byte) []byte {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i+1], src[i+1:]
		} else {
			src = nil
		}
		if wantedMetrics[string(lineMetricName(line))] {
			dst = append(dst, line...)
			if line[len(line)-1] != '\n' {
				dst = append(dst, '\n')
			}
		}
	}
	return dst
}

// lineMetricName returns the metric name a text-format line is about: the
// sample's name, or the name in a HELP or TYPE comment; nil otherwise.
func lineMetricName(line []byte) []byte {
	if len(line) > 0 && line[0] == '#' {
		rest := bytes.TrimLeft(line[1:], " \t")
		switch {
		case bytes.HasPrefix(rest, []byte("HELP")), bytes.HasPrefix(rest, []byte("TYPE")):
			rest = bytes.TrimLeft(rest[4:], " \t")
		default:
			return nil
		}
		line = rest
	}
	end := bytes.IndexAny(line, "{ \t\r\n")
	if end < 0 {
		end = len(line)
	}
	return line[:end]
}

func parseFiltered(text []byte) (Metrics, error) {
	var m Metrics
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	running, okR := fams[metricRunning]
	waiting, okW := fams[metricWaiting]
	if !okR && !okW {
		return m, ErrNotEngine
	}
	engines := map[string]bool{}
	var errs []error
	sumCount := func(f *dto.MetricFamily) int {
		v, err := sum(f)
		if err != nil {
			errs = append(errs, err)
		}
		for _, s := range f.GetMetric() {
			if e, ok := label(s, "engine"); ok {
				engines[e] = true
			}
		}
		return int(math.Round(v))
	}
	if okR {
		m.Running = sumCount(running)
	}
	if okW {
		m.Waiting = sumCount(waiting)
	}
	m.Engines = max(len(engines), 1)
	usage := fams[metricKVUsage]
	if usage == nil {
		usage = fams[metricGPUUsage]
	}
	if usage != nil && len(usage.GetMetric()) > 0 {
		v, err := sum(usage)
		if err != nil {
			errs = append(errs, err)
		}
		m.KVCacheUsage = v / float64(len(usage.GetMetric()))
		m.HasKVCacheUsage = true
	}
	counter := func(name, old string) float64 {
		f := fams[name]
		if f == nil {
			f = fams[old]
		}
		if f == nil {
			return 0
		}
		v, err := sum(f)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	m.PrefixCacheQueries = counter(metricPrefixQueries, metricGPUPrefixQuery)
	m.PrefixCacheHits = counter(metricPrefixHits, metricGPUPrefixHits)
	m.Preemptions = counter(metricPreemptions, metricPreemptions)
	if fams[metricTTFTCount] != nil && fams[metricTTFTSum] != nil {
		m.TTFTCount, m.TTFTSeconds, m.HasTTFT = counter(metricTTFTCount, metricTTFTCount), counter(metricTTFTSum, metricTTFTSum), true
	}
	if f := fams[metricLoRAInfo]; f != nil {
		lora, err := parseLoRA(f)
		if err != nil {
			errs = append(errs, err)
		}
		m.LoRA = lora
	}
	if f := fams[metricCacheConfig]; f != nil {
		cc, err := parseCacheConfig(f)
		if err != nil {
			errs = append(errs, err)
		}
		m.CacheConfig = cc
		for _, s := range f.GetMetric() {
			if v, ok := label(s, "num_gpu_blocks"); ok {
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					m.KVBlocks += n
				}
			}
		}
	}
	if len(errs) > 0 {
		return m, errors.Join(errs...)
	}
	return m, nil
}

// value returns a sample's value whatever its family type.
func value(s *dto.Metric) float64 {
	switch {
	case s.Gauge != nil:
		return s.GetGauge().GetValue()
	case s.Counter != nil:
		return s.GetCounter().GetValue()
	case s.Untyped != nil:
		return s.GetUntyped().GetValue()
	}
	return math.NaN()
}

func sum(f *dto.MetricFamily) (float64, error) {
	var total float64
	for _, s := range f.GetMetric() {
		v := value(s)
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return 0, fmt.Errorf("%w: %s = %v", ErrInvalidValue, f.GetName(), v)
		}
		total += v
	}
	return total, nil
}

func label(s *dto.Metric, name string) (string, bool) {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

// parseLoRA takes the series with the newest timestamp value: vLLM sets the
// value to the time of the update and old label sets linger.
func parseLoRA(f *dto.MetricFamily) (*LoRAInfo, error) {
	var best *dto.Metric
	for _, s := range f.GetMetric() {
		if best == nil || value(s) > value(best) {
			best = s
		}
	}
	if best == nil {
		return nil, nil
	}
	info := &LoRAInfo{Running: []string{}, Waiting: []string{}}
	if v, ok := label(best, "max_lora"); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: %s max_lora %q", ErrInvalidValue, metricLoRAInfo, v)
		}
		info.MaxLoRA = n
	}
	split := func(v string) []string {
		out := []string{}
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out
	}
	if v, ok := label(best, "running_lora_adapters"); ok {
		info.Running = split(v)
	}
	if v, ok := label(best, "waiting_lora_adapters"); ok {
		info.Waiting = split(v)
	}
	return info, nil
}

// parseCacheConfig reads the labels of the first vllm:cache_config_info
// series (the lowest engine; data-parallel ranks share one configuration).
func parseCacheConfig(f *dto.MetricFamily) (*CacheConfig, error) {
	var first *dto.Metric
	firstEngine := ""
	for _, s := range f.GetMetric() {
		e, _ := label(s, "engine")
		if first == nil || e < firstEngine {
			first, firstEngine = s, e
		}
	}
	if first == nil {
		return nil, nil
	}
	cc := &CacheConfig{}
	atoi := func(name string) (int, error) {
		v, ok := label(first, name)
		if !ok || v == "None" || v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %s %s %q", ErrInvalidValue, metricCacheConfig, name, v)
		}
		return n, nil
	}
	var err1, err2 error
	cc.BlockSize, err1 = atoi("block_size")
	cc.NumGPUBlocks, err2 = atoi("num_gpu_blocks")
	if v, ok := label(first, "enable_prefix_caching"); ok {
		cc.PrefixCaching = strings.EqualFold(v, "true")
	}
	cc.HashAlgo, _ = label(first, "prefix_caching_hash_algo")
	if err := errors.Join(err1, err2); err != nil {
		return cc, err
	}
	return cc, nil
}
