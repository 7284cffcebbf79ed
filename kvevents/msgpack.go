package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Errors returned by the msgpack reader. Decoding errors wrap one of them.
var (
	// ErrTruncated means the payload ended inside a value.
	ErrTruncated = errors.New("msgpack: truncated")
	// ErrType means a value had a type the schema does not allow there.
	ErrType = errors.New("msgpack: unexpected type")
	// ErrTooDeep means nesting exceeded the reader's depth limit.
	ErrTooDeep = errors.New("msgpack: nesting too deep")
)

// maxDepth bounds the nesting skip will follow, so hostile payloads cannot
// exhaust the stack.
const maxDepth = 32

// reader reads msgpack values from a byte slice. It never allocates and
// never panics: every read checks bounds and returns an error instead.
type reader struct {
	b   []byte
	off int
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrTruncated
	}
	return r.b[r.off], nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || len(r.b)-r.off < n {
		return nil, ErrTruncated
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) byte1() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrTruncated
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) be(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	default:
		return binary.BigEndian.Uint64(s), nil
	}
}

// isNil consumes a nil and reports true, or leaves the reader unchanged.
func (r *reader) isNil() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// arrayLen reads an array header.
func (r *reader) arrayLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x90:
		return int(c & 0x0f), nil
	case c == 0xdc:
		n, err := r.be(2)
		return int(n), err
	case c == 0xdd:
		n, err := r.be(4)
		return r.count(n, err)
	}
	r.off--
	return 0, fmt.Errorf("array header 0x%02x: %w", c, ErrType)
}

// mapLen reads a map header.
func (r *reader) mapLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	switch {
	case c&0xf0 == 0x80:
		return int(c & 0x0f), nil
	case c == 0xde:
		n, err := r.be(2)
		return int(n), err
	case c == 0xdf:
		n, err := r.be(4)
		return r.count(n, err)
	}
	r.off--
	return 0, fmt.Errorf("map header 0x%02x: %w", c, ErrType)
}

// count rejects element counts that cannot fit in the remaining bytes (each
// element takes at least one byte), so callers never size buffers from a lie.
func (r *reader) count(n uint64, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if n > uint64(len(r.b)-r.off) {
		return 0, ErrTruncated
	}
	return int(n), nil
}

// str reads a str or bin value and returns its bytes, aliasing the input.
func (r *reader) str() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.be(4)
	default:
		r.off--
		return nil, fmt.Errorf("string header 0x%02x: %w", c, ErrType)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)-r.off) {
		return nil, ErrTruncated
	}
	return r.take(int(n))
}

// integer reads any msgpack integer. For negative values neg is true and u
// holds the two's complement bit pattern.
func (r *reader) integer() (u uint64, neg bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc:
		u, err = r.be(1)
	case 0xcd:
		u, err = r.be(2)
	case 0xce:
		u, err = r.be(4)
	case 0xcf:
		u, err = r.be(8)
	case 0xd0:
		u, err = r.be(1)
		u = uint64(int64(int8(u)))
	case 0xd1:
		u, err = r.be(2)
		u = uint64(int64(int16(u)))
	case 0xd2:
		u, err = r.be(4)
		u = uint64(int64(int32(u)))
	case 0xd3:
		u, err = r.be(8)
	default:
		r.off--
		return 0, false, fmt.Errorf("integer header 0x%02x: %w", c, ErrType)
	}
	return u, c >= 0xd0 && int64(u) < 0, err
}

// appendUint32s reads an array's n elements, integers in [0, 2³²), and
// appends them to dst: token ids. The encodings an encoder picks for such
// values (positive fixint, uint8, uint16, uint32) are read in place; any
// other element goes through integer, and one out of range is an
// ErrType.
func (r *reader) appendUint32s(dst []uint32, n int) ([]uint32, error) {
	b, off := r.b, r.off
	for range n {
		if off >= len(b) {
			r.off = off
			return dst, ErrTruncated
		}
		switch c := b[off]; {
		case c <= 0x7f:
			dst = append(dst, uint32(c))
			off++
		case c == 0xcd && len(b)-off >= 3:
			dst = append(dst, uint32(binary.BigEndian.Uint16(b[off+1:off+3])))
			off += 3
		case c == 0xce && len(b)-off >= 5:
			dst = append(dst, binary.BigEndian.Uint32(b[off+1:off+5]))
			off += 5
		case c == 0xcc && len(b)-off >= 2:
			dst = append(dst, uint32(b[off+1]))
			off += 2
		default:
			r.off = off
			u, neg, err := r.integer()
			if err != nil {
				return dst, err
			}
			if neg || u > math.MaxUint32 {
				return dst, fmt.Errorf("token id %d out of range: %w", int64(u), ErrType)
			}
			dst = append(dst, uint32(u))
			off = r.off
		}
	}
	r.off = off
	return dst, nil
}

// float reads a float32 or float64, or an integer converted to float64.
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.off++
		u, err := r.be(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		r.off++
		u, err := r.be(8)
		return math.Float64frombits(u), err
	}
	u, neg, err := r.integer()
	if neg {
		return float64(int64(u)), err
	}
	return float64(u), err
}

// skip consumes one value of any type.
func (r *reader) skip() error { return r.skipDepth(0) }

func (r *reader) skipDepth(depth int) error {
	if depth > maxDepth {
		return ErrTooDeep
	}
	c, err := r.byte1()
	if err != nil {
		return err
	}
	var n uint64 // bytes to skip, or elements for containers
	elems := 0   // 1 for arrays, 2 for maps
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return nil
	case c&0xf0 == 0x80:
		n, elems = uint64(c&0x0f), 2
	case c&0xf0 == 0x90:
		n, elems = uint64(c&0x0f), 1
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	default:
		switch c {
		case 0xcc, 0xd0:
			n = 1
		case 0xcd, 0xd1, 0xd4:
			n = 2
		case 0xd5:
			n = 3
		case 0xce, 0xd2, 0xca:
			n = 4
		case 0xd6:
			n = 5
		case 0xcf, 0xd3, 0xcb:
			n = 8
		case 0xd7:
			n = 9
		case 0xd8:
			n = 17
		case 0xc4, 0xd9:
			n, err = r.be(1)
		case 0xc5, 0xda:
			n, err = r.be(2)
		case 0xc6, 0xdb:
			n, err = r.be(4)
		case 0xc7:
			n, err = r.be(1)
			n++
		case 0xc8:
			n, err = r.be(2)
			n++
		case 0xc9:
			n, err = r.be(4)
			n++
		case 0xdc:
			n, err = r.be(2)
			elems = 1
		case 0xdd:
			n, err = r.be(4)
			elems = 1
		case 0xde:
			n, err = r.be(2)
			elems = 2
		case 0xdf:
			n, err = r.be(4)
			elems = 2
		default: // 0xc1 is never used
			return fmt.Errorf("header 0x%02x: %w", c, ErrType)
		}
		if err != nil {
			return err
		}
	}
	if elems == 0 {
		if n > uint64(len(r.b)-r.off) {
			return ErrTruncated
		}
		r.off += int(n)
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		return ErrTruncated
	}
	for i := 0; i < int(n)*elems; i++ {
		if err := r.skipDepth(depth + 1); err != nil {
			return err
		}
	}
	return nil
}
