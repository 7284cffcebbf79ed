package tokenize

import (
	"container/list"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"
)

// A PrefixCache tokenizes texts that extend recently seen texts by
// re-tokenizing only the new tail, as multi-turn conversations do: turn N+1
// repeats the rendered prompt of turn N and appends to it.
//
// It splits a text only where the result stays exact: at the start of a
// pre-token at least a safety margin before the end of the cached text,
// between two ASCII characters of different kinds (letter, digit, space,
// punctuation), so no pre-tokenizer pattern, added token or normalization
// can reach across the split. SentencePiece-style files whose normalizer
// only replaces spaces with U+2581 (Gemma 3) are split before a space
// where no token joins U+2581 to the character before. For other files
// (Llama 2's Prepend normalizer, Metaspace) it only reuses exact repeats.
//
// A PrefixCache is safe for concurrent use. It holds at most about maxBytes
// of texts, ids and split points, evicting the least recently used entries.
type PrefixCache struct {
	t        *Tokenizer
	maxBytes int
	margin   int
	seed     maphash.Seed

	mu      sync.Mutex
	byKey   map[uint64][]*prefixEntry
	lru     list.List // of *prefixEntry, most recent at the front
	used    int
	hits    uint64
	misses  uint64
	tailLen uint64
}

type prefixEntry struct {
	key   uint64
	text  string
	ids   []uint32    // without post-processor tokens
	marks []splitMark // safe split points, ascending
	elem  *list.Element
	size  int
	hash  uint64 // maphash of text
}

// prefixKeyLen is how many leading bytes index an entry. Shorter texts are
// tokenized directly.
const prefixKeyLen = 64

// markSpacing is the least distance in bytes between two kept split points.
const markSpacing = 96

// NewPrefixCache returns a cache over t holding about maxBytes.
func NewPrefixCache(t *Tokenizer, maxBytes int) *PrefixCache {
	margin := 64
	for _, a := range t.added {
		margin = max(margin, len(a.Content)+8)
	}
	return &PrefixCache{
		t:        t,
		maxBytes: maxBytes,
		margin:   margin,
		seed:     maphash.MakeSeed(),
		byKey:    make(map[uint64][]*prefixEntry),
	}
}

// PrefixCacheStats are counters of a PrefixCache.
type PrefixCacheStats struct {
	Hits, Misses uint64 // texts that did or did not extend a cached text
	TailBytes    uint64 // bytes re-tokenized on hits
	Entries      int
	Bytes        int
}

// Stats returns the cache's counters.
func (c *PrefixCache) Stats() PrefixCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return PrefixCacheStats{c.hits, c.misses, c.tailLen, c.lru.Len(), c.used}
}

// Encode returns the same ids as the Tokenizer's Encode. The returned slice
// belongs to the caller.
func (c *PrefixCache) Encode(text string, addSpecialTokens bool) []uint32 {
	t := c.t
	if len(text) < prefixKeyLen {
		return t.Encode(text, addSpecialTokens)
	}
	key := maphash.String(c.seed, text[:prefixKeyLen])
	base, hash := c.lookup(key, text)
	var ids []uint32
	var marks []splitMark
	switch {
	case base != nil && len(base.text) == len(text):
		ids, marks = base.ids, base.marks
	case base != nil && (t.splitSafe || t.spaceCut):
		i := sort.Search(len(base.marks), func(i int) bool { return base.marks[i].off > len(base.text)-c.margin }) - 1
		if i < 0 {
			ids, marks = c.encodeFull(text)
			break
		}
		m := base.marks[i]
		var tailMarks []splitMark
		var tail []uint32
		if t.splitSafe {
			tail = t.encode(text[m.off:], false, nil, &tailMarks)
		} else {
			tail, tailMarks = c.encodeSpaceCut(text[m.off:])
		}
		ids = make([]uint32, 0, m.nids+len(tail))
		ids = append(append(ids, base.ids[:m.nids]...), tail...)
		marks = append(make([]splitMark, 0, i+1+len(tailMarks)/4), base.marks[:i+1]...)
		marks = c.keepSafe(text, marks, tailMarks, m.off, m.nids)
		c.mu.Lock()
		c.tailLen += uint64(len(text) - m.off)
		c.mu.Unlock()
	default:
		ids, marks = c.encodeFull(text)
	}
	if base == nil || len(base.text) != len(text) {
		c.store(key, hash, text, ids, marks)
	}
	out := make([]uint32, 0, len(t.prefixIDs)+len(ids)+len(t.suffixIDs))
	if addSpecialTokens {
		out = append(out, t.prefixIDs...)
	}
	out = append(out, ids...)
	if addSpecialTokens {
		out = append(out, t.suffixIDs...)
	}
	return out
}

