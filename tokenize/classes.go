package tokenize

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes used by the hand-written pre-tokenizer scanners. They
// follow the Unicode general categories as Go's unicode package defines them;
// \s is the White_Space property, as in Oniguruma.
const (
	cLu uint16 = 1 << iota
	cLl
	cLt
	cLm
	cLo
	cM
	cN
	cP
	cS
	cSpace
	cCRLF

	cL = cLu | cLl | cLt | cLm | cLo
)

// classTable holds the classes of every rune of the Basic Multilingual Plane.
// It is computed once and never written again.
var classTable = sync.OnceValue(func() *[0x10000]uint16 {
	var t [0x10000]uint16
	for r := rune(0); r < 0x10000; r++ {
		t[r] = computeClass(r)
	}
	return &t
})

func computeClass(r rune) uint16 {
	var c uint16
	switch {
	case unicode.Is(unicode.Lu, r):
		c |= cLu
	case unicode.Is(unicode.Ll, r):
		c |= cLl
	case unicode.Is(unicode.Lt, r):
		c |= cLt
	case unicode.Is(unicode.Lm, r):
		c |= cLm
	case unicode.Is(unicode.Lo, r):
		c |= cLo
	case unicode.Is(unicode.M, r):
		c |= cM
	case unicode.Is(unicode.N, r):
		c |= cN
	case unicode.Is(unicode.P, r):
		c |= cP
	case unicode.Is(unicode.S, r):
		c |= cS
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= cSpace
	}
	if r == '\r' || r == '\n' {
		c |= cCRLF
	}
	return c
}

// classScanner reads runes and their classes from a byte string. Invalid UTF-8
// bytes decode as one-byte runes of no class (like punctuation for the
// patterns, which is deterministic and never panics).
type classScanner struct {
	tab *[0x10000]uint16
}

func newClassScanner() classScanner { return classScanner{tab: classTable()} }

// at returns the class of the rune at s[i] and its width in bytes. At the end
// of s it returns (0, 0).
func (sc classScanner) at(s []byte, i int) (uint16, int) {
	if i >= len(s) {
		return 0, 0
	}
	b := s[i]
	if b < utf8.RuneSelf {
		return sc.tab[b], 1
	}
	r, w := utf8.DecodeRune(s[i:])
	if r == utf8.RuneError && w <= 1 {
		return 0, 1
	}
	if r < 0x10000 {
		return sc.tab[r], w
	}
	return computeClass(r), w
}

// runeAt returns the rune at s[i] and its width (RuneError, 1 for invalid bytes).
func runeAt(s []byte, i int) (rune, int) {
	if s[i] < utf8.RuneSelf {
		return rune(s[i]), 1
	}
	return utf8.DecodeRune(s[i:])
}
