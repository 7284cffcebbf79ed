package tokenize

import (
	"strings"
	"testing"
)

// TestIsASCII checks the word-at-a-time scan against the byte loop, with
// one non-ASCII byte at every position of strings of every length up to
// a few words, so that each byte of a word and the tail are covered.
func TestIsASCII(t *testing.T) {
	model := func(s string) bool {
		for i := range len(s) {
			if s[i] >= 0x80 {
				return false
			}
		}
		return true
	}
	for n := range 40 {
		b := []byte(strings.Repeat("a", n))
		if !isASCII(string(b)) {
			t.Fatalf("isASCII(%d ASCII bytes) = false", n)
		}
		for i := range n {
			for _, c := range []byte{0x80, 0xC3, 0xFF} {
				b[i] = c
				if got, want := isASCII(string(b)), model(string(b)); got != want {
					t.Fatalf("isASCII(%q) = %v, want %v", b, got, want)
				}
				b[i] = 'a'
			}
		}
	}
}