func (c *PrefixCache) encodeFull(text string) ([]uint32, []splitMark) {
	if c.t.spaceCut {
		ids, all := c.encodeSpaceCut(text)
		return ids, c.keepSafe(text, nil, all, 0, 0)
	}
	if !c.t.splitSafe {
		return c.t.encode(text, false, nil, nil), nil
	}
	var all []splitMark
	ids := c.t.encode(text, false, nil, &all)
	return ids, c.keepSafe(text, nil, all, 0, 0)
}

// keepSafe appends to dst the marks of src (relative to off, with nids ids
// before them) that are safe split points of text, at least markSpacing
// apart. The marks of encodeSpaceCut are safe by construction.
func (c *PrefixCache) keepSafe(text string, dst, src []splitMark, off, nids int) []splitMark {
	last := -markSpacing
	if len(dst) > 0 {
		last = dst[len(dst)-1].off
	}
	for _, m := range src {
		o := m.off + off
		if o-last < markSpacing || !c.t.spaceCut && !safeSplit(text, o) {
			continue
		}
		dst = append(dst, splitMark{o, m.nids + nids})
		last = o
	}
	return dst
}

// encodeSpaceCut tokenizes text in pieces cut before spaces where that is
// exact for a spaceCut tokenizer, and returns the cuts as marks.
func (c *PrefixCache) encodeSpaceCut(text string) ([]uint32, []splitMark) {
	t := c.t
	var ids []uint32
	var marks []splitMark
	last := 0
	for p := markSpacing; p < len(text); p++ {
		if text[p] != ' ' || p-last < markSpacing {
			continue
		}
		prev := rune(text[p-1])
		if prev >= 0x80 || prev == '\'' {
			continue
		}
		if prev == ' ' {
			prev = '\u2581'
		}
		if t.model.joinBefore[prev] {
			continue
		}
		ids = append(ids, t.encode(text[last:p], false, nil, nil)...)
		marks = append(marks, splitMark{p, len(ids)})
		last = p
	}
	return append(ids, t.encode(text[last:], false, nil, nil)...), marks
}

// asciiKind is 1 for letters, 2 for digits, 3 for whitespace and 4 for the
// rest of ASCII.
func asciiKind(b byte) int {
	switch {
	case isASCIIAlpha(b):
		return 1
	case b >= '0' && b <= '9':
		return 2
	case b == ' ' || b >= '\t' && b <= '\r':
		return 3
	}
	return 4
}

// safeSplit reports whether tokenizing text[:off] and text[off:] apart
// gives the ids of text, given that off starts a pre-token.
func safeSplit(text string, off int) bool {
	if off <= 0 || off >= len(text) {
		return false
	}
	a, b := text[off-1], text[off]
	if a >= 0x80 || b >= 0x80 || a == '\'' {
		return false
	}
	ka := asciiKind(a)
	return ka != 3 && ka != asciiKind(b)
}

// lookup returns the longest cached text that text starts with. Candidates
// are compared by a hash of text's prefix of their length, computed in one
// streaming pass, so many long cached siblings cost one pass over text. It
// also returns the hash of the whole text.
func (c *PrefixCache) lookup(key uint64, text string) (*prefixEntry, uint64) {
	c.mu.Lock()
	var cands []*prefixEntry
	for _, e := range c.byKey[key] {
		if len(e.text) <= len(text) {
			cands = append(cands, e)
		}
	}
	c.mu.Unlock()
	slices.SortFunc(cands, func(a, b *prefixEntry) int { return len(a.text) - len(b.text) })
	var h maphash.Hash
	h.SetSeed(c.seed)
	pos := 0
	var best *prefixEntry
	for _, e := range cands {
		h.WriteString(text[pos:len(e.text)])
		pos = len(e.text)
		if h.Sum64() == e.hash {
			best = e
		}
	}
	h.WriteString(text[pos:])
	full := h.Sum64()
	if best != nil && !strings.HasPrefix(text, best.text) {
		best = nil // a hash collision
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if best == nil {
		c.misses++
		return nil, full
	}
	c.hits++
	c.lru.MoveToFront(best.elem) // a no-op if evicted meanwhile
	return best, full
}

func (c *PrefixCache) store(key, hash uint64, text string, ids []uint32, marks []splitMark) {
	size := len(text) + 4*len(ids) + 16*len(marks) + 128
	if size > c.maxBytes {
		return
	}
	e := &prefixEntry{key: key, text: text, ids: ids, marks: marks, size: size, hash: hash}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, old := range c.byKey[key] {
		if old.hash == e.hash && old.text == text {
			c.lru.MoveToFront(old.elem)
			return
		}
	}
	e.elem = c.lru.PushFront(e)
	c.byKey[key] = append(c.byKey[key], e)
	c.used += size
	for c.used > c.maxBytes {
		c.evict(c.lru.Back().Value.(*prefixEntry))
	}
}

func (c *PrefixCache) evict(e *prefixEntry) {
	c.lru.Remove(e.elem)
	c.used -= e.size
	list := c.byKey[e.key]
	for i, x := range list {
		if x == e {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.byKey, e.key)
	} else {
		c.byKey[e.key] = list
	}
}
