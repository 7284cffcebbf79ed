package jinja

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

func pyPrintable(r rune) bool { return unicode.IsPrint(r) }

// maxJSONDepth bounds nesting so hostile input cannot exhaust the stack.
const maxJSONDepth = 512

// ErrJSON is wrapped by every error of ParseJSON.
var ErrJSON = errors.New("invalid JSON")

// ParseJSON decodes one JSON document into a Value tree as Python's
// json.loads does: objects become *Dict in document order (a repeated key
// keeps its first place and its last value), integers stay exact (int64 or
// *big.Int), numbers with a fraction or exponent become float64. Trailing
// data other than whitespace is an error.
func ParseJSON(data []byte) (Value, error) {
	p := jsonParser{s: data}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, p.errf("trailing data")
	}
	return v, nil
}

// Member is a top-level member of a JSON object: its key and where its
// value lies in the document.
type Member struct {
	Key        string
	Start, End int // the value is data[Start:End]
}

// ParseJSONObject is ParseJSON for a document that must be an object. It
// also returns the object's members in document order (a repeated key
// appears each time; its last value is the one the Dict holds), so a caller
// can read a member's raw JSON without parsing the document again. With a
// cache (nil means none), the objects in the document's top-level arrays
// are looked up there by their bytes and reused (JSONCache).
func ParseJSONObject(data []byte, cache *JSONCache) (*Dict, []Member, error) {
	var members []Member
	p := jsonParser{s: data, top: &members, cache: cache}
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, nil, p.errf("expected a JSON object")
	}
	v, err := p.value(0)
	if err != nil {
		return nil, nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, nil, p.errf("trailing data")
	}
	return v.(*Dict), members, nil
}

type jsonParser struct {
	s     []byte
	i     int
	top   *[]Member // where the top-level object's members are recorded, if not nil
	cache *JSONCache
}

func (p *jsonParser) errf(format string, a ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrJSON, fmt.Sprintf(format, a...), p.i)
}

func (p *jsonParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, p.errf("nesting deeper than %d", maxJSONDepth)
	}
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		d := NewDict(4)
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.errf("expected object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, p.errf("expected ':'")
			}
			p.i++
			p.ws()
			start := p.i
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if depth == 0 && p.top != nil {
				*p.top = append(*p.top, Member{k, start, p.i})
			}
			d.Set(k, v)
			p.ws()
			if p.i >= len(p.s) {
				return nil, p.errf("unexpected end in object")
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == '}' {
				p.i++
				return d, nil
			}
			return nil, p.errf("expected ',' or '}'")
		}
	case c == '[':
		p.i++
		l := &List{}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return l, nil
		}
		for {
			p.ws()
			v, err := p.element(depth + 1)
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
			p.ws()
			if p.i >= len(p.s) {
				return nil, p.errf("unexpected end in array")
			}
			if p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.s[p.i] == ']' {
				p.i++
				return l, nil
			}
			return nil, p.errf("expected ',' or ']'")
		}
	case c == '"':
		return p.str()
	case c == 't':
		return p.lit("true", true)
	case c == 'f':
		return p.lit("false", false)
	case c == 'n':
		return p.lit("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.num()
	}
	return nil, p.errf("unexpected character %q", p.s[p.i])
}

// element parses an array element: through the cache when it is an object
// in a top-level array, else as any value.
func (p *jsonParser) element(depth int) (Value, error) {
	if p.cache == nil || depth != 2 || p.i >= len(p.s) || p.s[p.i] != '{' {
		return p.value(depth)
	}
	start := p.i
	end, ok := skipValue(p.s, start)
	if !ok || end-start < minCachedElement {
		return p.value(depth)
	}
	key, v, hit := p.cache.get(p.s[start:end])
	if hit {
		p.i = end
		return v, nil
	}
	v, err := p.value(depth)
	if err == nil && p.i == end {
		p.cache.put(key, p.s[start:end], v)
	}
	return v, err
}

func (p *jsonParser) lit(word string, v Value) (Value, error) {
	if len(p.s)-p.i < len(word) || string(p.s[p.i:p.i+len(word)]) != word {
		return nil, p.errf("invalid literal")
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) num() (Value, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, p.errf("invalid number")
	}
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		isFloat = true
		if digits() == 0 {
			return nil, p.errf("invalid number")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		isFloat = true
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.errf("invalid number")
		}
	}
	text := string(p.s[start:p.i])
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, p.errf("invalid number")
		}
		return f, nil
	}
	if n, err := strconv.ParseInt(text, 10, 64); err == nil {
		return n, nil
	}
	b, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return nil, p.errf("invalid number")
	}
	return b, nil
}

