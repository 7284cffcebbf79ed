package tokenize

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ErrUnsupported is wrapped by the errors Load returns for a tokenizer.json
// feature this package does not implement. Such a file is rejected rather
// than tokenized approximately.
var ErrUnsupported = errors.New("unsupported tokenizer feature")

// A Tokenizer turns text into the token ids the Rust tokenizers library
// computes for the same tokenizer.json, and back.
//
// A Tokenizer is safe for concurrent use by multiple goroutines: after Load
// it changes only internal memoization that never alters a result. The
// zero value is not usable.
type Tokenizer struct {
	added      []addedToken
	addedByID  map[uint32]int    // id -> index into added
	addedByStr map[string]uint32 // content -> id
	plain      *addedMatcher     // added tokens matched before normalization
	normed     *addedMatcher     // added tokens matched after normalization
	norm       []normOp
	steps      []splitStep
	meta       *metaspace // a Metaspace pre-tokenizer, then steps is empty
	model      *bpeModel
	prefixIDs  []uint32 // post-processor ids before a single sequence
	suffixIDs  []uint32 // post-processor ids after it
	dec        tokenDecoder
	idToToken  idStrings // model vocabulary as tokenizer.json spells it

	// splitSafe reports whether text may be split at pre-token boundaries
	// and tokenized piecewise (byte-level BPE after a Split pre-tokenizer,
	// no per-piece prepending); PrefixCache relies on it.
	splitSafe bool
	// spaceCut reports whether text may be cut before a space (when the
	// character before is not one that joins with U+2581) and tokenized
	// piecewise: SentencePiece-style files whose normalizer only replaces
	// spaces, whose pre-tokenizer does nothing after that, and whose added
	// tokens hold no space. PrefixCache relies on it.
	spaceCut bool

	pool sync.Pool // *encodeState
}

// Load reads dir/tokenizer.json, or dir/tokenizer.json.gz if the former does
// not exist, and builds a Tokenizer from it. Errors wrap ErrUnsupported when
// the file uses a feature this package does not implement.
func Load(dir string) (*Tokenizer, error) {
	data, err := readTokenizerFile(dir)
	if err != nil {
		return nil, err
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", dir, err)
	}
	return t, nil
}

func readTokenizerFile(dir string) ([]byte, error) {
	p := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(p)
	if err == nil {
		return data, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read tokenizer: %w", err)
	}
	f, gzErr := os.Open(p + ".gz")
	if gzErr != nil {
		return nil, fmt.Errorf("read tokenizer: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read tokenizer %s.gz: %w", p, err)
	}
	data, err = io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("read tokenizer %s.gz: %w", p, err)
	}
	return data, nil
}

// fileJSON holds the members of tokenizer.json.
type fileJSON struct {
	Truncation    json.RawMessage
	Padding       json.RawMessage
	AddedTokens   []addedToken
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
	Model         json.RawMessage
}

func jsonIsNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json file.
func FromJSON(data []byte) (*Tokenizer, error) {
	top, err := splitObject(data)
	if err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	f := fileJSON{
		Truncation:    top["truncation"],
		Padding:       top["padding"],
		Normalizer:    top["normalizer"],
		PreTokenizer:  top["pre_tokenizer"],
		PostProcessor: top["post_processor"],
		Decoder:       top["decoder"],
		Model:         top["model"],
	}
	if raw := top["added_tokens"]; !jsonIsNull(raw) {
		if err := json.Unmarshal(raw, &f.AddedTokens); err != nil {
			return nil, fmt.Errorf("parse added_tokens: %w", err)
		}
	}
	if jsonIsNull(f.Model) {
		return nil, fmt.Errorf("parse tokenizer.json: no model")
	}
	if !jsonIsNull(f.Truncation) {
		return nil, fmt.Errorf("%w: truncation", ErrUnsupported)
	}
	if !jsonIsNull(f.Padding) {
		return nil, fmt.Errorf("%w: padding", ErrUnsupported)
	}
	t := &Tokenizer{
		added:      f.AddedTokens,
		addedByID:  make(map[uint32]int, len(f.AddedTokens)),
		addedByStr: make(map[string]uint32, len(f.AddedTokens)),
	}
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	byteLevelPre := false
	if t.steps, byteLevelPre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	for i, st := range t.steps {
		if st.meta != nil {
			if len(t.steps) != 1 {
				return nil, fmt.Errorf("%w: Metaspace in a pre-tokenizer sequence", ErrUnsupported)
			}
			t.meta, t.steps = t.steps[i].meta, nil
		}
	}
	if t.model, t.idToToken, err = parseModel(f.Model, byteLevelPre); err != nil {
		return nil, err
	}
	for i, a := range f.AddedTokens {
		t.addedByID[a.ID] = i
		t.addedByStr[a.Content] = a.ID
	}
	t.buildAddedMatchers()
	if err := t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	t.splitSafe = byteLevelPre && len(t.steps) > 0 && t.steps[0].literal == nil
	for _, op := range t.norm {
		if _, ok := op.(nfcOp); !ok {
			t.splitSafe = false
		}
	}
	t.spaceCut = t.model.splitRune == '\u2581' && t.meta == nil && len(t.norm) > 0
	for _, op := range t.norm {
		if r, ok := op.(replaceOp); !ok || r.old != " " || r.new != "\u2581" {
			t.spaceCut = false
		}
	}
	for _, st := range t.steps {
		if string(st.literal) != " " {
			t.spaceCut = false // a split on " " finds nothing after the normalizer
		}
	}
	for _, a := range t.added {
		if a.SingleWord || a.LStrip || a.RStrip {
			t.splitSafe = false // they look at the text around a match
			t.spaceCut = false
		}
		if strings.Contains(a.Content, " ") {
			t.spaceCut = false
		}
	}
	t.pool.New = func() any { return &encodeState{} }
	return t, nil
}

func (t *Tokenizer) buildAddedMatchers() {
	var plain, normed []addedToken
	var plainPat, normedPat []string
	for _, a := range t.added {
		if a.Normalized {
			normed = append(normed, a)
			normedPat = append(normedPat, applyNormalizers(t.norm, a.Content))
		} else {
			plain = append(plain, a)
			plainPat = append(plainPat, a.Content)
		}
	}
	if len(plain) > 0 {
		t.plain = newAddedMatcher(plain, plainPat)
	}
	if len(normed) > 0 {
		t.normed = newAddedMatcher(normed, normedPat)
	}
}

// TokenID returns the id of a token given as tokenizer.json spells it (for
// byte-level models, in the byte-to-unicode alphabet, e.g. "Ġthe"); added
// tokens such as "<|im_end|>" are found by their content.
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	if id, ok := t.addedByStr[s]; ok {
		return id, true
	}
	key := s
	if t.model.byteLevel {
		b, ok := byteLevelDecode(s)
		if !ok {
			return 0, false
		}
		key = string(b)
	}
	id, ok := t.model.vocab.get(key)
	return id, ok
}

// VocabSize returns one more than the largest token id.
func (t *Tokenizer) VocabSize() int {
	n := t.idToToken.len()
	for _, a := range t.added {
		n = max(n, int(a.ID)+1)
	}
	return n
}

// token returns the string of an id as the decoder sees it.
func (t *Tokenizer) token(id uint32) (string, bool) {
	if i, ok := t.addedByID[id]; ok {
		return t.added[i].Content, true
	}
	if s := t.idToToken.get(id); s != "" {
		return s, true
	}
	return "", false
}

// Decode returns the text of ids as the Rust library's decode with
// skip_special_tokens=false does. Unknown ids are skipped.
func (t *Tokenizer) Decode(ids []uint32) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if s, ok := t.token(id); ok {
			toks = append(toks, s)
		}
	}
	if t.dec == nil {
		return joinSpace(toks)
	}
	return t.dec.decode(toks)
}

func joinSpace(toks []string) string {
	var b bytes.Buffer
	for i, s := range toks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}
