package tokenize

import (
	"bytes"
	"fmt"
	"strings"
)

// A matchFunc reports the end of the match of a pre-tokenizer pattern that
// starts exactly at s[i], or -1 when the pattern does not match there. It
// must never return a match of zero length. It reads s[i:] only: these
// patterns have no look-behind.
type matchFunc func(sc classScanner, s []byte, i int) int

// splitBehavior is how a Split pre-tokenizer turns matches into pieces.
type splitBehavior int

const (
	splitIsolated splitBehavior = iota
	splitMergedWithPrevious
	splitMergedWithNext
	splitRemoved
)

// splitStep is one Split pre-tokenizer of a pipeline, or a Metaspace
// pre-tokenizer (meta not nil), which rewrites before it splits.
type splitStep struct {
	match    matchFunc
	behavior splitBehavior
	literal  []byte // for string patterns; match is nil then
	meta     *metaspace
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement
// (U+2581), which is prepended to the first piece of the text (first),
// every piece (always) or none, unless the piece starts with it already;
// with split, each replacement starts a new piece.
type metaspace struct {
	replacement string
	scheme      prependScheme
	split       bool
	splitter    *splitStep // splits before each replacement, with split
}

// rewrite returns the piece as the pre-tokenizer's split sees it; atStart
// reports whether the piece starts at offset 0 of the input.
func (m *metaspace) rewrite(s string, atStart bool) string {
	s = strings.ReplaceAll(s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) && (m.scheme == prependAlways || m.scheme == prependFirst && atStart) {
		s = m.replacement + s
	}
	return s
}

// split calls emit for each piece of s, in order. Empty pieces are never
// emitted.
func (st *splitStep) split(sc classScanner, s []byte, emit func([]byte)) {
	if st.literal != nil {
		st.splitLiteral(s, emit)
		return
	}
	gap, i := 0, 0
	for i < len(s) {
		e := st.match(sc, s, i)
		if e <= i {
			_, w := sc.at(s, i)
			i += w
			continue
		}
		if gap < i {
			emit(s[gap:i])
		}
		emit(s[i:e])
		i, gap = e, e
	}
	if gap < len(s) {
		emit(s[gap:])
	}
}

func (st *splitStep) splitLiteral(s []byte, emit func([]byte)) {
	lit := st.literal
	start := 0 // start of the pending piece
	i := 0
	for {
		k := bytes.Index(s[i:], lit)
		if k < 0 {
			break
		}
		ms, me := i+k, i+k+len(lit)
		switch st.behavior {
		case splitIsolated:
			if start < ms {
				emit(s[start:ms])
			}
			emit(s[ms:me])
			start = me
		case splitRemoved:
			if start < ms {
				emit(s[start:ms])
			}
			start = me
		case splitMergedWithPrevious:
			emit(s[start:me])
			start = me
		case splitMergedWithNext:
			if start < ms {
				emit(s[start:ms])
			}
			start = ms
		}
		i = me
	}
	if start < len(s) {
		emit(s[start:])
	}
}

// Pre-tokenizer regexes this package implements with exact hand-written
// scanners, keyed by the pattern text as tokenizer.json spells it.
const (
	patCL100K  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patQwen2   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200K   = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patDigits3 = `\p{N}{1,3}`
	patDSCJK   = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDSMain  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// knownPatterns maps each supported regex to its scanner.
func knownPattern(p string) (matchFunc, error) {
	switch p {
	case patCL100K:
		return func(sc classScanner, s []byte, i int) int { return matchCL100K(sc, s, i, 3) }, nil
	case patQwen2:
		return func(sc classScanner, s []byte, i int) int { return matchCL100K(sc, s, i, 1) }, nil
	case patO200K:
		return matchO200K, nil
	case patDigits3:
		return matchDigits3, nil
	case patDSCJK:
		return matchDSCJK, nil
	case patDSMain:
		return matchDSMain, nil
	}
	return nil, fmt.Errorf("%w: Split regex %q has no exact scanner", ErrUnsupported, p)
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] as Oniguruma
// does, including the case fold of U+017F LATIN SMALL LETTER LONG S to s.
func contraction(s []byte, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return -1
	}
	c := s[i+1] | 0x20
	switch c {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	if s[i+1] == 0xC5 && i+2 < len(s) && s[i+2] == 0xBF { // U+017F
		return i + 3
	}
	return -1
}

// scanRun returns the end of the run of runes starting at j whose class has any
// bit of mask.
func scanRun(sc classScanner, s []byte, j int, mask uint16) int {
	for j < len(s) {
		if b := s[j]; b < 0x80 {
			if sc.tab[b]&mask == 0 {
				return j
			}
			j++
			continue
		}
		c, w := sc.at(s, j)
		if c&mask == 0 {
			return j
		}
		j += w
	}
	return j
}

// matchSpace implements the shared tail \s*[\r\n]+|\s+(?!\S)|\s+ at s[i],
// whose class is c.
func matchSpace(sc classScanner, s []byte, i int) int {
	z, lastNL, lastStart := i, -1, i
	for z < len(s) {
		c, w := sc.at(s, z)
		if c&cSpace == 0 {
			break
		}
		if c&cCRLF != 0 {
			lastNL = z
		}
		lastStart = z
		z += w
	}
	if z == i {
		return -1
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if z == len(s) || lastStart == i {
		return z
	}
	return lastStart
}

// matchCL100K scans the Llama 3 (maxDigits 3) and Qwen 2/3 (maxDigits 1)
// pattern.
func matchCL100K(sc classScanner, s []byte, i int, maxDigits int) int {
	if s[i] == '\'' {
		if e := contraction(s, i); e > 0 {
			return e
		}
	}
	c, w := sc.at(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&(cCRLF|cL|cN) == 0 {
		if c2, w2 := sc.at(s, i+w); c2&cL != 0 {
			return scanRun(sc, s, i+w+w2, cL)
		}
	} else if c&cL != 0 {
		return scanRun(sc, s, i+w, cL)
	}
	// \p{N}{1,maxDigits}
	if c&cN != 0 {
		j := i + w
		for n := 1; n < maxDigits; n++ {
			c2, w2 := sc.at(s, j)
			if c2&cN == 0 {
				break
			}
			j += w2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if e := matchPunct(sc, s, i, c, w, false); e > 0 {
		return e
	}
	if c&cSpace != 0 {
		return matchSpace(sc, s, i)
	}
	return -1
}

// matchPunct matches ' ?[^\s\p{L}\p{N}]+[\r\n]*' (and [\r\n/]* with slash).
func matchPunct(sc classScanner, s []byte, i int, c uint16, w int, slash bool) int {
	j := i
	if s[i] == ' ' {
		j = i + 1
		c, w = sc.at(s, j)
		if w == 0 {
			return -1
		}
	}
	if c&(cSpace|cL|cN) != 0 {
		return -1
	}
	j += w
	for j < len(s) {
		if b := s[j]; b < 0x80 {
			if sc.tab[b]&(cSpace|cL|cN) != 0 {
				break
			}
			j++
			continue
		}
		c2, w2 := sc.at(s, j)
		if c2&(cSpace|cL|cN) != 0 {
			break
		}
		j += w2
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || (slash && s[j] == '/')) {
		j++
	}
	return j
}

const (
	oU = cLu | cLt | cLm | cLo | cM
	oW = cLl | cLm | cLo | cM
)

// matchO200K scans the GPT-OSS (o200k) pattern.
func matchO200K(sc classScanner, s []byte, i int) int {
	c, w := sc.at(s, i)
	prefix := c&(cCRLF|cL|cN) == 0
	// [^\r\n\p{L}\p{N}]?[U]*[W]+(contraction)?
	altA := func(a int) int {
		b, lastWEnd := a, -1
		for b < len(s) {
			c2, w2 := sc.at(s, b)
			if c2&oU == 0 {
				break
			}
			if c2&oW != 0 {
				lastWEnd = b + w2
			}
			b += w2
		}
		end := -1
		if c3, _ := sc.at(s, b); c3&oW != 0 {
			end = scanRun(sc, s, b, oW)
		} else if lastWEnd >= 0 {
			end = lastWEnd
		}
		if end < 0 {
			return -1
		}
		if e := contraction(s, end); e > 0 {
			return e
		}
		return end
	}
	// [^\r\n\p{L}\p{N}]?[U]+[W]*(contraction)?
	altB := func(a int) int {
		if c2, _ := sc.at(s, a); c2&oU == 0 {
			return -1
		}
		end := scanRun(sc, s, scanRun(sc, s, a, oU), oW)
		if e := contraction(s, end); e > 0 {
			return e
		}
		return end
	}
	if prefix {
		if e := altA(i + w); e >= 0 {
			return e
		}
	}
	if e := altA(i); e >= 0 {
		return e
	}
	if prefix {
		if e := altB(i + w); e >= 0 {
			return e
		}
	}
	if e := altB(i); e >= 0 {
		return e
	}
	if c&cN != 0 {
		return matchDigits3(sc, s, i)
	}
	if e := matchPunct(sc, s, i, c, w, true); e > 0 {
		return e
	}
	if c&cSpace != 0 {
		return matchSpace(sc, s, i)
	}
	return -1
}

// matchDigits3 matches \p{N}{1,3}.
func matchDigits3(sc classScanner, s []byte, i int) int {
	j := i
	for n := 0; n < 3; n++ {
		c, w := sc.at(s, j)
		if c&cN == 0 {
			break
		}
		j += w
	}
	if j == i {
		return -1
	}
	return j
}

// matchDSCJK matches [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+.
func matchDSCJK(_ classScanner, s []byte, i int) int {
	j := i
	for j < len(s) && s[j] >= 0xE3 && s[j] <= 0xE9 {
		r, w := runeAt(s, j)
		if !(r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x309f || r >= 0x30a0 && r <= 0x30ff) {
			break
		}
		j += w
	}
	if j == i {
		return -1
	}
	return j
}

func isASCIIPunct(b byte) bool {
	return b >= '!' && b <= '/' || b >= ':' && b <= '@' || b >= '[' && b <= '`' || b >= '{' && b <= '~'
}

func isASCIIAlpha(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }

// matchDSMain scans the main DeepSeek V3 pattern.
func matchDSMain(sc classScanner, s []byte, i int) int {
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIIAlpha(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIIAlpha(s[j]) {
			j++
		}
		return j
	}
	c, w := sc.at(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c&(cCRLF|cL|cP|cS) == 0 {
		if c2, w2 := sc.at(s, i+w); c2&(cL|cM) != 0 {
			return scanRun(sc, s, i+w+w2, cL|cM)
		}
	}
	if c&(cL|cM) != 0 {
		return scanRun(sc, s, i+w, cL|cM)
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	j := i
	if s[i] == ' ' {
		j = i + 1
		c, w = sc.at(s, j)
	}
	if w > 0 && c&(cP|cS) != 0 {
		j = scanRun(sc, s, j+w, cP|cS)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if c0, _ := sc.at(s, i); c0&cSpace != 0 {
		return matchSpace(sc, s, i)
	}
	return -1
}
