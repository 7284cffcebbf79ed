package tokenize

import (
	"container/list"
	"hash/maphash"
	"sort"
	"sync"
)

// A PrefixCache tokenizes texts that share a prefix with recently seen
// texts by re-tokenizing only what follows the shared part: turn N+1 of a
// conversation repeats the rendered prompt of turn N and appends to it;
// requests of one application repeat its system prompt and differ after it.
//
// It splits a text only where the result stays exact: at the start of a
// pre-token at least a safety margin before the first byte that differs
// from the cached text, between two ASCII characters of different kinds
// (letter, digit, space, punctuation), so no pre-tokenizer pattern, added
// token or normalization can reach across the split. SentencePiece-style
// files whose normalizer only replaces spaces with U+2581 (Gemma 3) are
// split before a space where no token joins U+2581 to the character
// before. For other files (Llama 2's Prepend normalizer, Metaspace) it only
// reuses exact repeats.
//
// Cached texts are found by the hashes of their prefixes at every
// checkpointSpacing bytes, so the text sharing the longest prefix with a
// new one is found with a binary search over the new text's checkpoints,
// whatever the texts share: a system prompt under thousands of different
// conversations costs no more than one conversation.
//
// A text that contains a cached one (the next turn of its conversation)
// takes that entry's place, so a conversation is one entry however many
// turns it has had.
//
// A PrefixCache is safe for concurrent use. It holds at most about maxBytes
// of texts, ids, split points and checkpoints, evicting the least recently
// used entries.
type PrefixCache struct {
	t        *Tokenizer
	maxBytes int
	margin   int
	seed     maphash.Seed

	mu sync.Mutex
	// byPrefix maps the hash of a text's first k·checkpointSpacing bytes to
	// the slot of the entry that last stored a text with that prefix.
	byPrefix map[uint64]*prefixSlot
	lru      list.List // of *prefixEntry, most recent at the front
	used     int
	hits     uint64
	misses   uint64
	tailLen  uint64
}

type prefixEntry struct {
	text  string
	ids   []uint32    // without post-processor tokens
	marks []splitMark // safe split points, ascending
	cps   []uint64    // hashes of the prefixes at each checkpoint
	slot  *prefixSlot
	elem  *list.Element
	size  int
}

// prefixSlot is where byPrefix's checkpoints lead: the entry holding them
// now. A conversation's next turn contains its last one, so its entry
// takes over the older entry's slot, and with it the checkpoints that led
// there, instead of rewriting thousands of them per turn and keeping every
// turn's copy of the conversation until it ages out.
type prefixSlot struct{ e *prefixEntry }

// checkpointSpacing is the distance in bytes between two indexed prefixes
// of a cached text. Texts shorter than it (about 130 tokens) are tokenized
// directly. A new text that shares a prefix with a cached one but does not
// extend it (a sibling under a shared system prompt or conversation)
// indexes all its checkpoints and its eviction drops them, a map write and
// a delete each: at 128 bytes those took 4% of warmpath's CPU at 500
// 8K-token chats/s. At 512 a 32K-token sibling encodes in 51 µs instead of
// 72 (BenchmarkPrefixCacheSecondTurn/qwen3); at 1,024 in 48.
const checkpointSpacing = 512

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
		byPrefix: make(map[uint64]*prefixSlot),
	}
}

