package extproc

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"

	"github.com/warmpath/warmpath/internal/jsonvalid"
)

// eventFields are what the watcher reads from one event's data: the
// fields of streamEvent, as json.Unmarshal into it gives them. Byte slices
// point into the data.
type eventFields struct {
	typ         []byte // "type"
	choiceToken bool   // a choice carries text, content, reasoning or tool calls
	deltaToken  bool   // "delta" carries text, thinking or partial JSON
	usage       usageFields
	msgUsage    usageFields // "message"."usage"
	errRaw      []byte      // "error", nil when absent or null
}

// usageFields are a usage object's counts; ok is false for a count the
// object does not have (or has as null).
type usageFields struct {
	prompt, completion, cached, input, output, cache optInt
}

type optInt struct {
	v  int
	ok bool
}

// readEvent returns the fields of data, or an error where json.Unmarshal
// into streamEvent fails. The common events are read by scanEvent without
// decoding them; anything it does not read exactly goes to the decoder.
func readEvent(data []byte) (eventFields, error) {
	if !jsonvalid.Valid(data) {
		var ev streamEvent
		return eventFields{}, json.Unmarshal(data, &ev) // the decoder's own syntax error
	}
	if f, ok := scanEvent(data); ok {
		return f, nil
	}
	return decodeEvent(data)
}

// decodeEvent is readEvent by json.Unmarshal.
func decodeEvent(data []byte) (eventFields, error) {
	var ev streamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return eventFields{}, err
	}
	f := eventFields{typ: []byte(ev.Type), usage: usageOf(ev.Usage)}
	if ev.Type == "" {
		f.typ = nil
	}
	for _, c := range ev.Choices {
		if c.Text != "" || c.Delta.Content != "" || c.Delta.ReasoningContent != "" || c.Delta.Reasoning != "" ||
			(len(c.Delta.ToolCalls) > 0 && string(c.Delta.ToolCalls) != "null") {
			f.choiceToken = true
		}
	}
	if d := ev.Delta; d != nil && (d.Text != "" || d.Thinking != "" || d.PartialJSON != "") {
		f.deltaToken = true
	}
	if ev.Message != nil {
		f.msgUsage = usageOf(ev.Message.Usage)
	}
	if len(ev.Error) > 0 && string(ev.Error) != "null" {
		f.errRaw = ev.Error
	}
	return f, nil
}

func usageOf(u *usageJSON) usageFields {
	if u == nil {
		return usageFields{}
	}
	opt := func(p *int) optInt {
		if p == nil {
			return optInt{}
		}
		return optInt{*p, true}
	}
	f := usageFields{prompt: opt(u.PromptTokens), completion: opt(u.CompletionTokens),
		input: opt(u.InputTokens), output: opt(u.OutputTokens), cache: opt(u.CacheReadInputTokens)}
	if u.PromptTokensDetails != nil {
		f.cached = opt(u.PromptTokensDetails.CachedTokens)
	}
	return f
}

// scanEvent reads the fields of data, which must be valid JSON, in one
// pass and without allocating. ok is false wherever json.Unmarshal might
// read it otherwise: a key written with escapes or non-ASCII bytes, or in
// another case than the field's (the decoder matches names without
// case), a field given twice, a value of another type than the field's,
// a null choice, a count that is not an integer, a type with escapes.
func scanEvent(data []byte) (f eventFields, ok bool) {
	s := eventScanner{d: data}
	ok = s.object(eventKeys, func(key []byte) bool {
		switch string(key) {
		case "type":
			v, null, ok := s.plainString()
			if !null {
				f.typ = v
			}
			return ok
		case "choices":
			return s.choices(&f)
		case "usage":
			return s.usage(&f.usage)
		case "error":
			if v := s.value(); string(v) != "null" {
				f.errRaw = v
			}
			return true
		case "message":
			return s.nullOr('{', func() bool {
				return s.object(messageKeys, func([]byte) bool { return s.usage(&f.msgUsage) })
			})
		default: // delta
			return s.nullOr('{', func() bool {
				return s.object(deltaKeys, func(key []byte) bool {
					if string(key) == "type" {
						_, _, ok := s.plainString()
						return ok
					}
					return s.content(&f.deltaToken)
				})
			})
		}
	})
	s.ws()
	return f, ok && s.i == len(s.d)
}

// The JSON names of streamEvent's fields, by object.
var (
	eventKeys        = []string{"type", "choices", "usage", "error", "message", "delta"}
	messageKeys      = []string{"usage"}
	deltaKeys        = []string{"type", "text", "thinking", "partial_json"}
	choiceKeys       = []string{"text", "delta"}
	choiceDeltaKeys  = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
	usageKeys        = []string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_read_input_tokens", "prompt_tokens_details"}
	usageDetailsKeys = []string{"cached_tokens"}
)

// eventScanner walks valid JSON.
type eventScanner struct {
	d []byte
	i int
}

