package kvevents

import (
	"fmt"
	"math"
)

// DecodeValue decodes one msgpack value into plain Go values, for showing
// raw fields such as [Event.ExtraKeys]: nil, bool, int64 or uint64,
// float64, string, []byte, []any and map[string]any (non-string map keys
// are formatted with %v). It returns an error for malformed input or
// trailing bytes.
func DecodeValue(raw []byte) (any, error) {
	r := reader{b: raw}
	v, err := r.value(0)
	if err != nil {
		return nil, fmt.Errorf("decode value: %w", err)
	}
	if r.off != len(raw) {
		return nil, fmt.Errorf("decode value: %d trailing bytes", len(raw)-r.off)
	}
	return v, nil
}

func (r *reader) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, ErrTooDeep
	}
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == 0xc0:
		r.off++
		return nil, nil
	case c == 0xc2 || c == 0xc3:
		r.off++
		return c == 0xc3, nil
	case c == 0xca || c == 0xcb:
		return r.float()
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		u, neg, err := r.integer()
		if neg {
			return int64(u), err
		}
		if u <= math.MaxInt64 {
			return int64(u), err
		}
		return u, err
	case c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb):
		s, err := r.str()
		return string(s), err
	case c >= 0xc4 && c <= 0xc6:
		s, err := r.str()
		return append([]byte(nil), s...), err
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, min(n, 64))
		for range n {
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, min(n, 64))
		for range n {
			k, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				ks = fmt.Sprint(k)
			}
			out[ks] = v
		}
		return out, nil
	}
	// Extension types: skip them and show their absence.
	if err := r.skip(); err != nil {
		return nil, err
	}
	return nil, nil
}
