package tokenize

import (
	"encoding/binary"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normOp is one normalizer step. apply returns s unchanged (same string)
// when the step changes nothing.
type normOp interface {
	apply(s string) string
}

type nfcOp struct{}

// apply composes s to Unicode NFC as Rust's unicode-normalization crate
// does. golang.org/x/text/unicode/norm follows the Stream-Safe Text Format
// and inserts U+034F after 30 consecutive non-starters; Rust does not, so
// strings with such runs take an exact, slower path.
func (nfcOp) apply(s string) string {
	if isASCII(s) || norm.NFC.IsNormalString(s) {
		return s
	}
	if !hasLongNonStarterRun(s) {
		return norm.NFC.String(s)
	}
	return plainNFC(s)
}

// isASCII reports whether s is all ASCII, eight bytes at a time.
func isASCII(s string) bool {
	b := unsafeBytes(s)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:])&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// hasLongNonStarterRun reports whether s holds a run of runes that are or
// decompose to non-starters long enough for norm's stream-safe limit to
// apply. It errs on the side of true.
func hasLongNonStarterRun(s string) bool {
	n := 0
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			n = 0
			i++
			continue
		}
		p := norm.NFD.PropertiesString(s[i:])
		w := p.Size()
		if w == 0 {
			w = 1
		}
		if p.CCC() != 0 || p.LeadCCC() != 0 || p.TrailCCC() != 0 {
			n += max(1, utf8.RuneCount(p.Decomposition()))
			if n >= 20 {
				return true
			}
		} else {
			n = 0
		}
		i += w
	}
	return false
}

func ccc(r rune) uint8 {
	var b [4]byte
	n := utf8.EncodeRune(b[:], r)
	return norm.NFD.Properties(b[:n]).CCC()
}

// plainNFC is canonical decomposition, canonical ordering and canonical
// composition without any stream-safe limit. It takes its Unicode data from
// golang.org/x/text: decompositions of single runes and compositions of
// single pairs never reach the stream-safe limit.
func plainNFC(s string) string {
	var rs []rune
	for _, r := range s {
		d := norm.NFD.String(string(r))
		for _, x := range d {
			rs = append(rs, x)
		}
	}
	// canonical ordering: stable sort of each run of non-starters by class
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	// canonical composition
	out := rs[:0:0]
	starter := -1
	lastCCC := -1 // class of the last rune kept after the starter; -1 if none
	for _, r := range rs {
		c := int(ccc(r))
		if starter >= 0 && (lastCCC == -1 || (lastCCC != 0 && lastCCC < c)) {
			if p, ok := composePair(out[starter], r); ok {
				out[starter] = p
				continue
			}
		}
		if c == 0 {
			starter = len(out)
			lastCCC = -1
		} else {
			lastCCC = c
		}
		out = append(out, r)
	}
	return string(out)
}

// composePair returns the primary composite of a and b, if there is one.
func composePair(a, b rune) (rune, bool) {
	t := norm.NFC.String(string(a) + string(b))
	r, n := utf8.DecodeRuneInString(t)
	if n != len(t) || r == a {
		return 0, false
	}
	return r, true
}

// prependOp prepends a string to non-empty input.
type prependOp struct{ prefix string }

func (p prependOp) apply(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replaceOp replaces every occurrence of a literal.
type replaceOp struct{ old, new string }

func (r replaceOp) apply(s string) string {
	if !strings.Contains(s, r.old) {
		return s
	}
	return strings.ReplaceAll(s, r.old, r.new)
}

// applyNormalizers applies ops in order.
func applyNormalizers(ops []normOp, s string) string {
	for _, op := range ops {
		s = op.apply(s)
	}
	return s
}
