package tokenize

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// tokenDecoder turns token strings back into text, as the Rust library's decoder
// chain does.
type tokenDecoder interface {
	decode(toks []string) string
}

// decodeStep is one decoder of a Sequence: it maps the token list to a new
// token list (decode_chain in the Rust library).
type decodeStep func(toks []string) []string

type decodeChain []decodeStep

func (c decodeChain) decode(toks []string) string {
	for _, st := range c {
		toks = st(toks)
	}
	return strings.Join(toks, "")
}

func parseDecoder(raw json.RawMessage) (tokenDecoder, error) {
	if jsonIsNull(raw) {
		return nil, nil
	}
	steps, err := parseDecoderSteps(raw)
	if err != nil {
		return nil, err
	}
	return decodeChain(steps), nil
}

func parseDecoderSteps(raw json.RawMessage) ([]decodeStep, error) {
	var d struct {
		Type           string            `json:"type"`
		Replacement    string            `json:"replacement"`
		PrependScheme  *string           `json:"prepend_scheme"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		Split          *bool             `json:"split"`
		Decoders       []json.RawMessage `json:"decoders"`
		Pattern        patternJSON       `json:"pattern"`
		Content        string            `json:"content"`
		Start          int               `json:"start"`
		Stop           int               `json:"stop"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("parse decoder: %w", err)
	}
	switch d.Type {
	case "Sequence":
		var out []decodeStep
		for _, sub := range d.Decoders {
			s, err := parseDecoderSteps(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "ByteLevel":
		return []decodeStep{decodeByteLevel}, nil
	case "Metaspace":
		m, err := parseMetaspace(d.Replacement, d.PrependScheme, d.AddPrefixSpace, d.Split)
		if err != nil {
			return nil, err
		}
		return []decodeStep{func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				with := " "
				if i == 0 && m.scheme != prependNever {
					with = ""
				}
				out[i] = strings.ReplaceAll(s, m.replacement, with)
			}
			return out
		}}, nil
	case "ByteFallback":
		return []decodeStep{decodeByteFallback}, nil
	case "Fuse":
		return []decodeStep{func(toks []string) []string { return []string{strings.Join(toks, "")} }}, nil
	case "Replace":
		if d.Pattern.String == nil {
			return nil, fmt.Errorf("%w: Replace decoder with a regex", ErrUnsupported)
		}
		old, content := *d.Pattern.String, d.Content
		return []decodeStep{func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				out[i] = strings.ReplaceAll(s, old, content)
			}
			return out
		}}, nil
	case "Strip":
		content, _ := utf8.DecodeRuneInString(d.Content)
		start, stop := d.Start, d.Stop
		return []decodeStep{func(toks []string) []string {
			out := make([]string, len(toks))
			for i, s := range toks {
				rs := []rune(s)
				a := 0
				for a < start && a < len(rs) && rs[a] == content {
					a++
				}
				b := len(rs)
				for n := 0; n < stop && b > a && rs[b-1] == content; n++ {
					b--
				}
				out[i] = string(rs[a:b])
			}
			return out
		}}, nil
	}
	return nil, fmt.Errorf("%w: decoder %q", ErrUnsupported, d.Type)
}

// decodeByteLevel maps every token in the byte-to-unicode alphabet back to
// bytes (tokens outside it are taken as they are) and joins the result,
// replacing invalid UTF-8 as String::from_utf8_lossy does.
func decodeByteLevel(toks []string) []string {
	var buf []byte
	for _, t := range toks {
		if b, ok := byteLevelDecode(t); ok {
			buf = append(buf, b...)
		} else {
			buf = append(buf, t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// decodeByteFallback turns runs of <0xXX> tokens into text, or into one
// U+FFFD per byte when the run is not valid UTF-8.
func decodeByteFallback(toks []string) []string {
	var out []string
	var pending []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range n {
				out = append(out, "\uFFFD")
			}
		}
		pending, n = pending[:0], 0
	}
	for _, t := range toks {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if v, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				pending = append(pending, byte(v))
				n++
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// lossyUTF8 replaces each maximal invalid subsequence with U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, w := utf8.DecodeRune(b)
		if r == utf8.RuneError && w <= 1 {
			sb.WriteRune(utf8.RuneError)
			b = b[max(w, invalidPrefixLen(b)):]
			continue
		}
		sb.Write(b[:w])
		b = b[w:]
	}
	return sb.String()
}

// invalidPrefixLen returns the length of the maximal prefix of an invalid
// sequence that Rust's from_utf8_lossy replaces by one U+FFFD.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c >= 0xE0 && c <= 0xEF:
		need = 2
	case c >= 0xF0 && c <= 0xF4:
		need = 3
	default:
		return 1
	}
	i := 1
	for ; i <= need && i < len(b); i++ {
		lo, hi := byte(0x80), byte(0xBF)
		if i == 1 {
			switch c {
			case 0xE0:
				lo = 0xA0
			case 0xED:
				hi = 0x9F
			case 0xF0:
				lo = 0x90
			case 0xF4:
				hi = 0x8F
			}
		}
		if b[i] < lo || b[i] > hi {
			break
		}
	}
	return i
}
