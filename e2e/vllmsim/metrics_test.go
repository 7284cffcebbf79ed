package vllmsim

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetricsExposition checks the vLLM-named metrics after two requests
// with the same 100-token prompt (the second hits 96 tokens) against
// testdata/metrics.golden.
func TestMetricsExposition(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.KVEvents.EnableKVCacheEvents = false
	srv := startServer(t, cfg)
	prompt := synthTokens(77, 100)
	checkCompletionStream(t, streamCompletion(t, srv, prompt, 4), 4)
	checkCompletionStream(t, streamCompletion(t, srv, prompt, 4), 4)
	f, err := os.Open("testdata/metrics.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := testutil.GatherAndCompare(srv.Registry(), f,
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
		"vllm:cache_config_info"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(srv.met.ttft); n != 1 {
		t.Errorf("%d TTFT series", n)
	}
}
