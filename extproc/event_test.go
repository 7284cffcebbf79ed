package extproc

import (
	"bytes"
	"strings"
	"testing"
)

// eventSeeds are events as vLLM and Anthropic send them, and the shapes
// scanEvent must leave to the decoder.
var eventSeeds = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Héllo \"q\" 世界"},"finish_reason":null}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":null}}]}`,
	`{"id":"c1","choices":[{"index":0,"text":" completion","finish_reason":null}]}`,
	`{"id":"c1","choices":[],"usage":{"prompt_tokens":640,"total_tokens":650,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":624}}}`,
	`{"usage":{"prompt_tokens":-0,"completion_tokens":9223372036854775807,"prompt_tokens_details":null}}`,
	`{"usage":{"prompt_tokens":-9223372036854775808}}`,
	`{"usage":{"prompt_tokens":9223372036854775808}}`,
	`{"usage":{"prompt_tokens":1.0}}`,
	`{"usage":{"prompt_tokens":1e3}}`,
	`{"usage":{"prompt_tokens":"1"}}`,
	`{"type":"message_start","message":{"id":"m1","usage":{"input_tokens":100,"output_tokens":0,"cache_read_input_tokens":64}}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`,
	`{"type": "ping"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	`{"error":"boom"}`,
	`{"error":null,"choices":null,"usage":null,"message":null,"delta":null,"type":null}`,
	` { "choices" : [ { "delta" : { "content" : "x" } } , { "text" : "" } ] } `,
	`{"Choices":[{"delta":{"content":"x"}}]}`,
	`{"choices":[{"Delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"CONTENT":"x"}}]}`,
	`{"choices":[{"delta":{"content":"x"}}],"choices":[]}`,
	`{"choices":[{"delta":{"content":"x","content":""}}]}`,
	`{"choices":[null]}`,
	`{"choices":{}}`,
	`{"choices":[{"delta":{"content":5}}]}`,
	"{\"\u212aey\":1,\"u\u017fage\":{\"prompt_tokens\":1}}",
	`{"t\u0079pe":"message_stop"}`,
	`{"type":"message\u005fstop"}`,
	`{"type":5}`,
	`{"message":{"usage":{"input_tokens":1}},"message":{"id":"x"}}`,
	`{"delta":{"type":1}}`,
	`null`,
	`[]`,
	`"x"`,
	`{"a":[1,{"b":"}"}],"c":true,"d":false,"e":null,"f":-1.5e+3}`,
	`{not json`,
	``,
}

// sameFields reports whether scanEvent's reading equals the decoder's.
func sameFields(a, b eventFields) bool {
	return bytes.Equal(a.typ, b.typ) && bytes.Equal(a.errRaw, b.errRaw) && a.choiceToken == b.choiceToken &&
		a.deltaToken == b.deltaToken && a.usage == b.usage && a.msgUsage == b.msgUsage
}

// TestReadEventMatchesDecoder checks readEvent against json.Unmarshal into
// streamEvent on every seed: the same fields, or an error from both.
func TestReadEventMatchesDecoder(t *testing.T) {
	t.Parallel()
	for _, data := range eventSeeds {
		got, gerr := readEvent([]byte(data))
		want, werr := decodeEvent([]byte(data))
		if (gerr != nil) != (werr != nil) || gerr == nil && !sameFields(got, want) {
			t.Errorf("%s:\n got %+v, %v\nwant %+v, %v", data, got, gerr, want, werr)
		}
	}
}

// TestScanEventReadsCommonEvents checks that the events streams are made
// of take the scanner's path, not the decoder's.
func TestScanEventReadsCommonEvents(t *testing.T) {
	t.Parallel()
	for _, data := range eventSeeds[:20] {
		if strings.Contains(data, `"1"`) || strings.Contains(data, "1.0") || strings.Contains(data, "1e3") || strings.Contains(data, "9223372036854775808}") {
			continue // counts the decoder refuses
		}
		if _, ok := scanEvent([]byte(data)); !ok {
			t.Errorf("scanEvent gave %s to the decoder", data)
		}
	}
}

func FuzzReadEvent(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		got, gerr := readEvent([]byte(data))
		want, werr := decodeEvent([]byte(data))
		if (gerr != nil) != (werr != nil) || gerr == nil && !sameFields(got, want) {
			t.Fatalf("%q:\n got %+v, %v\nwant %+v, %v", data, got, gerr, want, werr)
		}
	})
}

func BenchmarkReadEvent(b *testing.B) {
	data := []byte(eventSeeds[1])
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
