package replay

import (
	_ "embed"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// words.txt lists English words that are exactly one token both bare and
// after a space in the Qwen3 and Llama 3 tokenizers (checked by
// testdata/wordlist/check_words.mjs with the Rust tokenizers library). A
// text of n such words joined by single spaces is n tokens in both, and close
// to n in other large byte-level BPE vocabularies.
//
//go:embed words.txt
var wordsFile string

var wordList = strings.Fields(wordsFile)

// tokenIDBase and tokenIDSpan bound the token ids generated for token-id
// prompts: ordinary vocabulary ids of any tokenizer with at least 32K
// entries, clear of the low ids some vocabularies reserve for bytes and
// special tokens.
const (
	tokenIDBase = 1000
	tokenIDSpan = 30000
)

// newRand returns a deterministic generator for the stream (seed, key).
// Different keys give independent streams, so one part of a workload can be
// regenerated without replaying the draws of another.
func newRand(seed int64, key ...uint64) *rand.Rand {
	h := uint64(seed) ^ 0x9e3779b97f4a7c15
	for _, k := range key {
		h = mix64(h ^ k)
	}
	return rand.New(rand.NewPCG(uint64(seed), h))
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hashString folds s into a key for newRand.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Text is a prompt fragment in two equivalent forms generated together:
// Words for text prompts (joined by single spaces, one token per word in
// the Qwen3 and Llama 3 vocabularies) and IDs for token-id prompts, of the
// same length.
type Text struct {
	Words []string
	IDs   []int
}

// genText draws n words and n token ids from r.
func genText(r *rand.Rand, n int) Text {
	t := Text{Words: make([]string, n), IDs: make([]int, n)}
	for i := range n {
		t.Words[i] = wordList[r.IntN(len(wordList))]
		t.IDs[i] = tokenIDBase + r.IntN(tokenIDSpan)
	}
	return t
}

// String returns the words joined by single spaces.
func (t Text) String() string { return strings.Join(t.Words, " ") }

// Len returns the length in (approximate, for words) tokens.
func (t Text) Len() int { return len(t.Words) }

// concat returns the texts one after the other.
func concat(ts ...Text) Text {
	var out Text
	for _, t := range ts {
		out.Words = append(out.Words, t.Words...)
		out.IDs = append(out.IDs, t.IDs...)
	}
	return out
}

// marker returns a short text unique to (kind, a, b) that starts a prompt's
// unique part, so that no two requests share more than their intended
// prefix. Its words cost about four tokens; its ids are exactly four tokens.
func marker(kind string, a, b int) Text {
	word := kind + "-" + strconv.Itoa(a) + "-" + strconv.Itoa(b)
	h := mix64(hashString(word))
	ids := make([]int, 4)
	for i := range ids {
		ids[i] = tokenIDBase + int((h>>(16*i))&0xffff)%tokenIDSpan
	}
	return Text{Words: []string{word}, IDs: ids}
}

// Dist is a distribution of token counts: normal with Mean and Stdev,
// clipped to [Min, Max]. Stdev 0 means always Mean. Max 0 means no upper
// bound.
type Dist struct {
	Mean  int `json:"mean" yaml:"mean"`
	Stdev int `json:"stdev,omitempty" yaml:"stdev"`
	Min   int `json:"min,omitempty" yaml:"min"`
	Max   int `json:"max,omitempty" yaml:"max"`
}

// sample draws one value.
func (d Dist) sample(r *rand.Rand) int {
	v := d.Mean
	if d.Stdev > 0 {
		v = int(math.Round(float64(d.Mean) + r.NormFloat64()*float64(d.Stdev)))
	}
	if v < d.Min {
		v = d.Min
	}
	if d.Max > 0 && v > d.Max {
		v = d.Max
	}
	return max(v, 0)
}

func (d Dist) validate(name string, minMean int) error {
	if d.Mean < minMean || d.Stdev < 0 || d.Min < 0 || (d.Max > 0 && d.Max < d.Min) {
		return fieldErr(name, "mean must be >= %d, stdev and min >= 0, max >= min", minMean)
	}
	return nil
}
