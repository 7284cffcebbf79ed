package vllmsim

import (
	"errors"
	"fmt"
	"math"
)

// decodeMsgpack is a small msgpack reader for tests: it decodes what the
// encoder and vLLM produce into nil, bool, uint64, int64, float64, string,
// []byte, []any and map[string]any.
func decodeMsgpack(b []byte) (any, error) {
	d := mpDecoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if d.i != len(b) {
		return nil, fmt.Errorf("%d trailing bytes", len(b)-d.i)
	}
	return v, nil
}

type mpDecoder struct {
	b []byte
	i int
}

var errShort = errors.New("msgpack: short input")

func (d *mpDecoder) take(n int) ([]byte, error) {
	if n < 0 || d.i+n > len(d.b) {
		return nil, errShort
	}
	p := d.b[d.i : d.i+n]
	d.i += n
	return p, nil
}

func (d *mpDecoder) uint(n int) (uint64, error) {
	p, err := d.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (d *mpDecoder) value(depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("msgpack: too deep")
	}
	p, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := p[0]
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c&0xe0 == 0xa0:
		s, err := d.take(int(c & 0x1f))
		return string(s), err
	case c&0xf0 == 0x90:
		return d.array(int(c&0x0f), depth)
	case c&0xf0 == 0x80:
		return d.mapv(int(c&0x0f), depth)
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2, 0xc3:
		return c == 0xc3, nil
	case 0xcc, 0xcd, 0xce, 0xcf:
		return d.uint(1 << (c - 0xcc))
	case 0xd0, 0xd1, 0xd2, 0xd3:
		n := 1 << (c - 0xd0)
		v, err := d.uint(n)
		shift := 64 - 8*n
		return int64(v<<shift) >> shift, err
	case 0xcb:
		v, err := d.uint(8)
		return math.Float64frombits(v), err
	case 0xd9, 0xda, 0xdb:
		n, err := d.uint(1 << (c - 0xd9))
		if err != nil {
			return nil, err
		}
		s, err := d.take(int(n))
		return string(s), err
	case 0xc4, 0xc5, 0xc6:
		n, err := d.uint(1 << (c - 0xc4))
		if err != nil {
			return nil, err
		}
		s, err := d.take(int(n))
		return append([]byte(nil), s...), err
	case 0xdc, 0xdd:
		n, err := d.uint(2 << (c - 0xdc))
		if err != nil {
			return nil, err
		}
		return d.array(int(n), depth)
	case 0xde, 0xdf:
		n, err := d.uint(2 << (c - 0xde))
		if err != nil {
			return nil, err
		}
		return d.mapv(int(n), depth)
	}
	return nil, fmt.Errorf("msgpack: unsupported byte %#x", c)
}

func (d *mpDecoder) array(n, depth int) (any, error) {
	if n > len(d.b)-d.i {
		return nil, errShort
	}
	out := make([]any, n)
	for i := range out {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (d *mpDecoder) mapv(n, depth int) (any, error) {
	out := make(map[string]any, n)
	for range n {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack: map key %T", k)
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[ks] = v
	}
	return out, nil
}