// PrefixCacheStats are counters of a PrefixCache.
type PrefixCacheStats struct {
	Hits, Misses uint64 // texts that did or did not reuse a cached text's ids
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

// Encode returns the same ids as the Tokenizer's Encode. The returned
// slice may be the one the cache holds: the caller must not change its
// elements (appending to it is safe, its capacity is its length).
func (c *PrefixCache) Encode(text string, addSpecialTokens bool) []uint32 {
	t := c.t
	if len(text) < checkpointSpacing {
		ids := t.Encode(text, addSpecialTokens)
		return ids[:len(ids):len(ids)]
	}
	cps := c.checkpoints(text)
	base, shared := c.lookup(text, cps)
	var ids []uint32
	var marks []splitMark
	switch {
	case base != nil && shared == len(text) && len(base.text) == len(text):
		ids, marks = base.ids, base.marks
	case base != nil && (t.splitSafe || t.spaceCut):
		i := sort.Search(len(base.marks), func(i int) bool { return base.marks[i].off > shared-c.margin }) - 1
		if i < 0 {
			ids, marks = c.encodeFull(text)
			break
		}
		m := base.marks[i]
		var tailMarks []splitMark
		var tail []uint32
		if t.splitSafe {
			sink := newMarkSink(0) // m.off, the last mark kept, is the tail's start
			tail = t.encode(text[m.off:], false, nil, sink)
			tailMarks = sink.marks
		} else {
			tail, tailMarks = c.encodeSpaceCut(text[m.off:])
		}
		ids = make([]uint32, 0, m.nids+len(tail))
		ids = append(append(ids, base.ids[:m.nids]...), tail...)
		marks = append(make([]splitMark, 0, i+1+len(tailMarks)), base.marks[:i+1]...)
		marks = c.keepSafe(text, marks, tailMarks, m.off, m.nids)
		c.mu.Lock()
		c.tailLen += uint64(len(text) - m.off)
		c.mu.Unlock()
	default:
		ids, marks = c.encodeFull(text)
	}
	c.store(text, cps, ids, marks, base, shared)
	if !addSpecialTokens || len(t.prefixIDs)+len(t.suffixIDs) == 0 {
		return ids[:len(ids):len(ids)]
	}
	out := make([]uint32, 0, len(t.prefixIDs)+len(ids)+len(t.suffixIDs))
	return append(append(append(out, t.prefixIDs...), ids...), t.suffixIDs...)
}

// checkpoints returns the hashes of text's first k·checkpointSpacing bytes
// for every k ≥ 1 that fits, in one streaming pass.
func (c *PrefixCache) checkpoints(text string) []uint64 {
	cps := make([]uint64, len(text)/checkpointSpacing)
	var h maphash.Hash
	h.SetSeed(c.seed)
	for k := range cps {
		h.WriteString(text[k*checkpointSpacing : (k+1)*checkpointSpacing])
		cps[k] = h.Sum64()
	}
	return cps
}

func (c *PrefixCache) encodeFull(text string) ([]uint32, []splitMark) {
	if c.t.spaceCut {
		ids, all := c.encodeSpaceCut(text)
		return ids, c.keepSafe(text, nil, all, 0, 0)
	}
	if !c.t.splitSafe {
		return c.t.encode(text, false, nil, nil), nil
	}
	sink := newMarkSink(-markSpacing)
	ids := c.t.encode(text, false, nil, sink)
	return ids, sink.marks
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

// lookup returns the cached entry sharing the longest prefix with text
// (found by its checkpoints cps) and the length of the prefix they share,
// or nil. Checkpoints are stored for every prefix of a text, so the longest
// one present is found by binary search; a hash collision or a gap left by
// an eviction only costs reuse, since the shared length is measured on the
// bytes.
func (c *PrefixCache) lookup(text string, cps []uint64) (*prefixEntry, int) {
	c.mu.Lock()
	k := sort.Search(len(cps), func(k int) bool { return c.byPrefix[cps[k]] == nil })
	var e *prefixEntry
	if k > 0 {
		e = c.byPrefix[cps[k-1]].e
	}
	c.mu.Unlock()
	shared := 0
	if e != nil {
		if from := (k - 1) * checkpointSpacing; text[:from] == e.text[:from] {
			shared = from + commonPrefix(text[from:], e.text[from:])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if shared < checkpointSpacing {
		c.misses++
		return nil, 0
	}
	c.hits++
	c.lru.MoveToFront(e.elem) // a no-op if evicted meanwhile
	return e, shared
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	const chunk = 64
	i := 0
	for i+chunk <= n && a[i:i+chunk] == b[i:i+chunk] {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// store caches text, whose ids were computed from base's sharing shared
// bytes with it (base nil when none was).
func (c *PrefixCache) store(text string, cps []uint64, ids []uint32, marks []splitMark, base *prefixEntry, shared int) {
	if base != nil && len(text) <= len(base.text) && shared >= len(text)-c.margin {
		return // base holds text but for its last bytes: a repeat, or an earlier turn again
	}
	size := len(text) + 4*len(ids) + 16*len(marks) + 48*len(cps) + 128
	if size > c.maxBytes {
		return
	}
	e := &prefixEntry{text: text, ids: ids, marks: marks, cps: cps, size: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(cps); n > 0 {
		if old := c.byPrefix[cps[n-1]]; old != nil && old.e.text == text {
			c.lru.MoveToFront(old.e.elem)
			return
		}
	}
	from := 0
	if base != nil && base.slot.e == base && len(text) >= len(base.text) && shared >= len(base.text)-c.margin {
		// text contains base up to the margin (the generation prompt a
		// next turn rewrites): e takes base's place and its slot. The
		// checkpoints up to the shared bytes are base's, and lead to the
		// slot or to a newer entry with the same prefix.
		// Base's checkpoints past the shared bytes (one at most) would
		// lead a repeat of base to e, which does not have them.
		c.lru.Remove(base.elem)
		c.used -= base.size
		e.slot, base.slot.e = base.slot, e
		from = shared / checkpointSpacing
		for _, h := range base.cps[min(from, len(base.cps)):] {
			if c.byPrefix[h] == e.slot {
				delete(c.byPrefix, h)
			}
		}
	} else {
		e.slot = &prefixSlot{e}
	}
	e.elem = c.lru.PushFront(e)
	for _, h := range cps[from:] {
		c.byPrefix[h] = e.slot
	}
	c.used += size
	for c.used > c.maxBytes {
		c.evict(c.lru.Back().Value.(*prefixEntry))
	}
}

// evict drops e and the checkpoints that still lead to it; those a newer
// entry took over stay.
func (c *PrefixCache) evict(e *prefixEntry) {
	c.lru.Remove(e.elem)
	c.used -= e.size
	for _, h := range e.cps {
		if c.byPrefix[h] == e.slot {
			delete(c.byPrefix, h)
		}
	}
	if e.slot.e == e {
		e.slot.e = nil // a request holding e as its base must not replace it
	}
}
