package tokenize

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

type typed struct {
	Type string `json:"type"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func parseNormalizer(raw json.RawMessage) ([]normOp, error) {
	if isNull(raw) {
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
	if isNull(raw) {
		return nil, false, nil
	}
	var p struct {
		Type           string            `json:"type"`
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

func parseModel(raw json.RawMessage, byteLevel bool) (*bpeModel, []string, error) {
	var mj modelJSON
	if err := json.Unmarshal(raw, &mj); err != nil {
		return nil, nil, fmt.Errorf("parse model: %w", err)
	}
	if mj.Type != "BPE" {
		return nil, nil, fmt.Errorf("%w: model %q", ErrUnsupported, mj.Type)
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return nil, nil, fmt.Errorf("%w: BPE dropout", ErrUnsupported)
	}
	if mj.ContinuingSubwordPrefix != nil && *mj.ContinuingSubwordPrefix != "" {
		return nil, nil, fmt.Errorf("%w: continuing_subword_prefix", ErrUnsupported)
	}
	if mj.EndOfWordSuffix != nil && *mj.EndOfWordSuffix != "" {
		return nil, nil, fmt.Errorf("%w: end_of_word_suffix", ErrUnsupported)
	}
	vocab, err := parseVocab(mj.Vocab)
	if err != nil {
		return nil, nil, err
	}
	m := &bpeModel{
		vocab:        make(map[string]uint32, len(vocab)),
		byteLevel:    byteLevel,
		ignoreMerges: mj.IgnoreMerges,
		byteFallback: mj.ByteFallback,
		fuseUnk:      mj.FuseUnk,
	}
	maxID := uint32(0)
	for _, e := range vocab {
		maxID = max(maxID, e.id)
	}
	idToToken := make([]string, int(maxID)+1)
	// key maps a token as spelled in the file to the model's key.
	key := func(s string) (string, bool) {
		if !byteLevel {
			return s, true
		}
		b, ok := byteLevelDecode(s)
		return string(b), ok
	}
	for _, e := range vocab {
		idToToken[e.id] = e.tok
		if k, ok := key(e.tok); ok {
			m.vocab[k] = e.id
		}
	}
	if byteLevel {
		for b := 0; b < 256; b++ {
			m.byteID[b], m.byteOK[b] = m.vocab[string([]byte{byte(b)})]
		}
	}
	if mj.ByteFallback {
		m.fallbackOK = true
		for b := 0; b < 256; b++ {
			id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]
			m.fallbackID[b] = id
			m.fallbackOK = m.fallbackOK && ok
		}
	}
	if mj.UnkToken != nil {
		id, ok := m.vocab[*mj.UnkToken]
		if !ok {
			return nil, nil, fmt.Errorf("parse model: unk_token %q not in vocab", *mj.UnkToken)
		}
		m.unk, m.hasUnk = id, true
	}
	pairs, err := parseMerges(mj.Merges)
	if err != nil {
		return nil, nil, err
	}
	m.merges = newPairTable(len(pairs))
	for rank, p := range pairs {
		ka, okA := key(p[0])
		kb, okB := key(p[1])
		a, okA2 := m.vocab[ka]
		b, okB2 := m.vocab[kb]
		n, okN := m.vocab[ka+kb]
		if !(okA && okB && okA2 && okB2 && okN) {
			return nil, nil, fmt.Errorf("parse model: merge %d (%q %q) uses a token not in the vocabulary", rank, p[0], p[1])
		}
		m.merges.put(a, b, uint32(rank), n)
	}
	return m, idToToken, nil
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

// parseMerges reads merges as "a b" strings or ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	d := jsonScanner{b: raw}
	var out [][2]string
	if !d.consume('[') {
		return nil, fmt.Errorf("parse merges: want an array")
	}
	if d.consume(']') {
		return out, nil
	}
	for {
		var p [2]string
		if d.consume('[') {
			a, err := d.str()
			if err != nil {
				return nil, fmt.Errorf("parse merges: %w", err)
			}
			if !d.consume(',') {
				return nil, fmt.Errorf("parse merges: want a pair at %d", d.i)
			}
			b, err := d.str()
			if err != nil {
				return nil, fmt.Errorf("parse merges: %w", err)
			}
			if !d.consume(']') {
				return nil, fmt.Errorf("parse merges: want a pair at %d", d.i)
			}
			p = [2]string{a, b}
		} else {
			s, err := d.str()
			if err != nil {
				return nil, fmt.Errorf("parse merges: %w", err)
			}
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("parse merges: merge %q is not two tokens", s)
			}
			p = [2]string{a, b}
		}
		out = append(out, p)
		if d.consume(',') {
			continue
		}
		if d.consume(']') {
			return out, nil
		}
		return nil, fmt.Errorf("parse merges: want ',' or ']' at %d", d.i)
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
	if isNull(raw) {
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