func (p *jsonParser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Escapes decode to valid UTF-8; only raw bytes past ASCII need the
	// check.
	var nonASCII bool
	p.i, nonASCII = plainEnd(p.s, p.i)
	if p.i < len(p.s) && p.s[p.i] == '"' { // no escape: the common case
		s := string(p.s[start:p.i])
		p.i++
		if nonASCII && !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		return s, nil
	}
	var b strings.Builder
	// The decoded string is no longer than its source up to the closing
	// quote: grow once, not byte by byte.
	end := p.i
	for end < len(p.s) {
		end, _ = plainEnd(p.s, end)
		if end == len(p.s) || p.s[end] == '"' {
			break
		}
		if p.s[end] == '\\' {
			end++
		}
		end++
	}
	b.Grow(end - start)
	b.Write(p.s[start:p.i])
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c != '"' && c != '\\' && c >= 0x20 {
			// A run of plain bytes goes in at once.
			j, high := plainEnd(p.s, p.i+1)
			nonASCII = nonASCII || high || c >= 0x80
			b.Write(p.s[p.i:j])
			p.i = j
			continue
		}
		switch {
		case c == '"':
			p.i++
			s := b.String()
			if nonASCII && !utf8.ValidString(s) {
				s = strings.ToValidUTF8(s, "\uFFFD")
			}
			return s, nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c == '\\':
			p.i++
			if p.i >= len(p.s) {
				return "", p.errf("unexpected end in string")
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if r < 0xdc00 && p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						r2, ok := p.hex4()
						if ok && r2 >= 0xdc00 && r2 <= 0xdfff {
							b.WriteRune(utf16.DecodeRune(r, r2))
							continue
						}
						p.i = save
					}
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				return "", p.errf("invalid escape")
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", p.errf("unterminated string")
}

// plainEnd returns the index of the first byte of s at or after i that
// ends a run of plain string bytes (a quote, a backslash or a control
// character), or len(s), and whether a byte of the run is past ASCII (only
// then can it be invalid UTF-8). It tests eight bytes at a time:
// conversation bodies are mostly long runs of plain text. In each word the
// lowest byte flagged by the zero-byte and less-than tests is exact (a
// borrow only runs upwards), which is all that is read.
func plainEnd(s []byte, i int) (int, bool) {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	var seen uint64
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		q := x ^ ('"' * ones)
		bs := x ^ ('\\' * ones)
		m := ((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - 0x20*ones) &^ x)
		if m &= highs; m != 0 {
			n := bits.TrailingZeros64(m) / 8
			return i + n, (seen|x&(1<<(8*n)-1))&highs != 0
		}
		seen |= x
	}
	high := seen&highs != 0
	for ; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 {
			return i, high
		}
		high = high || c >= 0x80
	}
	return i, high
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.s)-p.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// jsonOpts are the arguments of Python's json.dumps that tojson passes on.
type jsonOpts struct {
	indent      string // "" with hasIndent false means no newlines
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
}

// dumpJSON serialises v as Python's json.dumps does with opts.
func dumpJSON(b *strings.Builder, v Value, o *jsonOpts, level int) error {
	switch x := unmark(v).(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case *List:
		if len(x.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			if err := dumpJSON(b, it, o, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sortStrings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			writeJSONKey(b, x.keyOf(k), o.ensureASCII)
			b.WriteString(o.keySep)
			if err := dumpJSON(b, x.m[k], o, level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// writeJSONKey writes a dict key as json.dumps does: strings as they are,
// numbers, booleans and None converted to their JSON text.
func writeJSONKey(b *strings.Builder, k Value, ensureASCII bool) {
	switch x := k.(type) {
	case string:
		writeJSONString(b, x, ensureASCII)
	case nil:
		b.WriteString(`"null"`)
	case bool:
		if x {
			b.WriteString(`"true"`)
		} else {
			b.WriteString(`"false"`)
		}
	case float64:
		writeJSONString(b, pyFloatRepr(x), false)
	default:
		writeJSONString(b, str(x), false)
	}
}

func (o *jsonOpts) newline(b *strings.Builder, level int) {
	if !o.hasIndent {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(o.indent)
	}
}

// sortStrings sorts by code point, as Python sorts str.
func sortStrings(s []string) {
	// Byte order of valid UTF-8 equals code point order.
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

const hexDigits = "0123456789abcdef"

// writeJSONString writes s quoted as Python's json encoder does.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && (c < 0x80 || !ensureASCII) {
			i++
			continue
		}
		b.WriteString(s[start:i])
		if c >= 0x80 {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				writeU(b, r1)
				writeU(b, r2)
			} else {
				writeU(b, r)
			}
			i += size
			start = i
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			writeU(b, rune(c))
		}
		i++
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
}
