package tokenize

// encodeState is the per-call state of Encode; Tokenizer keeps a pool of them.
type encodeState struct {
	t     *Tokenizer
	sc    classScanner
	ids   []uint32
	bpe   bpeScratch
	segs  []addedSegment
	segs2 []addedSegment
	// marks records split points when non-nil (see PrefixCache).
	marks    *markSink
	input    string // the text Encode was given, which marks' offsets index
	base     int    // offset of the current text piece in the input
	markable bool   // whether the current piece's offsets are the input's
}

// splitMark is a position in the input text at which a pre-token starts,
// with the number of ids before it.
type splitMark struct {
	off  int
	nids int
}

// markSink collects the split points a PrefixCache keeps: pre-token starts
// that are safe splits (safeSplit), at least markSpacing bytes apart.
// Filtering while encoding keeps one mark per hundred bytes or so instead
// of one per word, which a 100K-token prompt would grow to a megabyte.
type markSink struct {
	marks []splitMark
	last  int // offset of the last mark kept, or markSpacing before 0
}

func newMarkSink(last int) *markSink { return &markSink{last: last} }

// Encode returns the token ids of text. With addSpecialTokens it adds the
// post-processor's special tokens (for example Llama 3's BOS), as the Rust
// library's encode(text, add_special_tokens=True) does. Added tokens in the
// text (such as "<|im_start|>") are always recognized.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []uint32 {
	return t.encode(text, addSpecialTokens, nil, nil)
}

func (t *Tokenizer) encode(text string, addSpecialTokens bool, dst []uint32, marks *markSink) []uint32 {
	e := t.pool.Get().(*encodeState)
	e.t, e.sc, e.marks, e.input = t, newClassScanner(), marks, text
	e.ids = dst[:0]
	if dst == nil {
		e.ids = make([]uint32, 0, len(text)/3+8)
	}
	if addSpecialTokens {
		e.ids = append(e.ids, t.prefixIDs...)
	}
	e.text(text)
	if addSpecialTokens {
		e.ids = append(e.ids, t.suffixIDs...)
	}
	ids := e.ids
	e.ids, e.marks, e.t, e.input = nil, nil, nil, ""
	t.pool.Put(e)
	return ids
}

// text splits out added tokens, normalizes and tokenizes the rest.
func (e *encodeState) text(s string) {
	t := e.t
	segs := t.plain.split(s, e.segs[:0])
	e.segs = segs
	for _, sg := range segs {
		if sg.id >= 0 {
			e.ids = append(e.ids, uint32(sg.id))
			continue
		}
		piece := s[sg.start:sg.end]
		n := applyNormalizers(t.norm, piece)
		if t.normed == nil {
			e.base, e.markable = sg.start, n == piece
			e.pretokenize(n)
			continue
		}
		inner := t.normed.split(n, e.segs2[:0])
		e.segs2 = inner
		for _, ig := range inner {
			if ig.id >= 0 {
				e.ids = append(e.ids, uint32(ig.id))
				continue
			}
			e.base, e.markable = sg.start+ig.start, n == piece
			e.pretokenize(n[ig.start:ig.end])
		}
		e.segs2 = inner[:0]
	}
}

func (e *encodeState) pretokenize(s string) {
	if s == "" {
		return
	}
	if m := e.t.meta; m != nil {
		s = m.rewrite(s, e.base == 0)
		e.markable = false
		b := unsafeBytes(s)
		if !m.split {
			e.split(len(e.t.steps), b, b)
			return
		}
		m.splitter.split(e.sc, b, func(p []byte) { e.split(len(e.t.steps), b, p) })
		return
	}
	b := unsafeBytes(s)
	e.split(0, b, b)
}

// split runs step i of the pre-tokenizer on piece; whole is the text the
// offsets of marks are relative to.
func (e *encodeState) split(i int, whole, piece []byte) {
	steps := e.t.steps
	if i == len(steps) {
		if e.marks != nil && e.markable {
			if off := e.base + offsetIn(whole, piece); off-e.marks.last >= markSpacing && safeSplit(e.input, off) {
				e.marks.marks = append(e.marks.marks, splitMark{off, len(e.ids)})
				e.marks.last = off
			}
		}
		e.ids = e.t.model.encodeWord(piece, e.ids, &e.bpe)
		return
	}
	steps[i].split(e.sc, piece, func(p []byte) { e.split(i+1, whole, p) })
}
