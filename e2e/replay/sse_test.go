package replay

import (
	"errors"
	"strings"
	"testing"
)

type sseEv struct{ event, data string }

// parseAll feeds input in pieces cut at the given positions and returns
// the events and the finish error.
func parseAll(input string, cuts ...int) ([]sseEv, error) {
	var p sseParser
	var got []sseEv
	emit := func(event string, data []byte) error {
		got = append(got, sseEv{event, string(data)})
		return nil
	}
	prev := 0
	for _, c := range append(cuts, len(input)) {
		if err := p.feed([]byte(input[prev:c]), emit); err != nil {
			return got, err
		}
		prev = c
	}
	return got, p.finish()
}

func TestSSEParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		input   string
		want    []sseEv
		wantErr error
	}{
		{"openai chunks", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []sseEv{{"", `{"a":1}`}, {"", "[DONE]"}}, nil},
		{"crlf endings", "data: x\r\n\r\ndata: y\r\n\r\n", []sseEv{{"", "x"}, {"", "y"}}, nil},
		{"cr endings", "data: x\r\rdata: y\r\r", []sseEv{{"", "x"}, {"", "y"}}, nil},
		{"named event", "event: message_stop\ndata: {}\n\n", []sseEv{{"message_stop", "{}"}}, nil},
		{"event name resets", "event: a\ndata: 1\n\ndata: 2\n\n", []sseEv{{"a", "1"}, {"", "2"}}, nil},
		{"multi-line data", "data: a\ndata: b\n\n", []sseEv{{"", "a\nb"}}, nil},
		{"no space after colon", "data:x\n\n", []sseEv{{"", "x"}}, nil},
		{"only one space stripped", "data:  x\n\n", []sseEv{{"", " x"}}, nil},
		{"comments and other fields ignored", ": ping\nid: 7\nretry: 10\ndata: x\n\n", []sseEv{{"", "x"}}, nil},
		{"blank lines without data", "\n\n\nevent: e\n\ndata: x\n\n", []sseEv{{"", "x"}}, nil},
		{"field without colon", "data\n\n", []sseEv{{"", ""}}, nil},
		{"truncated event", "data: x\n", nil, errTruncated},
		{"truncated line", "data: x\n\ndata: {\"par", []sseEv{{"", "x"}}, errTruncated},
		{"empty stream", "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Every split position must give the same events.
			for cut := 0; cut <= len(tt.input); cut++ {
				got, err := parseAll(tt.input, cut)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("cut %d: err = %v, want %v", cut, err, tt.wantErr)
				}
				if !equalEvents(got, tt.want) {
					t.Fatalf("cut %d: events = %q, want %q", cut, got, tt.want)
				}
			}
			// And byte by byte.
			cuts := make([]int, 0, len(tt.input))
			for i := 1; i < len(tt.input); i++ {
				cuts = append(cuts, i)
			}
			got, err := parseAll(tt.input, cuts...)
			if !errors.Is(err, tt.wantErr) || !equalEvents(got, tt.want) {
				t.Fatalf("byte by byte: events = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestSSEParserTooLarge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input string
	}{
		{"one long line", "data: " + strings.Repeat("x", maxEventBytes+1)},
		{"many data lines", strings.Repeat("data: "+strings.Repeat("x", 1<<20)+"\n", 9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var p sseParser
			err := p.feed([]byte(tt.input), func(string, []byte) error { return nil })
			if !errors.Is(err, errEventTooLarge) {
				t.Fatalf("err = %v, want errEventTooLarge", err)
			}
		})
	}
}

func TestSSEParserEmitError(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	var p sseParser
	n := 0
	err := p.feed([]byte("data: 1\n\ndata: 2\n\n"), func(string, []byte) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err = %v after %d events, want stop after 1", err, n)
	}
}

func equalEvents(a, b []sseEv) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzSSEParser checks that the parser never panics and that splitting the
// input anywhere never changes the events or the verdict.
func FuzzSSEParser(f *testing.F) {
	seeds := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
		"event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n",
		"data: a\rdata: b\r\r: comment\n\n",
		"data:\n\n",
		"\r\n\r",
		"data: x",
	}
	for _, s := range seeds {
		f.Add(s, uint16(3))
	}
	f.Fuzz(func(t *testing.T, input string, cut uint16) {
		whole, errWhole := parseAll(input)
		c := int(cut) % (len(input) + 1)
		split, errSplit := parseAll(input, c)
		if (errWhole == nil) != (errSplit == nil) || !equalEvents(whole, split) {
			t.Fatalf("cut %d: whole %q (%v), split %q (%v)", c, whole, errWhole, split, errSplit)
		}
	})
}
