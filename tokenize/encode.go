package tokenize

// encodeState is the per-call state of Encode; Tokenizer keeps a pool of them.
type encodeState struct {
	t     *Tokenizer
	sc    classScanner
	ids   []uint32
	bpe   bpeScratch
	segs  []addedSegment
	segs2 []addedSegment
	// marks records pre-token boundaries when non-nil (see PrefixCache).
	marks    *[]splitMark
	base     int  // offset of the current text piece in the input
	markable bool // whether the current piece's offsets are the input's
}

// splitMark is a position in the input text at which a pre-token starts,
// with the number of ids before it.
type splitMark struct {
	off  int
	nids int
}

// Encode returns the token ids of text. With addSpecialTokens it adds the
// post-processor's special tokens (for example Llama 3's BOS), as the Rust
// library's encode(text, add_special_tokens=True) does. Added tokens in the
// text (such as "<|im_start|>") are always recognized.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []uint32 {
	return t.encode(text, addSpecialTokens, nil, nil)
}

func (t *Tokenizer) encode(text string, addSpecialTokens bool, dst []uint32, marks *[]splitMark) []uint32 {
	e := t.pool.Get().(*encodeState)
	e.t, e.sc, e.marks = t, newClassScanner(), marks
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
	e.ids, e.marks, e.t = nil, nil, nil
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
			*e.marks = append(*e.marks, splitMark{e.base + offsetIn(whole, piece), len(e.ids)})
		}
		e.ids = e.t.model.encodeWord(piece, e.ids, &e.bpe)
		return
	}
	steps[i].split(e.sc, piece, func(p []byte) { e.split(i+1, whole, p) })
}
