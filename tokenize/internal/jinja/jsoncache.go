package jinja

import (
	"bytes"
	"container/list"
	"hash/maphash"
	"sync"
)

// A JSONCache keeps the parsed values of the objects that recent documents
// held in their top-level arrays (a chat request's messages and tools), by
// their exact bytes: the next turn of a conversation repeats every earlier
// message byte for byte, and ParseJSONObject with a cache finds the end of
// such an element, compares its bytes with the cached ones and reuses the
// value instead of decoding it again. A reused value is the one an earlier
// document produced, so it is the same pointer for every document that
// repeats those bytes, which is what lets a renderer memoize per element
// (Template.Render's loop memo).
//
// Values are shared between documents and must not be modified; this
// package's renderer never modifies them (lists and dicts are immutable in
// templates). A JSONCache is safe for concurrent use; it holds about
// maxBytes of element bytes, evicting the least recently used.
type JSONCache struct {
	seed     maphash.Seed
	maxBytes int

	mu    sync.Mutex
	byKey map[uint64]*list.Element // of *jsonEntry
	lru   list.List
	used  int
	stats JSONCacheStats
}

type jsonEntry struct {
	key uint64
	raw []byte
	v   Value
}

// size is what an entry counts against the budget: its bytes, about as
// much again of decoded value, and a fixed part for the entry, its index
// slot, the decoded object's own structure and what callers file on it
// (Dict.SetDerived: tokenize's normalized and prepared forms of a message,
// two dicts). Measured on the heap, 20,000 entries each: a 64-byte message
// holds about 770 bytes and its derivations 900 more, a 400-byte one 1,430
// and 580.
func (e *jsonEntry) size() int { return 2*len(e.raw) + 1536 }

// JSONCacheStats are a JSONCache's counters.
type JSONCacheStats struct {
	Hits, Misses uint64 // elements reused or decoded
	Entries      int
	Bytes        int
}

// minCachedElement is the shortest element worth a lookup: below it,
// decoding costs about what finding, hashing and comparing it does.
const minCachedElement = 64

// NewJSONCache returns a cache of about maxBytes.
func NewJSONCache(maxBytes int) *JSONCache {
	return &JSONCache{seed: maphash.MakeSeed(), maxBytes: maxBytes, byKey: map[uint64]*list.Element{}}
}

// Stats returns the cache's counters.
func (c *JSONCache) Stats() JSONCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries, s.Bytes = c.lru.Len(), c.used
	return s
}

func (c *JSONCache) get(raw []byte) (uint64, Value, bool) {
	key := maphash.Bytes(c.seed, raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		if e := el.Value.(*jsonEntry); bytes.Equal(e.raw, raw) {
			c.lru.MoveToFront(el)
			c.stats.Hits++
			return key, e.v, true
		}
	}
	c.stats.Misses++
	return key, nil, false
}

func (c *JSONCache) put(key uint64, raw []byte, v Value) {
	e := &jsonEntry{key: key, raw: raw, v: v}
	if e.size() > c.maxBytes/4 {
		return
	}
	e.raw = bytes.Clone(raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.byKey[key]; ok {
		c.remove(old)
	}
	c.byKey[key] = c.lru.PushFront(e)
	c.used += e.size()
	for c.used > c.maxBytes {
		c.remove(c.lru.Back())
	}
}

func (c *JSONCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*jsonEntry)
	delete(c.byKey, e.key)
	c.used -= e.size()
}

// skipValue returns the end of the JSON value that starts at s[i], an
// object or an array, or false when s ends first. It does not validate:
// a span it returns is only reused when its bytes equal those of a value
// decoded before, and a decoder reading those bytes from here stops where
// that value ended.
func skipValue(s []byte, i int) (int, bool) {
	depth := 0
	for i < len(s) {
		switch s[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		case '"':
			end, ok := stringEnd(s, i+1)
			if !ok {
				return 0, false
			}
			i = end
		}
		i++
	}
	return 0, false
}

// stringEnd returns the index of the quote that closes the string whose
// contents start at s[i]: the first quote not escaped by an odd run of
// backslashes.
func stringEnd(s []byte, i int) (int, bool) {
	for {
		q := bytes.IndexByte(s[i:], '"')
		if q < 0 {
			return 0, false
		}
		q += i
		bs := 0
		for j := q - 1; j >= i && s[j] == '\\'; j-- {
			bs++
		}
		if bs%2 == 0 {
			return q, true
		}
		i = q + 1
	}
}
