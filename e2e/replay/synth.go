package replay

import (
	_ "embed"
	"math"
	"math/rand/v2"
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

// markerTokens is the length of a marker in tokens.
const markerTokens = 4

// Marker encodings: an index is first permuted (multiplied by a constant
// coprime with the modulus) so consecutive indices differ in their first
// digit, then written least significant digit first, in base len(wordList)
// as words and in base tokenIDSpan as token ids.
const (
	markerWordMult = 1000003 // coprime with 378⁴ = 2⁴·3¹²·7⁴
	markerIDMult   = 7919    // coprime with 30000⁴ = 2¹⁶·3⁴·5¹⁶
)

// marker returns the marker of the index-th user turn of a workload: four
// list words (exactly four tokens in the verified vocabularies) and four
// token ids that no other index below len(wordList)⁴ ≈ 2·10¹⁰ shares. It
// opens each prompt's unique part, so no two requests share more than their
// intended prefix (plus, for 1 in len(wordList) pairs, a first word).
func marker(index int) Text {
	t := Text{Words: make([]string, markerTokens), IDs: make([]int, markerTokens)}
	base := uint64(len(wordList))
	modulus := base * base * base * base
	w := uint64(index) % modulus * markerWordMult % modulus
	idBase := uint64(tokenIDSpan)
	idModulus := idBase * idBase * idBase * idBase
	id := uint64(index) % idModulus * markerIDMult % idModulus
	for i := range markerTokens {
		t.Words[i] = wordList[w%base]
		w /= base
		t.IDs[i] = tokenIDBase + int(id%idBase)
		id /= idBase
	}
	return t
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
