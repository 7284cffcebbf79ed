package vllmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMainHelpDocumentsContractFlags checks that --help lists every flag
// DESIGN.md §4 promises to scripts, and every flag the FlagSet defines.
func TestMainHelpDocumentsContractFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := Main(t.Context(), []string{"--help"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	help := errb.String()
	for _, f := range []string{"host", "port", "served-model-name", "tokenizer", "block-size", "num-gpu-blocks-override",
		"max-num-batched-tokens", "max-num-seqs", "kv-events-config", "data-parallel-size", "profile", "step-overhead-ms",
		"prefill-us-per-token", "decode-us-per-seq", "context-ns-per-token", "time-scale", "seed", "kv-events-wire"} {
		if !strings.Contains(help, "-"+f+" ") && !strings.Contains(help, "-"+f+"\n") {
			t.Errorf("--help does not document --%s", f)
		}
	}
	for _, p := range Profiles() {
		if !strings.Contains(help, p.Name) {
			t.Errorf("--help does not name profile %s", p.Name)
		}
	}
}

func TestMainRejectsBadFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown profile", []string{"--profile", "tpu"}, "unknown profile"},
		{"bad wire", []string{"--kv-events-wire", "json"}, "unknown kv-events wire"},
		{"bad kv json", []string{"--kv-events-config", `{"enable_kv_cache_events":1}`}, "kv-events-config"},
		{"unknown kv field", []string{"--kv-events-config", `{"endpont":"x"}`}, "unknown field"},
		{"hash algo", []string{"--prefix-caching-hash-algo", "sha256"}, "only sha256_cbor"},
		{"tokenizer", []string{"--tokenizer", "/nonexistent"}, "--tokenizer /nonexistent"},
		{"negative coefficient", []string{"--prefill-us-per-token", "-1"}, "must not be negative"},
		{"zero time scale", []string{"--time-scale", "0"}, "time scale"},
		{"fraction", []string{"--fault-error-fraction", "2"}, "within [0, 1]"},
		{"joined", []string{"--profile", "tpu", "--time-scale", "0"}, "time scale"},
		{"positional", []string{"serve"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Main(t.Context(), append(tt.args, "--port", "0"), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Main(%q) = %v, want error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestMainServesAndPrintsReady runs the command on :0 listeners with KV
// events, reads the ready line and checks the HTTP API and metrics.
func TestMainServesAndPrintsReady(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"--port", "0", "--profile", "test", "--time-scale", "50", "--served-model-name", "qwen3,alias",
			"--block-size", "32", "--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}`,
			"--data-parallel-size", "2"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Msg      string   `json:"msg"`
		HTTP     string   `json:"http"`
		KVEvents []string `json:"kv_events"`
		KVReplay []string `json:"kv_replay"`
	}
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.Msg != "vllm-sim ready" || len(ready.KVEvents) != 2 || len(ready.KVReplay) != 2 {
		t.Fatalf("ready line %q: %v", line, err)
	}
	go io.Copy(io.Discard, pr)
	resp := post(t, t.Context(), ready.HTTP, "/v1/completions", `{"model":"alias","prompt":[[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33],[5,6]],"max_tokens":2}`)
	var body struct {
		Model   string `json:"model"`
		Choices []struct {
			Index        int    `json:"index"`
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage usageMsg `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body.Model != "alias" || len(body.Choices) != 2 || body.Choices[1].Index != 1 ||
		body.Choices[0].FinishReason != "length" || body.Usage.PromptTokens != 35 || body.Usage.CompletionTokens != 4 {
		t.Errorf("batched completion: status %d, %+v", resp.StatusCode, body)
	}
	mresp, err := http.Get("http://" + ready.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`vllm:cache_config_info{block_size="32",cache_dtype="auto",enable_prefix_caching="True",engine="1",gpu_memory_utilization="0.9",num_gpu_blocks="585",prefix_caching_hash_algo="sha256_cbor"} 1`,
		`vllm:num_requests_running{engine="0",model_name="qwen3"}`,
		`vllm:prefix_cache_queries_total{engine="`,
		`vllm:time_to_first_token_seconds_bucket{engine="`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Main after cancel: %v", err)
	}
}
