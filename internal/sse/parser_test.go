package sse

import (
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

type event struct{ name, data string }

// run feeds chunks to p, ends the body with Finish (or Flush when lenient)
// and returns the events and the first error.
func run(p *Parser, chunks []string, lenient bool) ([]event, error) {
	var got []event
	emit := func(name, data []byte) error {
		got = append(got, event{string(name), string(data)})
		return nil
	}
	for _, c := range chunks {
		if err := p.Feed([]byte(c), emit); err != nil {
			return got, err
		}
	}
	if lenient {
		return got, p.Flush(emit)
	}
	return got, p.Finish()
}

// splitCase is a body and what parsing it must give however it is split.
type splitCase struct {
	name    string
	input   string
	want    []event
	wantErr error
}

// testSplits runs each case as a parallel subtest that parses the input
// with the bound max, ending with Flush when lenient, whole, cut once at
// every position (with an empty chunk fed at the cut) and byte by byte; each
// must give the case's events and an error that errors.Is its wantErr.
func testSplits(t *testing.T, max int, lenient bool, tests []splitCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check := func(how string, chunks []string) {
				t.Helper()
				got, err := run(&Parser{MaxEventBytes: max}, chunks, lenient)
				if !errors.Is(err, tt.wantErr) || !slices.Equal(got, tt.want) {
					t.Fatalf("%s: got %q, %v; want %q, %v", how, got, err, tt.want, tt.wantErr)
				}
			}
			check("whole", []string{tt.input})
			for c := 0; c <= len(tt.input); c++ {
				check("cut at "+strconv.Itoa(c), []string{tt.input[:c], "", tt.input[c:]})
			}
			bytewise := make([]string, len(tt.input))
			for i := range len(tt.input) {
				bytewise[i] = tt.input[i : i+1]
			}
			check("byte by byte", bytewise)
		})
	}
}

func TestParser(t *testing.T) {
	t.Parallel()
	testSplits(t, 0, false, []splitCase{
		{"lf endings", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []event{{"", `{"a":1}`}, {"", "[DONE]"}}, nil},
		{"crlf endings", "data: x\r\n\r\ndata: y\r\n\r\n", []event{{"", "x"}, {"", "y"}}, nil},
		{"cr endings", "data: x\r\rdata: y\r\r", []event{{"", "x"}, {"", "y"}}, nil},
		{"mixed endings", "data: a\r\ndata: b\rdata: c\n\r\n", []event{{"", "a\nb\nc"}}, nil},
		{"lf cr is two line ends", "data: x\n\rdata: y\n\n", []event{{"", "x"}, {"", "y"}}, nil},
		{"named event", "event: message_stop\ndata: {}\n\n", []event{{"message_stop", "{}"}}, nil},
		{"event name after data", "data: {}\nevent: ping\n\n", []event{{"ping", "{}"}}, nil},
		{"last event name wins", "event: a\nevent: b\ndata: x\n\n", []event{{"b", "x"}}, nil},
		{"event name resets after dispatch", "event: a\ndata: 1\n\ndata: 2\n\n", []event{{"a", "1"}, {"", "2"}}, nil},
		{"event without data is dropped with its name", "event: a\n\ndata: 1\n\n", []event{{"", "1"}}, nil},
		{"multi-line data", "data: a\ndata: b\n\n", []event{{"", "a\nb"}}, nil},
		{"empty data lines kept", "data: a\ndata:\ndata\ndata: b\n\n", []event{{"", "a\n\n\nb"}}, nil},
		{"empty data", "data:\n\n", []event{{"", ""}}, nil},
		{"field without colon", "data\n\n", []event{{"", ""}}, nil},
		{"no space after colon", "data:x\n\n", []event{{"", "x"}}, nil},
		{"only one space stripped", "data:  x\n\n", []event{{"", " x"}}, nil},
		{"tab not stripped", "data:\tx\n\n", []event{{"", "\tx"}}, nil},
		{"colons and utf-8 in the value", "data: {\"é\":\"世:界\"}\n\n", []event{{"", `{"é":"世:界"}`}}, nil},
		{"comments", ": ping\n\n:\ndata: a\n: between\ndata: b\n\n", []event{{"", "a\nb"}}, nil},
		{"other fields ignored", "id: 7\nretry: 10\nfoo: bar\nData: no\ndata : no\ndata: x\n\n", []event{{"", "x"}}, nil},
		{"blank lines without data", "\n\n\r\n\r\ndata: x\n\n\n", []event{{"", "x"}}, nil},
		{"event name alone at the end", "data: x\n\nevent: e\n", []event{{"", "x"}}, nil},
		{"truncated event", "data: x\n", nil, ErrTruncated},
		{"truncated after cr", "data: x\r", nil, ErrTruncated},
		{"truncated line", "data: x\n\ndata: {\"par", []event{{"", "x"}}, ErrTruncated},
		{"truncated comment", ": keep-alive", nil, ErrTruncated},
		{"empty stream", "", nil, nil},
	})
}

