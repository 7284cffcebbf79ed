package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestAddedMatcherSplit checks split against a plain leftmost-longest scan
// on random texts built from the tokens' pieces, for a set whose tokens
// share one first byte (the IndexByte jump) and for one whose do not.
func TestAddedMatcherSplit(t *testing.T) {
	sets := map[string][]string{
		"one first byte":   {"<|a|>", "<|ab|>", "<x>", "<"},
		"four first bytes": {"<|a|>", "[B]", "\n\n", "é!", "<x>"},
	}
	for name, patterns := range sets {
		t.Run(name, func(t *testing.T) {
			toks := make([]addedToken, len(patterns))
			for i, p := range patterns {
				toks[i] = addedToken{ID: uint32(100 + i), Content: p}
			}
			m := newAddedMatcher(toks, patterns)
			pieces := append(slices.Clone(patterns), "<|", "a", "|>", "[", "B", "\n", "é", " text ", "<|ab", "x>")
			rng := rand.New(rand.NewPCG(5, uint64(len(name))))
			for range 2000 {
				var b strings.Builder
				for range rng.IntN(12) {
					b.WriteString(pieces[rng.IntN(len(pieces))])
				}
				s := b.String()
				if got, want := m.split(s, nil), splitLeftmostLongest(s, patterns, toks); !slices.Equal(got, want) {
					t.Fatalf("split(%q) = %v, want %v", s, got, want)
				}
			}
		})
	}
}

// splitLeftmostLongest is the model of addedMatcher.split for tokens
// without stripping or single-word rules.
func splitLeftmostLongest(s string, patterns []string, toks []addedToken) []addedSegment {
	var out []addedSegment
	start := 0
	for i := 0; i < len(s); {
		best := -1
		for k, p := range patterns {
			if strings.HasPrefix(s[i:], p) && (best < 0 || len(p) > len(patterns[best])) {
				best = k
			}
		}
		if best < 0 {
			i++
			continue
		}
		if start < i {
			out = append(out, addedSegment{start, i, -1})
		}
		end := i + len(patterns[best])
		out = append(out, addedSegment{i, end, int64(toks[best].ID)})
		start, i = end, end
	}
	if start != len(s) || len(s) == 0 {
		out = append(out, addedSegment{start, len(s), -1})
	}
	return out
}
