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

// Token-id prompts use one id per word of the list: tokenIDBase plus the
// word's index times tokenIDStride modulo tokenIDSpan, distinct for every
// word. The ids are ordinary vocabulary entries of any tokenizer with at
// least 32K entries, clear of the low ids some vocabularies reserve for bytes
// and special tokens; they are not the words' real ids in any vocabulary.
const (
	tokenIDBase   = 1000
	tokenIDSpan   = 30000
	tokenIDStride = 7919 // coprime with tokenIDSpan
)

// tokenID returns the token id standing for word index w.
func tokenID(w uint16) int { return tokenIDBase + int(w)*tokenIDStride%tokenIDSpan }

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

// Text is a prompt fragment: a sequence of words from the verified list,
// each exactly one token in the Qwen3 and Llama 3 vocabularies. It is sent
// as the words joined by single spaces (String) or, for token-id prompts, as
// one id per word (IDs).
//
// A Text is immutable and cheap to copy: concatenating and cutting share the
// underlying word blocks, so sessions repeating a large context or trace
// blocks hold one copy of them. The zero Text is empty.
type Text struct {
	segs [][]uint16 // word indices, in order; never empty slices
	n    int
}

// textOf returns the Text of word indices idx, which it keeps.
func textOf(idx []uint16) Text {
	if len(idx) == 0 {
		return Text{}
	}
	return Text{segs: [][]uint16{idx}, n: len(idx)}
}

// genText draws n words from r.
func genText(r *rand.Rand, n int) Text {
	idx := make([]uint16, n)
	for i := range idx {
		idx[i] = uint16(r.IntN(len(wordList)))
	}
	return textOf(idx)
}

// Len returns the length in tokens.
func (t Text) Len() int { return t.n }

// String returns the words joined by single spaces.
func (t Text) String() string {
	var b strings.Builder
	b.Grow(8 * t.n)
	for _, seg := range t.segs {
		for _, w := range seg {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(wordList[w])
		}
	}
	return b.String()
}

// Words returns the words.
func (t Text) Words() []string {
	out := make([]string, 0, t.n)
	for _, seg := range t.segs {
		for _, w := range seg {
			out = append(out, wordList[w])
		}
	}
	return out
}

// IDs returns the token ids.
func (t Text) IDs() []int { return t.appendIDs(make([]int, 0, t.n)) }

// appendIDs appends the token ids to dst.
func (t Text) appendIDs(dst []int) []int {
	for _, seg := range t.segs {
		for _, w := range seg {
			dst = append(dst, tokenID(w))
		}
	}
	return dst
}

// head returns the first n tokens of t (all of t when it is shorter).
func (t Text) head(n int) Text {
	if n >= t.n {
		return t
	}
	var out Text
	for _, seg := range t.segs {
		if out.n == n {
			break
		}
		k := min(len(seg), n-out.n)
		out.segs = append(out.segs, seg[:k])
		out.n += k
	}
	return out
}

// concat returns the texts one after the other.
func concat(ts ...Text) Text {
	var out Text
	for _, t := range ts {
		out.segs = append(out.segs, t.segs...)
		out.n += t.n
	}
	return out
}

// markerTokens is the length of a marker in tokens.
const markerTokens = 4

// markerWordMult permutes marker indices (it is coprime with 378⁴ =
// 2⁴·3¹²·7⁴) so consecutive indices differ in their first word.
const markerWordMult = 1000003

// marker returns the marker of the index-th user turn of a workload: four
// list words (so four tokens, and four token ids) that no other index below
// len(wordList)⁴ ≈ 2·10¹⁰ shares, spelling the permuted index in base
// len(wordList), least significant digit first. It opens each prompt's
// unique part, so no two requests share more than their intended prefix
// (plus, for 1 in len(wordList) pairs, a first word).
func marker(index int) Text {
	base := uint64(len(wordList))
	modulus := base * base * base * base
	w := uint64(index) % modulus * markerWordMult % modulus
	idx := make([]uint16, markerTokens)
	for i := range idx {
		idx[i] = uint16(w % base)
		w /= base
	}
	return textOf(idx)
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
