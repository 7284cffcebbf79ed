package tokenize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text, leftmost first and longest among
// those starting at the same byte, as the Rust library's Aho-Corasick
// automaton (MatchKind::LeftmostLongest) does.
type addedMatcher struct {
	first  [256]bool
	nfirst int              // distinct first bytes
	only   byte             // the first byte, when nfirst is 1
	edges  map[uint64]int32 // node<<8 | byte -> child node
	term   []int32          // node -> index into toks, or -1
	toks   []addedToken
	maxLen int
}

func newAddedMatcher(toks []addedToken, patterns []string) *addedMatcher {
	m := &addedMatcher{edges: make(map[uint64]int32), term: []int32{-1}, toks: toks}
	for ti, p := range patterns {
		if p == "" {
			continue
		}
		m.maxLen = max(m.maxLen, len(p))
		if !m.first[p[0]] {
			m.first[p[0]] = true
			m.nfirst++
			m.only = p[0]
		}
		node := int32(0)
		for i := 0; i < len(p); i++ {
			k := uint64(node)<<8 | uint64(p[i])
			child, ok := m.edges[k]
			if !ok {
				child = int32(len(m.term))
				m.term = append(m.term, -1)
				m.edges[k] = child
			}
			node = child
		}
		if m.term[node] < 0 {
			m.term[node] = int32(ti)
		}
	}
	return m
}

// longestAt returns the index of the longest token that s[i:] starts with,
// and its end, or -1.
func (m *addedMatcher) longestAt(s string, i int) (int, int) {
	node, best, end := int32(0), int32(-1), -1
	for j := i; j < len(s); j++ {
		child, ok := m.edges[uint64(node)<<8|uint64(s[j])]
		if !ok {
			break
		}
		node = child
		if t := m.term[node]; t >= 0 {
			best, end = t, j+1
		}
	}
	return int(best), end
}

// addedSegment is a piece of text: either an added token (id >= 0) or text to
// normalize and tokenize.
type addedSegment struct {
	start, end int
	id         int64
}

// nextCandidate returns the first index from i on where a token may start,
// or len(s). Most vocabularies' added tokens all start with '<', which
// IndexByte finds many bytes at a time.
func (m *addedMatcher) nextCandidate(s string, i int) int {
	if m.nfirst != 1 {
		for i < len(s) && !m.first[s[i]] {
			i++
		}
		return i
	}
	if j := strings.IndexByte(s[i:], m.only); j >= 0 {
		return i + j
	}
	return len(s)
}

// split appends the segments of s to segs. Segment offsets are relative to s.
func (m *addedMatcher) split(s string, segs []addedSegment) []addedSegment {
	if m == nil || len(m.toks) == 0 {
		return append(segs, addedSegment{0, len(s), -1})
	}
	startOff := 0
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i = m.nextCandidate(s, i+1)
			continue
		}
		ti, stop := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		tok := &m.toks[ti]
		start := i
		i = stop
		if tok.SingleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.LStrip {
			start = max(spaceLeftmostAtEnd(s[:start]), startOff)
		}
		if tok.RStrip {
			stop += spaceRightmostAtStart(s[stop:])
		}
		if start < startOff {
			// The Rust library would emit overlapping offsets here; it
			// cannot happen with added tokens that hold no whitespace.
			start = startOff
		}
		if start > startOff {
			segs = append(segs, addedSegment{startOff, start, -1})
		}
		segs = append(segs, addedSegment{start, stop, int64(tok.ID)})
		startOff = stop
		i = max(i, stop)
	}
	if startOff != len(s) || len(s) == 0 {
		segs = append(segs, addedSegment{startOff, len(s), -1})
	}
	return segs
}

// isWordRune reports whether r matches \w of Rust's regex crate, which the
// Rust library uses for single_word: Alphabetic, marks, decimal digits,
// connector punctuation and joiners.
func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.Is(unicode.M, r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordRune(r)
}

// spaceLeftmostAtEnd returns the start of the whitespace at the end of s.
func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= w
	}
	return i
}

// spaceRightmostAtStart returns the length of the whitespace at the start of s.
func spaceRightmostAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += w
	}
	return i
}
