package tokenize

import "unicode/utf8"

// runeToByte inverts the GPT-2 byte-to-unicode mapping used by ByteLevel
// pre-tokenizers and decoders: printable bytes stand for themselves, the
// others for U+0100 on.
var runeToByte = func() map[rune]byte {
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			r2b[rune(b)] = byte(b)
		} else {
			r2b[256+n] = byte(b)
			n++
		}
	}
	return r2b
}()

// runeToByteTab is runeToByte as an array over the alphabet's range; -1
// marks runes outside the alphabet.
var runeToByteTab = func() (t [0x144]int16) {
	for i := range t {
		t[i] = -1
	}
	for r, b := range runeToByte {
		t[r] = int16(b)
	}
	return t
}()

// byteLevelDecode maps a string in the byte-to-unicode alphabet back to raw
// bytes. ok is false when s holds a rune outside that alphabet.
func byteLevelDecode(s string) ([]byte, bool) {
	return byteLevelDecodeInto(make([]byte, 0, len(s)), unsafeBytes(s))
}

// byteLevelDecodeInto appends the raw bytes of s to dst.
func byteLevelDecodeInto(dst []byte, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); {
		r, w := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, w = utf8.DecodeRune(s[i:])
		}
		if r >= rune(len(runeToByteTab)) || runeToByteTab[r] < 0 {
			return dst, false
		}
		dst = append(dst, byte(runeToByteTab[r]))
		i += w
	}
	return dst, true
}
