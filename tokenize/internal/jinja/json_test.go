package jinja

import (
	"math/rand/v2"
	"testing"
)

// plainEndModel is plainEnd a byte at a time.
func plainEndModel(s []byte, i int) (int, bool) {
	high := false
	for ; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 {
			return i, high
		}
		high = high || c >= 0x80
	}
	return i, high
}

// TestPlainEnd checks the eight-bytes-at-a-time scan against the model on
// random texts dense in the bytes that end a run and the bytes one bit away
// from them (high bytes whose low bits are a quote's or a backslash's, the
// control range's edges), from every start.
func TestPlainEnd(t *testing.T) {
	t.Parallel()
	special := []byte{'"', '\\', 0x00, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0xa2, 0xdc, 0x80, 0xff, 0x7f, 0x9f, 0x3c}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 2000 {
		s := make([]byte, rng.IntN(40))
		for i := range s {
			if rng.IntN(4) == 0 {
				s[i] = special[rng.IntN(len(special))]
			} else {
				s[i] = byte('a' + rng.IntN(26))
			}
		}
		for i := range len(s) + 1 {
			got, gotHigh := plainEnd(s, i)
			want, wantHigh := plainEndModel(s, i)
			if got != want || gotHigh != wantHigh {
				t.Fatalf("case %d: plainEnd(%q, %d) = %d, %v; want %d, %v", n, s, i, got, gotHigh, want, wantHigh)
			}
		}
	}
}
