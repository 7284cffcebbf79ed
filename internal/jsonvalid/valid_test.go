package jsonvalid

import (
	"encoding/json"
	"strings"
	"testing"
)

// cases are inputs at the edges of the grammar, each checked against
// encoding/json.Valid.
var cases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a" : 1 , "b" : [1, 2.5, -3e+4, 0.0e-0]}`,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,"a":1}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:1}`, `{"a":1 "b":2}`,
	`[1 2]`, `[1,,2]`, `[`, `]`, `{`, `}`, `[}`, `{]`, `[[]]]`, `[[[]]`, `{"a":{"b":[{}]}}`,
	`"x"`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9\uABCDx"`, `"\u00g0"`, `"\u00"`, `"\x"`, `"\'"`,
	"\"\x1f\"", "\"\x7f\"", "\"\xff\xfe\"", "\"tab\there\"", `"é"`,
	`0`, `-0`, `01`, `-01`, `1.`, `.5`, `1.5`, `1e5`, `1E+5`, `1e`, `1e+`, `-`, `--1`, `+1`, `1.5.5`, `0x10`,
	`1 2`, `1,`, `123456789012345678901234567890`, `-1.0e-10`, `1ee5`, `2.e3`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `nullnull`, `[true,false,null]`, `True`, `NULL`,
	" \t\r\n1 \t\r\n", "\v1", "\u00a01",
	`data: {"a":1}`, `{"choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range cases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// TestValidNesting checks encoding/json's depth limit: 10,000 open
// containers are valid, 10,001 are not.
func TestValidNesting(t *testing.T) {
	for _, depth := range []int{maxNesting - 1, maxNesting, maxNesting + 1} {
		for _, pair := range [][2]string{{"[", "]"}, {`{"k":`, "}"}} {
			c := strings.Repeat(pair[0], depth) + "1" + strings.Repeat(pair[1], depth)
			if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
				t.Errorf("%d of %q: Valid %v, encoding/json %v", depth, pair[0], got, want)
			}
		}
	}
}

func TestValidAllocatesNothing(t *testing.T) {
	data := []byte(`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"b":"x"}`)
	if n := testing.AllocsPerRun(100, func() { Valid(data) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", data, got, want)
		}
	})
}

// BenchmarkValid is one streamed chat completion event, the watcher's
// commonest input.
func BenchmarkValid(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.Run("jsonvalid", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			Valid(data)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			json.Valid(data)
		}
	})
}
