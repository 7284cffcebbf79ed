package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
)

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func parseNormalizer(raw json.RawMessage) ([]normOp, error) {
	if jsonIsNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     string            `json:"prepend"`
		Pattern     patternJSON       `json:"pattern"`
		Content     string            `json:"content"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("parse normalizer: %w", err)
	}
	switch n.Type {
	case "NFC":
		return []normOp{nfcOp{}}, nil
	case "Sequence":
		var ops []normOp
		for _, sub := range n.Normalizers {
			o, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
		return ops, nil
	case "Prepend":
		return []normOp{prependOp{n.Prepend}}, nil
	case "Replace":
		if n.Pattern.String == nil {
			return nil, fmt.Errorf("%w: Replace normalizer with a regex pattern", ErrUnsupported)
		}
		if *n.Pattern.String == "" {
			return nil, fmt.Errorf("%w: Replace normalizer with an empty pattern", ErrUnsupported)
		}
		return []normOp{replaceOp{*n.Pattern.String, n.Content}}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, n.Type)
}

// parsePreTokenizer returns the Split steps in order, and whether a
// ByteLevel pre-tokenizer (without its own regex) ends the sequence.
func parsePreTokenizer(raw json.RawMessage) ([]splitStep, bool, error) {
	if jsonIsNull(raw) {
		return nil, false, nil
	}
	var p struct {
		Type           string            `json:"type"`
		Replacement    string            `json:"replacement"`
		PrependScheme  *string           `json:"prepend_scheme"`
		Split          *bool             `json:"split"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        patternJSON       `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, false, fmt.Errorf("parse pre_tokenizer: %w", err)
	}
	switch p.Type {
	case "Sequence":
		var steps []splitStep
		byteLevel := false
		for _, sub := range p.Pretokenizers {
			if byteLevel {
				return nil, false, fmt.Errorf("%w: pre-tokenizer after ByteLevel", ErrUnsupported)
			}
			s, bl, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, false, err
			}
			steps = append(steps, s...)
			byteLevel = bl
		}
		return steps, byteLevel, nil
	case "Metaspace":
		m, err := parseMetaspace(p.Replacement, p.PrependScheme, p.AddPrefixSpace, p.Split)
		if err != nil {
			return nil, false, err
		}
		return []splitStep{{meta: m}}, false, nil
	case "ByteLevel":
		if p.AddPrefixSpace {
			return nil, false, fmt.Errorf("%w: ByteLevel pre-tokenizer with add_prefix_space", ErrUnsupported)
		}
		if p.UseRegex == nil || *p.UseRegex {
			return nil, false, fmt.Errorf("%w: ByteLevel pre-tokenizer with use_regex", ErrUnsupported)
		}
		return nil, true, nil
	case "Split":
		if p.Invert {
			return nil, false, fmt.Errorf("%w: inverted Split", ErrUnsupported)
		}
		var b splitBehavior
		switch p.Behavior {
		case "Isolated":
			b = splitIsolated
		case "MergedWithPrevious":
			b = splitMergedWithPrevious
		case "MergedWithNext":
			b = splitMergedWithNext
		case "Removed":
			b = splitRemoved
		default:
			return nil, false, fmt.Errorf("%w: Split behavior %q", ErrUnsupported, p.Behavior)
		}
		if p.Pattern.String != nil {
			if *p.Pattern.String == "" {
				return nil, false, fmt.Errorf("%w: Split with an empty string", ErrUnsupported)
			}
			return []splitStep{{behavior: b, literal: []byte(*p.Pattern.String)}}, false, nil
		}
		if p.Pattern.Regex == nil {
			return nil, false, fmt.Errorf("parse pre_tokenizer: Split without a pattern")
		}
		if b != splitIsolated {
			return nil, false, fmt.Errorf("%w: regex Split with behavior %q", ErrUnsupported, p.Behavior)
		}
		m, err := knownPattern(*p.Pattern.Regex)
		if err != nil {
			return nil, false, err
		}
		return []splitStep{{behavior: b, match: m}}, false, nil
	}
	return nil, false, fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, p.Type)
}

// parseMetaspace reads a Metaspace pre-tokenizer or decoder. Files written
// before prepend_scheme existed say add_prefix_space instead.
func parseMetaspace(replacement string, scheme *string, addPrefixSpace bool, split *bool) (*metaspace, error) {
	r := []rune(replacement)
	if len(r) != 1 {
		return nil, fmt.Errorf("%w: Metaspace replacement %q", ErrUnsupported, replacement)
	}
	m := &metaspace{replacement: replacement, split: split == nil || *split}
	m.splitter = &splitStep{behavior: splitMergedWithNext, literal: []byte(replacement)}
	switch {
	case scheme == nil && addPrefixSpace, scheme != nil && *scheme == "always":
		m.scheme = prependAlways
	case scheme == nil, *scheme == "never":
		m.scheme = prependNever
	case *scheme == "first":
		m.scheme = prependFirst
	default:
		return nil, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrUnsupported, *scheme)
	}
	return m, nil
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

func parseModel(raw json.RawMessage, byteLevel bool) (*bpeModel, idStrings, error) {
	fields, err := splitObject(raw)
	if err != nil {
		return nil, idStrings{}, fmt.Errorf("parse model: %w", err)
	}
	small := make(map[string]json.RawMessage, len(fields))
	for k, v := range fields {
		if k != "vocab" && k != "merges" {
			small[k] = v
		}
	}
	smallJSON, err := json.Marshal(small)
	if err != nil {
		return nil, idStrings{}, fmt.Errorf("parse model: %w", err)
	}
	var mj modelJSON
	if err := json.Unmarshal(smallJSON, &mj); err != nil {
		return nil, idStrings{}, fmt.Errorf("parse model: %w", err)
	}
	mj.Vocab, mj.Merges = fields["vocab"], fields["merges"]
	if mj.Type != "BPE" {
		return nil, idStrings{}, fmt.Errorf("%w: model %q", ErrUnsupported, mj.Type)
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return nil, idStrings{}, fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	}
	if mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "" {
		return nil, idStrings{}, fmt.Errorf("%w: continuing_subword_prefix", ErrUnsupported)
	}
	if mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "" {
		return nil, idStrings{}, fmt.Errorf("%w: end_of_word_suffix", ErrUnsupported)
	}
	vocab, err := parseVocab(mj.Vocab)
	if err != nil {
		return nil, idStrings{}, err
	}
	m := &bpeModel{
		byteLevel:    byteLevel,
		ignoreMerges: mj.IgnoreMerges,
		byteFallback: mj.ByteFallback,
		fuseUnk:      mj.FuseUnk,
	}
	maxID := uint32(0)
	for _, e := range vocab {
		maxID = max(maxID, e.id)
	}
	if int(maxID) > 16*len(vocab)+1024 {
		return nil, idStrings{}, fmt.Errorf("parse model: id %d is far beyond a vocabulary of %d", maxID, len(vocab))
	}
	idToToken := make([]string, int(maxID)+1)
	m.whole = make([]uint32, int(maxID)+1)
	m.words = newWordCache(wordCacheBits, rand.Uint64())
	// key appends the model's key of a token as spelled in the file.
	key := func(dst, s []byte) ([]byte, bool) {
		if !byteLevel {
			return append(dst, s...), true
		}
		return byteLevelDecodeInto(dst, s)
	}
	var buf []byte
	var keys vocabBuilder
	for _, e := range vocab {
		idToToken[e.id] = e.tok
		var ok bool
		if buf, ok = key(buf[:0], unsafeBytes(e.tok)); ok && !keys.add(buf, e.id) {
			return nil, idStrings{}, fmt.Errorf("parse model: the vocabulary's keys pass 2 GiB")
		}
	}
	m.vocab = keys.build()
	if byteLevel {
		for b := 0; b < 256; b++ {
			m.byteID[b], m.byteOK[b] = m.vocab.get(string([]byte{byte(b)}))
		}
	}
	if mj.ByteFallback {
		m.fallbackOK = true
		for b := 0; b < 256; b++ {
			id, ok := m.vocab.get(fmt.Sprintf("<0x%02X>", b))
			m.fallbackID[b] = id
			m.fallbackOK = m.fallbackOK && ok
		}
	}
	if mj.UnkToken != nil {
		id, ok := m.vocab.get(*mj.UnkToken)
		if !ok {
			return nil, idStrings{}, fmt.Errorf("parse model: unk_token %q not in vocab", *mj.UnkToken)
		}
		m.unk, m.hasUnk = id, true
	}
	m.sentencePieceSplit(vocab)
	m.merges = newPairTable(max(len(vocab), 16))
	rank := 0
	var kbuf []byte
	err = parseMerges(mj.Merges, func(a, b []byte) error {
		kbuf = kbuf[:0]
		kbuf, okA := key(kbuf, a)
		na := len(kbuf)
		kbuf, okB := key(kbuf, b)
		idA, okA2 := m.vocab.getBytes(kbuf[:na])
		idB, okB2 := m.vocab.getBytes(kbuf[na:])
		idN, okN := m.vocab.getBytes(kbuf)
		if !(okA && okB && okA2 && okB2 && okN) {
			return fmt.Errorf("parse model: merge %d (%q %q) uses a token not in the vocabulary", rank, a, b)
		}
		m.merges.put(idA, idB, uint32(rank), idN)
		rank++
		return nil
	})
	if err != nil {
		return nil, idStrings{}, err
	}
	tokens, ok := newIDStrings(idToToken)
	if !ok {
		return nil, idStrings{}, fmt.Errorf("parse model: the vocabulary's tokens pass 4 GiB")
	}
	return m, tokens, nil
}

type vocabEntry struct {
	tok string
	id  uint32
}

// parseVocab reads the vocab object in file order.
func parseVocab(raw json.RawMessage) ([]vocabEntry, error) {
	d := jsonScanner{b: raw}
	var out []vocabEntry
	if !d.consume('{') {
		return nil, fmt.Errorf("parse vocab: want an object")
	}
	if d.consume('}') {
		return out, nil
	}
	for {
		k, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("parse vocab: %w", err)
		}
		if !d.consume(':') {
			return nil, fmt.Errorf("parse vocab: want ':' at %d", d.i)
		}
		n, err := d.uint()
		if err != nil {
			return nil, fmt.Errorf("parse vocab: %w", err)
		}
		out = append(out, vocabEntry{k, n})
		if d.consume(',') {
			continue
		}
		if d.consume('}') {
			return out, nil
		}
		return nil, fmt.Errorf("parse vocab: want ',' or '}' at %d", d.i)
	}
}

// parseMerges calls fn for each merge, given as "a b" strings or ["a", "b"]
// pairs, in order. The slices are valid only during the call.
func parseMerges(raw json.RawMessage, fn func(a, b []byte) error) error {
	if jsonIsNull(raw) {
		return nil
	}
	d := jsonScanner{b: raw}
	if !d.consume('[') {
		return fmt.Errorf("parse merges: want an array")
	}
	if d.consume(']') {
		return nil
	}
	var sa, sb []byte
	for {
		var a, b []byte
		var err error
		if d.consume('[') {
			if a, err = d.strBytes(&sa); err != nil {
				return fmt.Errorf("parse merges: %w", err)
			}
			if !d.consume(',') {
				return fmt.Errorf("parse merges: want a pair at %d", d.i)
			}
			if b, err = d.strBytes(&sb); err != nil {
				return fmt.Errorf("parse merges: %w", err)
			}
			if !d.consume(']') {
				return fmt.Errorf("parse merges: want a pair at %d", d.i)
			}
		} else {
			s, err := d.strBytes(&sa)
			if err != nil {
				return fmt.Errorf("parse merges: %w", err)
			}
			k := bytes.IndexByte(s, ' ')
			if k < 0 || bytes.IndexByte(s[k+1:], ' ') >= 0 {
				return fmt.Errorf("parse merges: merge %q is not two tokens", s)
			}
			a, b = s[:k], s[k+1:]
		}
		if err := fn(a, b); err != nil {
			return err
		}
		if d.consume(',') {
			continue
		}
		if d.consume(']') {
			return nil
		}
		return fmt.Errorf("parse merges: want ',' or ']' at %d", d.i)
	}
}

// splitObject returns the raw values of a JSON object's keys without
// decoding them, so that huge members (vocab, merges) are never scanned by
// encoding/json.
func splitObject(b []byte) (map[string]json.RawMessage, error) {
	d := jsonScanner{b: b}
	if !d.consume('{') {
		return nil, fmt.Errorf("want an object")
	}
	out := make(map[string]json.RawMessage)
	if d.consume('}') {
		return out, nil
	}
	for {
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if !d.consume(':') {
			return nil, fmt.Errorf("want ':' at %d", d.i)
		}
		d.ws()
		start := d.i
		if err := d.skipValue(); err != nil {
			return nil, err
		}
		out[k] = b[start:d.i]
		if d.consume(',') {
			continue
		}
		if d.consume('}') {
			d.ws()
			if d.i != len(b) {
				return nil, fmt.Errorf("data after the object at %d", d.i)
			}
			return out, nil
		}
		return nil, fmt.Errorf("want ',' or '}' at %d", d.i)
	}
}

// jsonScanner reads the few JSON shapes of vocab and merges much faster
// than encoding/json decodes them into maps.
type jsonScanner struct {
	b []byte
	i int
}

func (d *jsonScanner) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonScanner) consume(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *jsonScanner) uint() (uint32, error) {
	d.ws()
	j := d.i
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	n, err := strconv.ParseUint(string(d.b[d.i:j]), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad id at %d: %w", d.i, err)
	}
	d.i = j
	return uint32(n), nil
}

// skipValue moves past one JSON value. It checks nesting and strings, not
// the values' grammar: the parts are decoded (and checked) later.
func (d *jsonScanner) skipValue() error {
	d.ws()
	if d.i >= len(d.b) {
		return fmt.Errorf("want a value at %d", d.i)
	}
	depth := 0
	for d.i < len(d.b) {
		switch c := d.b[d.i]; c {
		case '"':
			if err := d.skipString(); err != nil {
				return err
			}
		case '{', '[':
			depth++
			d.i++
		case '}', ']':
			if depth == 0 {
				return nil
			}
			depth--
			d.i++
		case ',':
			if depth == 0 {
				return nil
			}
			d.i++
		default:
			if depth == 0 && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				return nil
			}
			d.i++
		}
		if depth == 0 && d.i > 0 && (d.b[d.i-1] == '"' || d.b[d.i-1] == '}' || d.b[d.i-1] == ']') {
			return nil
		}
	}
	if depth != 0 {
		return fmt.Errorf("unterminated value")
	}
	return nil
}

func (d *jsonScanner) skipString() error {
	j := d.i + 1
	for j < len(d.b) {
		switch d.b[j] {
		case '\\':
			j += 2
			continue
		case '"':
			d.i = j + 1
			return nil
		}
		j++
	}
	return fmt.Errorf("unterminated string at %d", d.i)
}

// strBytes reads a string; without escapes it returns a slice of the input,
// else it decodes into *scratch.
func (d *jsonScanner) strBytes(scratch *[]byte) ([]byte, error) {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, fmt.Errorf("want a string at %d", d.i)
	}
	j := d.i + 1
	for j < len(d.b) && d.b[j] != '"' && d.b[j] != '\\' {
		j++
	}
	if j < len(d.b) && d.b[j] == '"' {
		s := d.b[d.i+1 : j]
		d.i = j + 1
		return s, nil
	}
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	*scratch = append((*scratch)[:0], s...)
	return *scratch, nil
}

func (d *jsonScanner) str() (string, error) {
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", fmt.Errorf("want a string at %d", d.i)
	}
	j := d.i + 1
	for j < len(d.b) && d.b[j] != '"' && d.b[j] != '\\' {
		j++
	}
	if j < len(d.b) && d.b[j] == '"' {
		s := string(d.b[d.i+1 : j])
		d.i = j + 1
		return s, nil
	}
	// escapes: find the closing quote and let encoding/json unquote it
	k := j
	for k < len(d.b) {
		if d.b[k] == '\\' {
			k += 2
			continue
		}
		if d.b[k] == '"' {
			break
		}
		k++
	}
	if k >= len(d.b) {
		return "", fmt.Errorf("unterminated string at %d", d.i)
	}
	var s string
	if err := json.Unmarshal(d.b[d.i:k+1], &s); err != nil {
		return "", fmt.Errorf("bad string at %d: %w", d.i, err)
	}
	d.i = k + 1
	return s, nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if jsonIsNull(raw) {
		return nil
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("parse post_processor: %w", err)
	}
	switch p.Type {
	case "ByteLevel":
		return nil // changes offsets only
	case "Sequence":
		for _, sub := range p.Processors {
			if err := t.parsePostProcessor(sub); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		if len(t.prefixIDs)+len(t.suffixIDs) > 0 {
			return fmt.Errorf("%w: two TemplateProcessing post-processors", ErrUnsupported)
		}
		seen := false
		for _, it := range p.Single {
			switch {
			case it.Sequence != nil:
				if seen || it.Sequence.ID != "A" {
					return fmt.Errorf("%w: TemplateProcessing single template", ErrUnsupported)
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := p.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("parse post_processor: special token %q undefined", it.SpecialToken.ID)
				}
				if seen {
					t.suffixIDs = append(t.suffixIDs, st.IDs...)
				} else {
					t.prefixIDs = append(t.prefixIDs, st.IDs...)
				}
			default:
				return fmt.Errorf("parse post_processor: empty template item")
			}
		}
		if !seen {
			return fmt.Errorf("%w: TemplateProcessing without sequence A", ErrUnsupported)
		}
		return nil
	}
	return fmt.Errorf("%w: post-processor %q", ErrUnsupported, p.Type)
}