// TestParserChunks pins chunkings that matter: a CR that ends one chunk
// and an LF that starts the next are one line ending.
func TestParserChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		chunks  []string
		want    []event
		wantErr error
	}{
		{"cr at chunk end, lf next", []string{"data: x\r", "\ndata: y\r", "\n\r", "\n"}, []event{{"", "x\ny"}}, nil},
		{"cr at chunk end, lf next is no blank line", []string{"data: x\r", "\n"}, nil, ErrTruncated},
		{"cr at chunk end, empty chunks, lf", []string{"data: x\r", "", "", "\n", "\r\n"}, []event{{"", "x"}}, nil},
		{"cr at chunk end, cr next is a blank line", []string{"data: x\r", "\r"}, []event{{"", "x"}}, nil},
		{"cr at chunk end, data next", []string{"data: x\r", "data: y\r\r"}, []event{{"", "x\ny"}}, nil},
		{"line across three chunks", []string{"da", "ta: {\"a\"", ":1}", "\n\n"}, []event{{"", `{"a":1}`}}, nil},
		{"event name across chunks", []string{"event: message", "_stop\r", "\ndata: {}\r\n", "\r\n"}, []event{{"message_stop", "{}"}}, nil},
		{"many events in one chunk", []string{"data: 1\n\ndata: 2\n\nevent: e\ndata: 3\n\n"}, []event{{"", "1"}, {"", "2"}, {"e", "3"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := run(&Parser{}, tt.chunks, false)
			if !errors.Is(err, tt.wantErr) || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParserFlush(t *testing.T) {
	t.Parallel()
	testSplits(t, 0, true, []splitCase{
		{"complete stream", "event: a\ndata: 1\n\ndata: 2\n\n", []event{{"a", "1"}, {"", "2"}}, nil},
		{"pending event emitted", "event: a\ndata: x\n", []event{{"a", "x"}}, nil},
		{"partial line taken as complete", "data: x\n\ndata: [DONE]", []event{{"", "x"}, {"", "[DONE]"}}, nil},
		{"partial line joins pending data", "data: a\ndata: b", []event{{"", "a\nb"}}, nil},
		{"partial comment", "data: x\n\n: ping", []event{{"", "x"}}, nil},
		{"event name alone", "event: e\n", nil, nil},
		{"empty stream", "", nil, nil},
	})
}

// TestParserReuse checks that Finish and Flush leave nothing of one body
// for the next.
func TestParserReuse(t *testing.T) {
	t.Parallel()
	for _, lenient := range []bool{false, true} {
		var p Parser
		_, _ = run(&p, []string{"event: a\ndata: x\ndata: {\"part\r"}, lenient)
		got, err := run(&p, []string{"\ndata: y\n\n"}, false)
		if want := []event{{"", "y"}}; err != nil || !slices.Equal(got, want) {
			t.Fatalf("lenient %v: second body got %q, %v; want %q", lenient, got, err, want)
		}
	}
}

// TestParserMaxEventBytes bounds lines and events at 10 bytes.
func TestParserMaxEventBytes(t *testing.T) {
	t.Parallel()
	testSplits(t, 10, false, []splitCase{
		{"line at the bound", "data: abcd\n\n", []event{{"", "abcd"}}, nil},
		{"line over the bound", "data: abcde\n\n", nil, ErrEventTooLarge},
		{"partial line over the bound", "data: abcde", nil, ErrEventTooLarge},
		{"comment over the bound", ": keep-alive\n", nil, ErrEventTooLarge},
		{"line ending not counted", "data: abcd\r\n\r\n", []event{{"", "abcd"}}, nil},
		{"data at the bound", "data:12345\ndata:6789\n\n", []event{{"", "12345\n6789"}}, nil},
		{"data over the bound", "data:12345\ndata:67890\n\n", nil, ErrEventTooLarge},
		{"bound is per event", "data:12345\n\ndata:67890\n\n", []event{{"", "12345"}, {"", "67890"}}, nil},
		{"events before the oversized one emitted", "data: 1\n\ndata: 0123456789\n\n", []event{{"", "1"}}, ErrEventTooLarge},
	})
}

// TestParserLarge feeds events far larger than a chunk, in 64 KiB pieces.
func TestParserLarge(t *testing.T) {
	t.Parallel()
	line := strings.Repeat("x", 3<<20)
	tests := []struct {
		name    string
		max     int
		input   string
		want    []event
		wantErr error
	}{
		{"unbounded long line", 0, "data: " + line + "\n\n", []event{{"", line}}, nil},
		{"unbounded many lines", 0, strings.Repeat("data: "+line+"\n", 3) + "\n", []event{{"", line + "\n" + line + "\n" + line}}, nil},
		{"bounded long line", 8 << 20, "data: " + line + line + line + "\n", nil, ErrEventTooLarge},
		{"bounded many lines", 8 << 20, strings.Repeat("data: "+line+"\n", 3) + "\n", nil, ErrEventTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chunks []string
			for off := 0; off < len(tt.input); off += 64 << 10 {
				chunks = append(chunks, tt.input[off:min(off+64<<10, len(tt.input))])
			}
			got, err := run(&Parser{MaxEventBytes: tt.max}, chunks, false)
			if !errors.Is(err, tt.wantErr) || !slices.Equal(got, tt.want) {
				t.Fatalf("got %d events, %v; want %d, %v", len(got), err, len(tt.want), tt.wantErr)
			}
		})
	}
}

func TestParserEmitError(t *testing.T) {
	t.Parallel()
	stop := errors.New("stop")
	n := 0
	emit := func(_, _ []byte) error { n++; return stop }
	var p Parser
	if err := p.Feed([]byte("data: 1\n\ndata: 2\n\n"), emit); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Feed: %v after %d events, want stop after 1", err, n)
	}
	n = 0
	_ = p.Feed([]byte("data: 3\n"), emit)
	if err := p.Flush(emit); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Flush: %v after %d events, want stop after 1", err, n)
	}
}

// TestParserAllocs checks the hot path: once its buffers have grown, the
// Parser allocates nothing per event, named or not, whole or split.
func TestParserAllocs(t *testing.T) {
	body := []byte("event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\r\ndata: \"delta\":{\"text\":\"Hi\"}}\r\n\r\n" +
		": ping\n\ndata: {\"choices\":[{\"delta\":{\"content\":\" token\"}}]}\n\n")
	var p Parser
	emit := func(_, _ []byte) error { return nil }
	feed := func() {
		for _, c := range [][]byte{body[:40], body[40:41], body[41:]} {
			if err := p.Feed(c, emit); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := testing.AllocsPerRun(100, feed); n != 0 {
		t.Fatalf("%v allocations per body, want 0", n)
	}
}

var lineEnd = regexp.MustCompile("\r\n|\r|\n")

// reference is the event-stream rules written plainly for a whole body, the
// model FuzzParser holds the Parser to.
func reference(body string, max int, lenient bool) ([]event, error) {
	lines := lineEnd.Split(body, -1)
	partial := lines[len(lines)-1] // "" when the body ends in a line ending
	lines = lines[:len(lines)-1]
	var (
		got     []event
		name    string
		data    []string
		hasData bool
	)
	apply := func(line string) error {
		if max > 0 && len(line) > max {
			return ErrEventTooLarge
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if hasData {
				got = append(got, event{name, strings.Join(data, "\n")})
			}
			name, data, hasData = "", nil, false
		case field == "data":
			if max > 0 && len(strings.Join(append(data, value), "\n")) > max {
				return ErrEventTooLarge
			}
			data, hasData = append(data, value), true
		case field == "event":
			name = value
		}
		return nil
	}
	for _, l := range lines {
		if err := apply(l); err != nil {
			return got, err
		}
	}
	if max > 0 && len(partial) > max {
		return got, ErrEventTooLarge
	}
	if !lenient {
		if partial != "" || hasData {
			return got, ErrTruncated
		}
		return got, nil
	}
	if partial != "" {
		if err := apply(partial); err != nil {
			return got, err
		}
	}
	return got, apply("")
}

// FuzzParser checks that the Parser never panics and that, whatever the
// chunk sizes, bound and ending, it gives the events and verdict of the
// whole body fed at once and of the reference model.
func FuzzParser(f *testing.F) {
	seeds := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
		"event: message_start\r\ndata: {\"type\":\"message_start\"}\r\n\r\n",
		"data: a\rdata: b\r\r: comment\n\n",
		"event: e\ndata\ndata:\ndata:  x\nid: 1\n\n",
		"data:\n\n",
		"\r\n\r",
		"data: x\r",
		"data: x",
	}
	for i, s := range seeds {
		f.Add(s, []byte{byte(i), 1, 0, 7}, uint8(i*3), i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, body string, sizes []byte, max uint8, lenient bool) {
		want, wantErr := reference(body, int(max), lenient)
		whole, wholeErr := run(&Parser{MaxEventBytes: int(max)}, []string{body}, lenient)
		// Chunk lengths cycle through sizes; a 0 feeds an empty chunk.
		chunks := []string{"", body}
		if slices.ContainsFunc(sizes, func(n byte) bool { return n > 0 }) {
			chunks = chunks[:0]
			for off, i := 0, 0; off < len(body); i++ {
				n := min(int(sizes[i%len(sizes)]), len(body)-off)
				chunks = append(chunks, body[off:off+n])
				off += n
			}
		}
		split, splitErr := run(&Parser{MaxEventBytes: int(max)}, chunks, lenient)
		for _, r := range []struct {
			how string
			got []event
			err error
		}{{"whole", whole, wholeErr}, {"split", split, splitErr}} {
			if !slices.Equal(r.got, want) || !errors.Is(r.err, wantErr) || (r.err == nil) != (wantErr == nil) {
				t.Fatalf("%s (chunks %q): got %q, %v; reference %q, %v", r.how, chunks, r.got, r.err, want, wantErr)
			}
		}
	})
}
