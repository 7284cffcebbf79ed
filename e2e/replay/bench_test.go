package replay

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// chatStream returns a vLLM-shaped chat stream of n content chunks.
func chatStream(n int) []byte {
	var b strings.Builder
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	for range n {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":640,"completion_tokens":1000,"total_tokens":1640,"prompt_tokens_details":{"cached_tokens":512}}}` + "\n\ndata: [DONE]\n\n")
	return []byte(b.String())
}

// BenchmarkReadStream measures the client's whole per-response work (split,
// decode, timestamp) for a 1000-chunk reply; ns/chunk is the measuring
// overhead added to each token.
func BenchmarkReadStream(b *testing.B) {
	stream := chatStream(1000)
	clock := realClock{}
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		st, _, err := readStream(io.MultiReader(bytes.NewReader(stream)), APIChat, clock)
		if err != nil || st.contentDelta != 1000 {
			b.Fatalf("%v, %d deltas", err, st.contentDelta)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/chunk")
}

// BenchmarkGenerateSynthetic measures building a 1000-request workload of
// 1K-token prompts behind 8 shared 2K-token prefixes.
func BenchmarkGenerateSynthetic(b *testing.B) {
	w := WorkloadConfig{Kind: WorkloadSynthetic, Model: "m", Synthetic: SyntheticConfig{
		Requests: 1000, Prompt: Dist{Mean: 1024}, Output: Dist{Mean: 128}, PrefixTokens: 2048, PrefixCount: 8}}
	for b.Loop() {
		if _, err := Generate(w, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestBody measures encoding one turn of a coding session:
// a 20K-token project context plus three earlier turns.
func BenchmarkRequestBody(b *testing.B) {
	s := Session{Prefix: genText(newRand(1), 20000), Accumulate: true}
	conv := &conversation{}
	for i := range 4 {
		s.Turns = append(s.Turns, Turn{User: genText(newRand(2, uint64(i)), 200), MaxTokens: 100})
		if i < 3 {
			conv.turns = append(conv.turns, exchange{user: s.Turns[i].User, reply: genText(newRand(3, uint64(i)), 300).String()})
		}
	}
	w := WorkloadConfig{Model: "m", API: APIChat}
	for b.Loop() {
		if _, err := requestBody(&w, &s, 3, conv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerateMooncake measures expanding the committed 100-request
// Mooncake excerpt (about 1.5 M prompt tokens) into sessions.
func BenchmarkGenerateMooncake(b *testing.B) {
	w := WorkloadConfig{Kind: WorkloadMooncake, Model: "m", API: APICompletions, TokenIDs: true,
		Trace: TraceConfig{Path: "testdata/mooncake-synthetic-head100.jsonl"}}
	for b.Loop() {
		if _, err := Generate(w, 1); err != nil {
			b.Fatal(err)
		}
	}
}
