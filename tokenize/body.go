package tokenize

import (
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/warmpath/warmpath/tokenize/internal/jinja"
)

// Body is a request body parsed once: the router reads its top-level fields
// and the raw JSON of some of them, and the chat template renders from the
// same parse. Build it with ParseBody; it is not changed afterwards, so it
// may be read concurrently.
type Body struct {
	raw     []byte
	root    *jinja.Dict
	members []jinja.Member
}

// ErrBodyType is wrapped by the errors of Body's typed accessors: a field
// holds a value of another JSON type.
var ErrBodyType = errors.New("invalid field type")

// ParseBody parses raw, which must be one JSON object, as Python's
// json.loads would (vLLM's own parse): keys are case-sensitive, a repeated
// key keeps its last value, invalid UTF-8 in strings becomes U+FFFD. The
// error wraps ErrBadRequest and says what is wrong and where.
func ParseBody(raw []byte) (*Body, error) { return (*BodyParser)(nil).Parse(raw) }

// A BodyParser is ParseBody with a cache of the messages (and other
// objects in the body's top-level arrays) of recent bodies: turn N+1 of a
// conversation repeats turn N's messages byte for byte, and those are
// found by their bytes and reused instead of decoded again. What it
// returns is what ParseBody returns. A nil *BodyParser parses without a
// cache. A BodyParser is safe for concurrent use.
type BodyParser struct{ cache *jinja.JSONCache }

// NewBodyParser returns a parser whose cache holds about cacheBytes; zero
// or less means no cache.
func NewBodyParser(cacheBytes int) *BodyParser {
	if cacheBytes <= 0 {
		return nil
	}
	return &BodyParser{cache: jinja.NewJSONCache(cacheBytes)}
}

// BodyCacheStats are a BodyParser's counters: messages reused and decoded,
// and what its cache holds.
type BodyCacheStats = jinja.JSONCacheStats

// Stats returns the cache's counters (zero for a nil parser).
func (p *BodyParser) Stats() BodyCacheStats {
	if p == nil {
		return BodyCacheStats{}
	}
	return p.cache.Stats()
}

// Parse is ParseBody through the parser's cache.
func (p *BodyParser) Parse(raw []byte) (*Body, error) {
	var cache *jinja.JSONCache
	if p != nil {
		cache = p.cache
	}
	root, members, err := jinja.ParseJSONObject(raw, cache)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return &Body{raw: raw, root: root, members: members}, nil
}

// UnparsedBody wraps raw for a pipeline that parses it when it needs to
// (TokenizeBody does); its accessors see no fields.
func UnparsedBody(raw []byte) *Body { return &Body{raw: raw} }

// Bytes returns the body as received.
func (b *Body) Bytes() []byte { return b.raw }

// Raw returns the JSON text of the top-level field key (its last
// occurrence), a slice of the body, or nil when the body has no such field.
func (b *Body) Raw(key string) []byte {
	for i := len(b.members) - 1; i >= 0; i-- {
		if m := b.members[i]; m.Key == key {
			return b.raw[m.Start:m.End]
		}
	}
	return nil
}

// field returns the value of key, and false when it is absent or null.
func (b *Body) field(key string) (jinja.Value, bool) {
	if b.root == nil {
		return nil, false
	}
	v, ok := b.root.Get(key)
	return v, ok && v != nil
}

func typeErr(key, want string) error {
	return fmt.Errorf("%w: field %q: expected %s", ErrBodyType, key, want)
}

// String returns the string field key; ok is false when it is absent or
// null.
func (b *Body) String(key string) (s string, ok bool, err error) {
	v, ok := b.field(key)
	if !ok {
		return "", false, nil
	}
	if s, isStr := v.(string); isStr {
		return s, true, nil
	}
	return "", false, typeErr(key, "string")
}

// Bool returns the boolean field key; ok is false when it is absent or
// null.
func (b *Body) Bool(key string) (v, ok bool, err error) {
	x, ok := b.field(key)
	if !ok {
		return false, false, nil
	}
	if v, isBool := x.(bool); isBool {
		return v, true, nil
	}
	return false, false, typeErr(key, "bool")
}

// Int returns the integer field key; ok is false when it is absent or null.
// A number with a fraction or an exponent, or one beyond the int range, is
// an error.
func (b *Body) Int(key string) (n int, ok bool, err error) {
	x, ok := b.field(key)
	if !ok {
		return 0, false, nil
	}
	switch v := x.(type) {
	case int64:
		if v >= math.MinInt && v <= math.MaxInt {
			return int(v), true, nil
		}
	case *big.Int:
	default:
		return 0, false, typeErr(key, "int")
	}
	return 0, false, fmt.Errorf("%w: field %q: integer out of range", ErrBodyType, key)
}

// Kind reports the JSON type of the field key: "null" when absent or null,
// else "string", "number", "bool", "array" or "object".
func (b *Body) Kind(key string) string {
	x, ok := b.field(key)
	if !ok {
		return "null"
	}
	switch x.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case *jinja.List:
		return "array"
	case *jinja.Dict:
		return "object"
	}
	return "number"
}
