package tokenize

import "unicode/utf8"

// The GPT-2 byte-to-unicode mapping used by ByteLevel pre-tokenizers and
// decoders: printable bytes stand for themselves, the others for U+0100 on.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// byteLevelDecode maps a string in the byte-to-unicode alphabet back to raw
// bytes. ok is false when s holds a rune outside that alphabet.
func byteLevelDecode(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := runeToByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// byteLevelEncode maps raw bytes to the byte-to-unicode alphabet.
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}