func (s *eventScanner) ws() {
	for s.i < len(s.d) {
		switch s.d[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next value's first byte, after whitespace.
func (s *eventScanner) peek() byte {
	s.ws()
	if s.i == len(s.d) {
		return 0
	}
	return s.d[s.i]
}

// object reads an object whose fields are named fields (at most 64):
// member reads the value of each, with the scanner at it, and returns
// false to give up. Other keys' values are skipped, unless a key might
// name a field for the decoder, which matches names without case: object
// gives up then, and on a field given twice (the decoder would keep or
// merge the last) or a key with escapes.
func (s *eventScanner) object(fields []string, member func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	var seen uint64
	for {
		c := s.peek()
		if c == '}' {
			s.i++
			return true
		}
		if c == ',' {
			s.i++
			s.ws()
		}
		key, escaped := s.str()
		if escaped {
			return false
		}
		s.ws()
		s.i++ // ':'
		s.ws()
		f := slices.Index(fields, string(key))
		switch {
		case f >= 0:
			if seen&(1<<f) != 0 {
				return false
			}
			seen |= 1 << f
			if !member(key) {
				return false
			}
		case mayName(key, fields):
			return false
		default:
			s.value()
		}
	}
}

// mayName reports whether the decoder might take key for one of fields:
// the same letters in another case, or non-ASCII bytes (its case folding
// maps the Kelvin sign to k and the long s to s).
func mayName(key []byte, fields []string) bool {
	if nonASCII(key) {
		return true
	}
	for _, f := range fields {
		if bytes.EqualFold(key, []byte(f)) {
			return true
		}
	}
	return false
}

// str reads a string and returns its raw bytes and whether it has escapes.
func (s *eventScanner) str() (raw []byte, escaped bool) {
	s.i++ // '"'
	start := s.i
	for {
		switch s.d[s.i] {
		case '"':
			raw = s.d[start:s.i]
			s.i++
			return raw, escaped
		case '\\':
			escaped = true
			s.i += 2
		default:
			s.i++
		}
	}
}

// value skips a value and returns its bytes.
func (s *eventScanner) value() []byte {
	s.ws()
	start := s.i
	depth := 0
	for {
		switch c := s.d[s.i]; c {
		case '"':
			s.str()
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			depth--
			s.i++
		default:
			s.i++
			if depth == 0 {
				// A literal or number: it ends at a delimiter.
				for s.i < len(s.d) && !delim(s.d[s.i]) {
					s.i++
				}
				return s.d[start:s.i]
			}
			continue
		}
		if depth == 0 {
			return s.d[start:s.i]
		}
	}
}

func delim(b byte) bool {
	switch b {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// nullOr reads null, or a value starting with open read by read.
func (s *eventScanner) nullOr(open byte, read func() bool) bool {
	switch s.peek() {
	case 'n':
		s.i += len("null")
		return true
	case open:
		return read()
	}
	return false
}

// plainString reads a string of ASCII without escapes (its bytes are its
// value), or null.
func (s *eventScanner) plainString() (v []byte, null, ok bool) {
	switch s.peek() {
	case 'n':
		s.i += len("null")
		return nil, true, true
	case '"':
		v, escaped := s.str()
		return v, false, !escaped && !nonASCII(v)
	}
	return nil, false, false
}

func nonASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// content reads a string or null and sets *token when it is not empty.
func (s *eventScanner) content(token *bool) bool {
	switch s.peek() {
	case 'n':
		s.i += len("null")
		return true
	case '"':
		if v, _ := s.str(); len(v) > 0 {
			*token = true
		}
		return true
	}
	return false
}

func (s *eventScanner) choices(f *eventFields) bool {
	return s.nullOr('[', func() bool {
		s.i++
		for {
			switch s.peek() {
			case ']':
				s.i++
				return true
			case ',':
				s.i++
			}
			ok := s.object(choiceKeys, func(key []byte) bool {
				if string(key) == "text" {
					return s.content(&f.choiceToken)
				}
				return s.nullOr('{', func() bool {
					return s.object(choiceDeltaKeys, func(key []byte) bool {
						if string(key) != "tool_calls" {
							return s.content(&f.choiceToken)
						}
						if v := s.value(); string(v) != "null" {
							f.choiceToken = true
						}
						return true
					})
				})
			})
			if !ok {
				return false
			}
		}
	})
}

func (s *eventScanner) usage(u *usageFields) bool {
	return s.nullOr('{', func() bool {
		return s.object(usageKeys, func(key []byte) bool {
			switch string(key) {
			case "prompt_tokens":
				return s.count(&u.prompt)
			case "completion_tokens":
				return s.count(&u.completion)
			case "input_tokens":
				return s.count(&u.input)
			case "output_tokens":
				return s.count(&u.output)
			case "cache_read_input_tokens":
				return s.count(&u.cache)
			}
			return s.nullOr('{', func() bool {
				return s.object(usageDetailsKeys, func([]byte) bool { return s.count(&u.cached) })
			})
		})
	})
}

// count reads an integer that fits an int, or null: what the decoder
// reads into an *int (it refuses fractions and exponents, 1.0 and 1e3).
func (s *eventScanner) count(v *optInt) bool {
	if s.peek() == 'n' {
		s.i += len("null")
		return true
	}
	num := s.value()
	neg := num[0] == '-'
	if neg {
		num = num[1:]
	}
	var n uint64
	for _, c := range num {
		if c < '0' || c > '9' || n > (math.MaxUint64-9)/10 {
			return false
		}
		n = n*10 + uint64(c-'0')
	}
	switch {
	case !neg && n <= math.MaxInt:
		*v = optInt{int(n), true}
	case neg && n <= -math.MinInt:
		*v = optInt{-int(n), true} // wraps to MinInt for n = -MinInt
	default:
		return false
	}
	return true
}
