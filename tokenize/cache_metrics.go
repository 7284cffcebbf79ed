package tokenize

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// cacheStats is what both of the package's request caches report.
type cacheStats struct {
	hits, misses   uint64
	entries, bytes int
}

// cacheDescs are the descriptions of one kind of cache's metrics, all
// under warmpath_<name>_: lookups_total{result}, entries, bytes.
type cacheDescs struct {
	lookups, entries, bytes *prometheus.Desc
}

func newCacheDescs(name, what string, labels []string) cacheDescs {
	return cacheDescs{
		lookups: prometheus.NewDesc("warmpath_"+name+"_lookups_total",
			"Lookups in the "+what+", by result: hit (reused) or miss.", slices.Concat(labels, []string{"result"}), nil),
		entries: prometheus.NewDesc("warmpath_"+name+"_entries", "Entries the "+what+" holds.", labels, nil),
		bytes:   prometheus.NewDesc("warmpath_"+name+"_bytes", "Bytes the "+what+" holds, by its own accounting.", labels, nil),
	}
}

func (d cacheDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.lookups
	ch <- d.entries
	ch <- d.bytes
}

func (d cacheDescs) collect(ch chan<- prometheus.Metric, s cacheStats, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d.lookups, prometheus.CounterValue, float64(s.hits), slices.Concat(labels, []string{"hit"})...)
	ch <- prometheus.MustNewConstMetric(d.lookups, prometheus.CounterValue, float64(s.misses), slices.Concat(labels, []string{"miss"})...)
	ch <- prometheus.MustNewConstMetric(d.entries, prometheus.GaugeValue, float64(s.entries), labels...)
	ch <- prometheus.MustNewConstMetric(d.bytes, prometheus.GaugeValue, float64(s.bytes), labels...)
}

// Collector exports the parser's message cache, read at each scrape:
// warmpath_message_cache_lookups_total{result} (one per message or other
// element of a top-level array long enough to be looked up),
// warmpath_message_cache_entries and warmpath_message_cache_bytes. A nil
// parser reports nothing.
func (p *BodyParser) Collector() prometheus.Collector {
	return bodyCollector{p, newCacheDescs("message_cache", "parsed-message cache", nil)}
}

type bodyCollector struct {
	p *BodyParser
	d cacheDescs
}

func (c bodyCollector) Describe(ch chan<- *prometheus.Desc) { c.d.describe(ch) }

func (c bodyCollector) Collect(ch chan<- prometheus.Metric) {
	if c.p == nil {
		return
	}
	s := c.p.Stats()
	c.d.collect(ch, cacheStats{s.Hits, s.Misses, s.Entries, s.Bytes})
}

// promptCaches exports the prompt prefix cache of every local pipeline:
// warmpath_prompt_cache_lookups_total{model,result} (one per prompt long
// enough to be looked up), warmpath_prompt_cache_entries{model},
// warmpath_prompt_cache_bytes{model} and
// warmpath_prompt_cache_retokenized_bytes_total{model}, the bytes after
// the reused part that hits tokenized again.
type promptCaches struct {
	d    cacheDescs
	tail *prometheus.Desc

	mu      sync.Mutex
	byModel map[string]*PrefixCache
}

func newPromptCaches() *promptCaches {
	return &promptCaches{
		d: newCacheDescs("prompt_cache", "prompt prefix cache", []string{"model"}),
		tail: prometheus.NewDesc("warmpath_prompt_cache_retokenized_bytes_total",
			"Bytes of prompts that hit the prompt prefix cache tokenized after the part they reused.", []string{"model"}, nil),
		byModel: map[string]*PrefixCache{},
	}
}

func (c *promptCaches) add(model string, pc *PrefixCache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byModel[model] = pc
}

func (c *promptCaches) Describe(ch chan<- *prometheus.Desc) {
	c.d.describe(ch)
	ch <- c.tail
}

func (c *promptCaches) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for model, pc := range c.byModel {
		s := pc.Stats()
		c.d.collect(ch, cacheStats{s.Hits, s.Misses, s.Entries, s.Bytes}, model)
		ch <- prometheus.MustNewConstMetric(c.tail, prometheus.CounterValue, float64(s.TailBytes), model)
	}
}

// renderMemos exports the render memo of every local pipeline's chat
// template: warmpath_render_memo_lookups_total{model,result} (one per
// message iteration of a memoized loop: hit when it replayed),
// warmpath_render_memo_entries{model} and warmpath_render_memo_bytes{model}.
type renderMemos struct {
	d cacheDescs

	mu      sync.Mutex
	byModel map[string]*ChatTemplate
}

func newRenderMemos() *renderMemos {
	return &renderMemos{d: newCacheDescs("render_memo", "chat template's render memo", []string{"model"}), byModel: map[string]*ChatTemplate{}}
}

func (c *renderMemos) add(model string, t *ChatTemplate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byModel[model] = t
}

func (c *renderMemos) Describe(ch chan<- *prometheus.Desc) { c.d.describe(ch) }

func (c *renderMemos) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for model, t := range c.byModel {
		s := t.memoStats()
		c.d.collect(ch, cacheStats{uint64(s.Hits), uint64(s.Misses), s.Entries, s.Bytes}, model)
	}
}
