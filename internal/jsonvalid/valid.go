// Package jsonvalid checks JSON syntax exactly as encoding/json.Valid does,
// in one pass over the bytes.
//
// The response watcher checks every streamed event of every response, one
// per token, before it reads a few fields of it; encoding/json drives a
// state machine through a function call per byte, which cost as much as
// the read itself. Valid walks the grammar directly.
package jsonvalid

// maxNesting is encoding/json's limit on open objects and arrays: deeper
// input is not valid to it.
const maxNesting = 10000

// Valid reports whether data is one JSON value with optional whitespace
// around it, with encoding/json.Valid's answer for every input: strings
// may hold any byte from 0x20 up (UTF-8 is not checked), and at most
// 10,000 objects and arrays may be open at once.
func Valid(data []byte) bool {
	var buf [32]byte
	open := buf[:0] // the opening byte of each container not yet closed
	i := 0
value:
	for {
		i = ws(data, i)
		if i == len(data) {
			return false
		}
		switch c := data[i]; c {
		case '{', '[':
			if len(open) == maxNesting {
				return false
			}
			open = append(open, c)
			if i = ws(data, i+1); i < len(data) && data[i] == closer(c) {
				open = open[:len(open)-1]
				i++
				break // an empty container is a whole value
			}
			if c == '{' {
				if i = key(data, i); i < 0 {
					return false
				}
			}
			continue value
		case '"':
			i = str(data, i)
		case 't':
			i = literal(data, i, "true")
		case 'f':
			i = literal(data, i, "false")
		case 'n':
			i = literal(data, i, "null")
		default:
			i = number(data, i)
		}
		if i < 0 {
			return false
		}
		// A value has ended: close containers until a comma asks for the
		// next member, or the input ends.
		for {
			i = ws(data, i)
			if len(open) == 0 {
				return i == len(data)
			}
			if i == len(data) {
				return false
			}
			top := open[len(open)-1]
			switch data[i] {
			case ',':
				i++
				if top == '{' {
					if i = key(data, ws(data, i)); i < 0 {
						return false
					}
				}
				continue value
			case closer(top):
				open = open[:len(open)-1]
				i++
			default:
				return false
			}
		}
	}
}

// closer is the byte that closes a container opened by open: '}' for '{'
// and ']' for '['.
func closer(open byte) byte { return open + 2 }

// ws returns the index of the first byte at or after i that is not JSON
// whitespace.
func ws(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// key reads an object's key and its colon from i; it returns the index
// after the colon, or -1.
func key(data []byte, i int) int {
	if i == len(data) || data[i] != '"' {
		return -1
	}
	if i = str(data, i); i < 0 {
		return -1
	}
	if i = ws(data, i); i == len(data) || data[i] != ':' {
		return -1
	}
	return i + 1
}

// str reads the string whose quote is at i; it returns the index after its
// closing quote, or -1.
func str(data []byte, i int) int {
	for i++; i < len(data); {
		switch c := data[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 == len(data) {
				return -1
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) || !hex(data[i+2]) || !hex(data[i+3]) || !hex(data[i+4]) || !hex(data[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
	return -1
}

func hex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// literal reads word at i; it returns the index after it, or -1.
func literal(data []byte, i int, word string) int {
	if len(data)-i < len(word) || string(data[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number reads a number at i: an optional minus, an integer part without
// leading zeros, an optional fraction and an optional exponent. It returns
// the index after it, or -1.
func number(data []byte, i int) int {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i == len(data):
		return -1
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		i = digits(data, i+1)
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		if i++; i == len(data) || !digit(data[i]) {
			return -1
		}
		i = digits(data, i)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i == len(data) || !digit(data[i]) {
			return -1
		}
		i = digits(data, i)
	}
	return i
}

func digit(c byte) bool { return '0' <= c && c <= '9' }

// digits returns the index of the first byte at or after i that is not a
// decimal digit.
func digits(data []byte, i int) int {
	for i < len(data) && digit(data[i]) {
		i++
	}
	return i
}
